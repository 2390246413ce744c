//! Unique ids and initialization: `ncclGetUniqueId`, `ncclCommInitRank[Config]` (the
//! rendezvous of the ranks, blocking or not), `ncclCommInitAll`.
//!
//! Ranks of one process register in a process-wide map keyed by the unique id; each gets its
//! handle at once, usable when the clique is *ready*. When every rank joined in this process,
//! the clique is ready without leaving it. A process that joins an id it did not make starts
//! the cross-process rendezvous ([`super::net`]) at once; the process that made the id (it
//! cannot tell whether other processes will join) looks for the rendezvous folder while its
//! ranks wait, and joins it once it exists. So a clique whose ranks are all in one process
//! never touches the file system.

use super::comm::{
    COMMS, Clique, PENDING, Pending, current_ctx, new_clique, new_comm, released, settle,
};
use super::deferred::{DeferredInit, GROUP};
use super::link::{process_token, rendezvous_dir};
use super::net::Net;
use super::types::{Failure, Init};
use super::{
    IN_PROGRESS, INVALID_ARGUMENT, INVALID_USAGE, LAST_ERROR, NcclResult, SUCCESS, SYSTEM_ERROR,
    UNHANDLED_CUDA_ERROR, api, fail, timeout,
};
use crate::context::{self, Ctx};
use crate::diag::{self, Kind};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ID_MAGIC: &[u8; 16] = b"xthunk-emu-nccl\0";

/// `ncclUniqueId`: the magic (16 bytes), a serial (8), the maker's pid (4), a time (8), the
/// maker's process token (8; zero for the ids a split derives), the rest zero.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// The id of color `color` of split round `round` of the clique made from `parent`: the same
/// in every process, made by none.
pub(super) fn derived_id(parent: &[u8; 128], round: u64, color: c_int) -> [u8; 128] {
    let mut u = [0u8; 128];
    u[..16].copy_from_slice(ID_MAGIC);
    u[16..44].copy_from_slice(&parent[16..44]);
    u[36..44].fill(0);
    u[44..52].copy_from_slice(&round.to_le_bytes());
    u[52..56].copy_from_slice(&color.to_le_bytes());
    u[56] = 1;
    u[57..].copy_from_slice(&parent[44..115]);
    u
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
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    u[28..36].copy_from_slice(&t.to_le_bytes());
    u[36..44].copy_from_slice(&process_token());
    // SAFETY: the caller's non-null out-pointer.
    unsafe { *id = UniqueId { internal: u } };
    SUCCESS
}

fn joined_ranks(p: &Pending) -> Vec<usize> {
    (0..p.nranks).filter(|r| p.joined[*r]).collect()
}

/// Registers rank `rank` of the clique made from `uid`: its handle (usable once the clique is
/// ready) and the clique.
pub(super) fn join(
    uid: [u8; 128],
    nranks: usize,
    rank: usize,
    ctx: Arc<Ctx>,
    blocking: bool,
    call: &str,
) -> Result<(usize, Arc<Clique>), NcclResult> {
    if uid[..16] != ID_MAGIC[..] {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            "the unique id was not made by this emulator's ncclGetUniqueId",
        ));
    }
    let (h, cl, started) = {
        let mut g = PENDING.lock();
        let map = g.get_or_insert_with(HashMap::new);
        let p = map.entry(uid).or_insert_with(|| Pending {
            nranks,
            clique: new_clique(nranks, Some(uid), false),
            joined: vec![false; nranks],
        });
        if p.nranks != nranks {
            return Err(fail(
                INVALID_USAGE,
                call,
                Kind::InvalidValue,
                format!("rank {rank} says {nranks} ranks, another said {}", p.nranks),
            ));
        }
        if p.joined[rank] {
            return Err(fail(
                INVALID_USAGE,
                call,
                Kind::InvalidValue,
                format!("rank {rank} joined the clique twice"),
            ));
        }
        let cl = p.clique.clone();
        if let Some(net) = cl.net()
            && let Err(e) = net.add_local(rank)
        {
            let msg = format!("{}: {e}", cl.label());
            return Err(fail(INVALID_USAGE, call, Kind::InvalidValue, msg));
        }
        p.joined[rank] = true;
        let h = new_comm(&cl, rank, ctx, blocking);
        let mut started = Ok(());
        if cl.net().is_none() {
            if p.joined.iter().all(|j| *j) {
                map.remove(&uid);
                *cl.init.lock() = Init::Ready;
                cl.init_cv.notify_all();
            } else if !cl.made_here {
                started = Net::start(&cl, uid, &joined_ranks(p));
            }
        }
        (h, cl, started)
    };
    if let Err(e) = started {
        net_failed(&cl, call, e);
    }
    Ok((h, cl))
}

/// The cross-process rendezvous could not start: the clique fails.
fn net_failed(cl: &Clique, call: &str, e: String) {
    let msg = format!("{}: {e}", cl.label());
    diag::record(Kind::InvalidState, call, msg.clone());
    settle(
        cl,
        Err(Failure {
            code: SYSTEM_ERROR,
            msg,
        }),
    );
}

