//! Stream-ordered allocation (`Stream::allocate_ordered`): a memory pool of the device's own
//! (`hipMemPoolCreate`, pinned device memory on this device), whose release threshold is the
//! largest (`hipMemPoolAttrReleaseThreshold`), so that memory freed with `hipFreeAsync`
//! stays in the pool and a repeated `hipMallocFromPoolAsync` of a size it held calls no
//! allocator. A pool of its own (not the device's default pool) leaves the threshold of
//! other users of the default pool alone.
//!
//! The device has the capability when the runtime says so
//! (`hipDeviceAttributeMemoryPoolsSupported`), has the entry points (optional symbols of
//! the HIP table), and the pool could be made; otherwise the capability is off and the
//! reason is logged, never an error.

use crate::context::DeviceContext;
use crate::result::{self, hip_describe};
use crate::sys;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::{Error, Result};

/// The entry points one pool needs, from the HIP table.
#[derive(Clone, Copy)]
struct Calls {
    create: sys::hipMemPoolCreate_t,
    destroy: sys::hipMemPoolDestroy_t,
    set_attribute: sys::hipMemPoolSetAttribute_t,
    allocate: sys::hipMallocFromPoolAsync_t,
    free: sys::hipFreeAsync_t,
}

/// A device's memory pool.
pub(crate) struct MemPool {
    raw: sys::hipMemPool_t,
    calls: Calls,
    ctx: Arc<DeviceContext>,
}

// SAFETY: a hipMemPool_t may be used from any thread; the handle is immutable after creation
// and destroyed once, in `drop`.
unsafe impl Send for MemPool {}
// SAFETY: as above; the runtime serializes use of the pool.
unsafe impl Sync for MemPool {}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl Drop for MemPool {
    fn drop(&mut self) {
        // Allocations hold the pool, so none is live; frees still queued complete first.
        let _ = self.ctx.bind();
        // SAFETY: `raw` came from hipMemPoolCreate and is destroyed once, here.
        let rc = unsafe { (self.calls.destroy)(self.raw) };
        if rc != sys::hipSuccess {
            tracing::warn!("hipMemPoolDestroy: {}", hip_describe(rc));
        }
    }
}

impl MemPool {
    /// The pool of the device of `ctx` (whose runtime reports `supported` for the
    /// memory-pools attribute), or why there is none.
    pub(crate) fn create(
        ctx: &Arc<DeviceContext>,
        supported: bool,
    ) -> std::result::Result<Arc<MemPool>, String> {
        if !supported {
            return Err("the HIP runtime reports no memory pools for the device".into());
        }
        let api = &ctx.hip.api;
        let calls = match (
            api.hipMemPoolCreate,
            api.hipMemPoolDestroy,
            api.hipMemPoolSetAttribute,
            api.hipMallocFromPoolAsync,
            api.hipFreeAsync,
        ) {
            (Some(create), Some(destroy), Some(set_attribute), Some(allocate), Some(free)) => {
                Calls {
                    create,
                    destroy,
                    set_attribute,
                    allocate,
                    free,
                }
            }
            _ => return Err("the HIP runtime lacks the memory-pool entry points".into()),
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
        let rc = unsafe { (calls.create)(&mut raw, &props) };
        result::hip("hipMemPoolCreate", rc).map_err(|e| e.to_string())?;
        let pool = Arc::new(MemPool {
            raw,
            calls,
            ctx: ctx.clone(),
        });
        let mut threshold = u64::MAX;
        // SAFETY: the pool is live; the release threshold is a uint64_t read from `threshold`.
        let rc = unsafe {
            (calls.set_attribute)(
                raw,
                sys::hipMemPoolAttrReleaseThreshold,
                (&mut threshold as *mut u64).cast(),
            )
        };
        result::hip("hipMemPoolSetAttribute", rc).map_err(|e| e.to_string())?;
        Ok(pool)
    }

    /// `bytes` bytes from the pool in the order of `stream` (the device is current).
    pub(crate) fn allocate(
        &self,
        bytes: usize,
        stream: sys::hipStream_t,
        oom: impl Fn() -> Error,
    ) -> Result<*mut c_void> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: the pool and the stream are live; writes one pointer; `bytes` is non-zero.
        let rc = unsafe { (self.calls.allocate)(&mut p, bytes, self.raw, stream) };
        if rc == 2 {
            return Err(oom());
        }
        result::hip("hipMallocFromPoolAsync", rc)?;
        if p.is_null() {
            return Err(oom());
        }
        Ok(p)
    }

    /// Frees a pool allocation in the order of `stream` (the device is current).
    pub(crate) fn free(&self, p: *mut c_void, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: `p` came from hipMallocFromPoolAsync and is freed once; the stream is live.
        let rc = unsafe { (self.calls.free)(p, stream) };
        result::hip("hipFreeAsync", rc)
    }
}
