//! Cliques and communicators: unique ids, `ncclCommInitRank[Config]` (the rendezvous of the
//! ranks), `ncclCommInitAll`, destruction, finalize, abort, asynchronous errors, queries.

use super::group::GROUP;
use super::slot::{Slot, SlotKey};
use super::split::SplitRound;
use super::{
    INTERNAL_ERROR, INVALID_ARGUMENT, INVALID_USAGE, LAST_ERROR, NcclResult, REMOTE_ERROR, SUCCESS,
    SYSTEM_ERROR, UNHANDLED_CUDA_ERROR, api, fail, timeout,
};
use crate::context::{self, Ctx};
use crate::diag::Kind;
use crate::handles::{HandleKind, Table};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

const ID_MAGIC: &[u8; 16] = b"xthunk-emu-nccl\0";

pub static COMMS: Table<Comm> = Table::new(HandleKind::Comm);

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// State shared by every rank of a communicator.
pub struct Clique {
    pub(super) id: u64,
    pub(super) nranks: usize,
    pub(super) slots: Mutex<HashMap<SlotKey, Slot>>,
    pub(super) cv: Condvar,
    pub(super) aborted: AtomicBool,
    /// `ncclCommSplit` rounds: per round, each rank's (color, key, context), then the new
    /// handles (0 for `NCCL_SPLIT_NOCOLOR`).
    pub(super) splits: Mutex<HashMap<u64, SplitRound>>,
    pub(super) split_cv: Condvar,
}

pub(super) fn new_clique(nranks: usize) -> Arc<Clique> {
    Arc::new(Clique {
        id: NEXT_CLIQUE.fetch_add(1, Ordering::SeqCst),
        nranks,
        slots: Mutex::new(HashMap::new()),
        cv: Condvar::new(),
        aborted: AtomicBool::new(false),
        splits: Mutex::new(HashMap::new()),
        split_cv: Condvar::new(),
    })
}

/// One rank's communicator.
pub struct Comm {
    pub(super) clique: Arc<Clique>,
    pub(super) rank: usize,
    pub(super) ctx: Arc<Ctx>,
    pub(super) next_coll: AtomicU64,
    pub(super) next_split: AtomicU64,
    pub(super) next_send: Mutex<HashMap<usize, u64>>,
    pub(super) next_recv: Mutex<HashMap<usize, u64>>,
    pub(super) async_error: Mutex<Option<String>>,
}

pub(super) static NEXT_CLIQUE: AtomicU64 = AtomicU64::new(1);

/// The calling thread's current device context: CUDA's current context, else HIP's device.
pub(super) fn current_ctx(call: &str) -> Option<Arc<Ctx>> {
    if context::current_handle() != 0 {
        if let Ok(c) = context::current(call) {
            return Some(c);
        }
    }
    context::hip_ctx(call).ok()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut UniqueId) -> NcclResult {
    const C: &str = "ncclGetUniqueId";
    if id.is_null() {
        return fail(INVALID_ARGUMENT, C, Kind::InvalidValue, "null pointer");
    }
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    let mut u = [0u8; 128];
    u[..16].copy_from_slice(ID_MAGIC);
    u[16..24].copy_from_slice(&SERIAL.fetch_add(1, Ordering::SeqCst).to_le_bytes());
    u[24..28].copy_from_slice(&std::process::id().to_le_bytes());
    let t = Instant::now().elapsed().as_nanos() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    u[28..36].copy_from_slice(&t.to_le_bytes());
    // SAFETY: the caller's non-null out-pointer.
    unsafe { *id = UniqueId { internal: u } };
    SUCCESS
}

/// Communicators being formed, by unique id.
pub(super) struct Pending {
    pub(super) nranks: usize,
    pub(super) ranks: Vec<Option<Arc<Ctx>>>,
    pub(super) clique: Option<Arc<Clique>>,
    pub(super) handles: Vec<usize>,
}

pub(super) static PENDING: Mutex<Option<HashMap<[u8; 128], Pending>>> = Mutex::new(None);
pub(super) static PENDING_CV: Condvar = Condvar::new();

