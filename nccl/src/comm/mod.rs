//! [`NcclCommunicator`]: one rank's `ncclComm_t`, as an xthunk [`Communicator`].
//!
//! **Threads.** NCCL allows one thread at a time on a communicator, so every call on it is
//! made under the communicator's lock. Groups (`ncclGroupStart`/`End`) are per thread in NCCL:
//! the calls of one group must all come from one thread (the executor issues a clique's
//! operations in program order from the thread that drives the device).
//!
//! **Abort.** [`Communicator::abort`] may be called from any thread (the hang watchdog): it
//! marks the communicator aborted, then calls `ncclCommAbort` as soon as it holds the lock. A
//! call that is inside the library (only possible on a blocking communicator: its init, or a
//! group end that connects peers) keeps the lock; the abort then happens when that call
//! returns, never under it, so no call ever uses a freed communicator. Non-blocking
//! communicators ([`CommOptions::nonblocking`]) never stay inside the library: a call returns
//! at once and completion is polled with `ncclCommGetAsyncError`, which also notices an abort
//! request, so an abort is immediate; use them where peers can die.
//!
//! **Devices.** `ncclCommInitRank` binds the communicator to the device current on the
//! calling thread (the CUDA runtime's current device, i.e. the current context's device; the
//! HIP runtime's on ROCm). The backend must make its device current on that thread first,
//! directly or through [`CommOptions::bind_device`], which is called right before the init
//! (and before a split). Later calls need nothing current: NCCL switches to the
//! communicator's device itself. Operations are queued on the stream given to each call
//! ([`Stream::native_handle`]: the `CUstream`/`hipStream_t`), which must belong to that device.
//!
//! The module's files: this one holds the communicator and its lock, abort and wait protocol;
//! `init.rs` makes communicators (init, split, finalize); `ops.rs` issues the operations;
//! `register.rs` registers collective memory (windows, user buffers).
//!
//! [`Communicator`]: xthunk_core::collectives::Communicator
//! [`Communicator::abort`]: xthunk_core::collectives::Communicator::abort
//! [`Communicator::async_error`]: xthunk_core::collectives::Communicator::async_error
//! [`Stream::native_handle`]: xthunk_core::backend::Stream::native_handle

mod init;
mod ops;
mod register;

pub use register::NcclRegistration;

use crate::loader::Nccl;
use crate::result::is_fatal;
use crate::sys;
use parking_lot::Mutex;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use xthunk_core::backend::DevicePtr;
use xthunk_core::collectives::Member;
use xthunk_core::{Error, Result};

/// How long [`Communicator::abort`] waits for a call in progress before deferring the abort
/// to the end of that call.
///
/// [`Communicator::abort`]: xthunk_core::collectives::Communicator::abort
const ABORT_LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long [`Communicator::async_error`] waits for the lock (a call in progress) before
/// reporting nothing new.
///
/// [`Communicator::async_error`]: xthunk_core::collectives::Communicator::async_error
const POLL_LOCK_WAIT: Duration = Duration::from_millis(100);

/// A hook that makes the communicator's device current on the calling thread.
pub type BindDevice = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// How a communicator is made.
#[derive(Clone, Default)]
pub struct CommOptions {
    /// A non-blocking communicator (`ncclConfig_t.blocking = 0`; needs NCCL/RCCL 2.14): every
    /// call returns at once and is waited on by polling `ncclCommGetAsyncError`, so no thread
    /// is ever held inside the library by a dead peer and aborts are immediate. Default:
    /// blocking (`ncclCommInitRank`, any supported version).
    pub nonblocking: bool,
    /// How long a non-blocking communicator waits for one call to complete (its init, a
    /// group end, a split, a finalize) before aborting it and failing with
    /// `DeadlineExceeded`. `None`: no limit. Blocking calls cannot be timed out.
    pub timeout: Option<Duration>,
    /// Called on the calling thread right before `ncclCommInitRank[Config]` and
    /// `ncclCommSplit`: make the communicator's device current there.
    pub bind_device: Option<BindDevice>,
}

