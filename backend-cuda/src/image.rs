//! Reading CUDA ELF images (cubins): machine, SM architecture and function symbols, so that a
//! cubin's declared architecture can be checked before the driver sees it, and tests can
//! check what NVRTC produced. (The ROCm backend's `image` reads AMD code objects.)
//!
//! Layout facts (checked against NVRTC 12.9 output): `e_machine` is `EM_CUDA` (190); the
//! ELF OS/ABI byte is 0x33 (`ELFOSABI_CUDA`); with ABI version 7 (sm_XX up to sm_90a) the SM
//! number is `e_flags & 0xff` and the virtual architecture `(e_flags >> 16) & 0xff`; with ABI
//! version 8 (CUDA 12.8+ for sm_100 and later) the SM number is `(e_flags >> 8) & 0xff`.

use xthunk_gpu::elf::{Elf, SHT_SYMTAB};

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

/// The SM number encoded in `e_flags` for an ELF ABI version.
pub fn sm_from_flags(abi_version: u8, e_flags: u32) -> u32 {
    if abi_version >= 8 {
        (e_flags >> 8) & 0xff
    } else {
        e_flags & 0xff
    }
}

/// Parses a 64-bit little-endian CUDA ELF (with the GPU layer's one ELF reader,
/// [`xthunk_gpu::elf`]). Errors say what is wrong.
pub fn inspect(data: &[u8]) -> Result<CubinInfo, String> {
    let elf = Elf::parse(data).map_err(|e| e.to_string())?;
    if elf.machine != EM_CUDA {
        return Err(format!(
            "ELF machine {}, not EM_CUDA ({EM_CUDA}): not a cubin",
            elf.machine
        ));
    }
    let functions = elf
        .symbols(&[SHT_SYMTAB])
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|s| s.is_function())
        .map(|s| s.name)
        .collect();
    Ok(CubinInfo {
        machine: elf.machine,
        abi_version: elf.abi_version,
        e_flags: elf.flags,
        sm: sm_from_flags(elf.abi_version, elf.flags),
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
