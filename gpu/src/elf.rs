//! The one ELF reader of the GPU backends (cubins, AMD code objects): the header fields a
//! loader checks, the symbol tables and the notes of a 64-bit little-endian ELF file. What a
//! machine's `e_flags` mean and which symbols are kernels is the vendor crate's business.
//!
//! Every read is bounds-checked: a truncated or hostile file is an error, never a panic, and
//! nothing is allocated from a size the file states before that size is checked against the
//! data. Constants are the ELF specification's (`SHT_*`, `STT_*`).

/// `SHT_SYMTAB`.
pub const SHT_SYMTAB: u32 = 2;
/// `SHT_NOTE`.
pub const SHT_NOTE: u32 = 7;
/// `SHT_DYNSYM`.
pub const SHT_DYNSYM: u32 = 11;
/// `STT_FUNC` (the low four bits of `st_info`).
pub const STT_FUNC: u8 = 2;

/// A malformed ELF file: what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ElfError(pub String);

fn bad<T>(what: impl Into<String>) -> Result<T, ElfError> {
    Err(ElfError(what.into()))
}

/// Bounds-checked little-endian reads from a byte slice (ELF files and the containers that
/// wrap them, such as offload bundles).
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    /// `len` bytes at `at`.
    pub fn bytes(&self, at: u64, len: u64) -> Result<&'a [u8], ElfError> {
        let start = usize::try_from(at).map_err(|_| ElfError("offset too large".into()))?;
        let len = usize::try_from(len).map_err(|_| ElfError("length too large".into()))?;
        start
            .checked_add(len)
            .and_then(|end| self.0.get(start..end))
            .ok_or_else(|| ElfError(format!("truncated: {len} bytes at {at} lie past the end")))
    }
    pub fn u8(&self, at: u64) -> Result<u8, ElfError> {
        Ok(self.bytes(at, 1)?[0])
    }
    pub fn u16(&self, at: u64) -> Result<u16, ElfError> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&self, at: u64) -> Result<u32, ElfError> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&self, at: u64) -> Result<u64, ElfError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(at, 8)?);
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

/// One section header (the fields the readers use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// `sh_type`.
    pub kind: u32,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub entsize: u64,
}

/// One named symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    /// `st_info` (type in the low four bits, binding in the high four).
    pub info: u8,
    /// The table it is in: [`SHT_SYMTAB`] or [`SHT_DYNSYM`].
    pub table: u32,
}

impl Symbol {
    /// `STT_FUNC`.
    pub fn is_function(&self) -> bool {
        self.info & 0xf == STT_FUNC
    }
}

/// One ELF note: owner name (without its NUL), type, descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note<'a> {
    pub name: &'a [u8],
    pub kind: u32,
    pub desc: &'a [u8],
}

/// A 64-bit little-endian ELF file: its header and section table.
#[derive(Clone, Debug)]
pub struct Elf<'a> {
    data: Reader<'a>,
    /// `e_ident[EI_OSABI]`.
    pub os_abi: u8,
    /// `e_ident[EI_ABIVERSION]`.
    pub abi_version: u8,
    /// `e_machine`.
    pub machine: u16,
    /// `e_flags`.
    pub flags: u32,
    pub sections: Vec<Section>,
}

impl<'a> Elf<'a> {
    /// Reads the header and the section table (the machine is not checked: the caller knows
    /// which it wants).
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>, ElfError> {
        let r = Reader(data);
        if r.bytes(0, 4).ok() != Some(b"\x7fELF") {
            return bad("no ELF magic");
        }
        if r.u8(4)? != 2 || r.u8(5)? != 1 {
            return bad("not a 64-bit little-endian ELF");
        }
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
        Ok(Elf {
            data: r,
            os_abi: r.u8(7)?,
            abi_version: r.u8(8)?,
            machine: r.u16(18)?,
            flags: r.u32(48)?,
            sections,
        })
    }

