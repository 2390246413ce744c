//! Cliques and communicators: their state (split rounds, the cliques being formed in this
//! process), settling a clique's initialization, destruction, finalize, abort, asynchronous
//! errors and queries.

use super::link::{id_hash, made_here};
use super::net::Net;
use super::types::{Failure, Init, OpKind, Slot, SlotKey, rank_at, slot_size};
use super::{
    IN_PROGRESS, INVALID_ARGUMENT, LAST_ERROR, NcclResult, REMOTE_ERROR, SUCCESS, api, fail,
};
use crate::context::{self, Ctx};
use crate::diag::Kind;
use crate::handles::{HandleKind, Table};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

pub static COMMS: Table<Comm> = Table::new(HandleKind::Comm);

/// State shared by every rank of a communicator (in this process).
pub struct Clique {
    pub(super) id: u64,
    pub(super) nranks: usize,
    /// The unique id it was made from (`ncclCommInitAll` and local splits have none).
    pub(super) uid: Option<[u8; 128]>,
    /// Whether `uid` was made by this process (it then looks for the rendezvous folder while
    /// ranks are missing, rather than making it).
    pub(super) made_here: bool,
    pub(super) slots: Mutex<HashMap<SlotKey, Slot>>,
    pub(super) cv: Condvar,
    pub(super) aborted: AtomicBool,
    pub(super) init: Mutex<Init>,
    pub(super) init_cv: Condvar,
    /// `ncclCommSplit` rounds: per round, each rank's (color, key, context), then the new
    /// handles (0 for `NCCL_SPLIT_NOCOLOR` and for ranks in other processes).
    pub(super) splits: Mutex<HashMap<u64, SplitRound>>,
    pub(super) split_cv: Condvar,
    /// The connections to the other processes, when the clique spans processes.
    pub(super) net: OnceLock<Arc<Net>>,
    /// Why the clique is broken (a peer process died): every communicator reports
    /// `ncclRemoteError`.
    pub(super) remote_error: Mutex<Option<String>>,
    /// Live communicator handles of this process.
    pub(super) live: AtomicUsize,
}

/// A local rank's context and whether its new communicator blocks.
pub(super) type Local = (Arc<Ctx>, bool);
/// A rank's new handle (0 for no color and for ranks in other processes), with its new
/// clique and rank.
pub(super) type NewComm = (usize, Option<(Arc<Clique>, usize)>);

#[derive(Default)]
pub(super) struct SplitRound {
    /// Per rank: (color, key, the context when the rank is in this process).
    pub(super) entries: Vec<Option<(c_int, c_int, Option<Local>)>>,
    /// Per rank: its new communicator.
    pub(super) result: Option<Vec<NewComm>>,
    pub(super) failed: Option<Failure>,
    pub(super) taken: usize,
}

/// A clique being formed in this process: who joined it here.
pub(super) struct Pending {
    pub(super) nranks: usize,
    pub(super) clique: Arc<Clique>,
    pub(super) joined: Vec<bool>,
}

pub(super) static PENDING: Mutex<Option<HashMap<[u8; 128], Pending>>> = Mutex::new(None);

/// The clique's initialization is over (`Ok`: every rank joined): its waiters wake. A failure
/// is told to the other processes.
pub(super) fn settle(cl: &Clique, r: Result<(), Failure>) {
    {
        let mut st = cl.init.lock();
        if !matches!(*st, Init::Forming) {
            return;
        }
        *st = match &r {
            Ok(()) => Init::Ready,
            Err(f) => Init::Failed(f.clone()),
        };
        cl.init_cv.notify_all();
    }
    if let Some(uid) = cl.uid {
        let mut g = PENDING.lock();
        if let Some(map) = g.as_mut()
            && map.get(&uid).is_some_and(|p| std::ptr::eq(&*p.clique, cl))
        {
            map.remove(&uid);
        }
    }
    if let (Err(f), Some(net)) = (&r, cl.net()) {
        net.abort(&f.msg);
    }
}

pub(super) static NEXT_CLIQUE: AtomicU64 = AtomicU64::new(1);

pub(super) fn new_clique(nranks: usize, uid: Option<[u8; 128]>, ready: bool) -> Arc<Clique> {
    Arc::new(Clique {
        id: NEXT_CLIQUE.fetch_add(1, Ordering::SeqCst),
        nranks,
        made_here: uid.is_some_and(|u| made_here(&u)),
        uid,
        slots: Mutex::new(HashMap::new()),
        cv: Condvar::new(),
        aborted: AtomicBool::new(false),
        init: Mutex::new(if ready { Init::Ready } else { Init::Forming }),
        init_cv: Condvar::new(),
        splits: Mutex::new(HashMap::new()),
        split_cv: Condvar::new(),
        net: OnceLock::new(),
        remote_error: Mutex::new(None),
        live: AtomicUsize::new(0),
    })
}

