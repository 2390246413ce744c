//! Reading module images: cubins (ELF, `EM_CUDA`), PTX text, AMD code objects (ELF,
//! `EM_AMDGPU`) and clang offload bundles holding them. Only what the emulator needs: the
//! target architecture, the names of the functions (ELF `STT_FUNC` symbols, PTX `.entry`
//! lines) and what the image says about each kernel ([`crate::kernel_info`]: parameter
//! sizes, launch bounds, static shared memory), and the portable source the image carries
//! (the device array `xt_portable_source`: an ELF object symbol, or a PTX `.b8` array), which
//! is what the emulator runs. Every read is bounds-checked; a malformed image is an error,
//! never a panic.

use crate::kernel_info::{self, Kernels};
pub use crate::section::Section;
use xthunk_core::kernels::portable::{EMBEDDED_SOURCE_SYMBOL, embedded_unit};

/// `EM_CUDA`.
pub const EM_CUDA: u16 = 190;
/// `EM_AMDGPU`.
pub const EM_AMDGPU: u16 = 224;

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Largest image read through a bare pointer (a sanity bound on header fields).
const MAX_IMAGE: usize = 1 << 30;

/// What an image is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A cubin for `sm_<n>` (e.g. 90).
    Cubin { sm: u32 },
    /// PTX for `sm_<n>` (from `.target`), if stated.
    Ptx { sm: Option<u32> },
    /// An AMD code object; `mach` is `e_flags & 0xff` (`EF_AMDGPU_MACH`).
    Hsaco { mach: u32 },
}

/// A parsed image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub target: Target,
    pub functions: Vec<String>,
    /// What the image says about its kernels (those it describes; by name).
    pub kernels: Kernels,
    /// The portable unit the image was compiled from, when it carries one (the device array
    /// `xt_portable_source`, see `xthunk_core::kernels::portable::embed_source`).
    pub source: Option<String>,
}

fn u16_at(d: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        d.get(o..o.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(d: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        d.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn u64_at(d: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        d.get(o..o.checked_add(8)?)?.try_into().ok()?,
    ))
}
fn usize_at(d: &[u8], o: usize) -> Option<usize> {
    usize::try_from(u64_at(d, o)?).ok()
}

/// The SM number of a cubin's `e_flags` (ABI version 8 moved it).
pub fn sm_from_flags(abi_version: u8, e_flags: u32) -> u32 {
    if abi_version >= 8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    }
}

/// The length of the ELF64 file whose first bytes are `head` (at least 64), from its section
/// and program header tables, with `section(i)` reading the 64-byte section header `i`.
fn elf_length(head: &[u8], section: impl Fn(usize) -> Option<[u8; 64]>) -> Option<usize> {
    let phoff = usize_at(head, 32)?;
    let shoff = usize_at(head, 40)?;
    let phentsize = u16_at(head, 54)? as usize;
    let phnum = u16_at(head, 56)? as usize;
    let shentsize = u16_at(head, 58)? as usize;
    let shnum = u16_at(head, 60)? as usize;
    let mut end = 64usize
        .max(shoff.checked_add(shnum.checked_mul(shentsize)?)?)
        .max(phoff.checked_add(phnum.checked_mul(phentsize)?)?);
    if shentsize < 64 && shnum > 0 {
        return None;
    }
    for i in 0..shnum {
        let sh = section(i)?;
        let ty = u32_at(&sh, 4)?;
        if ty == 8 {
            continue; // SHT_NOBITS
        }
        let off = usize_at(&sh, 24)?;
        let size = usize_at(&sh, 32)?;
        end = end.max(off.checked_add(size)?);
    }
    (end <= MAX_IMAGE).then_some(end)
}

