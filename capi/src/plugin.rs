//! Custom-call plugins from C: `xthunk_load_plugin` loads a shared library implementing
//! `include/xthunk_ffi.h` into the process, as `xthunk run --plugin` does.

use crate::error::{XthunkError, guard, str_arg};
use std::ffi::c_char;
use std::path::PathBuf;

/// Loads the custom-call plugin at `path` (a shared library implementing `xthunk_ffi.h`) into
/// this process: its handlers serve the programs loaded afterwards, on the backends it
/// registers for. A file already loaded is not loaded again. Errors: `XTHUNK_STATUS_UNAVAILABLE`
/// when the file cannot be loaded (the dynamic loader's reason in the message) or does not
/// register properly, `XTHUNK_STATUS_INVALID_ARGUMENT` for a target already registered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_load_plugin(path: *const c_char) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's NUL-terminated string (the ABI's contract).
        let path = unsafe { str_arg(path, "path")? };
        xthunk::plugins::load_plugins(&[PathBuf::from(path)]).map_err(xthunk::Error::from)?;
        Ok(())
    })
}