impl Clique {
    pub(super) fn net(&self) -> Option<&Arc<Net>> {
        self.net.get()
    }

    /// The clique's name in messages: a clique that spans processes is named by its unique
    /// id's hash, the same in every process.
    pub(super) fn label(&self) -> String {
        match (self.net(), &self.uid) {
            (Some(_), Some(u)) => format!("clique {} ({} ranks)", &id_hash(u)[..12], self.nranks),
            _ => format!("clique {} ({} ranks)", self.id, self.nranks),
        }
    }

    /// How many places of slot `key` are this process's.
    pub(super) fn local_places(&self, key: SlotKey) -> usize {
        let n = slot_size(key, self.nranks);
        match self.net() {
            None => n,
            Some(net) => (0..n).filter(|p| net.is_local(rank_at(key, *p))).count(),
        }
    }

    pub(super) fn init_state(&self) -> Init {
        self.init.lock().clone()
    }

    pub(super) fn is_forming(&self) -> bool {
        matches!(*self.init.lock(), Init::Forming)
    }

    pub(super) fn init_failed(&self) -> bool {
        matches!(*self.init.lock(), Init::Failed(_))
    }
}

impl Drop for Clique {
    fn drop(&mut self) {
        if let Some(n) = self.net.get() {
            n.leave();
        }
    }
}

/// One rank's communicator.
pub struct Comm {
    pub(super) clique: Arc<Clique>,
    pub(super) rank: usize,
    pub(super) ctx: Arc<Ctx>,
    /// `ncclConfig_t.blocking` (splits inherit it).
    pub(super) blocking: bool,
    pub(super) next_coll: AtomicU64,
    pub(super) next_split: AtomicU64,
    pub(super) next_send: Mutex<HashMap<usize, u64>>,
    pub(super) next_recv: Mutex<HashMap<usize, u64>>,
    /// The first failure of an operation (its result code and message).
    pub(super) async_error: Mutex<Option<(NcclResult, String)>>,
    /// A non-blocking `ncclCommFinalize` is flushing the rank's work.
    pub(super) finalizing: Arc<AtomicBool>,
}

/// The calling thread's current device context: CUDA's current context, else HIP's device.
pub(super) fn current_ctx(call: &str) -> Option<Arc<Ctx>> {
    if context::current_handle() != 0
        && let Ok(c) = context::current(call)
    {
        return Some(c);
    }
    context::hip_ctx(call).ok()
}

pub(super) fn new_comm(clique: &Arc<Clique>, rank: usize, ctx: Arc<Ctx>, blocking: bool) -> usize {
    clique.live.fetch_add(1, Ordering::SeqCst);
    COMMS.insert(Arc::new(Comm {
        clique: clique.clone(),
        rank,
        ctx,
        blocking,
        next_coll: AtomicU64::new(0),
        next_split: AtomicU64::new(0),
        next_send: Mutex::new(HashMap::new()),
        next_recv: Mutex::new(HashMap::new()),
        async_error: Mutex::new(None),
        finalizing: Arc::new(AtomicBool::new(false)),
    }))
}

pub(super) fn comm_of(h: usize, call: &str) -> Result<Arc<Comm>, NcclResult> {
    COMMS.get(h, call).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        INVALID_ARGUMENT
    })
}

/// A communicator whose initialization has completed (NCCL's `ncclCommEnsureReady`): one
/// still in progress is an invalid argument, one whose initialization failed keeps failing.
pub(super) fn ready_comm(h: usize, call: &str) -> Result<Arc<Comm>, NcclResult> {
    let c = comm_of(h, call)?;
    match c.clique.init_state() {
        Init::Ready => Ok(c),
        Init::Forming => Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidState,
            format!(
                "rank {} of {}: attempt to use the communicator before its initialization returned ncclSuccess",
                c.rank,
                c.clique.label()
            ),
        )),
        Init::Failed(f) => Err(fail(
            f.code,
            call,
            Kind::InvalidState,
            format!(
                "rank {}: the communicator's initialization failed: {}",
                c.rank, f.msg
            ),
        )),
    }
}

/// A name for an operation in messages: the call, its position and the clique.
pub(super) fn describe(cl: &Clique, key: SlotKey, kind: OpKind) -> String {
    match key {
        SlotKey::Coll(n) => format!("{} #{} of {}", kind.name(), n + 1, cl.label()),
        SlotKey::P2p(s, r, n) => {
            format!("message #{n} from rank {s} to rank {r} of {}", cl.label())
        }
    }
}

