//! Error names and strings, and the (empty) export table NVRTC looks for.

use super::CUresult;
use crate::error::cu;
use std::ffi::{c_char, c_uint, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(err: c_uint, p: *mut *const c_char) -> CUresult {
    error_text(err, p, true)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(err: c_uint, p: *mut *const c_char) -> CUresult {
    error_text(err, p, false)
}

fn error_text(err: c_uint, p: *mut *const c_char, name: bool) -> CUresult {
    let found = cu::NAMES.iter().find(|(v, _, _)| *v == err);
    if p.is_null() {
        return cu::INVALID_VALUE;
    }
    let s = found.map(|(_, n, d)| if name { *n } else { *d });
    // SAFETY: `p` is the caller's non-null out-pointer; the strings are static and
    // NUL-terminated.
    unsafe {
        *p = s.map(|s| s.as_ptr().cast()).unwrap_or(std::ptr::null());
    }
    if s.is_some() {
        cu::SUCCESS
    } else {
        cu::INVALID_VALUE
    }
}

/// `cuGetExportTable`: the driver's private tables. NVRTC looks this symbol up in whatever
/// `libcuda.so.1` the process can load (to learn about the driver) and handles an error, but
/// crashes when the symbol itself is missing; so it exists and reports that no table is
/// available.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetExportTable(
    table: *mut *const c_void,
    _id: *const c_void,
) -> CUresult {
    if !table.is_null() {
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *table = std::ptr::null() };
    }
    cu::NOT_FOUND
}
