//! Reading AMD GPU code objects (HSACO): ELF64 files with `e_machine` `EM_AMDGPU` (224) whose
//! `e_flags` carry the gfx target, whose symbol tables name the kernels, and whose
//! `NT_AMDGPU_METADATA` note (MessagePack) describes every kernel's parameters.
//!
//! The ELF file is read by the GPU layer's one ELF reader ([`xthunk_gpu::elf`]), the metadata
//! by its one MessagePack reader ([`xthunk_gpu::msgpack`]); offload bundles are read here.
//! Every read is bounds-checked: a truncated or hostile file is an error, never a panic.
//! Constants are LLVM's (`llvm/BinaryFormat/ELF.h`, `AMDGPUUsage.rst`).

use std::collections::BTreeMap;
use xthunk_gpu::elf::{self, Elf, Reader, SHT_DYNSYM, SHT_SYMTAB};
use xthunk_gpu::msgpack::Parser;

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

impl From<elf::ElfError> for ElfError {
    fn from(e: elf::ElfError) -> Self {
        ElfError(e.0)
    }
}

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

    /// Parses an ELF64 little-endian AMD GPU code object (with the GPU layer's one ELF
    /// reader, [`xthunk_gpu::elf`]).
    pub fn parse(data: &[u8]) -> Result<CodeObject, ElfError> {
        let elf = Elf::parse(data)?;
        if elf.machine != EM_AMDGPU {
            return bad(format!(
                "e_machine is {}, not EM_AMDGPU ({EM_AMDGPU})",
                elf.machine
            ));
        }
        let mut symbols = Vec::new();
        let mut descriptors = Vec::new();
        for s in elf.symbols(&[SHT_SYMTAB, SHT_DYNSYM])? {
            if let Some(k) = s.name.strip_suffix(".kd") {
                descriptors.push(k.to_string());
            }
            if !symbols.contains(&s.name) {
                symbols.push(s.name);
            }
        }
        descriptors.sort();
        descriptors.dedup();
        let mut kernel_args = BTreeMap::new();
        for n in elf.notes()? {
            if n.name == b"AMDGPU" && n.kind == NT_AMDGPU_METADATA {
                kernel_args = kernel_args_from_metadata(n.desc)?;
            }
        }
        Ok(CodeObject {
            e_machine: elf.machine,
            e_flags: elf.flags,
            os_abi: elf.os_abi,
            abi_version: elf.abi_version,
            kernels: descriptors,
            symbols,
            kernel_args,
        })
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

/// Explicit and hidden parameters of every kernel in `amdhsa.kernels`.
fn kernel_args_from_metadata(desc: &[u8]) -> Result<BTreeMap<String, Vec<ArgInfo>>, ElfError> {
    let mut p = Parser::new(desc);
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