/// Wakes everything waiting on the clique, with an error.
pub(super) fn abort_clique(c: &Clique, reason: &str) {
    c.aborted.store(true, Ordering::SeqCst);
    {
        let _g = c.slots.lock();
        c.cv.notify_all();
    }
    {
        let _g = c.splits.lock();
        c.split_cv.notify_all();
    }
    if c.is_forming() {
        settle(
            c,
            Err(Failure {
                code: REMOTE_ERROR,
                msg: format!("{}: {reason}", c.label()),
            }),
        );
    }
    if let Some(n) = c.net() {
        n.abort(reason);
    }
}

/// A handle of `c` was freed: the last one of this process leaves the other processes.
pub(super) fn released(c: &Comm) {
    let cl = &c.clique;
    if cl.live.fetch_sub(1, Ordering::SeqCst) == 1 {
        if cl.is_forming() {
            abort_clique(cl, "every communicator was destroyed during initialization");
        } else if let Some(n) = cl.net() {
            n.leave();
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: usize) -> NcclResult {
    const C: &str = "ncclCommDestroy";
    api(C, || match COMMS.remove(comm, C) {
        Ok(c) => {
            released(&c);
            SUCCESS
        }
        Err(e) => fail(INVALID_ARGUMENT, C, Kind::InvalidHandle, e.message),
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommFinalize(comm: usize) -> NcclResult {
    const C: &str = "ncclCommFinalize";
    api(C, || match comm_of(comm, C) {
        // A non-blocking communicator flushes on a thread; `ncclCommGetAsyncError` reports
        // `ncclInProgress` until it is done.
        Ok(c) if !c.blocking => {
            let ctx = c.ctx.clone();
            let flag = c.finalizing.clone();
            flag.store(true, Ordering::SeqCst);
            let spawned = std::thread::Builder::new()
                .name("xthunk-emu-nccl-finalize".into())
                .spawn(move || {
                    let _ = ctx.synchronize();
                    flag.store(false, Ordering::SeqCst);
                });
            if spawned.is_err() {
                let _ = c.ctx.synchronize();
                c.finalizing.store(false, Ordering::SeqCst);
                return SUCCESS;
            }
            IN_PROGRESS
        }
        Ok(c) => {
            let _ = c.ctx.synchronize();
            SUCCESS
        }
        Err(r) => r,
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommAbort(comm: usize) -> NcclResult {
    const C: &str = "ncclCommAbort";
    api(C, || match COMMS.remove(comm, C) {
        Ok(c) => {
            let reason = format!(
                "rank {} was aborted (ncclCommAbort in process {})",
                c.rank,
                std::process::id()
            );
            abort_clique(&c.clique, &reason);
            c.clique.live.fetch_sub(1, Ordering::SeqCst);
            SUCCESS
        }
        Err(e) => fail(INVALID_ARGUMENT, C, Kind::InvalidHandle, e.message),
    })
}

/// Exports a query of one `int` about a communicator (`ncclCommCount`, …): the handle is
/// checked (and, with `ready`, that its initialization completed), then the out-pointer
/// (`$what` in the message), then `$value` is written.
macro_rules! comm_query {
    ($name:ident, $what:literal, $ready:expr, |$c:ident| $value:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(comm: usize, out: *mut c_int) -> NcclResult {
            const C: &str = stringify!($name);
            api(C, || {
                let got = if $ready {
                    ready_comm(comm, C)
                } else {
                    comm_of(comm, C)
                };
                let $c = match got {
                    Ok(c) => c,
                    Err(r) => return r,
                };
                if out.is_null() {
                    return fail(
                        INVALID_ARGUMENT,
                        C,
                        Kind::InvalidValue,
                        concat!("`", $what, "` is null"),
                    );
                }
                // SAFETY: the caller's non-null out-pointer.
                unsafe { *out = $value };
                SUCCESS
            })
        }
    };
}

comm_query!(ncclCommCount, "count", true, |c| c.clique.nranks as c_int);
comm_query!(ncclCommUserRank, "rank", true, |c| c.rank as c_int);
comm_query!(ncclCommCuDevice, "device", true, |c| c.ctx.device);
comm_query!(ncclCommGetAsyncError, "asyncError", false, |c| {
    match c.clique.init_state() {
        Init::Forming => IN_PROGRESS,
        Init::Failed(f) => f.code,
        Init::Ready => {
            if let Some((code, _)) = &*c.async_error.lock() {
                *code
            } else if c.finalizing.load(Ordering::SeqCst) {
                IN_PROGRESS
            } else if c.clique.remote_error.lock().is_some()
                || c.clique.aborted.load(Ordering::SeqCst)
            {
                REMOTE_ERROR
            } else {
                SUCCESS
            }
        }
    }
});
