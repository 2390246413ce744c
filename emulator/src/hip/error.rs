//! Error names and strings, and the per-thread last error.

use super::{HipError, LAST_ERROR};
use crate::error::hip;
use std::ffi::c_char;

fn error_text(e: HipError, name: bool) -> *const c_char {
    let s = hip::NAMES
        .iter()
        .find(|(v, _, _)| *v == e)
        .map(|(_, n, d)| if name { *n } else { *d })
        .unwrap_or(if name {
            "hipErrorUnknown\0"
        } else {
            "unknown error\0"
        });
    s.as_ptr().cast()
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorName(e: HipError) -> *const c_char {
    error_text(e, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorString(e: HipError) -> *const c_char {
    error_text(e, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetLastError() -> HipError {
    LAST_ERROR.with(|l| l.replace(hip::SUCCESS))
}

#[unsafe(no_mangle)]
pub extern "C" fn hipPeekAtLastError() -> HipError {
    LAST_ERROR.with(|l| l.get())
}