impl fmt::Debug for CommOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommOptions")
            .field("nonblocking", &self.nonblocking)
            .field("timeout", &self.timeout)
            .field("bind_device", &self.bind_device.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

impl CommOptions {
    /// Non-blocking, with `timeout` per call.
    pub fn nonblocking(timeout: Option<Duration>) -> Self {
        CommOptions {
            nonblocking: true,
            timeout,
            bind_device: None,
        }
    }

    /// With this device hook.
    pub fn with_bind_device(mut self, f: impl Fn() -> Result<()> + Send + Sync + 'static) -> Self {
        self.bind_device = Some(Arc::new(f));
        self
    }
}

/// The communicator handle and what is known about it; only touched under the lock.
struct Inner {
    /// Null once aborted or destroyed.
    comm: sys::ncclComm_t,
    /// A call failed fatally: the communicator is aborted, not destroyed, when dropped.
    failed: bool,
}

// SAFETY: `ncclComm_t` is a pointer to NCCL's communicator, which NCCL allows any thread to
// use as long as one thread at a time does; `Inner` is only reached through the
// communicator's mutex, which provides exactly that.
unsafe impl Send for Inner {}

/// One rank's NCCL/RCCL communicator. Dropping it destroys the communicator
/// (`ncclCommDestroy`), or aborts it (`ncclCommAbort`) when a call failed or an asynchronous
/// error is pending; after [`Communicator::abort`] there is nothing left to free.
///
/// [`Communicator::abort`]: xthunk_core::collectives::Communicator::abort
pub struct NcclCommunicator {
    lib: Arc<Nccl>,
    rank: usize,
    size: usize,
    options: CommOptions,
    inner: Mutex<Inner>,
    abort_requested: AtomicBool,
    abort_reason: Mutex<Option<String>>,
    /// The clique a provider made this communicator for, if one did.
    clique: Option<Clique>,
}

/// The clique a provider made a communicator for: this rank's place in it (named in messages)
/// and the rendezvous its ranks meet in (an abort fails the ranks waiting there too).
struct Clique {
    member: Member,
    meeting: Arc<dyn Meeting>,
}

/// What a communicator needs of its provider's rendezvous.
pub(crate) trait Meeting: Send + Sync {
    /// Fails every rank waiting in it, and every later arrival, with `message`.
    fn poison(&self, message: &str);
    /// What its ranks wait on, if anything.
    fn describe_pending(&self) -> Option<String>;
}

impl fmt::Debug for NcclCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclCommunicator")
            .field("library", &self.lib.flavor())
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("nonblocking", &self.options.nonblocking)
            .field("aborted", &self.is_aborted())
            .field("clique", &self.clique.as_ref().map(|c| &c.member))
            .finish()
    }
}

/// `usize` as a C `int`, or an invalid-argument error naming `what`.
fn to_c_int(v: usize, what: &str) -> Result<c_int> {
    c_int::try_from(v)
        .map_err(|_| Error::InvalidArgument(format!("{what} {v} does not fit a C int")))
}

/// A device address as the pointer NCCL takes.
fn device_ptr(p: DevicePtr) -> Result<*mut c_void> {
    let addr = usize::try_from(p.0).map_err(|_| {
        Error::InvalidArgument(format!("device address {p} does not fit a pointer"))
    })?;
    Ok(std::ptr::with_exposed_provenance_mut(addr))
}
impl NcclCommunicator {
    /// Takes ownership of `comm` (rank and size are filled in by [`Self::query_shape`]).
    fn adopt(lib: Arc<Nccl>, comm: sys::ncclComm_t, options: CommOptions) -> Self {
        NcclCommunicator {
            lib,
            rank: 0,
            size: 0,
            options,
            inner: Mutex::new(Inner {
                comm,
                failed: false,
            }),
            abort_requested: AtomicBool::new(false),
            abort_reason: Mutex::new(None),
            clique: None,
        }
    }

