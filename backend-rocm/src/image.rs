//! Reading AMD GPU code objects (HSACO): ELF64 files with `e_machine` `EM_AMDGPU` (224) whose
//! `e_flags` carry the gfx target, whose symbol tables name the kernels, and whose
//! `NT_AMDGPU_METADATA` note (MessagePack) describes every kernel's parameters.
//!
//! Every read is bounds-checked: a truncated or hostile file is an error, never a panic.
//! Constants are LLVM's (`llvm/BinaryFormat/ELF.h`, `AMDGPUUsage.rst`).

use std::collections::BTreeMap;

/// `EM_AMDGPU`.
pub const EM_AMDGPU: u16 = 224;
/// `ELFOSABI_AMDGPU_HSA`.
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// The mach field of `e_flags` (`EF_AMDGPU_MACH`).
pub const EF_AMDGPU_MACH: u32 = 0x0ff;
/// `NT_AMDGPU_METADATA`.
pub const NT_AMDGPU_METADATA: u32 = 32;

/// `EF_AMDGPU_MACH_AMDGCN_*` values by gfx target (LLVM's table).
const MACH: &[(&str, u32)] = &[
    ("gfx600", 0x020),
    ("gfx601", 0x021),
    ("gfx700", 0x022),
    ("gfx701", 0x023),
    ("gfx702", 0x024),
    ("gfx703", 0x025),
    ("gfx704", 0x026),
    ("gfx801", 0x028),
    ("gfx802", 0x029),
    ("gfx803", 0x02a),
    ("gfx810", 0x02b),
    ("gfx900", 0x02c),
    ("gfx902", 0x02d),
    ("gfx904", 0x02e),
    ("gfx906", 0x02f),
    ("gfx908", 0x030),
    ("gfx909", 0x031),
    ("gfx90c", 0x032),
    ("gfx1010", 0x033),
    ("gfx1011", 0x034),
    ("gfx1012", 0x035),
    ("gfx1030", 0x036),
    ("gfx1031", 0x037),
    ("gfx1032", 0x038),
    ("gfx1033", 0x039),
    ("gfx602", 0x03a),
    ("gfx705", 0x03b),
    ("gfx805", 0x03c),
    ("gfx1035", 0x03d),
    ("gfx1034", 0x03e),
    ("gfx90a", 0x03f),
    ("gfx940", 0x040),
    ("gfx1100", 0x041),
    ("gfx1013", 0x042),
    ("gfx1150", 0x043),
    ("gfx1103", 0x044),
    ("gfx1036", 0x045),
    ("gfx1101", 0x046),
    ("gfx1102", 0x047),
    ("gfx1200", 0x048),
    ("gfx1151", 0x04a),
    ("gfx941", 0x04b),
    ("gfx942", 0x04c),
    ("gfx1201", 0x04e),
    ("gfx950", 0x04f),
];

/// The `EF_AMDGPU_MACH` value of a gfx target (without features), when LLVM's table has it.
pub fn mach_of(target: &str) -> Option<u32> {
    MACH.iter().find(|(t, _)| *t == target).map(|(_, m)| *m)
}

/// The gfx target of an `EF_AMDGPU_MACH` value.
pub fn target_of_mach(mach: u32) -> Option<&'static str> {
    MACH.iter().find(|(_, m)| *m == mach).map(|(t, _)| *t)
}

/// A malformed code object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a valid AMD GPU code object: {0}")]
pub struct ElfError(pub String);

fn bad<T>(what: impl Into<String>) -> Result<T, ElfError> {
    Err(ElfError(what.into()))
}

/// One kernel parameter, from the code object's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgInfo {
    /// `.name`, when the compiler kept it.
    pub name: Option<String>,
    /// `.size` in bytes.
    pub size: u64,
    /// `.offset` in the kernarg segment.
    pub offset: u64,
    /// `.value_kind`: `global_buffer`, `by_value`, `hidden_*`, ...
    pub value_kind: String,
}

impl ArgInfo {
    /// Arguments the caller passes (not filled in by the runtime).
    pub fn is_explicit(&self) -> bool {
        !self.value_kind.starts_with("hidden_")
    }
}

/// What a code object holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    pub e_machine: u16,
    pub e_flags: u32,
    pub os_abi: u8,
    pub abi_version: u8,
    /// Kernel names (symbols with a `.kd` kernel descriptor), sorted.
    pub kernels: Vec<String>,
    /// Every named symbol of `.symtab` and `.dynsym`.
    pub symbols: Vec<String>,
    /// Explicit parameters per kernel, from `NT_AMDGPU_METADATA` (empty when absent).
    pub kernel_args: BTreeMap<String, Vec<ArgInfo>>,
}