pub(super) fn new_comm(clique: &Arc<Clique>, rank: usize, ctx: Arc<Ctx>) -> usize {
    COMMS.insert(Arc::new(Comm {
        clique: clique.clone(),
        rank,
        ctx,
        next_coll: AtomicU64::new(0),
        next_split: AtomicU64::new(0),
        next_send: Mutex::new(HashMap::new()),
        next_recv: Mutex::new(HashMap::new()),
        async_error: Mutex::new(None),
    }))
}

/// Registers rank `rank` of the clique `id`; the communicator handle once every rank has
/// registered (`wait`), or `None` when not waiting and incomplete.
pub(super) fn join(
    id: [u8; 128],
    nranks: usize,
    rank: usize,
    ctx: Arc<Ctx>,
    call: &str,
) -> Result<(), NcclResult> {
    if id[..16] != ID_MAGIC[..] {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            "the unique id was not made by this emulator's ncclGetUniqueId",
        ));
    }
    let mut g = PENDING.lock();
    let map = g.get_or_insert_with(HashMap::new);
    let p = map.entry(id).or_insert_with(|| Pending {
        nranks,
        ranks: vec![None; nranks],
        clique: None,
        handles: vec![0; nranks],
    });
    if p.nranks != nranks {
        return Err(fail(
            INVALID_USAGE,
            call,
            Kind::InvalidValue,
            format!("rank {rank} says {nranks} ranks, another said {}", p.nranks),
        ));
    }
    if p.ranks[rank].is_some() {
        return Err(fail(
            INVALID_USAGE,
            call,
            Kind::InvalidValue,
            format!("rank {rank} joined the clique twice"),
        ));
    }
    p.ranks[rank] = Some(ctx);
    if p.ranks.iter().all(Option::is_some) {
        let clique = new_clique(nranks);
        for (r, c) in p.ranks.iter().enumerate() {
            if let Some(c) = c {
                p.handles[r] = new_comm(&clique, r, c.clone());
            }
        }
        p.clique = Some(clique);
        PENDING_CV.notify_all();
    }
    Ok(())
}

/// Waits until the clique `id` is complete; rank `rank`'s handle.
pub(super) fn wait_joined(id: [u8; 128], rank: usize, call: &str) -> Result<usize, NcclResult> {
    let deadline = Instant::now() + timeout();
    let mut g = PENDING.lock();
    loop {
        let map = g.get_or_insert_with(HashMap::new);
        let Some(p) = map.get_mut(&id) else {
            return Err(fail(
                INTERNAL_ERROR,
                call,
                Kind::InvalidState,
                "the clique vanished",
            ));
        };
        if p.clique.is_some() {
            let h = p.handles[rank];
            p.handles[rank] = usize::MAX;
            if p.handles.iter().all(|h| *h == usize::MAX) {
                map.remove(&id);
            }
            return Ok(h);
        }
        if PENDING_CV.wait_until(&mut g, deadline).timed_out() {
            let missing: Vec<usize> = g
                .as_ref()
                .and_then(|m| m.get(&id))
                .map(|p| {
                    p.ranks
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.is_none())
                        .map(|(r, _)| r)
                        .collect()
                })
                .unwrap_or_default();
            return Err(fail(
                SYSTEM_ERROR,
                call,
                Kind::InvalidState,
                format!("rank {rank} timed out waiting for ranks {missing:?} to join"),
            ));
        }
    }
}

/// # Safety
/// `comm` must be valid for writing a handle.
pub(super) unsafe fn init_rank(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    call: &str,
) -> NcclResult {
    if comm.is_null() {
        return fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            "`comm` is a null pointer",
        );
    }
    if nranks < 1 || rank < 0 || rank >= nranks {
        return fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("rank {rank} of {nranks}"),
        );
    }
    let Some(ctx) = current_ctx(call) else {
        return fail(
            UNHANDLED_CUDA_ERROR,
            call,
            Kind::InvalidState,
            "no current device (no CUDA context current, no HIP device)",
        );
    };
    let in_group = GROUP.with(|g| g.borrow().depth > 0);
    if in_group {
        GROUP.with(|g| {
            g.borrow_mut().inits.push((
                comm as usize,
                nranks as usize,
                id.internal,
                rank as usize,
                ctx,
            ))
        });
        // SAFETY: the caller's out-pointer (checked non-null); set at ncclGroupEnd.
        unsafe { *comm = 0 };
        return SUCCESS;
    }
    if let Err(r) = join(id.internal, nranks as usize, rank as usize, ctx, call) {
        return r;
    }
    match wait_joined(id.internal, rank as usize, call) {
        Ok(h) => {
            // SAFETY: the caller's out-pointer (checked non-null).
            unsafe { *comm = h };
            SUCCESS
        }
        Err(r) => r,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> NcclResult {
    const C: &str = "ncclCommInitRank";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { init_rank(comm, nranks, id, rank, C) })
}

