//! Reading CUDA ELF images (cubins): machine, SM architecture and function symbols, so that a
//! cubin's declared architecture can be checked before the driver sees it, and tests can
//! check what NVRTC produced. (The ROCm backend's `image` reads AMD code objects.)
//!
//! Layout facts (checked against NVRTC 12.9 output): `e_machine` is `EM_CUDA` (190); the
//! ELF OS/ABI byte is 0x33 (`ELFOSABI_CUDA`); with ABI version 7 (sm_XX up to sm_90a) the SM
//! number is `e_flags & 0xff` and the virtual architecture `(e_flags >> 16) & 0xff`; with ABI
//! version 8 (CUDA 12.8+ for sm_100 and later) the SM number is `(e_flags >> 8) & 0xff`.

/// `EM_CUDA`.
pub const EM_CUDA: u16 = 190;

/// What a cubin says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubinInfo {
    pub machine: u16,
    /// The ELF ABI version (`e_ident[EI_ABIVERSION]`).
    pub abi_version: u8,
    pub e_flags: u32,
    /// The SM architecture number (`90` for `sm_90`).
    pub sm: u32,
    /// Names of the function symbols (kernels and non-inlined device functions).
    pub functions: Vec<String>,
}

fn u16_at(d: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(d: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(d: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(o..o + 8)?.try_into().ok()?))
}
fn usize_at(d: &[u8], o: usize) -> Option<usize> {
    usize::try_from(u64_at(d, o)?).ok()
}

/// The SM number encoded in `e_flags` for an ELF ABI version.
pub fn sm_from_flags(abi_version: u8, e_flags: u32) -> u32 {
    if abi_version >= 8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    }
}

/// Parses a 64-bit little-endian CUDA ELF. Errors say what is wrong.
pub fn inspect(data: &[u8]) -> Result<CubinInfo, String> {
    if data.len() < 64 || &data[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if data[4] != 2 || data[5] != 1 {
        return Err("not a 64-bit little-endian ELF".into());
    }
    let bad = || "truncated or malformed ELF".to_string();
    let machine = u16_at(data, 18).ok_or_else(bad)?;
    if machine != EM_CUDA {
        return Err(format!(
            "ELF machine {machine}, not EM_CUDA ({EM_CUDA}): not a cubin"
        ));
    }
    let abi_version = data[8];
    let e_flags = u32_at(data, 48).ok_or_else(bad)?;
    let shoff = usize_at(data, 40).ok_or_else(bad)?;
    let shentsize = u16_at(data, 58).ok_or_else(bad)? as usize;
    let shnum = u16_at(data, 60).ok_or_else(bad)? as usize;
    if shentsize < 64 {
        return Err(bad());
    }
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let o = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(data, o + 4)?,    // sh_type
            usize_at(data, o + 24)?, // sh_offset
            usize_at(data, o + 32)?, // sh_size
            u32_at(data, o + 40)?,   // sh_link
            usize_at(data, o + 56)?, // sh_entsize
        ))
    };
    let mut functions = vec![];
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
            if info & 0xf != 2 {
                continue; // STT_FUNC only
            }
            let name = strtab.get(name_off..).ok_or_else(bad)?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            functions.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
    }
    Ok(CubinInfo {
        machine,
        abi_version,
        e_flags,
        sm: sm_from_flags(abi_version, e_flags),
        functions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_of_real_cubins() {
        // e_flags of NVRTC 12.9 cubins: sm_80, sm_90 (ABI 7), sm_100, sm_120 (ABI 8).
        assert_eq!(sm_from_flags(7, 0x0050_0550), 80);
        assert_eq!(sm_from_flags(7, 0x005a_055a), 90);
        assert_eq!(sm_from_flags(8, 0x0600_6402), 100);
        assert_eq!(sm_from_flags(8, 0x0600_7802), 120);
    }

    #[test]
    fn rejects_non_cubins() {
        assert!(inspect(b"hello").is_err());
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[18] = 62; // EM_X86_64
        let e = inspect(&elf).err().unwrap_or_default();
        assert!(e.contains("not EM_CUDA"), "{e}");
    }
}
