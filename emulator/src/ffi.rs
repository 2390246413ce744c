//! Small helpers shared by the C API shims.

use crate::error::{EmuResult, invalid};
use std::ffi::{CStr, c_char};

/// Writes `v` through the caller's out-pointer `p` (null is an invalid-value error).
///
/// # Safety
/// `p` must be null or valid for writing one `T`.
pub unsafe fn put<T>(p: *mut T, v: T, what: &str, call: &str) -> EmuResult<()> {
    if p.is_null() {
        return Err(invalid(call, format!("`{what}` is a null pointer")));
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Reads the caller's C string (null is an invalid-value error).
///
/// # Safety
/// `p` must be null or a valid NUL-terminated string.
pub unsafe fn string(p: *const c_char, what: &str, call: &str) -> EmuResult<String> {
    if p.is_null() {
        return Err(invalid(call, format!("`{what}` is a null pointer")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Copies `s` (truncated, NUL-terminated) into the caller's buffer of `len` bytes.
///
/// # Safety
/// `buf` must be null or valid for writing `len` bytes.
pub unsafe fn copy_str(buf: *mut c_char, len: usize, s: &str, call: &str) -> EmuResult<()> {
    if buf.is_null() || len == 0 {
        return Err(invalid(call, "null or empty name buffer"));
    }
    let n = s.len().min(len - 1);
    // SAFETY: `buf` holds `len` bytes and `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(())
}