impl CodeObject {
    /// The `EF_AMDGPU_MACH` field.
    pub fn mach(&self) -> u32 {
        self.e_flags & EF_AMDGPU_MACH
    }

    /// The gfx target the code is for (from the mach field), when known.
    pub fn target(&self) -> Option<&'static str> {
        target_of_mach(self.mach())
    }

    /// Parses an ELF64 little-endian AMD GPU code object.
    pub fn parse(data: &[u8]) -> Result<CodeObject, ElfError> {
        let r = Reader(data);
        if r.bytes(0, 4)? != b"\x7fELF" {
            return bad("no ELF magic");
        }
        if r.u8(4)? != 2 || r.u8(5)? != 1 {
            return bad("not a 64-bit little-endian ELF");
        }
        let os_abi = r.u8(7)?;
        let abi_version = r.u8(8)?;
        let e_machine = r.u16(18)?;
        if e_machine != EM_AMDGPU {
            return bad(format!(
                "e_machine is {e_machine}, not EM_AMDGPU ({EM_AMDGPU})"
            ));
        }
        let e_flags = r.u32(48)?;
        let shoff = r.u64(40)?;
        let shentsize = r.u16(58)? as u64;
        let shnum = r.u16(60)? as u64;
        if shnum > 0 && shentsize < 64 {
            return bad("section header entries are too small");
        }
        let mut sections = Vec::new();
        for i in 0..shnum {
            let at = shoff
                .checked_add(i * shentsize)
                .ok_or_else(|| ElfError("section table offset overflows".into()))?;
            let field = |o: u64| at.saturating_add(o);
            sections.push(Section {
                kind: r.u32(field(4))?,
                offset: r.u64(field(24))?,
                size: r.u64(field(32))?,
                link: r.u32(field(40))?,
                entsize: r.u64(field(56))?,
            });
        }
        let mut symbols = Vec::new();
        let mut descriptors = Vec::new();
        for s in &sections {
            // SHT_SYMTAB (2), SHT_DYNSYM (11).
            if s.kind != 2 && s.kind != 11 {
                continue;
            }
            let Some(strtab) = sections.get(s.link as usize) else {
                return bad("symbol table links to a missing string table");
            };
            let ent = if s.entsize == 0 { 24 } else { s.entsize };
            if ent < 24 {
                return bad("symbol entries are too small");
            }
            let count = s.size / ent;
            for i in 0..count {
                let at = i
                    .checked_mul(ent)
                    .and_then(|o| o.checked_add(s.offset))
                    .ok_or_else(|| ElfError("symbol table offset overflows".into()))?;
                let name_off = r.u32(at)? as u64;
                if name_off == 0 {
                    continue;
                }
                let name = r.cstr(strtab.offset, strtab.size, name_off)?;
                if name.is_empty() {
                    continue;
                }
                if let Some(k) = name.strip_suffix(".kd") {
                    descriptors.push(k.to_string());
                }
                if !symbols.contains(&name) {
                    symbols.push(name);
                }
            }
        }
        descriptors.sort();
        descriptors.dedup();
        let mut kernel_args = BTreeMap::new();
        for s in &sections {
            // SHT_NOTE (7).
            if s.kind == 7 {
                for (name, kind, desc) in notes(&r, s.offset, s.size)? {
                    if name == b"AMDGPU" && kind == NT_AMDGPU_METADATA {
                        kernel_args = kernel_args_from_metadata(desc)?;
                    }
                }
            }
        }
        Ok(CodeObject {
            e_machine,
            e_flags,
            os_abi,
            abi_version,
            kernels: descriptors,
            symbols,
            kernel_args,
        })
    }
}

