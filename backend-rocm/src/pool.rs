//! Stream-ordered allocation's HIP calls (the pool itself is [`xthunk_gpu::pool`]'s): a
//! memory pool of the device's own (`hipMemPoolCreate`, pinned device memory on this device)
//! whose release threshold is the largest (`hipMemPoolAttrReleaseThreshold`), so that memory
//! freed with `hipFreeAsync` stays in the pool and a repeated `hipMallocFromPoolAsync` of a
//! size it held calls no allocator.
//!
//! The device has the capability when the runtime says so
//! (`hipDeviceAttributeMemoryPoolsSupported`), has the entry points (optional symbols of
//! the HIP table), and the pool could be made; otherwise the capability is off and the
//! reason is logged, never an error.

use crate::context::DeviceContext;
use crate::result::{self, unsupported};
use crate::sys;
use crate::vendor::{MemPool, RawMemory, RawStream, Rocm};
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::{Error, Result};
use xthunk_gpu::pool::PoolVendor;

impl PoolVendor for Rocm {
    type RawPool = sys::hipMemPool_t;

    fn create_pool(
        ctx: &DeviceContext,
        supported: bool,
        made: &mut dyn FnMut(sys::hipMemPool_t),
    ) -> std::result::Result<(), String> {
        if !supported {
            return Err("the HIP runtime reports no memory pools for the device".into());
        }
        let api = &ctx.hip.api;
        let (Some(create), Some(_), Some(set_attribute), Some(_), Some(_)) = (
            api.hipMemPoolCreate,
            api.hipMemPoolDestroy,
            api.hipMemPoolSetAttribute,
            api.hipMallocFromPoolAsync,
            api.hipFreeAsync,
        ) else {
            return Err("the HIP runtime lacks the memory-pool entry points".into());
        };
        let props = sys::hipMemPoolProps {
            alloc_type: sys::hipMemAllocationTypePinned,
            handle_types: 0,
            location_type: sys::hipMemLocationTypeDevice,
            location_id: ctx.ordinal,
            win32_security_attributes: std::ptr::null_mut(),
            reserved: [0; 64],
        };
        ctx.bind().map_err(|e| e.to_string())?;
        let mut raw: sys::hipMemPool_t = std::ptr::null_mut();
        // SAFETY: `props` is a complete hipMemPoolProps; writes one pool handle.
        let rc = unsafe { create(&mut raw, &props) };
        result::hip("hipMemPoolCreate", rc).map_err(|e| e.to_string())?;
        made(raw);
        let mut threshold = u64::MAX;
        // SAFETY: the pool is live; the release threshold is a uint64_t read from `threshold`.
        let rc = unsafe {
            set_attribute(
                raw,
                sys::hipMemPoolAttrReleaseThreshold,
                (&mut threshold as *mut u64).cast(),
            )
        };
        result::hip("hipMemPoolSetAttribute", rc).map_err(|e| e.to_string())
    }

    unsafe fn destroy_pool(ctx: &DeviceContext, raw: sys::hipMemPool_t) -> Result<()> {
        let Some(destroy) = ctx.hip.api.hipMemPoolDestroy else {
            return Err(unsupported("hipMemPoolDestroy"));
        };
        // SAFETY: `raw` came from hipMemPoolCreate and is destroyed once (the caller's
        // contract); frees still queued complete first.
        result::hip("hipMemPoolDestroy", unsafe { destroy(raw) })
    }

    unsafe fn pool_allocate(
        ctx: &DeviceContext,
        pool: sys::hipMemPool_t,
        bytes: u64,
        stream: sys::hipStream_t,
        oom: &dyn Fn() -> Error,
    ) -> Result<u64> {
        let Some(allocate) = ctx.hip.api.hipMallocFromPoolAsync else {
            return Err(unsupported("hipMallocFromPoolAsync"));
        };
        let bytes = usize::try_from(bytes).map_err(|_| oom())?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: the pool and the stream are live (the caller's contract); writes one
        // pointer; `bytes` is non-zero.
        let rc = unsafe { allocate(&mut p, bytes, pool, stream) };
        if rc == 2 {
            return Err(oom());
        }
        result::hip("hipMallocFromPoolAsync", rc)?;
        if p.is_null() {
            return Err(oom());
        }
        Ok(p as u64)
    }

    fn pooled(ptr: u64, stream: Arc<RawStream>, pool: Arc<MemPool>) -> RawMemory {
        RawMemory::Pooled {
            ptr: ptr as usize as *mut c_void,
            stream,
            pool,
        }
    }
}