/// Reads the image at `ptr` (whose length is implied by its format).
///
/// # Safety
/// `ptr` must point to a complete, readable image (an ELF file, a NUL-terminated PTX text or
/// an offload bundle), as the vendor APIs require of their callers.
pub unsafe fn read_raw(ptr: *const u8) -> Result<Image, String> {
    if ptr.is_null() {
        return Err("the image pointer is null".into());
    }
    // SAFETY: byte by byte, stopping at the first mismatch: never past a PTX text's NUL, and
    // an ELF file is longer than its 4-byte magic.
    let is_elf = (0..4).all(|i| unsafe { *ptr.add(i) } == b"\x7fELF"[i]);
    if is_elf {
        // SAFETY: an ELF64 header is 64 bytes.
        let head = unsafe { std::slice::from_raw_parts(ptr, 64) };
        if head[4] != 2 || head[5] != 1 {
            return Err("not a 64-bit little-endian ELF".into());
        }
        let shoff = usize_at(head, 40).ok_or("malformed ELF header")?;
        let shentsize = u16_at(head, 58).ok_or("malformed ELF header")? as usize;
        let len = elf_length(head, |i| {
            let o = shoff.checked_add(i.checked_mul(shentsize)?)?;
            if o.checked_add(64)? > MAX_IMAGE {
                return None;
            }
            let mut sh = [0u8; 64];
            // SAFETY: the section header table lies inside the complete ELF file the caller
            // passed (its offsets come from the file's own header).
            unsafe { std::ptr::copy_nonoverlapping(ptr.add(o), sh.as_mut_ptr(), 64) };
            Some(sh)
        })
        .ok_or("malformed ELF (section table)")?;
        // SAFETY: `len` is the extent of the file described by its own headers.
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        return parse_elf(data);
    }
    // SAFETY: a bundle's magic is 24 bytes, and a PTX text is NUL-terminated: comparing the
    // first 24 bytes only reads past the NUL for texts shorter than that, so check for one.
    let short = (0..24).any(|i| unsafe { *ptr.add(i) } == 0);
    if !short {
        // SAFETY: as above, at least 24 bytes are readable.
        let head = unsafe { std::slice::from_raw_parts(ptr, 24) };
        if head == BUNDLE_MAGIC {
            // SAFETY: the bundle header holds a count after the magic.
            let count = unsafe { std::ptr::read_unaligned(ptr.add(24).cast::<u64>()) } as usize;
            if count > 1024 {
                return Err("malformed offload bundle".into());
            }
            let mut o = 32usize;
            let mut end = 32usize;
            for _ in 0..count {
                // SAFETY: each entry header (offset, size, triple length) follows the count.
                let (off, size, tlen) = unsafe {
                    (
                        std::ptr::read_unaligned(ptr.add(o).cast::<u64>()) as usize,
                        std::ptr::read_unaligned(ptr.add(o + 8).cast::<u64>()) as usize,
                        std::ptr::read_unaligned(ptr.add(o + 16).cast::<u64>()) as usize,
                    )
                };
                if tlen > 4096 {
                    return Err("malformed offload bundle".into());
                }
                o += 24 + tlen;
                end = end.max(o).max(off.saturating_add(size));
            }
            if end > MAX_IMAGE {
                return Err("malformed offload bundle".into());
            }
            // SAFETY: the entries lie inside the complete bundle the caller passed.
            let data = unsafe { std::slice::from_raw_parts(ptr, end) };
            return parse_bundle(data);
        }
    }
    // PTX: a NUL-terminated text.
    let mut len = 0usize;
    // SAFETY: the caller passes a NUL-terminated text; the scan stops at the NUL.
    while unsafe { *ptr.add(len) } != 0 {
        len += 1;
        if len > MAX_IMAGE {
            return Err("not an image (no NUL terminator found)".into());
        }
    }
    // SAFETY: `len` bytes before the NUL are readable.
    let text = unsafe { std::slice::from_raw_parts(ptr, len) };
    parse_ptx(&String::from_utf8_lossy(text))
}