struct Section {
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&self, at: u64, len: u64) -> Result<&'a [u8], ElfError> {
        let start = usize::try_from(at).map_err(|_| ElfError("offset too large".into()))?;
        let len = usize::try_from(len).map_err(|_| ElfError("length too large".into()))?;
        start
            .checked_add(len)
            .and_then(|end| self.0.get(start..end))
            .ok_or_else(|| ElfError(format!("truncated: {len} bytes at {at} lie past the end")))
    }
    fn u8(&self, at: u64) -> Result<u8, ElfError> {
        Ok(self.bytes(at, 1)?[0])
    }
    fn u16(&self, at: u64) -> Result<u16, ElfError> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&self, at: u64) -> Result<u32, ElfError> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&self, at: u64) -> Result<u64, ElfError> {
        let b = self.bytes(at, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A NUL-terminated string at `off` inside the table at `table..table + size`.
    fn cstr(&self, table: u64, size: u64, off: u64) -> Result<String, ElfError> {
        if off >= size {
            return bad("symbol name lies outside its string table");
        }
        let at = table
            .checked_add(off)
            .ok_or_else(|| ElfError("string table offset overflows".into()))?;
        let t = self.bytes(at, size - off)?;
        let end = t.iter().position(|b| *b == 0).unwrap_or(t.len());
        Ok(String::from_utf8_lossy(&t[..end]).into_owned())
    }
}

/// Magic of a clang offload bundle (what `hipcc --genco` and `clang-offload-bundler` write).
pub const OFFLOAD_BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Magic of a compressed offload bundle (ROCm ≥ 6.2), which needs zlib/zstd to read.
pub const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";

/// One device entry of an offload bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    /// The bundle triple, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`.
    pub triple: String,
    /// The gfx target in it, e.g. `gfx90a:xnack-`.
    pub target: String,
    pub code: &'a [u8],
}

/// The AMD GPU entries of an uncompressed clang offload bundle; `Ok(None)` when `data` is not
/// a bundle (a plain code object). Host entries are skipped.
pub fn unbundle(data: &[u8]) -> Result<Option<Vec<BundleEntry<'_>>>, ElfError> {
    if data.starts_with(COMPRESSED_BUNDLE_MAGIC) {
        return bad(
            "a compressed offload bundle (CCOB); unbundle it (clang-offload-bundler --unbundle) and pass the code object",
        );
    }
    if !data.starts_with(OFFLOAD_BUNDLE_MAGIC) {
        return Ok(None);
    }
    let r = Reader(data);
    let mut at = OFFLOAD_BUNDLE_MAGIC.len() as u64;
    let count = r.u64(at)?;
    at += 8;
    let mut out = Vec::new();
    for _ in 0..count.min(1024) {
        let offset = r.u64(at)?;
        let size = r.u64(at.saturating_add(8))?;
        let tlen = r.u64(at.saturating_add(16))?;
        let triple = r.bytes(at.saturating_add(24), tlen)?;
        at = at.saturating_add(24).saturating_add(tlen);
        let triple = String::from_utf8_lossy(triple).into_owned();
        let Some((_, target)) = triple.split_once("amdgcn-amd-amdhsa-") else {
            continue;
        };
        let target = target.trim_start_matches('-').to_string();
        out.push(BundleEntry {
            code: r.bytes(offset, size)?,
            triple,
            target,
        });
    }
    Ok(Some(out))
}

/// One ELF note: name, type, descriptor.
type Note<'a> = (&'a [u8], u32, &'a [u8]);

/// `(name, type, desc)` of every note in a `SHT_NOTE` section.
fn notes<'a>(r: &Reader<'a>, offset: u64, size: u64) -> Result<Vec<Note<'a>>, ElfError> {
    let body = r.bytes(offset, size)?;
    let n = Reader(body);
    let mut out = Vec::new();
    let mut at = 0u64;
    let align4 = |x: u64| x.div_ceil(4) * 4;
    while at + 12 <= size {
        let namesz = n.u32(at)? as u64;
        let descsz = n.u32(at + 4)? as u64;
        let kind = n.u32(at + 8)?;
        let name = n.bytes(at + 12, namesz)?;
        let name = name.strip_suffix(b"\0").unwrap_or(name);
        let desc_at = at + 12 + align4(namesz);
        let desc = n.bytes(desc_at, descsz)?;
        out.push((name, kind, desc));
        at = desc_at + align4(descsz);
    }
    Ok(out)
}

