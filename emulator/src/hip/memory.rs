//! Memory: device, managed and host allocations, frees, memory info, synchronous and
//! asynchronous copies, memsets.

use super::{Handle, Hip, HipError, api};
use crate::copy::{self, Dir};
use crate::diag::Kind;
use crate::driver;
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::ffi::put;
use crate::memory::{self, MemKind};
use std::ffi::{c_int, c_uint, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipError {
    const C: &str = "hipMemGetInfo";
    // SAFETY: the caller's out-pointers.
    api(C, || unsafe { driver::mem_info::<Hip>(free, total, C) })
}

/// Allocates (`size` 0 gives NULL, as HIP does).
///
/// # Safety
/// `out` must be null or valid for writing a pointer.
unsafe fn alloc(
    out: *mut *mut c_void,
    size: usize,
    kind: MemKind,
    call: &'static str,
) -> EmuResult<()> {
    // SAFETY: forwarded from the caller.
    unsafe { driver::allocate_into::<Hip, _>(out, "ptr", size, kind, |p| p as *mut c_void, call) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipError {
    const C: &str = "hipMalloc";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { alloc(ptr, size, MemKind::Device, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostMalloc(
    ptr: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> HipError {
    const C: &str = "hipHostMalloc";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { alloc(ptr, size, MemKind::Pinned, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocManaged(
    ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> HipError {
    const C: &str = "hipMallocManaged";
    api(C, || {
        if flags != 1 && flags != 2 {
            return Err(invalid(
                C,
                format!("flags must be hipMemAttachGlobal or hipMemAttachHost, got {flags}"),
            ));
        }
        // SAFETY: the caller's out-pointer.
        unsafe { alloc(ptr, size, MemKind::Managed, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFree(p: *mut c_void) -> HipError {
    const C: &str = "hipFree";
    // hipFree synchronizes the device.
    api(C, || {
        driver::free::<Hip>(p as usize, &[MemKind::Device, MemKind::Managed], true, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostFree(p: *mut c_void) -> HipError {
    const C: &str = "hipHostFree";
    api(C, || {
        driver::free::<Hip>(p as usize, &[MemKind::Pinned], true, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    dev_ptr: *mut *mut c_void,
    host: *mut c_void,
    flags: c_uint,
) -> HipError {
    const C: &str = "hipHostGetDevicePointer";
    api(C, || {
        if flags != 0 {
            return Err(invalid(C, format!("flags must be 0, got {flags}")));
        }
        match memory::allocation_containing(host as usize) {
            Some(a) if a.kind == MemKind::Pinned => {
                // SAFETY: the caller's out-pointer.
                unsafe { put(dev_ptr, host, "devPtr", C) }
            }
            _ => Err(invalid(
                C,
                format!("{host:p} is not memory from hipHostMalloc"),
            )),
        }
    })
}

/// `hipMemcpyKind` to the sides' kinds.
fn kind(k: c_int, call: &str) -> EmuResult<Dir> {
    Ok(match k {
        0 => copy::HTOH,
        1 => copy::HTOD,
        2 => copy::DTOH,
        3 => copy::DTOD,
        4 => copy::ANY,
        k => {
            return Err(EmuError::new(
                Code::InvalidValue,
                Kind::InvalidValue,
                call,
                format!("unknown hipMemcpyKind {k}"),
            ));
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    k: c_int,
) -> HipError {
    const C: &str = "hipMemcpy";
    api(C, || {
        let d = kind(k, C)?;
        driver::copy_sync::<Hip>(dst as usize, src as usize, n, d, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    const C: &str = "hipMemcpyHtoD";
    api(C, || {
        driver::copy_sync::<Hip>(dst as usize, src as usize, n, copy::HTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    const C: &str = "hipMemcpyDtoH";
    api(C, || {
        driver::copy_sync::<Hip>(dst as usize, src as usize, n, copy::DTOH, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    k: c_int,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyAsync";
    api(C, || {
        let d = kind(k, C)?;
        driver::copy_async::<Hip>(dst as usize, src as usize, n, d, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyHtoDAsync";
    api(C, || {
        driver::copy_async::<Hip>(dst as usize, src as usize, n, copy::HTOD, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyDtoHAsync";
    api(C, || {
        driver::copy_async::<Hip>(dst as usize, src as usize, n, copy::DTOH, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoDAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyDtoDAsync";
    api(C, || {
        driver::copy_async::<Hip>(dst as usize, src as usize, n, copy::DTOD, s, C)
    })
}

/// A memset (synchronous where `s` is `None`: the synchronous forms complete before returning).
fn memset(
    dst: *mut c_void,
    width: usize,
    v: u32,
    n: usize,
    s: Option<Handle>,
    call: &str,
) -> HipError {
    api(call, || {
        driver::memset::<Hip>(dst as usize, width, v, n, s, call)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> HipError {
    memset(dst, 1, value as u8 as u32, size, None, "hipMemset")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetAsync(
    dst: *mut c_void,
    value: c_int,
    size: usize,
    s: Handle,
) -> HipError {
    memset(dst, 1, value as u8 as u32, size, Some(s), "hipMemsetAsync")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD8(dst: *mut c_void, value: u8, n: usize) -> HipError {
    memset(dst, 1, value as u32, n, None, "hipMemsetD8")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD16(dst: *mut c_void, value: u16, n: usize) -> HipError {
    memset(dst, 2, value as u32, n, None, "hipMemsetD16")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD32(dst: *mut c_void, value: c_int, n: usize) -> HipError {
    memset(dst, 4, value as u32, n, None, "hipMemsetD32")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD8Async(
    dst: *mut c_void,
    value: u8,
    n: usize,
    s: Handle,
) -> HipError {
    memset(dst, 1, value as u32, n, Some(s), "hipMemsetD8Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD16Async(
    dst: *mut c_void,
    value: u16,
    n: usize,
    s: Handle,
) -> HipError {
    memset(dst, 2, value as u32, n, Some(s), "hipMemsetD16Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD32Async(
    dst: *mut c_void,
    value: c_int,
    n: usize,
    s: Handle,
) -> HipError {
    memset(dst, 4, value as u32, n, Some(s), "hipMemsetD32Async")
}
