//! The CUDA driver's raw calls behind the shared GPU layer ([`xthunk_gpu`]): [`Cuda`]
//! implements [`Vendor`] (memory, streams, events; the pool's calls are in
//! `pool.rs`), and the shared types are named here for this crate.
//!
//! Memory spaces: `Device` -> `cuMemAlloc`; `HostPinned` -> `cuMemAllocHost` (its device
//! address, equal to the host address under unified addressing); `Unified` ->
//! `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`; `Collective` -> `cuMemAlloc` when allocated
//! directly (plain device memory is valid for NCCL; the executor's collective arenas come from
//! NCCL's `ncclMemAlloc` through `Device::allocate_external` and are registered with each
//! clique by the executor's `collective_memory`); stream-ordered device memory -> `cuMemAllocFromPoolAsync` from the device's pool,
//! freed with `cuMemFreeAsync` on the stream it was allocated on. Alignment: the driver's own
//! (256 bytes for device memory, a page for pinned) when it suffices, else the allocation is
//! padded and the returned address rounded up (no guarantee is assumed: a misaligned address
//! is padded on a second try).

use crate::context::DeviceContext;
use crate::loader::guarded;
use crate::result::{cu, cu_error};
use crate::sys::{self, CUresult};
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};
use xthunk_gpu::Vendor;

/// The CUDA driver, as the shared layer's vendor.
#[derive(Debug)]
pub struct Cuda;

/// A device's live allocations, checked before every driver call.
pub type MemoryRegistry = xthunk_gpu::memory::MemoryRegistry<Cuda>;
/// A checked range of a live allocation.
pub type Region = xthunk_gpu::memory::Region<Cuda>;
/// The owner's handle to a CUDA allocation: dropping it frees the memory.
pub type CudaBuffer = xthunk_gpu::memory::Buffer<Cuda>;
/// A `CUstream`, destroyed when the last owner goes.
pub type RawStream = xthunk_gpu::stream::RawStream<Cuda>;
/// A CUDA event.
pub type CudaEvent = xthunk_gpu::event::GpuEvent<Cuda>;
/// The device's memory pool for stream-ordered allocation.
pub type MemPool = xthunk_gpu::pool::MemPool<Cuda>;

/// What the driver handed out (what must be given back).
#[derive(Debug)]
pub enum RawMemory {
    Device(sys::CUdeviceptr),
    Pinned(*mut c_void),
    /// From `pool`, in the order of `stream`.
    Pooled {
        ptr: sys::CUdeviceptr,
        stream: Arc<RawStream>,
        pool: Arc<MemPool>,
    },
}

/// A driver result, with out-of-memory as `oom()`.
fn alloc_result(call: &str, r: CUresult, oom: &dyn Fn() -> Error) -> Result<()> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(oom()),
        other => Err(cu_error(call, other)),
    }
}

impl Vendor for Cuda {
    const NAME: &'static str = "CUDA";
    const BACKEND: &'static str = crate::result::BACKEND;
    const DEVICE: &'static str = "CUDA device";

    type Context = DeviceContext;
    type RawStream = sys::CUstream;
    type RawEvent = sys::CUevent;
    type RawMemory = RawMemory;

    fn bind(ctx: &DeviceContext) -> Result<()> {
        ctx.bind()
    }

    fn device_name(ctx: &DeviceContext) -> &str {
        &ctx.name
    }

    fn guaranteed_alignment(_space: MemorySpace) -> Option<u64> {
        None
    }

