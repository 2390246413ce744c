//! The HIP runtime's raw calls behind the shared GPU layer ([`xthunk_gpu`]): [`Rocm`]
//! implements [`Vendor`] (memory, streams, events; the pool's calls are in
//! `pool.rs`), and the shared types are named here for this crate.
//!
//! Memory: `hipMalloc` (device), `hipMallocManaged` (unified, where the device has managed
//! memory), `hipHostMalloc` mapped and portable (pinned host memory, used by the device at
//! `hipHostGetDevicePointer`'s address); collective memory is not part of this backend.
//! Alignment: HIP returns device and managed memory aligned to at least 256 bytes and pinned
//! host memory to a page; a larger requested alignment is met by over-allocating up front and
//! handing out the aligned address inside. Stream-ordered device memory comes from the
//! device's pool (`hipMallocFromPoolAsync`) and goes back with `hipFreeAsync` on the stream
//! it was allocated on.

use crate::context::DeviceContext;
use crate::result::{self, BACKEND, hip_describe, unsupported};
use crate::sys;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};
use xthunk_gpu::Vendor;

/// The HIP runtime, as the shared layer's vendor.
#[derive(Debug)]
pub struct Rocm;

/// A device's live allocations, checked before every HIP call.
pub type MemoryRegistry = xthunk_gpu::memory::MemoryRegistry<Rocm>;
/// A checked range of a live allocation.
pub type Region = xthunk_gpu::memory::Region<Rocm>;
/// The owner's handle to a ROCm allocation: dropping it frees the memory.
pub type RocmBuffer = xthunk_gpu::memory::Buffer<Rocm>;
/// A `hipStream_t`, destroyed when the last owner goes.
pub type RawStream = xthunk_gpu::stream::RawStream<Rocm>;
/// A HIP event.
pub type RocmEvent = xthunk_gpu::event::GpuEvent<Rocm>;
/// The device's memory pool for stream-ordered allocation.
pub type MemPool = xthunk_gpu::pool::MemPool<Rocm>;

/// Alignment HIP guarantees for `hipMalloc` / `hipMallocManaged`.
const DEVICE_ALIGNMENT: u64 = 256;
/// Alignment of `hipHostMalloc` (a page).
const HOST_ALIGNMENT: u64 = 4096;

/// What HIP handed out, and how it goes back.
#[derive(Debug)]
pub enum RawMemory {
    /// `hipFree` (device and managed memory).
    Device(*mut c_void),
    /// `hipHostFree`.
    Pinned(*mut c_void),
    /// `hipFreeAsync` on `stream`, back into `pool`.
    Pooled {
        ptr: *mut c_void,
        stream: Arc<RawStream>,
        pool: Arc<MemPool>,
    },
}

impl Vendor for Rocm {
    const NAME: &'static str = "ROCm";
    const BACKEND: &'static str = BACKEND;
    const DEVICE: &'static str = "ROCm device";

    type Context = DeviceContext;
    type RawStream = sys::hipStream_t;
    type RawEvent = sys::hipEvent_t;
    type RawMemory = RawMemory;

    fn bind(ctx: &DeviceContext) -> Result<()> {
        ctx.bind()
    }

    fn device_name(ctx: &DeviceContext) -> &str {
        &ctx.name
    }

    fn guaranteed_alignment(space: MemorySpace) -> Option<u64> {
        Some(match space {
            MemorySpace::HostPinned => HOST_ALIGNMENT,
            _ => DEVICE_ALIGNMENT,
        })
    }