/// `ncclConfig_t` is accepted (any version); communicators are always blocking-complete.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    _config: *mut c_void,
) -> NcclResult {
    const C: &str = "ncclCommInitRankConfig";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { init_rank(comm, nranks, id, rank, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut usize,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    const C: &str = "ncclCommInitAll";
    api(C, || {
        if comms.is_null() || ndev < 1 {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                "no communicators requested",
            );
        }
        let mut ctxs = vec![];
        for i in 0..ndev as usize {
            let dev = if devlist.is_null() {
                i as c_int
            } else {
                // SAFETY: `devlist` holds `ndev` entries (the caller's contract).
                unsafe { *devlist.add(i) }
            };
            let c = if context::current_handle() != 0 {
                context::CONTEXTS
                    .all()
                    .into_iter()
                    .map(|(_, c)| c)
                    .find(|c| c.api == context::Api::Cuda && c.device == dev)
            } else {
                None
            };
            let c = match c {
                Some(c) => c,
                None => match context::hip_ctx_of(dev, C) {
                    Ok(c) => c,
                    Err(e) => return fail(INVALID_ARGUMENT, C, Kind::InvalidValue, e.message),
                },
            };
            ctxs.push(c);
        }
        let clique = new_clique(ctxs.len());
        for (r, c) in ctxs.into_iter().enumerate() {
            let h = new_comm(&clique, r, c);
            // SAFETY: `comms` holds `ndev` entries (the caller's contract).
            unsafe { *comms.add(r) = h };
        }
        SUCCESS
    })
}

pub(super) fn comm_of(h: usize, call: &str) -> Result<Arc<Comm>, NcclResult> {
    COMMS.get(h, call).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        INVALID_ARGUMENT
    })
}

pub(super) fn abort_clique(c: &Clique) {
    c.aborted.store(true, Ordering::SeqCst);
    let _g = c.slots.lock();
    c.cv.notify_all();
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: usize) -> NcclResult {
    const C: &str = "ncclCommDestroy";
    api(C, || match COMMS.remove(comm, C) {
        Ok(_) => SUCCESS,
        Err(e) => fail(INVALID_ARGUMENT, C, Kind::InvalidHandle, e.message),
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommFinalize(comm: usize) -> NcclResult {
    const C: &str = "ncclCommFinalize";
    api(C, || match comm_of(comm, C) {
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
            abort_clique(&c.clique);
            SUCCESS
        }
        Err(e) => fail(INVALID_ARGUMENT, C, Kind::InvalidHandle, e.message),
    })
}

/// Exports a query of one `int` about a communicator (`ncclCommCount`, …): the handle is
/// checked, then the out-pointer (`$what` in the message), then `$value` is written.
macro_rules! comm_query {
    ($name:ident, $what:literal, |$c:ident| $value:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(comm: usize, out: *mut c_int) -> NcclResult {
            const C: &str = stringify!($name);
            api(C, || {
                let $c = match comm_of(comm, C) {
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

comm_query!(ncclCommCount, "count", |c| c.clique.nranks as c_int);
comm_query!(ncclCommUserRank, "rank", |c| c.rank as c_int);
comm_query!(ncclCommCuDevice, "device", |c| c.ctx.device);
comm_query!(ncclCommGetAsyncError, "asyncError", |c| {
    if c.async_error.lock().is_some() {
        SYSTEM_ERROR
    } else if c.clique.aborted.load(Ordering::SeqCst) {
        REMOTE_ERROR
    } else {
        SUCCESS
    }
});
