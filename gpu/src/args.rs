//! Kernel-argument marshalling, as every vendor's launch call takes arguments: one 8-byte
//! slot per argument holding the bytes of its C type (a buffer's device address, an
//! immediate's value), and an array of pointers to the slots; each buffer's range is checked
//! against the device's live allocations first, and the checked regions are held until the
//! launch is queued. What is checked against the kernel's parameters is the vendor's.

use crate::memory::{MemoryRegistry, Region};
use crate::vendor::Vendor;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::{KernelHandle, LaunchArg};
use xthunk_core::ir::Scalar;
use xthunk_core::{Error, Result};

/// `kernel` as a kernel of vendor `V` (whose kernels are `K`).
pub fn vendor_kernel<V: Vendor, K: KernelHandle + 'static>(
    kernel: &Arc<dyn KernelHandle>,
) -> Result<&K> {
    kernel.as_any().downcast_ref::<K>().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "kernel `{}` was not loaded by the {} backend",
            kernel.name(),
            V::NAME
        ))
    })
}

/// An immediate's slot: the bytes of its C type first (little-endian, as the device reads
/// them), zeros after.
pub fn scalar_slot(s: &Scalar) -> u64 {
    let mut b = [0u8; 8];
    let v = s.to_le_bytes();
    b[..v.len()].copy_from_slice(&v);
    u64::from_le_bytes(b)
}

/// One argument's slot.
pub fn arg_slot(arg: &LaunchArg) -> u64 {
    match arg {
        LaunchArg::Buffer { ptr, .. } => ptr.0,
        LaunchArg::Scalar(s) => scalar_slot(s),
    }
}

/// Launch arguments ready for the vendor's launch call.
pub struct KernelArgs<V: Vendor> {
    slots: Vec<u64>,
    /// The checked regions of the buffers (kept alive until the launch is queued).
    _regions: Vec<Region<V>>,
}

impl<V: Vendor> KernelArgs<V> {
    /// Resolves every buffer argument to a region of one live allocation of `memory` (a
    /// failure goes through `on_error`) and lays the arguments out.
    pub fn marshal(
        args: &[LaunchArg],
        memory: &MemoryRegistry<V>,
        on_error: impl Fn(Error) -> Error,
    ) -> Result<Self> {
        let mut regions = Vec::new();
        for a in args {
            if let LaunchArg::Buffer { ptr, len } = *a {
                regions.push(memory.region(ptr, len).map_err(&on_error)?);
            }
        }
        Ok(KernelArgs {
            slots: args.iter().map(arg_slot).collect(),
            _regions: regions,
        })
    }

    /// The slots, in argument order.
    pub fn slots(&self) -> &[u64] {
        &self.slots
    }

    /// The `kernelParams` array: a pointer to each slot. Valid while `self` is borrowed.
    pub fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediates_fill_the_low_bytes() {
        assert_eq!(scalar_slot(&Scalar::F32(1.0)), 0x3f80_0000);
        assert_eq!(scalar_slot(&Scalar::I8(-1)), 0xff);
        assert_eq!(scalar_slot(&Scalar::I64(-2)), (-2i64) as u64);
        assert_eq!(scalar_slot(&Scalar::Pred(true)), 1);
    }
}
