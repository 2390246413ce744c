//! Stream-ordered allocation's driver calls (the pool itself is [`xthunk_gpu::pool`]'s): a
//! memory pool of the device's own (`cuMemPoolCreate`, pinned device memory on this device)
//! whose release threshold is the largest (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`), so that
//! memory freed with `cuMemFreeAsync` stays in the pool and a repeated
//! `cuMemAllocFromPoolAsync` of a size it held calls no allocator.
//!
//! The device has the capability when the driver says so
//! (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`), has the entry points (looked up under
//! `guarded`: cudarc panics on a missing symbol), and the pool could be made; otherwise the
//! capability is off and the reason is logged, never an error.

use crate::context::DeviceContext;
use crate::loader::{check_symbols, guarded};
use crate::result::{BACKEND, cu_error};
use crate::sys::{self, CUresult};
use crate::vendor::{Cuda, MemPool, RawMemory, RawStream, guarded_call};
use cudarc::driver::sys as drv;
use std::sync::Arc;
use xthunk_core::{Error, Result};
use xthunk_gpu::pool::PoolVendor;

/// The driver entry points of stream-ordered allocation.
pub(crate) const POOL_DRIVER_SYMBOLS: [&str; 5] = [
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolSetAttribute",
    "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync",
];

impl PoolVendor for Cuda {
    type RawPool = sys::CUmemoryPool;

    fn create_pool(
        ctx: &DeviceContext,
        supported: bool,
        made: &mut dyn FnMut(sys::CUmemoryPool),
    ) -> std::result::Result<(), String> {
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
                id: ctx.dev,
            },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            reserved: [0; 56],
        };
        let mut raw: sys::CUmemoryPool = std::ptr::null_mut();
        ctx.bind().map_err(|e| e.to_string())?;
        // SAFETY: `props` is a complete CUmemPoolProps; writes one pool handle.
        guarded_call("cuMemPoolCreate", || unsafe {
            sys::cuMemPoolCreate(&mut raw, &props)
        })
        .map_err(|e| e.to_string())?;
        made(raw);
        let mut threshold = u64::MAX;
        // SAFETY: the pool is live; the release threshold is a cuuint64_t read from `threshold`.
        guarded_call("cuMemPoolSetAttribute", || unsafe {
            sys::cuMemPoolSetAttribute(
                raw,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
        })
        .map_err(|e| e.to_string())
    }

    unsafe fn destroy_pool(_ctx: &DeviceContext, raw: sys::CUmemoryPool) -> Result<()> {
        // SAFETY: `raw` came from cuMemPoolCreate and is destroyed once (the caller's
        // contract); the driver releases it after the frees still queued.
        guarded_call("cuMemPoolDestroy", || unsafe { sys::cuMemPoolDestroy(raw) })
    }

    unsafe fn pool_allocate(
        _ctx: &DeviceContext,
        pool: sys::CUmemoryPool,
        bytes: u64,
        stream: sys::CUstream,
        oom: &dyn Fn() -> Error,
    ) -> Result<u64> {
        let bytes = usize::try_from(bytes).map_err(|_| oom())?;
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: the pool and the stream are live (the caller's contract); writes one device
        // pointer.
        let r = guarded("cuMemAllocFromPoolAsync", || unsafe {
            sys::cuMemAllocFromPoolAsync(&mut p, bytes, pool, stream)
        })
        .map_err(|e| Error::backend(BACKEND, "cuMemAllocFromPoolAsync", e))?;
        match r {
            CUresult::CUDA_SUCCESS => Ok(p),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(oom()),
            other => Err(cu_error("cuMemAllocFromPoolAsync", other)),
        }
    }

    fn pooled(ptr: u64, stream: Arc<RawStream>, pool: Arc<MemPool>) -> RawMemory {
        RawMemory::Pooled { ptr, stream, pool }
    }
}