    /// The named symbols of the tables of the kinds in `tables` ([`SHT_SYMTAB`],
    /// [`SHT_DYNSYM`]), in file order.
    pub fn symbols(&self, tables: &[u32]) -> Result<Vec<Symbol>, ElfError> {
        let r = self.data;
        let mut out = Vec::new();
        for s in self.sections.iter().filter(|s| tables.contains(&s.kind)) {
            let Some(strtab) = self.sections.get(s.link as usize) else {
                return bad("symbol table links to a missing string table");
            };
            let ent = if s.entsize == 0 { 24 } else { s.entsize };
            if ent < 24 {
                return bad("symbol entries are too small");
            }
            for i in 0..s.size / ent {
                let at = i
                    .checked_mul(ent)
                    .and_then(|o| o.checked_add(s.offset))
                    .ok_or_else(|| ElfError("symbol table offset overflows".into()))?;
                let name_off = r.u32(at)? as u64;
                let info = r.u8(at.saturating_add(4))?;
                if name_off == 0 {
                    continue;
                }
                let name = r.cstr(strtab.offset, strtab.size, name_off)?;
                if !name.is_empty() {
                    out.push(Symbol {
                        name,
                        info,
                        table: s.kind,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Every note of every `SHT_NOTE` section.
    pub fn notes(&self) -> Result<Vec<Note<'a>>, ElfError> {
        let mut out = Vec::new();
        for s in self.sections.iter().filter(|s| s.kind == SHT_NOTE) {
            let n = Reader(self.data.bytes(s.offset, s.size)?);
            let mut at = 0u64;
            let align4 = |x: u64| x.div_ceil(4) * 4;
            while at + 12 <= s.size {
                let namesz = n.u32(at)? as u64;
                let descsz = n.u32(at + 4)? as u64;
                let kind = n.u32(at + 8)?;
                let name = n.bytes(at + 12, namesz)?;
                let name = name.strip_suffix(b"\0").unwrap_or(name);
                let desc_at = at + 12 + align4(namesz);
                let desc = n.bytes(desc_at, descsz)?;
                out.push(Note { name, kind, desc });
                at = desc_at + align4(descsz);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF: header, a string table, a symbol table with `f` (a function) and `d`
    /// (data), and a note `AMDGPU`/32 with a 3-byte descriptor.
    fn sample() -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[7] = 64;
        f[8] = 3;
        f[18..20].copy_from_slice(&224u16.to_le_bytes());
        f[48..52].copy_from_slice(&0x3fu32.to_le_bytes());
        let strtab_at = f.len() as u64;
        f.extend_from_slice(b"\0f\0d\0");
        let symtab_at = f.len() as u64;
        f.extend_from_slice(&[0u8; 24]); // the null symbol
        for (name, info) in [(1u32, 0x12u8), (3, 0x11)] {
            let mut e = [0u8; 24];
            e[..4].copy_from_slice(&name.to_le_bytes());
            e[4] = info;
            f.extend_from_slice(&e);
        }
        let note_at = f.len() as u64;
        f.extend_from_slice(&7u32.to_le_bytes());
        f.extend_from_slice(&3u32.to_le_bytes());
        f.extend_from_slice(&32u32.to_le_bytes());
        f.extend_from_slice(b"AMDGPU\0\0abc\0");
        let shoff = f.len() as u64;
        let sections = [
            (0u32, 0u64, 0u64, 0u32, 0u64),
            (3, strtab_at, 5, 0, 0),
            (SHT_SYMTAB, symtab_at, 72, 1, 24),
            (SHT_NOTE, note_at, 24, 0, 0),
        ];
        for (kind, offset, size, link, entsize) in sections {
            let mut h = [0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&offset.to_le_bytes());
            h[32..40].copy_from_slice(&size.to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h[56..64].copy_from_slice(&entsize.to_le_bytes());
            f.extend_from_slice(&h);
        }
        f[40..48].copy_from_slice(&shoff.to_le_bytes());
        f[58..60].copy_from_slice(&64u16.to_le_bytes());
        f[60..62].copy_from_slice(&(sections.len() as u16).to_le_bytes());
        f
    }

    #[test]
    fn reads_header_symbols_and_notes() {
        let data = sample();
        let elf = Elf::parse(&data);
        let Ok(elf) = elf else {
            unreachable!("{elf:?}")
        };
        assert_eq!(
            (elf.machine, elf.flags, elf.os_abi, elf.abi_version),
            (224, 0x3f, 64, 3)
        );
        let syms = elf.symbols(&[SHT_SYMTAB]).unwrap_or_default();
        let names: Vec<_> = syms
            .iter()
            .map(|s| (s.name.as_str(), s.is_function()))
            .collect();
        assert_eq!(names, [("f", true), ("d", false)]);
        assert!(elf.symbols(&[SHT_DYNSYM]).unwrap_or_default().is_empty());
        let notes = elf.notes().unwrap_or_default();
        assert_eq!(notes.len(), 1);
        assert_eq!(
            (notes[0].name, notes[0].kind, notes[0].desc),
            (&b"AMDGPU"[..], 32, &b"abc"[..])
        );
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let data = sample();
        for cut in 0..data.len() {
            if let Ok(elf) = Elf::parse(&data[..cut]) {
                let _ = elf.symbols(&[SHT_SYMTAB, SHT_DYNSYM]);
                let _ = elf.notes();
            }
        }
        assert!(Elf::parse(b"hello").is_err());
        assert!(Elf::parse(b"\x7fELF\x01\x01").is_err());
    }
}
