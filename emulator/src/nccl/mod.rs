//! NCCL / RCCL (`libnccl.so.2`, `librccl.so.1`: one ABI) among the emulated devices of one
//! process or of several processes, from NCCL 2.32's `nccl.h`.
//!
//! - `ncclGetUniqueId` makes a fresh id; `ncclCommInitRank[Config]` from every rank (one thread
//!   each, or one thread inside `ncclGroupStart/End`) rendezvous on it; `ncclCommInitAll`
//!   makes a whole clique at once; `ncclCommInitRankScalable` (several roots' ids) is counted
//!   and joins on its first id. A rank's device is the current CUDA context's device if the
//!   thread has one, else the current HIP device.
//! - **Non-blocking communicators** (`ncclConfig_t.blocking = 0`): the init returns at once with
//!   the handle, `ncclInProgress` while ranks are missing; `ncclCommGetAsyncError` reports
//!   `ncclInProgress` until the clique is ready (`ncclSuccess`) or failed (its error), and any
//!   other use before then is `ncclInvalidArgument`, as NCCL's `ncclCommEnsureReady` makes it.
//!   `ncclGroupEnd` returns `ncclInProgress` for non-blocking inits still forming, and
//!   `ncclCommFinalize` flushes in the background (`ncclInProgress` until done).
//!   `ncclCommAbort` from another thread ends an init or an operation that waits.
//! - Collectives (`AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Reduce`) and
//!   `Send`/`Recv` are stream operations. The n-th operation of every rank meets in a *slot*;
//!   when a rank's stream runs its part, it releases the other ranks' streams up to theirs (so
//!   lazy streams cannot deadlock) and whoever completes the slot moves all the data at once
//!   (reading every input before writing any output, so in-place calls are right), after
//!   checking that the ranks agree (collective, count, type, operator, root; a send and its
//!   receive of one size). Operations inside a group are queued as one stream operation per
//!   stream that arrives at all its slots before waiting, so grouped sends and receives cannot
//!   deadlock.
//! - A rank that waits longer than 60 s (`XTHUNK_EMU_NCCL_TIMEOUT` seconds) fails the
//!   operation: its stream gets the error and `ncclCommGetAsyncError` reports
//!   `ncclSystemError`; `ncclCommAbort` wakes every waiter with an error. Every failed
//!   operation is a diagnostic naming the call, its position, its clique and the ranks, with
//!   why (a mismatch, a memory error, a timeout with what it waited for, an abort, a peer
//!   process gone).
//!
//! **Across processes.** Ranks of one clique may live in several processes, each loading the
//! emulator (e.g. 2 processes × 2 devices = 4 ranks): the process of rank 0 makes the id, the
//! program passes its 128 bytes to the others, and each process initializes its own ranks.
//! A clique whose ranks are all in one process stays in the process (no sockets, no files).
//! Otherwise (files `net`, `wire`, `remote`):
//!
//! - *Rendezvous*: in `temp_dir()/xthunk-emu-nccl-<hash of the id>/` (mode 0700), each process
//!   binds a Unix socket named by its pid, connects to the others' (one outgoing connection
//!   per peer process; a reader thread per incoming one) and announces its ranks (`Join`). A
//!   process that did not make the id starts this at once; the maker (which cannot know
//!   whether others will join) watches for the folder while its ranks wait. The clique is
//!   ready when every rank is held by exactly one process and every peer is connected; each
//!   process then unlinks its socket and the last one removes the folder, before the init
//!   returns. Disagreements (clique size, a rank held twice) fail the init on every side.
//! - *Operations*: when a local rank's stream reaches a collective, its metadata goes to every
//!   other process, with its input to those that need it (for a broadcast only the root's,
//!   for a reduce only to the root's process); every process performs the slot from the same
//!   parts in rank order, writing only its ranks' outputs, so results and mismatch reports are
//!   the same everywhere. A send to another process carries its input; the receiver's process
//!   performs the message and answers `Done` (or the failure), which completes the send.
//!   `ncclCommSplit` exchanges (color, key) and forms each color across processes from an id
//!   derived from the parent's (the same in every process).
//! - *Failures*: a peer process that is killed, crashes or aborts (its connection ends
//!   without `Leave`) fails at once every waiting operation that needs one of its ranks, with
//!   `ncclRemoteError`, and the clique's communicators report `ncclRemoteError` (a message
//!   names the process and its ranks). `ncclCommAbort` tells the peers (`Abort`) and closes the
//!   connections; destroying the last local communicator, or exiting normally, sends `Leave`
//!   (operations still waiting for that process fail, nothing else does). A stopped peer
//!   (SIGSTOP) makes waiters time out, unless `ncclCommAbort` wakes them first.
//! - *Limits*: one host (Unix sockets in the temporary folder: set `TMPDIR` the same in every
//!   process, short enough for a socket path); the processes run as one user; a message's
//!   input is at most `XTHUNK_EMU_MEMORY` bytes; no collectives in stream capture.
//!
//! Files, from the bottom up: `types` (what an operation, its parts and its slot are; why it
//! failed; where an initialization stands), `reduce` (element types and reduction), `wire` (the
//! messages between processes), `link` (the rendezvous folder, which process made an id, a
//! connection's writing), `net` (the processes of a clique and their connections; it reaches
//! its clique through the `Owner` trait), `comm` (cliques, communicators, split rounds, the
//! cliques being formed, settling an initialization, destruction, abort, queries), `deferred`
//! (what an open group holds), `perform` (checking the parts and moving the data), `remote`
//! (what the messages do to slots), `slot` (where the ranks' parts of one operation meet),
//! `init` (unique ids, initialization, blocking or not), `split` (`ncclCommSplit`), `group`
//! (`ncclGroupStart/End`), `collectives` (the collective calls), `p2p` (`ncclSend` /
//! `ncclRecv`), `symmetric` (`ncclMemAlloc`, user-buffer and window registration, their
//! counters and the version modes' refusals), `owner` (`Owner` for the clique: hands the messages to `remote` and `split`).
//! No module names one above it.