    fn allocate(
        _ctx: &DeviceContext,
        space: MemorySpace,
        size: u64,
        oom: &dyn Fn() -> Error,
    ) -> Result<(RawMemory, u64)> {
        let bytes = usize::try_from(size).map_err(|_| oom())?;
        match space {
            MemorySpace::Device | MemorySpace::Collective => {
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: writes one device pointer; the context is current (bound by the
                // caller).
                let r = unsafe { sys::cuMemAlloc_v2(&mut p, bytes) };
                alloc_result("cuMemAlloc_v2", r, oom)?;
                Ok((RawMemory::Device(p), p))
            }
            MemorySpace::Unified => {
                let mut p: sys::CUdeviceptr = 0;
                // SAFETY: writes one device pointer; the context is current.
                let r = unsafe { sys::cuMemAllocManaged(&mut p, bytes, sys::CU_MEM_ATTACH_GLOBAL) };
                alloc_result("cuMemAllocManaged", r, oom)?;
                Ok((RawMemory::Device(p), p))
            }
            MemorySpace::HostPinned => {
                let mut h: *mut c_void = std::ptr::null_mut();
                // SAFETY: writes one host pointer; the context is current.
                let r = unsafe { sys::cuMemAllocHost_v2(&mut h, bytes) };
                alloc_result("cuMemAllocHost_v2", r, oom)?;
                let mut d: sys::CUdeviceptr = 0;
                // SAFETY: `h` is pinned memory of this context; writes one device pointer.
                let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, h, 0) };
                if let Err(e) = alloc_result("cuMemHostGetDevicePointer_v2", r, oom) {
                    // SAFETY: `h` was just allocated and is freed once, here.
                    if let Err(f) = cu("cuMemFreeHost", unsafe { sys::cuMemFreeHost(h) }) {
                        tracing::error!("{f}");
                    }
                    return Err(e);
                }
                Ok((RawMemory::Pinned(h), d))
            }
        }
    }

    unsafe fn free(_ctx: &DeviceContext, raw: &RawMemory) -> Result<()> {
        match raw {
            // SAFETY: `p` came from cuMemAlloc_v2 / cuMemAllocManaged in this context and is
            // freed exactly once (the caller's contract).
            RawMemory::Device(p) => cu("cuMemFree_v2", unsafe { sys::cuMemFree_v2(*p) }),
            // SAFETY: `p` came from cuMemAllocHost_v2 in this context, freed once, as above.
            RawMemory::Pinned(p) => cu("cuMemFreeHost", unsafe { sys::cuMemFreeHost(*p) }),
            // SAFETY: `ptr` came from cuMemAllocFromPoolAsync and is freed once (the caller's
            // contract), in the order of its stream, which the allocation keeps alive.
            RawMemory::Pooled { ptr, stream, .. } => guarded_call("cuMemFreeAsync", || unsafe {
                sys::cuMemFreeAsync(*ptr, stream.raw())
            }),
        }
    }

    unsafe fn destroy_stream(_ctx: &DeviceContext, raw: sys::CUstream) -> Result<()> {
        // SAFETY: `raw` was created by cuStreamCreate and is destroyed once (the caller's
        // contract); the context is current.
        cu("cuStreamDestroy_v2", unsafe {
            sys::cuStreamDestroy_v2(raw)
        })
    }

    fn create_event(ctx: &DeviceContext, timing: bool) -> Result<sys::CUevent> {
        let flags = if timing {
            0
        } else {
            sys::CU_EVENT_DISABLE_TIMING
        };
        ctx.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one event handle; the context is current.
        cu("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, flags)
        })?;
        Ok(raw)
    }

    unsafe fn destroy_event(ctx: &DeviceContext, raw: sys::CUevent) -> Result<()> {
        ctx.bind()?;
        // SAFETY: created by cuEventCreate, destroyed once (the caller's contract).
        cu("cuEventDestroy_v2", unsafe { sys::cuEventDestroy_v2(raw) })
    }

    unsafe fn event_elapsed_ms(
        ctx: &DeviceContext,
        start: sys::CUevent,
        end: sys::CUevent,
    ) -> Result<f32> {
        ctx.bind()?;
        let mut ms = 0f32;
        // SAFETY: both events are live (the caller's contract); writes one float.
        cu("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, start, end)
        })?;
        Ok(ms)
    }

    unsafe fn event_synchronize(ctx: &DeviceContext, raw: sys::CUevent) -> Result<()> {
        ctx.bind()?;
        // SAFETY: the event is live (the caller's contract).
        cu("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(raw)
        })
    }

    unsafe fn event_query(ctx: &DeviceContext, raw: sys::CUevent) -> Result<bool> {
        ctx.bind()?;
        // SAFETY: the event is live (the caller's contract).
        ready("cuEventQuery", unsafe { sys::cuEventQuery(raw) })
    }
}

/// `true` when done, `false` when work is pending, for `cuStreamQuery`/`cuEventQuery`.
pub(crate) fn ready(call: &str, r: CUresult) -> Result<bool> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => Err(cu_error(call, other)),
    }
}

/// Runs a driver call that may be missing (cudarc panics then: the memory-pool calls are
/// guarded symbols) and checks its result.
pub(crate) fn guarded_call(what: &str, f: impl FnOnce() -> CUresult) -> Result<()> {
    let r = guarded(what, f).map_err(|e| Error::backend(crate::result::BACKEND, what, e))?;
    cu(what, r)
}
