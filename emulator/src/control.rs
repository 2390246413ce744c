//! The emulator's own C API (`xthunk_emu_*`), for tests and tools in any language.

use crate::diag;
use std::ffi::{c_char, c_int};

/// Version of this control API.
pub const CONTROL_VERSION: c_int = 1;

/// Returns [`CONTROL_VERSION`]; its presence tells a program that it talks to the emulator.
#[unsafe(no_mangle)]
pub extern "C" fn xthunk_emu_version() -> c_int {
    CONTROL_VERSION
}

/// Changes a setting (`key` as the `XTHUNK_EMU_*` variables, without the prefix; see
/// [`crate::config`]). Returns 0, or -1 with a diagnostic when the key or value is bad.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_emu_set(key: *const c_char, value: *const c_char) -> c_int {
    const C: &str = "xthunk_emu_set";
    // SAFETY: NUL-terminated strings (this function's contract).
    let kv = unsafe {
        (
            crate::ffi::string(key, "key", C),
            crate::ffi::string(value, "value", C),
        )
    };
    let (Ok(k), Ok(v)) = kv else {
        return -1;
    };
    match crate::config::set(&k, &v) {
        Ok(()) => 0,
        Err(e) => {
            diag::record(diag::Kind::InvalidValue, C, e);
            -1
        }
    }
}

/// Takes (and clears) the recorded diagnostics as text, one per line (`kind in call:
/// message`). Writes at most `cap - 1` bytes and a NUL into `buf` (when not null) and returns
/// the full length; with a null `buf` nothing is taken, so a caller can size its buffer first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_emu_take_diagnostics(buf: *mut c_char, cap: usize) -> usize {
    let text = if buf.is_null() {
        return peek_len();
    } else {
        diag::take()
            .iter()
            .map(|d| format!("{d}\n"))
            .collect::<String>()
    };
    if cap > 0 {
        let n = text.len().min(cap - 1);
        // SAFETY: `buf` holds `cap` bytes (this function's contract); `n + 1 <= cap`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

fn peek_len() -> usize {
    let all = diag::take();
    let n = all.iter().map(|d| d.to_string().len() + 1).sum();
    for d in all {
        diag::restore(d);
    }
    n
}

/// Memory-checker findings (out of bounds, use after free, double or invalid free, leaks,
/// non-device addresses) since the process started.
#[unsafe(no_mangle)]
pub extern "C" fn xthunk_emu_memory_errors() -> u64 {
    diag::memory_error_count()
}

/// Live emulated allocations (all APIs) and their total size in bytes (when `bytes` is not
/// null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_emu_live_allocations(bytes: *mut u64) -> u64 {
    let live = crate::memory::live(None);
    if !bytes.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *bytes = live.iter().map(|a| a.size as u64).sum() };
    }
    live.len() as u64
}

/// Calls that took memory from the host allocator for an emulated device since the process
/// started: plain allocations (`cuMemAlloc*`, `hipMalloc*`, pinned and managed too) and every
/// block a stream-ordered memory pool reserved; an allocation a pool served from memory it
/// held is not one (see [`crate::memory::allocator_calls`]).
#[unsafe(no_mangle)]
pub extern "C" fn xthunk_emu_allocator_calls() -> u64 {
    crate::memory::allocator_calls()
}

/// Bytes the stream-ordered memory pools of every emulated device hold (reserved blocks,
/// used or not); the bytes of those in use by live allocations go to `used` (when not null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_emu_pool_bytes(used: *mut u64) -> u64 {
    let (reserved, in_use) = crate::pool::held_bytes();
    if !used.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *used = in_use };
    }
    reserved
}

/// The NCCL emulation's collective-memory counters since the process started, in this order:
/// `ncclMemAlloc` calls, `ncclMemFree` calls, windows registered, windows deregistered, user
/// buffers registered, user buffers deregistered, empty windows handed back
/// (`XTHUNK_EMU_NCCL_MODE=rccl-no-windows`), ranks initialized by `ncclCommInitRankScalable`,
/// and the roots (unique ids) those ranks named, summed over the ranks.
/// Writes at most `n` of them to `out` (when not null) and returns how many there are.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_emu_nccl_counters(out: *mut u64, n: usize) -> usize {
    let all = crate::nccl::counters().as_array();
    if !out.is_null() {
        for (i, v) in all.iter().take(n).enumerate() {
            // SAFETY: `out` holds `n` values (this function's contract); `i < n`.
            unsafe { *out.add(i) = *v };
        }
    }
    all.len()
}