#![allow(non_snake_case, clippy::too_many_arguments)]

mod collectives;
mod comm;
mod deferred;
mod group;
mod init;
mod link;
mod net;
mod owner;
mod p2p;
mod perform;
mod reduce;
mod remote;
mod slot;
mod split;
mod symmetric;
mod types;
mod wire;

pub use collectives::*;
pub use comm::*;
pub use group::*;
pub use init::*;
pub use link::{id_hash, rendezvous_dir};
pub use p2p::*;
pub use split::*;
pub use symmetric::*;

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
pub const IN_PROGRESS: NcclResult = 7;

/// NCCL 2.32.3 (`NCCL_VERSION_CODE`).
pub const VERSION: c_int = 23203;
/// What `XTHUNK_EMU_NCCL_MODE=old` reports: NCCL 2.18.6, before `ncclMemAlloc` (2.19).
pub const OLD_VERSION: c_int = 21806;
/// What `XTHUNK_EMU_NCCL_MODE=rccl-no-windows` reports: 2.27.5, whose windows are empty.
pub const NO_WINDOWS_VERSION: c_int = 22705;

/// The version the library reports in its current mode.
pub fn version() -> c_int {
    match crate::config::get().nccl_mode {
        crate::config::NcclMode::Current => VERSION,
        crate::config::NcclMode::Old => OLD_VERSION,
        crate::config::NcclMode::RcclNoWindows => NO_WINDOWS_VERSION,
    }
}

/// How long a rank waits for the other ranks (`XTHUNK_EMU_NCCL_TIMEOUT` seconds, 60 by default).
fn timeout() -> Duration {
    Duration::from_secs(crate::config::get().nccl_timeout.max(1))
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
    unsafe { *v = version() };
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
        IN_PROGRESS => "NCCL operation in progress\0",
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