/// Parses an ELF64 image (cubin or AMD code object).
pub fn parse_elf(data: &[u8]) -> Result<Image, String> {
    if data.len() < 64 || &data[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if data[4] != 2 || data[5] != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let bad = || "truncated or malformed ELF".to_string();
    let machine = u16_at(data, 18).ok_or_else(bad)?;
    let e_flags = u32_at(data, 48).ok_or_else(bad)?;
    let target = match machine {
        EM_CUDA => Target::Cubin {
            sm: sm_from_flags(data[8], e_flags),
        },
        EM_AMDGPU => Target::Hsaco {
            mach: e_flags & 0xff,
        },
        m => {
            return Err(format!(
                "ELF machine {m} is neither EM_CUDA (190) nor EM_AMDGPU (224)"
            ));
        }
    };
    let shoff = usize_at(data, 40).ok_or_else(bad)?;
    let shentsize = u16_at(data, 58).ok_or_else(bad)? as usize;
    let shnum = u16_at(data, 60).ok_or_else(bad)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let o = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(data, o.checked_add(4)?)?,
            usize_at(data, o.checked_add(24)?)?,
            usize_at(data, o.checked_add(32)?)?,
            u32_at(data, o.checked_add(40)?)?,
            usize_at(data, o.checked_add(56)?)?,
        ))
    };
    // Section names, from the section-name string table (`e_shstrndx`); unnamed if absent.
    let names = u16_at(data, 62)
        .and_then(|i| section(usize::from(i)))
        .and_then(|(_, off, size, _, _)| data.get(off..off.checked_add(size)?));
    let mut sections = vec![];
    for i in 0..shnum {
        let o = shoff.checked_add(i.checked_mul(shentsize).ok_or_else(bad)?);
        let name_off = o.and_then(|o| u32_at(data, o)).ok_or_else(bad)? as usize;
        let name = names
            .and_then(|n| n.get(name_off..))
            .map(|n| &n[..n.iter().position(|&b| b == 0).unwrap_or(n.len())])
            .unwrap_or_default();
        let (ty, offset, size, _, _) = section(i).ok_or_else(bad)?;
        sections.push(Section {
            name: String::from_utf8_lossy(name).into_owned(),
            ty,
            offset,
            size,
        });
    }
    let kernels = match target {
        Target::Cubin { .. } => kernel_info::from_cubin(data, &sections),
        _ => kernel_info::from_amdgpu(data, &sections),
    };
    let mut functions = vec![];
    let mut source = None;
    for i in 0..shnum {
        let (ty, off, size, link, entsize) = section(i).ok_or_else(bad)?;
        if ty != 2 {
            continue; // SHT_SYMTAB only
        }
        let (_, str_off, str_size, _, _) = section(link as usize).ok_or_else(bad)?;
        let strtab = data
            .get(str_off..str_off.checked_add(str_size).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        let entsize = entsize.max(24);
        for s in 0..size / entsize {
            let o = off.checked_add(s * entsize).ok_or_else(bad)?;
            let name_off = u32_at(data, o).ok_or_else(bad)? as usize;
            let info = *data.get(o + 4).ok_or_else(bad)?;
            if info & 0xf == 1 && source.is_none() {
                // STT_OBJECT: the carried source?
                let name = strtab.get(name_off..).ok_or_else(bad)?;
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                if &name[..end] == EMBEDDED_SOURCE_SYMBOL.as_bytes() {
                    source = object_bytes(data, o, |j| {
                        let h = shoff.checked_add(j.checked_mul(shentsize)?)?;
                        Some((
                            u32_at(data, h.checked_add(4)?)?,
                            usize_at(data, h.checked_add(16)?)?,
                            usize_at(data, h.checked_add(24)?)?,
                            usize_at(data, h.checked_add(32)?)?,
                        ))
                    })
                    .and_then(embedded_unit);
                }
                continue;
            }
            if info & 0xf != 2 {
                continue; // STT_FUNC only
            }
            let name = strtab.get(name_off..).ok_or_else(bad)?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let n = String::from_utf8_lossy(&name[..end]).into_owned();
            if !n.is_empty() && !functions.contains(&n) {
                functions.push(n);
            }
        }
    }
    Ok(Image {
        target,
        functions,
        kernels,
        source,
    })
}

/// The bytes of the ELF symbol at `sym` (its section's file bytes at `st_value - sh_addr`);
/// `section(j)` gives section j's type, address, offset and size.
fn object_bytes(
    data: &[u8],
    sym: usize,
    section: impl Fn(usize) -> Option<(u32, usize, usize, usize)>,
) -> Option<&[u8]> {
    let shndx = u16_at(data, sym.checked_add(6)?)? as usize;
    let value = usize_at(data, sym.checked_add(8)?)?;
    let size = usize_at(data, sym.checked_add(16)?)?;
    let (ty, addr, off, sec_size) = section(shndx)?;
    if ty == 8 {
        return None; // SHT_NOBITS: no bytes in the file
    }
    let within = value.checked_sub(addr)?;
    if within.checked_add(size)? > sec_size {
        return None;
    }
    let start = off.checked_add(within)?;
    data.get(start..start.checked_add(size)?)
}

