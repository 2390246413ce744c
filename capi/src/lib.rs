//! xthunk's C ABI (`include/xthunk.h`, generated from this crate by cbindgen): runtime, device,
//! executable and buffer handles over the facade library, errors as objects with a message and
//! a cause chain.
//!
//! Conventions of every entry point:
//! - Fallible functions return `XthunkError*`: NULL on success, else an error the caller frees
//!   with `xthunk_error_free`. Results come back through out-pointers, written only on success.
//! - Handles are pointers this library returned and the caller has not freed; each has its
//!   `_free` function (NULL is accepted and ignored). A handle may be used from any thread.
//! - Nothing panics across the boundary: every entry point runs under `catch_unwind`, and a
//!   panic becomes an error of code `XTHUNK_STATUS_INTERNAL`.
//! - Pointer arguments are checked for NULL; memory they point at must be valid for the sizes
//!   given (the one contract C cannot check).

// The pointer contract is stated once above and in the header, not on every function.
#![allow(clippy::missing_safety_doc)]

mod donate;
mod error;
mod event;
mod executable;
mod handles;
mod plugin;

pub use donate::*;
pub use error::*;
pub use event::*;
pub use executable::*;
pub use handles::*;
pub use plugin::*;

use std::ffi::c_char;

/// The version of this C ABI: incremented on every incompatible change of `xthunk.h`. A
/// program compares `xthunk_abi_version()` with the `XTHUNK_ABI_VERSION` it was compiled with.
pub const XTHUNK_ABI_VERSION: u32 = 1;

/// The ABI version of the loaded library (see `XTHUNK_ABI_VERSION`).
#[unsafe(no_mangle)]
pub extern "C" fn xthunk_abi_version() -> u32 {
    XTHUNK_ABI_VERSION
}

/// The library's version, e.g. "0.1.0" (a static string).
#[unsafe(no_mangle)]
pub extern "C" fn xthunk_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
