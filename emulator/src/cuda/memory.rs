//! Memory: device, managed and page-locked allocations, frees, synchronous and asynchronous
//! copies, memsets, pointer attributes.

use super::{CUresult, Cuda, DevPtr, Handle, api};
use crate::context;
use crate::copy;
use crate::driver;
use crate::error::{EmuResult, invalid};
use crate::ffi::put;
use crate::memory::{self, MemKind};
use std::ffi::{c_int, c_uint, c_void};

/// Allocates device or managed memory and writes its address to `dptr`.
///
/// # Safety
/// `dptr` must be null or valid for writing.
unsafe fn alloc_device(
    dptr: *mut DevPtr,
    size: usize,
    kind: MemKind,
    call: &'static str,
) -> EmuResult<()> {
    // SAFETY: forwarded from the caller.
    unsafe { driver::allocate_into::<Cuda, _>(dptr, "dptr", size, kind, |p| p as DevPtr, call) }
}

/// Allocates page-locked host memory and writes its address to `pp`.
///
/// # Safety
/// `pp` must be null or valid for writing.
unsafe fn alloc_host(pp: *mut *mut c_void, size: usize, call: &'static str) -> EmuResult<()> {
    let kind = MemKind::Pinned;
    // SAFETY: forwarded from the caller.
    unsafe { driver::allocate_into::<Cuda, _>(pp, "pp", size, kind, |p| p as *mut c_void, call) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut DevPtr, bytesize: usize) -> CUresult {
    const C: &str = "cuMemAlloc_v2";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        alloc_device(dptr, bytesize, MemKind::Device, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut DevPtr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuMemAllocManaged";
    api(C, || {
        if flags != 1 && flags != 2 {
            return Err(invalid(
                C,
                format!("flags must be CU_MEM_ATTACH_GLOBAL or _HOST, got {flags}"),
            ));
        }
        // SAFETY: the caller's out-pointer.
        unsafe { alloc_device(dptr, bytesize, MemKind::Managed, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    const C: &str = "cuMemAllocHost_v2";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { alloc_host(pp, bytesize, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuMemHostAlloc";
    api(C, || {
        if flags & !0x7 != 0 {
            return Err(invalid(C, format!("unknown flags {flags:#x}")));
        }
        // SAFETY: the caller's out-pointer.
        unsafe { alloc_host(pp, bytesize, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut DevPtr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuMemHostGetDevicePointer_v2";
    api(C, || {
        context::current(C)?;
        if flags != 0 {
            return Err(invalid(C, format!("flags must be 0, got {flags}")));
        }
        match memory::allocation_containing(p as usize) {
            Some(a) if a.kind == MemKind::Pinned => {
                // SAFETY: the caller's out-pointer.
                unsafe { put(pdptr, p as DevPtr, "pdptr", C) }
            }
            _ => Err(invalid(
                C,
                format!("{p:p} is not page-locked memory from cuMemAllocHost/cuMemHostAlloc"),
            )),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: DevPtr) -> CUresult {
    const C: &str = "cuMemFree_v2";
    // cuMemFree waits for the device (in practice; the backends rely on it).
    api(C, || {
        driver::free::<Cuda>(dptr as usize, &[MemKind::Device, MemKind::Managed], true, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    const C: &str = "cuMemFreeHost";
    api(C, || {
        driver::free::<Cuda>(p as usize, &[MemKind::Pinned], false, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    const C: &str = "cuMemGetInfo_v2";
    // SAFETY: the caller's out-pointers.
    api(C, || unsafe { driver::mem_info::<Cuda>(free, total, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: DevPtr, src: *const c_void, n: usize) -> CUresult {
    const C: &str = "cuMemcpyHtoD_v2";
    api(C, || {
        driver::copy_sync::<Cuda>(dst as usize, src as usize, n, copy::HTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: DevPtr, n: usize) -> CUresult {
    const C: &str = "cuMemcpyDtoH_v2";
    api(C, || {
        driver::copy_sync::<Cuda>(dst as usize, src as usize, n, copy::DTOH, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: DevPtr, src: DevPtr, n: usize) -> CUresult {
    const C: &str = "cuMemcpyDtoD_v2";
    api(C, || {
        let c = context::current(C)?;
        copy::copy_async(&c.legacy, dst as usize, src as usize, n, copy::DTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy(dst: DevPtr, src: DevPtr, n: usize) -> CUresult {
    const C: &str = "cuMemcpy";
    api(C, || {
        driver::copy_sync::<Cuda>(dst as usize, src as usize, n, copy::ANY, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyAsync(dst: DevPtr, src: DevPtr, n: usize, s: Handle) -> CUresult {
    const C: &str = "cuMemcpyAsync";
    api(C, || {
        driver::copy_async::<Cuda>(dst as usize, src as usize, n, copy::ANY, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: DevPtr,
    src: *const c_void,
    n: usize,
    s: Handle,
) -> CUresult {
    const C: &str = "cuMemcpyHtoDAsync_v2";
    api(C, || {
        driver::copy_async::<Cuda>(dst as usize, src as usize, n, copy::HTOD, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: DevPtr,
    n: usize,
    s: Handle,
) -> CUresult {
    const C: &str = "cuMemcpyDtoHAsync_v2";
    api(C, || {
        driver::copy_async::<Cuda>(dst as usize, src as usize, n, copy::DTOH, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: DevPtr,
    src: DevPtr,
    n: usize,
    s: Handle,
) -> CUresult {
    const C: &str = "cuMemcpyDtoDAsync_v2";
    api(C, || {
        driver::copy_async::<Cuda>(dst as usize, src as usize, n, copy::DTOD, s, C)
    })
}

/// A memset (synchronous where `s` is `None`: complete on return for page-locked memory).
fn memset(dst: DevPtr, width: usize, v: u32, n: usize, s: Option<Handle>, call: &str) -> CUresult {
    api(call, || {
        driver::memset::<Cuda>(dst as usize, width, v, n, s, call)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: DevPtr, uc: u8, n: usize) -> CUresult {
    memset(dst, 1, uc as u32, n, None, "cuMemsetD8_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: DevPtr, us: u16, n: usize) -> CUresult {
    memset(dst, 2, us as u32, n, None, "cuMemsetD16_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: DevPtr, ui: c_uint, n: usize) -> CUresult {
    memset(dst, 4, ui, n, None, "cuMemsetD32_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8Async(dst: DevPtr, uc: u8, n: usize, s: Handle) -> CUresult {
    memset(dst, 1, uc as u32, n, Some(s), "cuMemsetD8Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD16Async(dst: DevPtr, us: u16, n: usize, s: Handle) -> CUresult {
    memset(dst, 2, us as u32, n, Some(s), "cuMemsetD16Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: DevPtr,
    ui: c_uint,
    n: usize,
    s: Handle,
) -> CUresult {
    memset(dst, 4, ui, n, Some(s), "cuMemsetD32Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: DevPtr,
) -> CUresult {
    const C: &str = "cuPointerGetAttribute";
    api(C, || {
        context::cuda_initialized(C)?;
        let a = memory::allocation_containing(ptr as usize)
            .ok_or_else(|| invalid(C, format!("{ptr:#x} is not in an emulated allocation")))?;
        let ctx_handle = context::CONTEXTS
            .all()
            .into_iter()
            .find(|(_, c)| c.id == a.ctx)
            .map(|(h, _)| h)
            .unwrap_or(0);
        let dev = context::by_id(a.ctx).map(|c| c.device).unwrap_or(0);
        // SAFETY: `data` points to storage of the attribute's type (the caller's contract).
        unsafe {
            match attribute {
                1 => put(data.cast::<Handle>(), ctx_handle, "data", C),
                2 => put(
                    data.cast::<c_uint>(),
                    if a.kind == MemKind::Pinned { 1 } else { 2 },
                    "data",
                    C,
                ),
                3 => put(data.cast::<DevPtr>(), ptr, "data", C),
                4 if !a.kind.device_only() => put(data.cast::<usize>(), ptr as usize, "data", C),
                8 => put(
                    data.cast::<c_uint>(),
                    (a.kind == MemKind::Managed) as c_uint,
                    "data",
                    C,
                ),
                9 => put(data.cast::<c_int>(), dev, "data", C),
                11 => put(data.cast::<DevPtr>(), a.base as DevPtr, "data", C),
                12 => put(data.cast::<usize>(), a.size, "data", C),
                _ => Err(invalid(
                    C,
                    format!(
                        "pointer attribute {attribute} is not emulated for {}",
                        a.describe()
                    ),
                )),
            }
        }
    })
}