/// Explicit and hidden parameters of every kernel in `amdhsa.kernels`.
fn kernel_args_from_metadata(desc: &[u8]) -> Result<BTreeMap<String, Vec<ArgInfo>>, ElfError> {
    let mut p = msgpack::Parser::new(desc);
    let root = p.value(0).map_err(|e| ElfError(format!("metadata: {e}")))?;
    let mut out = BTreeMap::new();
    let Some(kernels) = root.get("amdhsa.kernels").and_then(|k| k.as_array()) else {
        return Ok(out);
    };
    for k in kernels {
        let Some(name) = k.get(".name").and_then(|n| n.as_str()) else {
            continue;
        };
        let mut args = Vec::new();
        for a in k.get(".args").and_then(|a| a.as_array()).unwrap_or(&[]) {
            args.push(ArgInfo {
                name: a.get(".name").and_then(|n| n.as_str()).map(str::to_string),
                size: a.get(".size").and_then(|v| v.as_u64()).unwrap_or(0),
                offset: a.get(".offset").and_then(|v| v.as_u64()).unwrap_or(0),
                value_kind: a
                    .get(".value_kind")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string(),
            });
        }
        out.insert(name.to_string(), args);
    }
    Ok(out)
}

/// The small part of MessagePack the AMDGPU metadata uses, bounds-checked and depth-limited.
mod msgpack {
    #[derive(Clone, Debug, PartialEq)]
    pub enum Value {
        Nil,
        Bool(bool),
        Int(i64),
        UInt(u64),
        Float(f64),
        Str(String),
        Bin(Vec<u8>),
        Array(Vec<Value>),
        Map(Vec<(Value, Value)>),
        Ext,
    }