    fn allocate(
        ctx: &DeviceContext,
        space: MemorySpace,
        bytes: u64,
        oom: &dyn Fn() -> Error,
    ) -> Result<(RawMemory, u64)> {
        match space {
            MemorySpace::Collective => {
                return Err(unsupported(
                    "collective (symmetric) memory: RCCL is not part of this backend yet",
                ));
            }
            MemorySpace::Unified if !ctx.managed_memory => {
                return Err(unsupported(format!(
                    "unified (managed) memory on {}",
                    ctx.name
                )));
            }
            _ => {}
        }
        let bytes = usize::try_from(bytes).map_err(|_| oom())?;
        let api = &ctx.hip.api;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: each allocator writes one pointer into `raw`; `bytes` is non-zero; the
        // device is current (bound by the caller).
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
        result::hip(call, rc)?;
        if raw.is_null() {
            return Err(oom());
        }
        if space != MemorySpace::HostPinned {
            return Ok((RawMemory::Device(raw), raw as u64));
        }
        // Pinned host memory: the address the device uses (the same one with unified
        // addressing, which ROCm always has).
        let mut dev: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a live mapped pinned allocation; writes one pointer.
        let rc = unsafe { (api.hipHostGetDevicePointer)(&mut dev, raw, 0) };
        if rc != sys::hipSuccess || dev.is_null() {
            // SAFETY: frees the allocation just made, once.
            unsafe { (api.hipHostFree)(raw) };
            return Err(Error::backend(
                BACKEND,
                "hipHostGetDevicePointer",
                hip_describe(rc),
            ));
        }
        Ok((RawMemory::Pinned(raw), dev as u64))
    }

    unsafe fn free(ctx: &DeviceContext, raw: &RawMemory) -> Result<()> {
        let api = &ctx.hip.api;
        // SAFETY: `raw` came from the matching HIP allocator and is freed exactly once (the
        // caller's contract). hipFree/hipHostFree wait for work still using the memory to
        // finish; hipFreeAsync frees after the work queued on its stream, which the
        // allocation kept alive.
        unsafe {
            match raw {
                RawMemory::Device(p) => result::hip("hipFree", (api.hipFree)(*p)),
                RawMemory::Pinned(p) => result::hip("hipHostFree", (api.hipHostFree)(*p)),
                RawMemory::Pooled { ptr, stream, .. } => {
                    let Some(free) = api.hipFreeAsync else {
                        return Err(unsupported("hipFreeAsync"));
                    };
                    result::hip("hipFreeAsync", free(*ptr, stream.raw()))
                }
            }
        }
    }

    unsafe fn destroy_stream(ctx: &DeviceContext, raw: sys::hipStream_t) -> Result<()> {
        // SAFETY: `raw` is a live stream destroyed once (the caller's contract); HIP finishes
        // its queued work.
        let rc = unsafe { (ctx.hip.api.hipStreamDestroy)(raw) };
        result::hip("hipStreamDestroy", rc)
    }

    fn create_event(ctx: &DeviceContext, timing: bool) -> Result<sys::hipEvent_t> {
        let flags = if timing {
            0
        } else {
            sys::hipEventDisableTiming
        };
        ctx.bind()?;
        let mut raw: sys::hipEvent_t = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        let rc = unsafe { (ctx.hip.api.hipEventCreateWithFlags)(&mut raw, flags) };
        result::hip("hipEventCreateWithFlags", rc)?;
        Ok(raw)
    }

    unsafe fn destroy_event(ctx: &DeviceContext, raw: sys::hipEvent_t) -> Result<()> {
        // SAFETY: `raw` is a live event, destroyed once (the caller's contract).
        let rc = unsafe { (ctx.hip.api.hipEventDestroy)(raw) };
        result::hip("hipEventDestroy", rc)
    }

    unsafe fn event_elapsed_ms(
        ctx: &DeviceContext,
        start: sys::hipEvent_t,
        end: sys::hipEvent_t,
    ) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: both events are live (the caller's contract); writes one float.
        let rc = unsafe { (ctx.hip.api.hipEventElapsedTime)(&mut ms, start, end) };
        result::hip("hipEventElapsedTime", rc)?;
        Ok(ms)
    }

    unsafe fn event_synchronize(ctx: &DeviceContext, raw: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the event is live (the caller's contract).
        let rc = unsafe { (ctx.hip.api.hipEventSynchronize)(raw) };
        result::hip("hipEventSynchronize", rc)
    }

    unsafe fn event_query(ctx: &DeviceContext, raw: sys::hipEvent_t) -> Result<bool> {
        // SAFETY: the event is live (the caller's contract).
        let rc = unsafe { (ctx.hip.api.hipEventQuery)(raw) };
        match rc {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            _ => Err(result::hip_error("hipEventQuery", rc)),
        }
    }
}
