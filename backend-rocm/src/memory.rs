//! Device, pinned host and managed memory: allocation per memory space with accounting, and a
//! registry of live allocations against which every pointer range is checked before a HIP
//! call touches it (a wrong address is an error, not a GPU fault or host memory corruption).
//!
//! Alignment: HIP returns device and managed memory aligned to at least 256 bytes and pinned
//! host memory to a page; a larger requested alignment is met by over-allocating and handing
//! out the aligned address inside. Stream-ordered device memory comes from the device's pool
//! ([`crate::pool`], `hipMallocFromPoolAsync`) and goes back with `hipFreeAsync` on the
//! stream it was allocated on (the allocation keeps that stream alive).

use crate::context::DeviceContext;
use crate::pool::MemPool;
use crate::result::{self, hip_describe, unsupported};
use crate::stream::RawStream;
use crate::sys;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::accounting::{Accounting, AllocationRegistry};
use xthunk_core::backend::{DeviceMemory, DevicePtr, MemoryStats};
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};

/// Alignment HIP guarantees for `hipMalloc` / `hipMallocManaged`.
const DEVICE_ALIGNMENT: u64 = 256;
/// Alignment of `hipHostMalloc` (a page).
const HOST_ALIGNMENT: u64 = 4096;

/// How an allocation is released.
#[derive(Debug)]
enum Release {
    /// `hipFree` (device and managed memory).
    Free,
    /// `hipHostFree`.
    HostFree,
    /// `hipFreeAsync` on `stream`, back into `pool`.
    Pooled {
        stream: Arc<RawStream>,
        pool: Arc<MemPool>,
    },
}

/// One live HIP allocation, freed when the last reference goes.
pub(crate) struct Allocation {
    /// The (aligned) address handed out: what kernels and copies use.
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) space: MemorySpace,
    /// What HIP returned (freed with `release`).
    raw: *mut c_void,
    release: Release,
    ctx: Arc<DeviceContext>,
    accounting: Arc<Accounting>,
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("size", &self.size)
            .field("space", &self.space)
            .field("device", &self.ctx.ordinal)
            .finish()
    }
}

// SAFETY: `raw` is an address owned by this allocation, freed once in `drop`; HIP allocations
// may be used and freed from any thread.
unsafe impl Send for Allocation {}
// SAFETY: as above; nothing in the struct is mutated after creation.
unsafe impl Sync for Allocation {}

impl Drop for Allocation {
    fn drop(&mut self) {
        let api = &self.ctx.hip.api;
        if let Err(e) = self.ctx.bind() {
            tracing::warn!("freeing memory: {e}");
        }
        // SAFETY: `raw` came from the matching HIP allocator and is freed exactly once, here.
        // hipFree/hipHostFree wait for work still using the memory to finish; hipFreeAsync
        // frees after the work queued on its stream.
        let freed = unsafe {
            match &self.release {
                Release::Free => result::hip("hipFree", (api.hipFree)(self.raw)),
                Release::HostFree => result::hip("hipHostFree", (api.hipHostFree)(self.raw)),
                Release::Pooled { stream, pool } => pool.free(self.raw, stream.raw),
            }
        };
        if let Err(e) = freed {
            tracing::warn!(
                "freeing {} bytes of {} memory at {:#x}: {e}",
                self.size,
                self.space,
                self.addr,
            );
        }
        self.accounting.sub(self.space, self.size);
    }
}

/// The live allocations of one device, keyed by address.
#[derive(Debug, Default)]
pub(crate) struct MemoryRegistry {
    allocations: AllocationRegistry<Arc<Allocation>>,
    pub(crate) accounting: Arc<Accounting>,
}

/// A checked range inside one live allocation; holding it keeps the allocation alive.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) addr: u64,
}

impl Region {
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.addr as usize as *mut c_void
    }
}