    impl Value {
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Map(m) => m
                    .iter()
                    .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                    .map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(a) => Some(a),
                _ => None,
            }
        }
        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::Str(s) => Some(s),
                _ => None,
            }
        }
        pub fn as_u64(&self) -> Option<u64> {
            match *self {
                Value::UInt(v) => Some(v),
                Value::Int(v) => u64::try_from(v).ok(),
                _ => None,
            }
        }
    }

    const MAX_DEPTH: usize = 32;

    pub struct Parser<'a> {
        data: &'a [u8],
        at: usize,
    }

    impl<'a> Parser<'a> {
        pub fn new(data: &'a [u8]) -> Self {
            Parser { data, at: 0 }
        }

        fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
            let end = self.at.checked_add(n).ok_or("length overflows")?;
            let s = self.data.get(self.at..end).ok_or("truncated")?;
            self.at = end;
            Ok(s)
        }

        fn be(&mut self, n: usize) -> Result<u64, String> {
            Ok(self.take(n)?.iter().fold(0u64, |a, b| (a << 8) | *b as u64))
        }

        /// A length that cannot exceed what is left (every element takes at least a byte).
        fn count(&mut self, n: usize) -> Result<usize, String> {
            let c = usize::try_from(self.be(n)?).map_err(|_| "count too large")?;
            if c > self.data.len() - self.at {
                return Err("count exceeds the data".into());
            }
            Ok(c)
        }

        pub fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > MAX_DEPTH {
                return Err("nested too deeply".into());
            }
            let b = self.take(1)?[0];
            Ok(match b {
                0x00..=0x7f => Value::UInt(b as u64),
                0xe0..=0xff => Value::Int(b as i8 as i64),
                0x80..=0x8f => self.map((b & 0x0f) as usize, depth)?,
                0x90..=0x9f => self.array((b & 0x0f) as usize, depth)?,
                0xa0..=0xbf => self.str((b & 0x1f) as usize)?,
                0xc0 => Value::Nil,
                0xc2 => Value::Bool(false),
                0xc3 => Value::Bool(true),
                0xc4..=0xc6 => {
                    let n = self.count(1 << (b - 0xc4))?;
                    Value::Bin(self.take(n)?.to_vec())
                }
                0xc7..=0xc9 => {
                    let n = self.count(1 << (b - 0xc7))?;
                    self.take(n + 1)?;
                    Value::Ext
                }
                0xca => Value::Float(f32::from_bits(self.be(4)? as u32) as f64),
                0xcb => Value::Float(f64::from_bits(self.be(8)?)),
                0xcc..=0xcf => Value::UInt(self.be(1 << (b - 0xcc))?),
                0xd0 => Value::Int(self.be(1)? as u8 as i8 as i64),
                0xd1 => Value::Int(self.be(2)? as u16 as i16 as i64),
                0xd2 => Value::Int(self.be(4)? as u32 as i32 as i64),
                0xd3 => Value::Int(self.be(8)? as i64),
                0xd4..=0xd8 => {
                    self.take(1 + (1 << (b - 0xd4)))?;
                    Value::Ext
                }
                0xd9..=0xdb => {
                    let n = self.count(1 << (b - 0xd9))?;
                    self.str(n)?
                }
                0xdc | 0xdd => {
                    let n = self.count(if b == 0xdc { 2 } else { 4 })?;
                    self.array(n, depth)?
                }
                0xde | 0xdf => {
                    let n = self.count(if b == 0xde { 2 } else { 4 })?;
                    self.map(n, depth)?
                }
                _ => return Err(format!("unknown type byte {b:#04x}")),
            })
        }

        fn str(&mut self, n: usize) -> Result<Value, String> {
            Ok(Value::Str(
                String::from_utf8_lossy(self.take(n)?).into_owned(),
            ))
        }

        fn array(&mut self, n: usize, depth: usize) -> Result<Value, String> {
            let mut v = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                v.push(self.value(depth + 1)?);
            }
            Ok(Value::Array(v))
        }

        fn map(&mut self, n: usize, depth: usize) -> Result<Value, String> {
            let mut v = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let k = self.value(depth + 1)?;
                let val = self.value(depth + 1)?;
                v.push((k, val));
            }
            Ok(Value::Map(v))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_the_metadata_subset() {
            // {"a": [1, -1, "x"], "b": 300}
            let data = [
                0x82, 0xa1, b'a', 0x93, 0x01, 0xff, 0xa1, b'x', 0xa1, b'b', 0xcd, 0x01, 0x2c,
            ];
            let v = Parser::new(&data).value(0);
            let Ok(v) = v else {
                unreachable!("{v:?}");
            };
            assert_eq!(v.get("b").and_then(Value::as_u64), Some(300));
            assert_eq!(
                v.get("a").and_then(Value::as_array).map(<[Value]>::len),
                Some(3)
            );
            // Truncation and absurd counts are errors, not panics or huge allocations.
            assert!(Parser::new(&[0x92, 0x01]).value(0).is_err());
            assert!(
                Parser::new(&[0xdd, 0xff, 0xff, 0xff, 0xff])
                    .value(0)
                    .is_err()
            );
            let deep = vec![0x91u8; 100];
            assert!(Parser::new(&deep).value(0).is_err());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn mach_table_is_a_bijection() {
        for (t, m) in MACH {
            assert_eq!(mach_of(t), Some(*m));
            assert_eq!(target_of_mach(*m), Some(*t));
        }
        assert_eq!(mach_of("gfx90a"), Some(0x3f));
        assert_eq!(mach_of("gfx942"), Some(0x4c));
        assert_eq!(mach_of("gfx1030"), Some(0x36));
    }

    /// A bundle of `(triple, code)` entries, as clang-offload-bundler writes it.
    pub(crate) fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut head = OFFLOAD_BUNDLE_MAGIC.to_vec();
        head.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let header_len: usize =
            head.len() + entries.iter().map(|(t, _)| 24 + t.len()).sum::<usize>();
        let mut offset = header_len as u64;
        let mut body = Vec::new();
        for (t, code) in entries {
            head.extend_from_slice(&offset.to_le_bytes());
            head.extend_from_slice(&(code.len() as u64).to_le_bytes());
            head.extend_from_slice(&(t.len() as u64).to_le_bytes());
            head.extend_from_slice(t.as_bytes());
            body.extend_from_slice(code);
            offset += code.len() as u64;
        }
        head.extend(body);
        head
    }

    #[test]
    fn bundles_are_split_into_their_device_entries() {
        let b = bundle(&[
            ("host-x86_64-unknown-linux", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", b"AAAA"),
            ("hip-amdgcn-amd-amdhsa-gfx906", b"BB"),
        ]);
        let e = unbundle(&b);
        let Ok(Some(e)) = e else {
            unreachable!("{e:?}")
        };
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].target.as_str(), e[0].code),
            ("gfx90a:xnack-", &b"AAAA"[..])
        );
        assert_eq!((e[1].target.as_str(), e[1].code), ("gfx906", &b"BB"[..]));
        assert_eq!(unbundle(b"\x7fELF...").ok(), Some(None));
        assert!(unbundle(b"CCOB\x01\x00").is_err());
        assert!(unbundle(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(CodeObject::parse(b"").is_err());
        assert!(CodeObject::parse(b"\x7fELF\x02\x01").is_err());
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[18] = 62; // x86-64
        let e = CodeObject::parse(&h)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("not EM_AMDGPU"), "{e}");
        h[18] = 224;
        h[40] = 0xff; // section table far past the end
        h[60] = 1;
        h[58] = 64;
        assert!(CodeObject::parse(&h).is_err());
    }
}
