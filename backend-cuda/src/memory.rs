//! Device, pinned-host and managed allocations, with per-space accounting and a registry of
//! live allocations: every pointer range a stream or copy touches is checked against it
//! before the driver sees it (as the host backend does), so a wrong address is an error, not
//! a device fault.
//!
//! Memory spaces: `Device` -> `cuMemAlloc`; `HostPinned` -> `cuMemAllocHost` (its device
//! address, equal to the host address under unified addressing); `Unified` ->
//! `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`; `Collective` -> `cuMemAlloc` (plain device
//! memory is valid for NCCL; symmetric-window registration belongs to the collectives
//! layer); stream-ordered device memory -> `cuMemAllocFromPoolAsync` from the device's pool
//! ([`crate::pool`]), freed with `cuMemFreeAsync` on the stream it was allocated on (the
//! allocation keeps that stream alive). Alignment: the driver's own (256 bytes for device memory, a page for pinned) when
//! it suffices, else the allocation is padded and the returned address rounded up.

use crate::context::DeviceContext;
use crate::pool::MemPool;
use crate::result::{cu, cu_error};
use crate::stream::RawStream;
use crate::sys::{self, CUresult};
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::accounting::{Accounting, AllocationRegistry};
use xthunk_core::backend::{DeviceMemory, DevicePtr, MemoryStats};
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};

/// What the driver handed out (what must be given back).
#[derive(Debug)]
enum Raw {
    Device(sys::CUdeviceptr),
    Pinned(*mut c_void),
    /// From `pool`, in the order of `stream`.
    Pooled {
        ptr: sys::CUdeviceptr,
        stream: Arc<RawStream>,
        _pool: Arc<MemPool>,
    },
}

/// One allocation; freed when the last reference goes (the owner's [`CudaBuffer`] and any
/// checked [`Region`] still held).
#[derive(Debug)]
pub(crate) struct Allocation {
    /// The (aligned) address handed to users.
    base: u64,
    size: u64,
    space: MemorySpace,
    raw: Raw,
    ctx: Arc<DeviceContext>,
    accounting: Arc<Accounting>,
}

// SAFETY: `raw` is a driver allocation owned by this struct and only freed in `drop`; the
// pinned host pointer is never dereferenced here, only handed back to the driver. Access to
// the memory is ordered by streams, as on any GPU.
unsafe impl Send for Allocation {}
// SAFETY: as above; the struct is immutable after creation.
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        // The free functions synchronize with work still using the memory.
        let r = self.ctx.bind().and_then(|()| free(&self.raw));
        if let Err(e) = r {
            tracing::error!("freeing {} bytes of {} memory: {e}", self.size, self.space);
        }
        self.accounting.sub(self.space, self.size);
    }
}

/// A checked view of `len` bytes inside a live allocation; holding it keeps the memory alive.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    alloc: Arc<Allocation>,
    offset: u64,
    len: u64,
}

impl Region {
    /// The device address of the first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.alloc.base + self.offset
    }
    /// True if both regions share at least one byte.
    pub(crate) fn overlaps(&self, other: &Region) -> bool {
        let (a, b) = (self.addr(), other.addr());
        self.len > 0
            && other.len > 0
            && a < b.saturating_add(other.len)
            && b < a.saturating_add(self.len)
    }
}

/// One driver allocation of the byte count asked (the out-of-memory error given): what to
/// free, and its address.
type RawAlloc<'a> = dyn Fn(u64, &dyn Fn() -> Error) -> Result<(Raw, u64)> + 'a;

/// The live allocations of one device, by base address.
#[derive(Debug, Default)]
pub(crate) struct MemoryRegistry {
    allocations: AllocationRegistry<Arc<Allocation>>,
    pub(crate) accounting: Arc<Accounting>,
}

/// Rounds `v` up to a multiple of `align` (a power of two).
fn align_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

impl MemoryRegistry {
    /// Allocates `size` bytes (0 allowed: one byte is reserved so the address is unique).
    pub(crate) fn allocate(
        &self,
        ctx: &Arc<DeviceContext>,
        size: u64,
        alignment: u64,
        space: MemorySpace,
    ) -> Result<Arc<Allocation>> {
        self.allocate_with(ctx, size, alignment, space, &|n, oom| {
            raw_alloc(space, n, oom)
        })
    }

    /// Allocates `size` bytes of device memory from `pool` in the order of `stream`.
    pub(crate) fn allocate_pooled(
        &self,
        ctx: &Arc<DeviceContext>,
        size: u64,
        alignment: u64,
        pool: &Arc<MemPool>,
        stream: &Arc<RawStream>,
    ) -> Result<Arc<Allocation>> {
        self.allocate_with(ctx, size, alignment, MemorySpace::Device, &|n, oom| {
            let bytes = usize::try_from(n).map_err(|_| oom())?;
            let ptr = pool.allocate(bytes, stream.raw, oom)?;
            let raw = Raw::Pooled {
                ptr,
                stream: stream.clone(),
                _pool: pool.clone(),
            };
            Ok((raw, ptr))
        })
    }