impl MemoryRegistry {
    /// Allocates `size` bytes of `space` aligned to `alignment`.
    pub(crate) fn allocate(
        &self,
        ctx: &Arc<DeviceContext>,
        size: u64,
        alignment: u64,
        space: MemorySpace,
    ) -> Result<Arc<Allocation>> {
        let oom = || Error::OutOfMemory {
            device: ctx.name.clone(),
            requested: size,
            space,
        };
        let alignment = alignment.max(1);
        if !alignment.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        let (guaranteed, release) = match space {
            MemorySpace::Device | MemorySpace::Unified => (DEVICE_ALIGNMENT, Release::Free),
            MemorySpace::HostPinned => (HOST_ALIGNMENT, Release::HostFree),
            MemorySpace::Collective => {
                return Err(unsupported(
                    "collective (symmetric) memory: RCCL is not part of this backend yet",
                ));
            }
        };
        if space == MemorySpace::Unified && !ctx.managed_memory {
            return Err(unsupported(format!(
                "unified (managed) memory on {}",
                ctx.name
            )));
        }
        let extra = if alignment > guaranteed { alignment } else { 0 };
        // At least one byte, so that every allocation has its own address.
        let bytes = size.max(1).checked_add(extra).ok_or_else(oom)?;
        let bytes = usize::try_from(bytes).map_err(|_| oom())?;
        ctx.bind()?;
        let api = &ctx.hip.api;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: each allocator writes one pointer into `raw`; `bytes` is non-zero.
        let (call, rc) = unsafe {
            match space {
                MemorySpace::Device => ("hipMalloc", (api.hipMalloc)(&mut raw, bytes)),
                MemorySpace::Unified => (
                    "hipMallocManaged",
                    (api.hipMallocManaged)(&mut raw, bytes, sys::hipMemAttachGlobal),
                ),
                _ => (
                    "hipHostMalloc",
                    (api.hipHostMalloc)(
                        &mut raw,
                        bytes,
                        sys::hipHostMallocMapped | sys::hipHostMallocPortable,
                    ),
                ),
            }
        };
        if rc == 2 {
            return Err(oom());
        }
        crate::result::hip(call, rc)?;
        if raw.is_null() {
            return Err(oom());
        }
        // Pinned host memory: the address the device uses (the same one with unified
        // addressing, which ROCm always has).
        let mut base = raw as u64;
        if matches!(release, Release::HostFree) {
            let mut dev: *mut c_void = std::ptr::null_mut();
            // SAFETY: `raw` is a live mapped pinned allocation; writes one pointer.
            let rc = unsafe { (api.hipHostGetDevicePointer)(&mut dev, raw, 0) };
            if rc != sys::hipSuccess || dev.is_null() {
                // SAFETY: frees the allocation just made, once.
                unsafe { (api.hipHostFree)(raw) };
                return Err(Error::backend(
                    crate::result::BACKEND,
                    "hipHostGetDevicePointer",
                    hip_describe(rc),
                ));
            }
            base = dev as u64;
        }
        let addr = base.next_multiple_of(alignment);
        self.accounting.add(space, size);
        let a = Arc::new(Allocation {
            addr,
            size,
            space,
            raw,
            release,
            ctx: ctx.clone(),
            accounting: self.accounting.clone(),
        });
        self.allocations.insert(addr, size, a.clone());
        Ok(a)
    }

    /// Allocates `size` bytes of device memory aligned to `alignment` from `pool`, in the
    /// order of `stream`.
    pub(crate) fn allocate_pooled(
        &self,
        ctx: &Arc<DeviceContext>,
        size: u64,
        alignment: u64,
        pool: &Arc<MemPool>,
        stream: &Arc<RawStream>,
    ) -> Result<Arc<Allocation>> {
        let space = MemorySpace::Device;
        let oom = || Error::OutOfMemory {
            device: ctx.name.clone(),
            requested: size,
            space,
        };
        let alignment = alignment.max(1);
        if !alignment.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        let extra = if alignment > DEVICE_ALIGNMENT {
            alignment
        } else {
            0
        };
        let bytes = size.max(1).checked_add(extra).ok_or_else(oom)?;
        let bytes = usize::try_from(bytes).map_err(|_| oom())?;
        ctx.bind()?;
        let raw = pool.allocate(bytes, stream.raw, oom)?;
        let addr = (raw as u64).next_multiple_of(alignment);
        self.accounting.add(space, size);
        let a = Arc::new(Allocation {
            addr,
            size,
            space,
            raw,
            release: Release::Pooled {
                stream: stream.clone(),
                pool: pool.clone(),
            },
            ctx: ctx.clone(),
            accounting: self.accounting.clone(),
        });
        self.allocations.insert(addr, size, a.clone());
        Ok(a)
    }

    /// Forgets an allocation (its memory goes when the last reference does).
    pub(crate) fn release(&self, addr: u64) {
        self.allocations.remove(addr);
    }

    /// Resolves `len` bytes at `ptr` to one live allocation.
    pub(crate) fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region> {
        let c = self.allocations.check(ptr, len, "ROCm device")?;
        Ok(Region {
            alloc: c.value,
            addr: ptr.0,
        })
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.accounting.stats()
    }
}

/// The owner's handle to an allocation.
#[derive(Debug)]
pub struct RocmBuffer {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) registry: Arc<MemoryRegistry>,
}

impl DeviceMemory for RocmBuffer {
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.alloc.addr)
    }
    fn size(&self) -> u64 {
        self.alloc.size
    }
    fn space(&self) -> MemorySpace {
        self.alloc.space
    }
}

impl Drop for RocmBuffer {
    fn drop(&mut self) {
        self.registry.release(self.alloc.addr);
    }
}
