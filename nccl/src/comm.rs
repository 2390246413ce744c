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

use crate::loader::Nccl;
use crate::result::is_fatal;
use crate::sys;
use crate::types::{nccl_dtype, nccl_op};
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use xthunk_core::backend::{DevicePtr, Stream};
use xthunk_core::collectives::{Communicator, Member, ReduceOp};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// How long [`Communicator::abort`] waits for a call in progress before deferring the abort
/// to the end of that call.
const ABORT_LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long [`Communicator::async_error`] waits for the lock (a call in progress) before
/// reporting nothing new.
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

/// What every collective passes NCCL: the stream, the buffers, the count and the type.
struct Operands {
    s: sys::cudaStream_t,
    src: *mut c_void,
    dst: *mut c_void,
    n: usize,
    t: sys::ncclDataType_t,
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

impl Nccl {
    /// `ncclCommInitRank`: joins rank `rank` of `nranks` to the clique of `id` (from
    /// [`Nccl::unique_id`] on one rank, passed to all), as a blocking communicator. Every rank
    /// must call it (from its own thread or process); it returns when all have. The device
    /// must be current on the calling thread (see the [module documentation](self)).
    pub fn init_rank(
        self: &Arc<Self>,
        nranks: usize,
        id: &[u8; sys::NCCL_UNIQUE_ID_BYTES],
        rank: usize,
    ) -> Result<NcclCommunicator> {
        self.init_rank_with(nranks, id, rank, &CommOptions::default())
    }