    /// This communicator as `member` of a provider's clique whose ranks meet in `meeting`.
    pub(crate) fn in_clique(mut self, member: Member, meeting: Arc<dyn Meeting>) -> Self {
        self.clique = Some(Clique { member, meeting });
        self
    }

    /// This rank's place in the clique a provider made this communicator for, if one did.
    pub fn member(&self) -> Option<&Member> {
        self.clique.as_ref().map(|c| &c.member)
    }

    /// The library this communicator belongs to.
    pub fn library(&self) -> &Arc<Nccl> {
        &self.lib
    }

    /// Whether the communicator was aborted (or an abort is pending).
    pub fn is_aborted(&self) -> bool {
        self.abort_requested.load(Ordering::SeqCst)
    }

    /// Whether it was made non-blocking.
    pub fn is_nonblocking(&self) -> bool {
        self.options.nonblocking
    }

    fn name(&self) -> &'static str {
        self.lib.flavor().name()
    }

    fn aborted_error(&self, call: &str) -> Error {
        let reason = self
            .abort_reason
            .lock()
            .clone()
            .unwrap_or_else(|| "no reason given".into());
        Error::backend(
            self.name(),
            call,
            format!("the communicator was aborted: {reason}"),
        )
    }

    /// The live handle, or the error saying why there is none (aborting first when an abort
    /// was requested while another call held the lock).
    fn live(&self, inner: &mut Inner, call: &str) -> Result<sys::ncclComm_t> {
        if self.abort_requested.load(Ordering::SeqCst) {
            self.abort_now(inner);
        }
        if inner.comm.is_null() {
            return Err(self.aborted_error(call));
        }
        Ok(inner.comm)
    }

    /// `ncclCommAbort`, once; under the lock.
    fn abort_now(&self, inner: &mut Inner) {
        if inner.comm.is_null() {
            return;
        }
        let comm = std::mem::replace(&mut inner.comm, std::ptr::null_mut());
        // SAFETY: `comm` is a live communicator owned by this object (taken out of it just
        // above, so nothing uses it again); we hold the lock, so no other call is using it.
        let rc = unsafe { (self.lib.api.ncclCommAbort)(comm) };
        let reason = self.abort_reason.lock().clone().unwrap_or_default();
        tracing::warn!(library = self.name(), rank = self.rank, size = self.size, %reason, "communicator aborted");
        if rc != sys::ncclSuccess {
            tracing::error!(error = %self.lib.error("ncclCommAbort", rc), "abort failed");
        }
    }

    /// The outcome of `call` returning `rc`: waits when it is in progress, records fatal
    /// errors, and honours an abort requested meanwhile.
    fn finish(&self, inner: &mut Inner, call: &str, rc: sys::ncclResult_t) -> Result<()> {
        match rc {
            sys::ncclSuccess => {}
            sys::ncclInProgress => self.wait_locked(inner, call)?,
            rc => {
                inner.failed |= is_fatal(rc);
                return Err(self.lib.error(call, rc));
            }
        }
        if self.abort_requested.load(Ordering::SeqCst) {
            self.abort_now(inner);
            return Err(self.aborted_error(call));
        }
        Ok(())
    }

    /// Runs `f` on the live handle under the lock, then [`Self::finish`].
    fn call(&self, call: &str, f: impl FnOnce(sys::ncclComm_t) -> sys::ncclResult_t) -> Result<()> {
        let mut inner = self.inner.lock();
        let comm = self.live(&mut inner, call)?;
        let rc = f(comm);
        self.finish(&mut inner, call, rc)
    }

    /// Waits (exclusive access) until the communicator is no longer in progress.
    fn wait_ready(&mut self, call: &str) -> Result<()> {
        let mut guard = self.inner.lock();
        let inner: &mut Inner = &mut guard;
        self.wait_locked(inner, call)
    }

    /// Polls `ncclCommGetAsyncError` until the communicator is ready (`ncclSuccess`), failed,
    /// aborted, or past the timeout (then it is aborted).
    fn wait_locked(&self, inner: &mut Inner, call: &str) -> Result<()> {
        let start = Instant::now();
        let mut spins: u32 = 0;
        loop {
            let comm = self.live(inner, call)?;
            let mut state: sys::ncclResult_t = sys::ncclInProgress;
            // SAFETY: `comm` is live (checked under the lock we hold); writes one result.
            let rc = unsafe { (self.lib.api.ncclCommGetAsyncError)(comm, &mut state) };
            if rc != sys::ncclSuccess {
                inner.failed = true;
                return Err(self.lib.error("ncclCommGetAsyncError", rc));
            }
            match state {
                sys::ncclSuccess => return Ok(()),
                sys::ncclInProgress => {}
                e => {
                    inner.failed = true;
                    return Err(self.lib.error(call, e));
                }
            }
            if let Some(limit) = self.options.timeout
                && start.elapsed() >= limit
            {
                {
                    let mut r = self.abort_reason.lock();
                    if r.is_none() {
                        *r = Some(format!("{call} did not complete within {limit:?}"));
                    }
                }
                self.abort_requested.store(true, Ordering::SeqCst);
                self.abort_now(inner);
                return Err(Error::DeadlineExceeded {
                    deadline: limit,
                    pending: format!(
                        "{call} on {} rank {} of {} (the communicator was aborted)",
                        self.lib.flavor(),
                        self.rank,
                        self.size
                    ),
                });
            }
            // Spin briefly (most calls finish within microseconds), then back off to 1 ms.
            spins = spins.saturating_add(1);
            if spins < 64 {
                std::thread::yield_now();
            } else {
                let us = 1u64 << (spins - 64).min(10);
                std::thread::sleep(Duration::from_micros(us.min(1000)));
            }
        }
    }

    /// Reads rank and size from the library (`ncclCommUserRank`, `ncclCommCount`).
    fn query_shape(&mut self) -> Result<()> {
        let (mut rank, mut count): (c_int, c_int) = (-1, -1);
        {
            let inner = self.inner.get_mut();
            let comm = inner.comm;
            if comm.is_null() {
                return Err(self.aborted_error("ncclCommUserRank"));
            }
            // SAFETY: `comm` is live and exclusively ours (`&mut self`); writes one int.
            let rc = unsafe { (self.lib.api.ncclCommUserRank)(comm, &mut rank) };
            self.lib.check("ncclCommUserRank", rc)?;
            // SAFETY: as above.
            let rc = unsafe { (self.lib.api.ncclCommCount)(comm, &mut count) };
            self.lib.check("ncclCommCount", rc)?;
        }
        match (usize::try_from(rank), usize::try_from(count)) {
            (Ok(r), Ok(n)) if r < n => {
                self.rank = r;
                self.size = n;
                Ok(())
            }
            _ => Err(Error::backend(
                self.name(),
                "ncclCommUserRank",
                format!("reported rank {rank} of {count}"),
            )),
        }
    }
}

impl Drop for NcclCommunicator {
    fn drop(&mut self) {
        let abort = self.abort_requested.load(Ordering::SeqCst);
        let inner = self.inner.get_mut();
        let comm = std::mem::replace(&mut inner.comm, std::ptr::null_mut());
        if comm.is_null() {
            return;
        }
        let mut failed = inner.failed || abort;
        if !failed {
            let mut state: sys::ncclResult_t = sys::ncclSuccess;
            // SAFETY: `comm` is live and exclusively ours (`&mut self`); writes one result.
            let rc = unsafe { (self.lib.api.ncclCommGetAsyncError)(comm, &mut state) };
            failed = rc != sys::ncclSuccess || is_fatal(state);
        }
        let (call, rc) = if failed {
            // SAFETY: as above; the handle is not used again.
            ("ncclCommAbort", unsafe {
                (self.lib.api.ncclCommAbort)(comm)
            })
        } else {
            // SAFETY: as above; the handle is not used again.
            ("ncclCommDestroy", unsafe {
                (self.lib.api.ncclCommDestroy)(comm)
            })
        };
        if rc != sys::ncclSuccess {
            tracing::error!(error = %self.lib.error(call, rc), "freeing a communicator failed");
        }
    }
}
