//! NCCL / RCCL (`libnccl.so.2`, `librccl.so.1`: one ABI) among the emulated devices of one
//! process, from NCCL 2.32's `nccl.h`.
//!
//! - `ncclGetUniqueId` makes a fresh id; `ncclCommInitRank[Config]` from every rank (one thread
//!   each, or one thread inside `ncclGroupStart/End`) rendezvous on it; `ncclCommInitAll`
//!   makes a whole clique at once. A rank's device is the current CUDA context's device if the
//!   thread has one, else the current HIP device.
//! - Collectives (`AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Reduce`) and
//!   `Send`/`Recv` are stream operations. The n-th operation of every rank meets in a *slot*;
//!   when a rank's stream runs its part, it releases the other ranks' streams up to theirs (so
//!   lazy streams cannot deadlock) and the last rank to arrive moves all the data at once
//!   (reading every input before writing any output, so in-place calls are right). Operations
//!   inside a group are queued as one stream operation per stream that arrives at all its
//!   slots before waiting, so grouped sends and receives cannot deadlock.
//! - A rank that waits longer than 60 s (`XTHUNK_EMU_NCCL_TIMEOUT` seconds) fails the
//!   operation: its stream gets the error and `ncclCommGetAsyncError` reports
//!   `ncclSystemError`; `ncclCommAbort` wakes every waiter with an error.
//!
//! Files: `comm` (cliques, communicators, unique ids, initialization, destruction, queries),
//! `split` (`ncclCommSplit`), `group` (`ncclGroupStart/End`, deferred work), `slot` (where the
//! ranks' parts of one operation meet, and moving the data), `reduce` (element types and
//! reduction), `collectives` (the collective calls), `p2p` (`ncclSend` / `ncclRecv`).

#![allow(non_snake_case, clippy::too_many_arguments)]

mod collectives;
mod comm;
mod group;
mod p2p;
mod reduce;
mod slot;
mod split;

pub use collectives::*;
pub use comm::*;
pub use group::*;
pub use p2p::*;
pub use split::*;

use crate::diag::{self, Kind};
use crate::error::guard;
use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::time::Duration;

pub type NcclResult = c_int;
pub const SUCCESS: NcclResult = 0;
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INTERNAL_ERROR: NcclResult = 3;
pub const INVALID_ARGUMENT: NcclResult = 4;
pub const INVALID_USAGE: NcclResult = 5;
pub const REMOTE_ERROR: NcclResult = 6;

/// NCCL 2.32.3 (`NCCL_VERSION_CODE`).
pub const VERSION: c_int = 23203;

/// How long a rank waits for the other ranks (`XTHUNK_EMU_NCCL_TIMEOUT` seconds, 60 by default).
fn timeout() -> Duration {
    let s = std::env::var("XTHUNK_EMU_NCCL_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(60);
    Duration::from_secs(s.max(1))
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn fail(r: NcclResult, call: &str, kind: Kind, msg: impl Into<String>) -> NcclResult {
    let msg = msg.into();
    diag::record(kind, call, msg.clone());
    LAST_ERROR.with(|l| *l.borrow_mut() = format!("{call}: {msg}"));
    r
}

fn api(call: &str, f: impl FnOnce() -> NcclResult) -> NcclResult {
    match guard(call, || Ok(f())) {
        Ok(r) => r,
        Err(e) => {
            LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
            INTERNAL_ERROR
        }
    }
}

/// [`api`] for a body written with `?` on results: `Ok` is `ncclSuccess`.
fn api_try(call: &str, f: impl FnOnce() -> Result<(), NcclResult>) -> NcclResult {
    api(call, || match f() {
        Ok(()) => SUCCESS,
        Err(r) => r,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(v: *mut c_int) -> NcclResult {
    if v.is_null() {
        return fail(
            INVALID_ARGUMENT,
            "ncclGetVersion",
            Kind::InvalidValue,
            "null pointer",
        );
    }
    // SAFETY: the caller's non-null out-pointer.
    unsafe { *v = VERSION };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(r: NcclResult) -> *const c_char {
    let s: &str = match r {
        SUCCESS => "no error\0",
        UNHANDLED_CUDA_ERROR => "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\0",
        SYSTEM_ERROR => "unhandled system error (run with NCCL_DEBUG=INFO for details)\0",
        INTERNAL_ERROR => "internal error - please report this issue to the NCCL developers\0",
        INVALID_ARGUMENT => "invalid argument (run with NCCL_DEBUG=WARN for details)\0",
        INVALID_USAGE => "invalid usage (run with NCCL_DEBUG=WARN for details)\0",
        REMOTE_ERROR => "remote process exited or there was a network error\0",
        7 => "NCCL operation in progress\0",
        _ => "unknown result code\0",
    };
    s.as_ptr().cast()
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(_comm: usize) -> *const c_char {
    // A per-thread buffer that lives as long as the thread; the pointer stays valid until this
    // thread's next NCCL error, as NCCL's own does.
    thread_local! {
        static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let msg = LAST_ERROR.with(|l| l.borrow().clone());
    BUF.with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        b.extend_from_slice(msg.as_bytes());
        b.push(0);
        b.as_ptr().cast()
    })
}