    /// [`Nccl::init_rank`] with options: non-blocking (`ncclCommInitRankConfig` with the
    /// smallest `ncclConfig_t`, needs 2.14), a timeout, a device hook.
    pub fn init_rank_with(
        self: &Arc<Self>,
        nranks: usize,
        id: &[u8; sys::NCCL_UNIQUE_ID_BYTES],
        rank: usize,
        options: &CommOptions,
    ) -> Result<NcclCommunicator> {
        let lib = self.flavor().name();
        if nranks == 0 || rank >= nranks {
            return Err(Error::InvalidArgument(format!(
                "{lib}: rank {rank} of a clique of {nranks}"
            )));
        }
        let n = to_c_int(nranks, "clique size")?;
        let r = to_c_int(rank, "rank")?;
        let init_config = if options.nonblocking {
            match self.api.ncclCommInitRankConfig {
                Some(f) if self.supports_config() => Some(f),
                _ => {
                    return Err(Error::Unsupported {
                        backend: lib.into(),
                        feature: format!(
                            "non-blocking communicators ({} {} has no ncclCommInitRankConfig; 2.14 or later has)",
                            self.flavor(),
                            self.version()
                        ),
                    });
                }
            }
        } else {
            None
        };
        if let Some(bind) = &options.bind_device {
            bind()?;
        }
        let uid = sys::ncclUniqueId {
            internal: id.map(|b| b as c_char),
        };
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        let (call, rc) = match init_config {
            Some(f) => {
                let mut config = sys::ncclConfig_v21400::new(false);
                // SAFETY: `comm` and `config` are valid for writes/reads for the call; the id
                // is passed by value as the header declares; NCCL copies the config (at most
                // `config.size` bytes) before returning.
                let rc = unsafe { f(&mut comm, n, uid, r, &mut config) };
                ("ncclCommInitRankConfig", rc)
            }
            None => {
                // SAFETY: `comm` is valid for a write; the id is passed by value.
                let rc = unsafe { (self.api.ncclCommInitRank)(&mut comm, n, uid, r) };
                ("ncclCommInitRank", rc)
            }
        };
        if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
            if !comm.is_null() {
                // A synchronous failure frees what NCCL made; a handle it still returned is
                // not trusted (freeing it twice would be worse than leaking it).
                tracing::warn!(
                    library = lib,
                    call,
                    "a failed init returned a handle: leaked"
                );
            }
            return Err(self.error(call, rc));
        }
        if comm.is_null() {
            return Err(Error::backend(lib, call, "returned no communicator"));
        }
        let mut c = NcclCommunicator::adopt(self.clone(), comm, options.clone());
        if rc == sys::ncclInProgress {
            c.wait_ready(call)?;
        }
        c.query_shape()?;
        if c.rank != rank || c.size != nranks {
            return Err(Error::backend(
                lib,
                call,
                format!(
                    "asked for rank {rank} of {nranks}, got rank {} of {}",
                    c.rank, c.size
                ),
            ));
        }
        tracing::debug!(
            library = lib,
            rank,
            nranks,
            nonblocking = options.nonblocking,
            "communicator ready"
        );
        Ok(c)
    }
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
            if let Some(limit) = self.options.timeout {
                if start.elapsed() >= limit {
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

    fn stream(&self, stream: &dyn Stream, call: &str) -> Result<sys::cudaStream_t> {
        let h = stream.native_handle().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} {call}: the stream has no native handle (a host stream?); {} needs a {} stream",
                self.name(),
                self.lib.flavor(),
                match self.lib.flavor() {
                    crate::Flavor::Nccl => "CUDA",
                    crate::Flavor::Rccl => "HIP",
                }
            ))
        })?;
        Ok(std::ptr::with_exposed_provenance_mut(h))
    }

    fn count(&self, count: u64) -> Result<usize> {
        usize::try_from(count).map_err(|_| {
            Error::InvalidArgument(format!("element count {count} does not fit size_t"))
        })
    }

    fn peer(&self, peer: usize, what: &str) -> Result<c_int> {
        if peer >= self.size {
            return Err(Error::InvalidArgument(format!(
                "{} {what} {peer} is not a rank of this clique of {}",
                self.name(),
                self.size
            )));
        }
        to_c_int(peer, what)
    }

    fn dtype(&self, dtype: DType) -> Result<sys::ncclDataType_t> {
        nccl_dtype(dtype, self.lib.version(), self.name())
    }

    /// The stream, buffers, count and type of a collective `call`, as NCCL takes them.
    fn operands(
        &self,
        call: &str,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<Operands> {
        Ok(Operands {
            s: self.stream(stream, call)?,
            src: device_ptr(src)?,
            dst: device_ptr(dst)?,
            n: self.count(count)?,
            t: self.dtype(dtype)?,
        })
    }

    /// `ncclCommSplit` (2.18): every rank of this communicator calls it; ranks with the same
    /// `color` (a non-negative C `int`: at most 2^31 - 1, as `split_color` of
    /// `xthunk_core::collectives` makes them) form a new communicator, ordered by `key` (ties
    /// by rank). `color: None` joins none (`NCCL_SPLIT_NOCOLOR`) and returns `None`. The new
    /// communicator inherits this one's configuration (blocking or not) and options.
    pub fn split(&self, color: Option<u64>, key: usize) -> Result<Option<NcclCommunicator>> {
        const CALL: &str = "ncclCommSplit";
        let f = match self.lib.api.ncclCommSplit {
            Some(f) if self.lib.supports_split() => f,
            _ => {
                return Err(Error::Unsupported {
                    backend: self.name().into(),
                    feature: format!(
                        "communicator split ({} {} has no ncclCommSplit; 2.18 or later has)",
                        self.lib.flavor(),
                        self.lib.version()
                    ),
                });
            }
        };
        let color = match color {
            Some(c) => c_int::try_from(c).map_err(|_| {
                Error::InvalidArgument(format!("split color {c} does not fit a C int"))
            })?,
            None => sys::NCCL_SPLIT_NOCOLOR,
        };
        let key = to_c_int(key, "split key")?;
        if let Some(bind) = &self.options.bind_device {
            bind()?;
        }
        let mut newcomm: sys::ncclComm_t = std::ptr::null_mut();
        let mut inner = self.inner.lock();
        let comm = self.live(&mut inner, CALL)?;
        // SAFETY: `comm` is live and we hold its lock; `newcomm` is valid for a write; a null
        // config makes the child inherit this communicator's configuration.
        let rc = unsafe { f(comm, color, key, &mut newcomm, std::ptr::null_mut()) };
        // Owned (freed on every path below) as soon as it exists.
        let child = (!newcomm.is_null())
            .then(|| NcclCommunicator::adopt(self.lib.clone(), newcomm, self.options.clone()));
        // On a non-blocking communicator the parent is in progress too.
        self.finish(&mut inner, CALL, rc)?;
        drop(inner);
        let Some(mut child) = child else {
            return Ok(None);
        };
        if rc == sys::ncclInProgress {
            child.wait_ready(CALL)?;
        }
        child.query_shape()?;
        Ok(Some(child))
    }

    /// `ncclCommFinalize` (2.14): flushes this rank's operations and waits (non-blocking: up to
    /// the timeout) until the clique is quiescent, so that dropping the communicator then
    /// frees it without blocking. On older libraries there is nothing to do.
    pub fn finalize(&self) -> Result<()> {
        let Some(f) = self
            .lib
            .api
            .ncclCommFinalize
            .filter(|_| self.lib.supports_finalize())
        else {
            return Ok(());
        };
        // SAFETY: `comm` is live and we hold its lock for the call.
        self.call("ncclCommFinalize", |comm| unsafe { f(comm) })
    }

    /// A send or receive, shared by [`Communicator::send`], `recv` and `all_to_all`.
    fn p2p(
        &self,
        send: bool,
        stream: sys::cudaStream_t,
        buf: *mut c_void,
        count: usize,
        dtype: sys::ncclDataType_t,
        peer: c_int,
    ) -> Result<()> {
        if send {
            self.call("ncclSend", |comm| {
                // SAFETY: `comm` is live under the lock; `buf`, `stream` are the caller's
                // device buffer and stream (NCCL validates them and only queues work).
                unsafe { (self.lib.api.ncclSend)(buf, count, dtype, peer, comm, stream) }
            })
        } else {
            self.call("ncclRecv", |comm| {
                // SAFETY: as for the send.
                unsafe { (self.lib.api.ncclRecv)(buf, count, dtype, peer, comm, stream) }
            })
        }
    }
}

