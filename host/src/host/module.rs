//! Host modules: the standard kernel library and registered host kernel libraries.

use crate::backend::{KernelHandle, LoadedModule};
use crate::error::{Error, Result};
use crate::kernels::{HostKernel, KernelLibrary};
use std::any::Any;
use std::sync::Arc;

/// A host kernel ready to run.
#[derive(Debug)]
pub struct HostKernelHandle {
    pub(crate) kernel: HostKernel,
}

impl KernelHandle for HostKernelHandle {
    fn name(&self) -> &str {
        &self.kernel.signature.name
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A module resolved to a host kernel library.
pub struct HostModule {
    pub(crate) name: String,
    pub(crate) image: String,
    pub(crate) library: Arc<KernelLibrary>,
    pub(crate) library_ref: Option<&'static KernelLibrary>,
}

impl HostModule {
    fn lib(&self) -> &KernelLibrary {
        match self.library_ref {
            Some(l) => l,
            None => &self.library,
        }
    }
}

impl LoadedModule for HostModule {
    fn name(&self) -> &str {
        &self.name
    }
    fn image(&self) -> String {
        self.image.clone()
    }
    fn kernel(&self, name: &str) -> Result<Arc<dyn KernelHandle>> {
        let lib = self.lib();
        match lib.get(name) {
            Some(k) => Ok(Arc::new(HostKernelHandle { kernel: k.clone() })),
            None => Err(Error::Module {
                module: self.name.clone(),
                message: format!(
                    "kernel `{name}` not found in host library `{}` ({} kernels)",
                    lib.name,
                    lib.len()
                ),
            }),
        }
    }
}

/// A kernel of a source module, run by the CPU execution ([`crate::host::cpu`]).
pub struct CpuKernelHandle {
    pub(crate) program: Arc<crate::host::cpu::Program>,
    pub(crate) entry: crate::host::cpu::Entry,
    pub(crate) warp_size: u32,
}

impl KernelHandle for CpuKernelHandle {
    fn name(&self) -> &str {
        &self.entry.name
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A source module compiled for the CPU.
pub struct CpuModule {
    pub(crate) name: String,
    pub(crate) program: Arc<crate::host::cpu::Program>,
    pub(crate) warp_size: u32,
}

impl LoadedModule for CpuModule {
    fn name(&self) -> &str {
        &self.name
    }
    fn image(&self) -> String {
        "source (cpu)".to_string()
    }
    fn kernel(&self, name: &str) -> Result<Arc<dyn KernelHandle>> {
        match self.program.entry(name) {
            Some(e) => Ok(Arc::new(CpuKernelHandle {
                program: self.program.clone(),
                entry: e.clone(),
                warp_size: self.warp_size,
            })),
            None => {
                let have: Vec<&str> = self
                    .program
                    .entries()
                    .iter()
                    .map(|e| e.name.as_str())
                    // The source stamp every compiled unit carries is not the user's kernel.
                    .filter(|n| !n.starts_with(crate::kernels::portable::stamp::STAMP_PREFIX))
                    .collect();
                Err(Error::Module {
                    module: self.name.clone(),
                    message: format!(
                        "no kernel `{name}` in the source (its kernels: [{}])",
                        have.join(", ")
                    ),
                })
            }
        }
    }
}

/// Each launch argument as an 8-byte slot for `entry`'s parameters (a pointer, or an
/// immediate's little-endian bytes), checked against what the kernel declares.
pub(crate) fn cpu_slots(
    entry: &crate::host::cpu::Entry,
    args: &[crate::kernels::HostArg],
) -> std::result::Result<Vec<u64>, String> {
    use crate::kernels::HostArg;
    if args.len() != entry.params.len() {
        return Err(format!(
            "{} arguments for the kernel's {} parameters",
            args.len(),
            entry.params.len()
        ));
    }
    let mut slots = Vec::with_capacity(args.len());
    for (i, (a, p)) in args.iter().zip(&entry.params).enumerate() {
        match a {
            HostArg::Buffer { ptr, .. } => {
                if !p.pointer {
                    return Err(format!(
                        "argument {i} is a buffer; parameter {i} is a {}-byte value",
                        p.size
                    ));
                }
                // A GPU faults on a misaligned access (the emulator too); the CPU would read
                // across elements silently.
                if !(*ptr as u64).is_multiple_of(u64::from(p.align.max(1))) {
                    return Err(format!(
                        "argument {i} ({:#x}) is not aligned to its pointee's {} bytes",
                        *ptr as u64, p.align
                    ));
                }
                slots.push(*ptr as u64);
            }
            HostArg::Scalar(s) => {
                let b = s.to_le_bytes();
                if p.pointer || b.len() != p.size as usize {
                    return Err(format!(
                        "argument {i} is a {} immediate of {} bytes; parameter {i} is {}",
                        s.dtype(),
                        b.len(),
                        if p.pointer {
                            "a pointer".to_string()
                        } else {
                            format!("a {}-byte value", p.size)
                        }
                    ));
                }
                let mut slot = [0u8; 8];
                slot[..b.len()].copy_from_slice(&b);
                slots.push(u64::from_le_bytes(slot));
            }
        }
    }
    Ok(slots)
}