/// The creator of the id: when the rendezvous folder appeared (another process joined),
/// joins it too.
fn look_for_peers(cl: &Arc<Clique>, call: &str) {
    let Some(uid) = cl.uid else {
        return;
    };
    if cl.net().is_some() || !cl.made_here || !rendezvous_dir(&uid).exists() {
        return;
    }
    let started = {
        let g = PENDING.lock();
        match g.as_ref().and_then(|m| m.get(&uid)) {
            Some(p) if std::ptr::eq(&*p.clique, &**cl) && cl.net().is_none() => {
                Net::start(cl, uid, &joined_ranks(p))
            }
            _ => Ok(()),
        }
    };
    if let Err(e) = started {
        net_failed(cl, call, e);
    }
}

fn failed(f: &Failure) -> NcclResult {
    LAST_ERROR.with(|l| *l.borrow_mut() = f.msg.clone());
    f.code
}

/// Waits until the clique of rank `rank` is ready, failed, or `deadline` passed (it then
/// fails).
pub(super) fn wait_ready(
    cl: &Arc<Clique>,
    rank: usize,
    deadline: Instant,
    call: &str,
) -> Result<(), NcclResult> {
    loop {
        let waited = {
            let mut st = cl.init.lock();
            match &*st {
                Init::Ready => return Ok(()),
                Init::Failed(f) => return Err(failed(f)),
                Init::Forming => {}
            }
            let now = Instant::now();
            if now < deadline {
                let left = deadline - now;
                // The id's maker looks for the rendezvous folder every 10 ms.
                let step = if cl.net().is_none() && cl.made_here {
                    left.min(Duration::from_millis(10))
                } else {
                    left
                };
                cl.init_cv.wait_for(&mut st, step);
                true
            } else {
                false
            }
        };
        if waited {
            if cl.is_forming() {
                look_for_peers(cl, call);
            }
            continue;
        }
        let missing: Vec<usize> = match (cl.net(), cl.uid) {
            (Some(n), _) => n.progress().0,
            (None, Some(uid)) => PENDING
                .lock()
                .as_ref()
                .and_then(|m| m.get(&uid))
                .map(|p| (0..p.nranks).filter(|r| !p.joined[*r]).collect())
                .unwrap_or_default(),
            _ => vec![],
        };
        let msg = format!(
            "rank {rank} of {} timed out after {} s waiting for ranks {missing:?} to join",
            cl.label(),
            timeout().as_secs()
        );
        diag::record(Kind::InvalidState, call, msg.clone());
        let f = Failure {
            code: SYSTEM_ERROR,
            msg,
        };
        settle(cl, Err(f.clone()));
        return Err(failed(&f));
    }
}

/// A non-blocking initialization: a thread waits (looks for peers, enforces the timeout)
/// while the caller polls `ncclCommGetAsyncError`.
pub(super) fn watch(cl: Arc<Clique>, rank: usize, call: &'static str) {
    let deadline = Instant::now() + timeout();
    let _ = std::thread::Builder::new()
        .name("xthunk-emu-nccl-watch".into())
        .spawn(move || {
            let _ = wait_ready(&cl, rank, deadline, call);
        });
}

/// `ncclConfig_t.blocking` (`None`: no config). NCCL reads the struct through its `size`
/// and checks its `magic`; `NCCL_CONFIG_UNDEF_INT` means the default, blocking.
pub(super) fn config_blocking(
    config: *const c_void,
    call: &str,
) -> Result<Option<bool>, NcclResult> {
    if config.is_null() {
        return Ok(None);
    }
    let p = config.cast::<u8>();
    // SAFETY: a non-null `ncclConfig_t*` starts with `size_t size; unsigned magic; unsigned
    // version;` (every version since 2.14); `blocking` follows when `size` covers it.
    let (size, magic) = unsafe {
        (
            std::ptr::read_unaligned(p.cast::<usize>()),
            std::ptr::read_unaligned(p.add(8).cast::<u32>()),
        )
    };
    if magic != 0xcafe_beef {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("config.magic is {magic:#x}, not NCCL_API_MAGIC (use NCCL_CONFIG_INITIALIZER)"),
        ));
    }
    if size < 20 {
        return Ok(Some(true));
    }
    // SAFETY: `size` says the caller's struct holds `int blocking` at offset 16.
    let blocking = unsafe { std::ptr::read_unaligned(p.add(16).cast::<c_int>()) };
    match blocking {
        c_int::MIN | 1 => Ok(Some(true)),
        0 => Ok(Some(false)),
        b => Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("invalid config blocking attribute value {b}"),
        )),
    }
}

/// Frees the handle of a failed blocking initialization.
fn discard(h: usize) {
    if let Ok(c) = COMMS.remove(h, "ncclCommInitRank") {
        released(&c);
    }
}

