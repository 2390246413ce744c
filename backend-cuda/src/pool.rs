//! Stream-ordered allocation (`Stream::allocate_ordered`): a memory pool of the device's own
//! (`cuMemPoolCreate`, pinned device memory on this device), whose release threshold is the
//! largest (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`), so that memory freed with `cuMemFreeAsync`
//! stays in the pool and a repeated `cuMemAllocFromPoolAsync` of a size it held calls no
//! allocator. A pool of its own (not the device's default pool) leaves the threshold of
//! other users of the default pool alone.
//!
//! The device has the capability when the driver says so
//! (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`), has the entry points (looked up under
//! `guarded`: cudarc panics on a missing symbol), and the pool could be made; otherwise the
//! capability is off and the reason is logged, never an error.

use crate::context::DeviceContext;
use crate::loader::{check_symbols, guarded};
use crate::result::{cu, cu_error};
use crate::sys::{self, CUresult};
use cudarc::driver::sys as drv;
use std::sync::Arc;
use xthunk_core::{Error, Result};

/// The driver entry points of stream-ordered allocation.
pub(crate) const POOL_DRIVER_SYMBOLS: [&str; 5] = [
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolSetAttribute",
    "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync",
];

/// A device's memory pool.
pub(crate) struct MemPool {
    raw: sys::CUmemoryPool,
    ctx: Arc<DeviceContext>,
}

// SAFETY: a CUmemoryPool may be used from any thread; the handle is immutable after creation
// and destroyed once, in `drop`.
unsafe impl Send for MemPool {}
// SAFETY: as above; the driver serializes use of the pool.
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
        // Allocations hold the pool, so none is live; frees still queued complete first
        // (the driver releases the pool after them).
        let raw = self.raw;
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: `raw` came from cuMemPoolCreate and is destroyed once, here.
            call("cuMemPoolDestroy", || unsafe { sys::cuMemPoolDestroy(raw) })
        });
        if let Err(e) = r {
            tracing::warn!("destroying the memory pool: {e}");
        }
    }
}

/// Runs a driver call that may be missing (cudarc panics then) and checks its result.
fn call(what: &str, f: impl FnOnce() -> CUresult) -> Result<()> {
    let r = guarded(what, f).map_err(|e| Error::backend("cuda", what, e))?;
    cu(what, r)
}

impl MemPool {
    /// The pool of device `dev` (whose driver reports `supported` for the memory-pools
    /// attribute), or why there is none.
    pub(crate) fn create(
        ctx: &Arc<DeviceContext>,
        dev: sys::CUdevice,
        supported: bool,
    ) -> std::result::Result<Arc<MemPool>, String> {
        if !supported {
            return Err("the driver reports no memory pools for the device".into());
        }
        // SAFETY: the driver library is already loaded (the probe opened it).
        guarded("the driver library", || unsafe { drv::culib() })
            .and_then(|lib| check_symbols(lib, &POOL_DRIVER_SYMBOLS))
            .map_err(|e| format!("the driver library: {e}"))?;
        let props = sys::CUmemPoolProps {
            allocType: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: dev,
            },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            reserved: [0; 56],
        };
        let mut raw: sys::CUmemoryPool = std::ptr::null_mut();
        ctx.bind().map_err(|e| e.to_string())?;
        // SAFETY: `props` is a complete CUmemPoolProps; writes one pool handle.
        call("cuMemPoolCreate", || unsafe {
            sys::cuMemPoolCreate(&mut raw, &props)
        })
        .map_err(|e| e.to_string())?;
        let pool = Arc::new(MemPool {
            raw,
            ctx: ctx.clone(),
        });
        let mut threshold = u64::MAX;
        // SAFETY: the pool is live; the release threshold is a cuuint64_t read from `threshold`.
        call("cuMemPoolSetAttribute", || unsafe {
            sys::cuMemPoolSetAttribute(
                raw,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
        })
        .map_err(|e| e.to_string())?;
        Ok(pool)
    }

    /// `bytes` bytes from the pool in the order of `stream` (the context is current).
    pub(crate) fn allocate(
        &self,
        bytes: usize,
        stream: sys::CUstream,
        oom: impl Fn() -> Error,
    ) -> Result<sys::CUdeviceptr> {
        let mut p: sys::CUdeviceptr = 0;
        let raw = self.raw;
        // SAFETY: the pool and the stream are live; writes one device pointer.
        let r = guarded("cuMemAllocFromPoolAsync", || unsafe {
            sys::cuMemAllocFromPoolAsync(&mut p, bytes, raw, stream)
        })
        .map_err(|e| Error::backend("cuda", "cuMemAllocFromPoolAsync", e))?;
        match r {
            CUresult::CUDA_SUCCESS => Ok(p),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(oom()),
            other => Err(cu_error("cuMemAllocFromPoolAsync", other)),
        }
    }
}

/// Frees a pool allocation in the order of `stream` (the context is current).
pub(crate) fn free(p: sys::CUdeviceptr, stream: sys::CUstream) -> Result<()> {
    // SAFETY: `p` came from cuMemAllocFromPoolAsync and is freed once; the stream is live.
    call("cuMemFreeAsync", || unsafe {
        sys::cuMemFreeAsync(p, stream)
    })
}