impl Communicator for NcclCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn describe(&self) -> String {
        let lib = format!(
            "{} {}{}",
            self.lib.flavor(),
            self.lib.version(),
            if self.is_aborted() { ", aborted" } else { "" }
        );
        match &self.clique {
            Some(c) => format!("{} ({lib})", c.member),
            None => format!("rank {} of a clique of {} ({lib})", self.rank, self.size),
        }
    }

    fn all_reduce(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "ncclAllReduce";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        let op = nccl_op(op, dtype, self.name())?;
        self.call(CALL, |comm| {
            // SAFETY: `comm` is live under the lock; the buffers and stream are the caller's
            // (device addresses checked by the backend); NCCL only queues work on the stream.
            unsafe { (self.lib.api.ncclAllReduce)(x.src, x.dst, x.n, x.t, op, comm, x.s) }
        })
    }

    fn all_gather(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        const CALL: &str = "ncclAllGather";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        self.call(CALL, |comm| {
            // SAFETY: as for `all_reduce`.
            unsafe { (self.lib.api.ncclAllGather)(x.src, x.dst, x.n, x.t, comm, x.s) }
        })
    }

    fn reduce_scatter(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "ncclReduceScatter";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        let op = nccl_op(op, dtype, self.name())?;
        self.call(CALL, |comm| {
            // SAFETY: as for `all_reduce`.
            unsafe { (self.lib.api.ncclReduceScatter)(x.src, x.dst, x.n, x.t, op, comm, x.s) }
        })
    }

    /// A group of one send and one receive per rank (self included), as nccl-tests does it.
    fn all_to_all(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        let s = self.stream(stream, "all-to-all")?;
        let n = self.count(count)?;
        let t = self.dtype(dtype)?;
        let chunk = count.checked_mul(dtype.size() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("all-to-all of {count} {dtype} overflows"))
        })?;
        // Every address first, so that nothing is issued when one is out of range.
        let mut parts = Vec::with_capacity(self.size);
        for p in 0..self.size {
            let off = chunk
                .checked_mul(p as u64)
                .ok_or_else(|| Error::InvalidArgument("all-to-all offsets overflow".into()))?;
            parts.push((
                device_ptr(src.offset(off))?,
                device_ptr(dst.offset(off))?,
                to_c_int(p, "peer")?,
            ));
        }
        self.group_start()?;
        let mut result = Ok(());
        for (sp, dp, peer) in parts {
            result = self
                .p2p(true, s, sp, n, t, peer)
                .and_then(|()| self.p2p(false, s, dp, n, t, peer));
            if result.is_err() {
                break;
            }
        }
        // The group is always closed, even after a failed call inside it.
        let end = self.group_end();
        result.and(end)
    }

    fn broadcast(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "ncclBroadcast";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        let root = self.peer(root, "root")?;
        self.call(CALL, |comm| {
            // SAFETY: as for `all_reduce`.
            unsafe { (self.lib.api.ncclBroadcast)(x.src, x.dst, x.n, x.t, root, comm, x.s) }
        })
    }

    fn send(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let s = self.stream(stream, "ncclSend")?;
        let (buf, n, t) = (device_ptr(src)?, self.count(count)?, self.dtype(dtype)?);
        self.p2p(true, s, buf, n, t, self.peer(peer, "peer")?)
    }

    fn recv(
        &self,
        stream: &dyn Stream,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let s = self.stream(stream, "ncclRecv")?;
        let (buf, n, t) = (device_ptr(dst)?, self.count(count)?, self.dtype(dtype)?);
        self.p2p(false, s, buf, n, t, self.peer(peer, "peer")?)
    }

    fn group_start(&self) -> Result<()> {
        if self.is_aborted() {
            return Err(self.aborted_error("ncclGroupStart"));
        }
        self.lib.group_start()
    }

    fn group_end(&self) -> Result<()> {
        const CALL: &str = "ncclGroupEnd";
        // The group is closed even on an aborted communicator (NCCL's group depth is per
        // thread); its outcome is then the abort.
        let done = self.lib.group_end();
        let mut inner = self.inner.lock();
        let comm_ok = self.live(&mut inner, CALL);
        match (done, comm_ok) {
            (Err(e), _) => {
                inner.failed = true;
                Err(e)
            }
            (Ok(_), Err(e)) => Err(e),
            (Ok(true), Ok(_)) => Ok(()),
            (Ok(false), Ok(_)) => self.finish(&mut inner, CALL, sys::ncclInProgress),
        }
    }

    /// `ncclCommGetAsyncError`: `ncclInProgress` (a non-blocking call still running) is not an
    /// error. While another thread is inside a blocking call on this communicator, nothing new
    /// can be read; that reads as no error (the watchdog's deadline still applies).
    fn async_error(&self) -> Result<()> {
        const CALL: &str = "ncclCommGetAsyncError";
        let Some(mut inner) = self.inner.try_lock_for(POLL_LOCK_WAIT) else {
            return Ok(());
        };
        let comm = self.live(&mut inner, CALL)?;
        let mut state: sys::ncclResult_t = sys::ncclSuccess;
        // SAFETY: `comm` is live under the lock; writes one result.
        let rc = unsafe { (self.lib.api.ncclCommGetAsyncError)(comm, &mut state) };
        self.lib.check(CALL, rc)?;
        match state {
            sys::ncclSuccess | sys::ncclInProgress => Ok(()),
            e => {
                inner.failed = true;
                Err(self.lib.error("asynchronous error", e))
            }
        }
    }

    /// Aborts the communicator (`ncclCommAbort`) and, for a provider's, fails its clique's
    /// rendezvous, so that peers waiting there (a split in progress) fail at once.
    fn abort(&self, reason: &str) {
        if let Some(c) = &self.clique {
            c.meeting.poison(&format!(
                "{} aborted by rank {}: {reason}",
                c.member.key(),
                c.member.global_rank()
            ));
        }
        {
            let mut r = self.abort_reason.lock();
            if r.is_none() {
                *r = Some(reason.to_string());
            }
        }
        self.abort_requested.store(true, Ordering::SeqCst);
        match self.inner.try_lock_for(ABORT_LOCK_WAIT) {
            Some(mut inner) => self.abort_now(&mut inner),
            None => tracing::warn!(
                library = self.name(),
                rank = self.rank,
                %reason,
                "a call is inside the library on this communicator: it is aborted when that call returns"
            ),
        }
    }

    fn pending(&self) -> Option<String> {
        self.clique
            .as_ref()
            .and_then(|c| c.meeting.describe_pending())
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