/// # Safety
/// `comm` must be valid for writing a handle; `config` null or an `ncclConfig_t`.
unsafe fn init_rank(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    config: *const c_void,
    call: &'static str,
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
    let blocking = match config_blocking(config, call) {
        Ok(b) => b.unwrap_or(true),
        Err(r) => return r,
    };
    let Some(ctx) = current_ctx(call) else {
        return fail(
            UNHANDLED_CUDA_ERROR,
            call,
            Kind::InvalidState,
            "no current device (no CUDA context current, no HIP device)",
        );
    };
    let (rank, nranks) = (rank as usize, nranks as usize);
    let (h, cl) = match join(id.internal, nranks, rank, ctx, blocking, call) {
        Ok(x) => x,
        Err(r) => return r,
    };
    if GROUP.with(|g| g.borrow().depth > 0) {
        // Waited for at ncclGroupEnd; a blocking communicator's handle is given then.
        GROUP.with(|g| {
            g.borrow_mut()
                .inits
                .push((comm as usize, h, cl, rank, blocking))
        });
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { *comm = if blocking { 0 } else { h } };
        return SUCCESS;
    }
    if !blocking {
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { *comm = h };
        if matches!(cl.init_state(), Init::Ready) {
            return SUCCESS;
        }
        watch(cl, rank, call);
        return IN_PROGRESS;
    }
    match wait_ready(&cl, rank, Instant::now() + timeout(), call) {
        Ok(()) => {
            // SAFETY: the caller's out-pointer (checked non-null).
            unsafe { *comm = h };
            SUCCESS
        }
        Err(r) => {
            discard(h);
            r
        }
    }
}

/// Waits for the initializations deferred by a group (`ncclGroupEnd`): blocking ones get
/// their handles; `IN_PROGRESS` when a non-blocking one is still forming.
pub(super) fn finish_group_inits(inits: Vec<DeferredInit>, call: &'static str) -> NcclResult {
    let deadline = Instant::now() + timeout();
    let mut result = SUCCESS;
    let mut failed_at = None;
    for (i, (out, h, cl, rank, blocking)) in inits.iter().enumerate() {
        if !*blocking {
            if !matches!(cl.init_state(), Init::Ready) {
                watch(cl.clone(), *rank, call);
                result = IN_PROGRESS;
            }
            continue;
        }
        match wait_ready(cl, *rank, deadline, call) {
            // SAFETY: the out-pointer given to the deferred ncclCommInitRank.
            Ok(()) => unsafe { *(*out as *mut usize) = *h },
            Err(r) => {
                failed_at = Some((i, r));
                break;
            }
        }
    }
    if let Some((_, r)) = failed_at {
        for (out, h, _, _, blocking) in &inits {
            if *blocking {
                discard(*h);
                // SAFETY: as above.
                unsafe { *(*out as *mut usize) = 0 };
            }
        }
        return r;
    }
    result
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> NcclResult {
    const C: &str = "ncclCommInitRank";
    // SAFETY: the caller's out-pointer; no config.
    api(C, || unsafe {
        init_rank(comm, nranks, id, rank, std::ptr::null(), C)
    })
}

/// `ncclConfig_t` (any version): `blocking = 0` makes the call return `ncclInProgress` while
/// the clique forms; `ncclCommGetAsyncError` then reports `ncclInProgress` until it is ready
/// (`ncclSuccess`) or failed. Other fields are accepted and ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut usize,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    config: *mut c_void,
) -> NcclResult {
    const C: &str = "ncclCommInitRankConfig";
    // SAFETY: the caller's out-pointer and config.
    api(C, || unsafe {
        init_rank(comm, nranks, id, rank, config, C)
    })
}

/// `ncclCommInitRankScalable` (NCCL 2.23): `n_id` unique ids (one per root), the same on
/// every rank; counted (ranks, and the roots each named) and then joined as one clique on the
/// first id (the emulator's rendezvous needs one).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    comm: *mut usize,
    nranks: c_int,
    rank: c_int,
    n_id: c_int,
    ids: *const UniqueId,
    config: *mut c_void,
) -> NcclResult {
    const C: &str = "ncclCommInitRankScalable";
    api(C, || {
        if crate::config::get().nccl_mode == crate::config::NcclMode::Old {
            return fail(
                INVALID_USAGE,
                C,
                Kind::InvalidState,
                "not in NCCL 2.18.6 (XTHUNK_EMU_NCCL_MODE=old): gate it on the version",
            );
        }
        if ids.is_null() || n_id < 1 || n_id > nranks.max(1) {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                format!("{n_id} unique ids at {ids:?} for {nranks} ranks"),
            );
        }
        super::symmetric::count_scalable(n_id as u64);
        // SAFETY: `ids` holds `n_id >= 1` ids (the caller's contract).
        let first = unsafe { std::ptr::read(ids) };
        // SAFETY: the caller's out-pointer and config.
        unsafe { init_rank(comm, nranks, first, rank, config, C) }
    })
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
        let clique = new_clique(ctxs.len(), None, true);
        for (r, c) in ctxs.into_iter().enumerate() {
            let h = new_comm(&clique, r, c, true);
            // SAFETY: `comms` holds `ndev` entries (the caller's contract).
            unsafe { *comms.add(r) = h };
        }
        SUCCESS
    })
}