/// The carried source in PTX: `.global .align 1 .b8 xt_portable_source[N] = {b, b, ...};`.
fn ptx_source(text: &str) -> Option<String> {
    let at = text.find(&format!(" {EMBEDDED_SOURCE_SYMBOL}["))?;
    let rest = &text[at..];
    let open = rest.find('{')?;
    let close = rest.find('}')?;
    let mut bytes = Vec::new();
    for v in rest.get(open + 1..close)?.split(',') {
        bytes.push(v.trim().parse::<u8>().ok()?);
    }
    embedded_unit(&bytes)
}

/// Parses PTX text: `.target sm_XX` and the `.entry` names.
pub fn parse_ptx(text: &str) -> Result<Image, String> {
    if !text.contains(".version") && !text.contains(".entry") {
        return Err("neither an ELF image nor PTX text".into());
    }
    let mut sm = None;
    let mut functions = vec![];
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix(".target") {
            for part in rest.split([',', ' ', '\t']) {
                if let Some(n) = part.trim().strip_prefix("sm_") {
                    let digits: String = n.chars().take_while(|c| c.is_ascii_digit()).collect();
                    sm = digits.parse().ok();
                }
            }
        }
        let mut words = t.split_whitespace().peekable();
        while let Some(w) = words.next() {
            if w == ".entry"
                && let Some(name) = words.peek()
            {
                let n: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                    .collect();
                if !n.is_empty() && !functions.contains(&n) {
                    functions.push(n);
                }
            }
        }
    }
    Ok(Image {
        target: Target::Ptx { sm },
        functions,
        kernels: kernel_info::from_ptx(text),
        source: ptx_source(text),
    })
}

/// Parses a clang offload bundle: the first `amdgcn` (or `hip`) entry holding an ELF.
pub fn parse_bundle(data: &[u8]) -> Result<Image, String> {
    let bad = || "malformed offload bundle".to_string();
    let count = usize_at(data, 24).ok_or_else(bad)?;
    let mut o = 32usize;
    let mut tried = vec![];
    for _ in 0..count {
        let off = usize_at(data, o).ok_or_else(bad)?;
        let size = usize_at(data, o + 8).ok_or_else(bad)?;
        let tlen = usize_at(data, o + 16).ok_or_else(bad)?;
        let triple = data.get(o + 24..o + 24 + tlen).ok_or_else(bad)?;
        let triple = String::from_utf8_lossy(triple).into_owned();
        o += 24 + tlen;
        if triple.contains("amdgcn") && size > 0 {
            let body = data.get(off..off + size).ok_or_else(bad)?;
            return parse_elf(body);
        }
        tried.push(triple);
    }
    Err(format!(
        "the offload bundle has no amdgcn code object (entries: {})",
        tried.join(", ")
    ))
}

/// `EF_AMDGPU_MACH` of a gfx target (the common ones; `None` when unknown).
pub fn amdgpu_mach(gfx: &str) -> Option<u32> {
    Some(match gfx {
        "gfx900" => 0x2c,
        "gfx906" => 0x2f,
        "gfx908" => 0x30,
        "gfx90a" => 0x3f,
        "gfx940" => 0x40,
        "gfx941" => 0x4b,
        "gfx942" => 0x4c,
        "gfx1030" => 0x36,
        "gfx1100" => 0x41,
        "gfx1101" => 0x46,
        "gfx1102" => 0x47,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_entries_and_target() {
        let ptx = ".version 8.5\n.target sm_90\n.address_size 64\n\n\t// .globl\tadd_f32\n.visible .entry add_f32(\n\t.param .u64 add_f32_param_0\n)\n{\n}\n.visible .entry fill_f32(\n)";
        let img = parse_ptx(ptx).unwrap_or(Image {
            target: Target::Ptx { sm: None },
            functions: vec![],
            source: None,
            kernels: vec![],
        });
        assert_eq!(img.target, Target::Ptx { sm: Some(90) });
        assert_eq!(img.functions, vec!["add_f32", "fill_f32"]);
        assert!(parse_ptx("hello").is_err());
    }

    #[test]
    fn rejects_bad_elves() {
        assert!(parse_elf(b"nope").is_err());
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[18] = 62;
        assert!(parse_elf(&elf).is_err_and(|e| e.contains("neither")));
        elf[18] = 190;
        elf[48] = 90;
        elf[8] = 7;
        let img = parse_elf(&elf);
        assert!(img.is_ok_and(|i| i.target == Target::Cubin { sm: 90 } && i.functions.is_empty()));
    }
}