    /// Allocates `size` bytes of `space` with `alloc` (which takes the byte count to ask the
    /// driver for), aligned, registered and counted.
    fn allocate_with(
        &self,
        ctx: &Arc<DeviceContext>,
        size: u64,
        alignment: u64,
        space: MemorySpace,
        alloc: &RawAlloc<'_>,
    ) -> Result<Arc<Allocation>> {
        let align = alignment.max(1);
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        let oom = || Error::OutOfMemory {
            device: ctx.name.clone(),
            requested: size,
            space,
        };
        ctx.bind()?;
        let want = size.max(1);
        let (raw, addr) = alloc(want, &oom)?;
        let (raw, base) = if addr % align == 0 {
            (raw, addr)
        } else {
            // Pad and round up.
            free_raw(&raw);
            let padded = want.checked_add(align).ok_or_else(oom)?;
            let (raw, addr) = alloc(padded, &oom)?;
            match align_up(addr, align) {
                Some(base) => (raw, base),
                None => {
                    free_raw(&raw);
                    return Err(oom());
                }
            }
        };
        self.accounting.add(space, size);
        let a = Arc::new(Allocation {
            base,
            size,
            space,
            raw,
            ctx: ctx.clone(),
            accounting: self.accounting.clone(),
        });
        self.allocations.insert(base, size, a.clone());
        Ok(a)
    }

    /// Removes an allocation from the registry (it is freed when its last user is done).
    pub(crate) fn release(&self, ptr: DevicePtr) {
        self.allocations.remove(ptr.0);
    }

    /// Resolves `len` bytes at `ptr` to a region of one live allocation.
    pub(crate) fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region> {
        let c = self.allocations.check(ptr, len, "CUDA device")?;
        Ok(Region {
            alloc: c.value,
            offset: c.offset,
            len,
        })
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.accounting.stats()
    }
}

/// One driver allocation of `size` bytes in `space`: what to free, and its device address.
fn raw_alloc(space: MemorySpace, size: u64, oom: &dyn Fn() -> Error) -> Result<(Raw, u64)> {
    let bytes = usize::try_from(size).map_err(|_| oom())?;
    let check = |call: &str, r: CUresult| -> Result<()> {
        match r {
            CUresult::CUDA_SUCCESS => Ok(()),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(oom()),
            other => Err(cu_error(call, other)),
        }
    };
    match space {
        MemorySpace::Device | MemorySpace::Collective => {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: writes one device pointer; the context is current (bound by the caller).
            check("cuMemAlloc_v2", unsafe {
                sys::cuMemAlloc_v2(&mut p, bytes)
            })?;
            Ok((Raw::Device(p), p))
        }
        MemorySpace::Unified => {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: writes one device pointer; the context is current.
            check("cuMemAllocManaged", unsafe {
                sys::cuMemAllocManaged(&mut p, bytes, sys::CU_MEM_ATTACH_GLOBAL)
            })?;
            Ok((Raw::Device(p), p))
        }
        MemorySpace::HostPinned => {
            let mut h: *mut c_void = std::ptr::null_mut();
            // SAFETY: writes one host pointer; the context is current.
            check("cuMemAllocHost_v2", unsafe {
                sys::cuMemAllocHost_v2(&mut h, bytes)
            })?;
            let raw = Raw::Pinned(h);
            let mut d: sys::CUdeviceptr = 0;
            // SAFETY: `h` is pinned memory of this context; writes one device pointer.
            let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, h, 0) };
            if let Err(e) = check("cuMemHostGetDevicePointer_v2", r) {
                free_raw(&raw);
                return Err(e);
            }
            Ok((raw, d))
        }
    }
}

/// Gives a driver allocation back (the context is current): device and pinned memory after
/// the work using it (the free functions synchronize), pool memory in its stream's order.
fn free(raw: &Raw) -> Result<()> {
    match raw {
        // SAFETY: `p` came from cuMemAlloc_v2 / cuMemAllocManaged in this context and is
        // freed exactly once (by the allocation that owns it, or unregistered, right away).
        Raw::Device(p) => cu("cuMemFree_v2", unsafe { sys::cuMemFree_v2(*p) }),
        // SAFETY: `p` came from cuMemAllocHost_v2 in this context, freed once, as above.
        Raw::Pinned(p) => cu("cuMemFreeHost", unsafe { sys::cuMemFreeHost(*p) }),
        Raw::Pooled { ptr, stream, .. } => crate::pool::free(*ptr, stream.raw),
    }
}

/// Frees a raw allocation that was never registered.
fn free_raw(raw: &Raw) {
    if let Err(e) = free(raw) {
        tracing::error!("{e}");
    }
}

/// The owner's handle to a CUDA allocation: dropping it frees the memory.
#[derive(Debug)]
pub struct CudaBuffer {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) registry: Arc<MemoryRegistry>,
}

impl DeviceMemory for CudaBuffer {
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.alloc.base)
    }
    fn size(&self) -> u64 {
        self.alloc.size
    }
    fn space(&self) -> MemorySpace {
        self.alloc.space
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        self.registry.release(self.ptr());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(512, 256), Some(512));
        assert_eq!(align_up(u64::MAX, 2), None);
    }
}
