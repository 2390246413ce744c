//! Memory: device, managed and host allocations, frees, memory info, synchronous and
//! asynchronous copies, memsets.

use super::{Handle, HipError, api, ctx, stream_of};
use crate::copy::{self, Dir};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::ffi::put;
use crate::memory::{self, MemKind};
use crate::stream;
use std::ffi::{c_int, c_uint, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipError {
    const C: &str = "hipMemGetInfo";
    api(C, || {
        let c = ctx(C)?;
        let used = memory::live_bytes(c.id);
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(free, c.memory().saturating_sub(used) as usize, "free", C)?;
            put(total, c.memory() as usize, "total", C)
        }
    })
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
    if out.is_null() {
        return Err(invalid(call, "`ptr` is a null pointer"));
    }
    let c = ctx(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    let p = if size == 0 {
        0
    } else {
        memory::allocate(c.id, c.memory(), size, kind, call)?
    };
    // SAFETY: forwarded from the caller (checked non-null).
    unsafe { put(out, p as *mut c_void, "ptr", call) }
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

fn free(p: *mut c_void, kinds: &[MemKind], call: &str) -> EmuResult<()> {
    let c = ctx(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    if p.is_null() {
        return Ok(());
    }
    // hipFree synchronizes the device.
    let _ = c.synchronize();
    memory::free(p as usize, kinds, call).map(|_| ())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFree(p: *mut c_void) -> HipError {
    const C: &str = "hipFree";
    api(C, || free(p, &[MemKind::Device, MemKind::Managed], C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostFree(p: *mut c_void) -> HipError {
    const C: &str = "hipHostFree";
    api(C, || free(p, &[MemKind::Pinned], C))
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
        copy::copy_sync(&*ctx(C)?, dst as usize, src as usize, n, d, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    const C: &str = "hipMemcpyHtoD";
    api(C, || {
        copy::copy_sync(&*ctx(C)?, dst as usize, src as usize, n, copy::HTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    const C: &str = "hipMemcpyDtoH";
    api(C, || {
        copy::copy_sync(&*ctx(C)?, dst as usize, src as usize, n, copy::DTOH, C)
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
        copy::copy_async(&stream_of(s, C)?, dst as usize, src as usize, n, d, C)
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
        copy::copy_async(
            &stream_of(s, C)?,
            dst as usize,
            src as usize,
            n,
            copy::HTOD,
            C,
        )
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
        copy::copy_async(
            &stream_of(s, C)?,
            dst as usize,
            src as usize,
            n,
            copy::DTOH,
            C,
        )
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
        copy::copy_async(
            &stream_of(s, C)?,
            dst as usize,
            src as usize,
            n,
            copy::DTOD,
            C,
        )
    })
}

fn memset(
    dst: *mut c_void,
    width: usize,
    v: u32,
    n: usize,
    s: Option<Handle>,
    call: &str,
) -> HipError {
    api(call, || {
        let st = match s {
            Some(h) => stream_of(h, call)?,
            None => ctx(call)?.legacy.clone(),
        };
        copy::memset(&st, dst as usize, width, v, n, call)?;
        if s.is_none() {
            // The synchronous forms complete before returning.
            if let Some(c) = st.ctx() {
                stream::legacy_barrier(&c, call)?;
            }
        }
        Ok(())
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
