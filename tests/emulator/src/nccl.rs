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

#![allow(non_snake_case, clippy::too_many_arguments)]

use crate::context::{self, Ctx};
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult, guard};
use crate::handles::{HandleKind, Table};
use crate::stream::{self, Op, STREAMS, StreamCore, Work};
use half::{bf16, f16};
use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
const ID_MAGIC: &[u8; 16] = b"xthunk-emu-nccl\0";

pub static COMMS: Table<Comm> = Table::new(HandleKind::Comm);

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// Element types (`ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dt {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    BF16,
}

impl Dt {
    fn from(v: c_int) -> Option<Dt> {
        Some(match v {
            0 => Dt::I8,
            1 => Dt::U8,
            2 => Dt::I32,
            3 => Dt::U32,
            4 => Dt::I64,
            5 => Dt::U64,
            6 => Dt::F16,
            7 => Dt::F32,
            8 => Dt::F64,
            9 => Dt::BF16,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Dt::I8 | Dt::U8 => 1,
            Dt::F16 | Dt::BF16 => 2,
            Dt::I32 | Dt::U32 | Dt::F32 => 4,
            Dt::I64 | Dt::U64 | Dt::F64 => 8,
        }
    }
}

/// Reduction operators (`ncclRedOp_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Red {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

/// A value while reducing: integers exactly (wrapping at the type's width when stored),
/// floats in f64 (f16/bf16/f32 rounded once when stored).
#[derive(Clone, Copy)]
enum Val {
    I(i128),
    F(f64),
}

fn load(dt: Dt, b: &[u8]) -> Val {
    let a2 = |b: &[u8]| [b[0], b[1]];
    let a4 = |b: &[u8]| [b[0], b[1], b[2], b[3]];
    let a8 = |b: &[u8]| [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
    match dt {
        Dt::I8 => Val::I(b[0] as i8 as i128),
        Dt::U8 => Val::I(b[0] as i128),
        Dt::I32 => Val::I(i32::from_le_bytes(a4(b)) as i128),
        Dt::U32 => Val::I(u32::from_le_bytes(a4(b)) as i128),
        Dt::I64 => Val::I(i64::from_le_bytes(a8(b)) as i128),
        Dt::U64 => Val::I(u64::from_le_bytes(a8(b)) as i128),
        Dt::F16 => Val::F(f16::from_bits(u16::from_le_bytes(a2(b))).to_f64()),
        Dt::BF16 => Val::F(bf16::from_bits(u16::from_le_bytes(a2(b))).to_f64()),
        Dt::F32 => Val::F(f32::from_le_bytes(a4(b)) as f64),
        Dt::F64 => Val::F(f64::from_le_bytes(a8(b))),
    }
}

fn store(dt: Dt, v: Val, out: &mut [u8]) {
    let (i, f) = match v {
        Val::I(i) => (i, i as f64),
        Val::F(f) => (f as i128, f),
    };
    match dt {
        Dt::I8 | Dt::U8 => out[0] = i as u8,
        Dt::I32 | Dt::U32 => out.copy_from_slice(&(i as u32).to_le_bytes()),
        Dt::I64 | Dt::U64 => out.copy_from_slice(&(i as u64).to_le_bytes()),
        Dt::F16 => out.copy_from_slice(&f16::from_f64(f).to_bits().to_le_bytes()),
        Dt::BF16 => out.copy_from_slice(&bf16::from_f64(f).to_bits().to_le_bytes()),
        Dt::F32 => out.copy_from_slice(&(f as f32).to_le_bytes()),
        Dt::F64 => out.copy_from_slice(&f.to_le_bytes()),
    }
}

fn combine(op: Red, a: Val, b: Val) -> Val {
    match (a, b) {
        (Val::I(x), Val::I(y)) => Val::I(match op {
            Red::Sum | Red::Avg => x.wrapping_add(y),
            Red::Prod => x.wrapping_mul(y),
            Red::Max => x.max(y),
            Red::Min => x.min(y),
        }),
        (Val::F(x), Val::F(y)) => Val::F(match op {
            Red::Sum | Red::Avg => x + y,
            Red::Prod => x * y,
            Red::Max => x.max(y),
            Red::Min => x.min(y),
        }),
        _ => a,
    }
}

/// Reduces `inputs` (one byte slice per rank, same length) element by element.
fn reduce(dt: Dt, op: Red, inputs: &[&[u8]]) -> Vec<u8> {
    let es = dt.size();
    let n = inputs.first().map(|b| b.len() / es).unwrap_or(0);
    let mut out = vec![0u8; n * es];
    for i in 0..n {
        let mut acc = load(dt, &inputs[0][i * es..]);
        for inp in &inputs[1..] {
            acc = combine(op, acc, load(dt, &inp[i * es..]));
        }
        if op == Red::Avg {
            acc = match acc {
                Val::I(x) => Val::I(x / inputs.len() as i128),
                Val::F(x) => Val::F(x / inputs.len() as f64),
            };
        }
        store(dt, acc, &mut out[i * es..(i + 1) * es]);
    }
    out
}

/// What one rank contributes to a slot.
#[derive(Clone, Debug)]
enum Part {
    AllReduce {
        send: usize,
        recv: usize,
        bytes: usize,
        dt: Dt,
        op: Red,
    },
    Broadcast {
        send: usize,
        recv: usize,
        bytes: usize,
        root: usize,
    },
    Reduce {
        send: usize,
        recv: usize,
        bytes: usize,
        dt: Dt,
        op: Red,
        root: usize,
    },
    AllGather {
        send: usize,
        recv: usize,
        bytes: usize,
    },
    ReduceScatter {
        send: usize,
        recv: usize,
        bytes: usize,
        dt: Dt,
        op: Red,
    },
    Send {
        send: usize,
        bytes: usize,
    },
    Recv {
        recv: usize,
        bytes: usize,
    },
}

impl Part {
    fn name(&self) -> &'static str {
        match self {
            Part::AllReduce { .. } => "ncclAllReduce",
            Part::Broadcast { .. } => "ncclBroadcast",
            Part::Reduce { .. } => "ncclReduce",
            Part::AllGather { .. } => "ncclAllGather",
            Part::ReduceScatter { .. } => "ncclReduceScatter",
            Part::Send { .. } => "ncclSend",
            Part::Recv { .. } => "ncclRecv",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SlotKey {
    Coll(u64),
    /// (sender, receiver, n-th message between them)
    P2p(usize, usize, u64),
}

#[derive(Default)]
struct Slot {
    /// Per local participant: its part, its queued position.
    parts: Vec<Option<Part>>,
    queued: Vec<Option<(Arc<StreamCore>, u64)>>,
    arrived: usize,
    /// Participants that have seen the result (the slot is dropped when all have).
    finished: usize,
    done: Option<Result<(), String>>,
}

/// State shared by every rank of a communicator.
pub struct Clique {
    id: u64,
    nranks: usize,
    slots: Mutex<HashMap<SlotKey, Slot>>,
    cv: Condvar,
    aborted: AtomicBool,
    /// `ncclCommSplit` rounds: per round, each rank's (color, key, context), then the new
    /// handles (0 for `NCCL_SPLIT_NOCOLOR`).
    splits: Mutex<HashMap<u64, SplitRound>>,
    split_cv: Condvar,
}

#[derive(Default)]
struct SplitRound {
    entries: Vec<Option<(c_int, c_int, Arc<Ctx>)>>,
    result: Option<Vec<usize>>,
    taken: usize,
}

fn new_clique(nranks: usize) -> Arc<Clique> {
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
    clique: Arc<Clique>,
    rank: usize,
    ctx: Arc<Ctx>,
    next_coll: AtomicU64,
    next_split: AtomicU64,
    next_send: Mutex<HashMap<usize, u64>>,
    next_recv: Mutex<HashMap<usize, u64>>,
    async_error: Mutex<Option<String>>,
}

static NEXT_CLIQUE: AtomicU64 = AtomicU64::new(1);

fn timeout() -> Duration {
    let s = std::env::var("XTHUNK_EMU_NCCL_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(60);
    Duration::from_secs(s.max(1))
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// A deferred `ncclCommInitRank`: (out-pointer, nranks, id, rank, context).
type DeferredInit = (usize, usize, [u8; 128], usize, Arc<Ctx>);
/// One rank's part of a slot, as queued.
type QueuedPart = (Arc<Comm>, SlotKey, Part);

#[derive(Default)]
struct Group {
    depth: usize,
    /// Deferred stream operations: (comm, stream, slot, part).
    ops: Vec<(Arc<Comm>, Arc<StreamCore>, SlotKey, Part)>,
    /// Deferred initializations: (out-pointer, nranks, id, rank, ctx).
    inits: Vec<DeferredInit>,
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

/// The calling thread's current device context: CUDA's current context, else HIP's device.
fn current_ctx(call: &str) -> Option<Arc<Ctx>> {
    if context::current_handle() != 0 {
        if let Ok(c) = context::current(call) {
            return Some(c);
        }
    }
    context::hip_ctx(call).ok()
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
struct Pending {
    nranks: usize,
    ranks: Vec<Option<Arc<Ctx>>>,
    clique: Option<Arc<Clique>>,
    handles: Vec<usize>,
}

static PENDING: Mutex<Option<HashMap<[u8; 128], Pending>>> = Mutex::new(None);
static PENDING_CV: Condvar = Condvar::new();

fn new_comm(clique: &Arc<Clique>, rank: usize, ctx: Arc<Ctx>) -> usize {
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
fn join(
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
fn wait_joined(id: [u8; 128], rank: usize, call: &str) -> Result<usize, NcclResult> {
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
unsafe fn init_rank(
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

fn comm_of(h: usize, call: &str) -> Result<Arc<Comm>, NcclResult> {
    COMMS.get(h, call).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        INVALID_ARGUMENT
    })
}

fn abort_clique(c: &Clique) {
    c.aborted.store(true, Ordering::SeqCst);
    let _g = c.slots.lock();
    c.cv.notify_all();
}

/// `NCCL_SPLIT_NOCOLOR`.
const NOCOLOR: c_int = -1;

/// `ncclCommSplit`: every rank of `comm` calls it (one thread each); ranks of one color form a
/// new communicator, ordered by `key` then by their old rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: usize,
    color: c_int,
    key: c_int,
    newcomm: *mut usize,
    _config: *mut c_void,
) -> NcclResult {
    const C: &str = "ncclCommSplit";
    api(C, || {
        let c = match comm_of(comm, C) {
            Ok(c) => c,
            Err(r) => return r,
        };
        if newcomm.is_null() || (color < 0 && color != NOCOLOR) {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                "bad color or null newcomm",
            );
        }
        if GROUP.with(|g| g.borrow().depth > 0) {
            return fail(
                INVALID_USAGE,
                C,
                Kind::Unsupported,
                "ncclCommSplit inside a group (one thread driving several ranks) is not emulated",
            );
        }
        let cl = c.clique.clone();
        let round = c.next_split.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + timeout();
        let mut g = cl.splits.lock();
        let r = g.entry(round).or_default();
        if r.entries.is_empty() {
            r.entries = vec![None; cl.nranks];
        }
        r.entries[c.rank] = Some((color, key, c.ctx.clone()));
        if r.entries.iter().all(Option::is_some) {
            let entries: Vec<(c_int, c_int, Arc<Ctx>)> =
                r.entries.iter().flatten().cloned().collect();
            let mut handles = vec![0usize; cl.nranks];
            let mut colors: Vec<c_int> = entries
                .iter()
                .map(|e| e.0)
                .filter(|&x| x != NOCOLOR)
                .collect();
            colors.sort();
            colors.dedup();
            for col in colors {
                let mut members: Vec<(c_int, usize)> = entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.0 == col)
                    .map(|(old, e)| (e.1, old))
                    .collect();
                members.sort();
                let sub = new_clique(members.len());
                for (new_rank, (_, old)) in members.iter().enumerate() {
                    handles[*old] = new_comm(&sub, new_rank, entries[*old].2.clone());
                }
            }
            r.result = Some(handles);
            cl.split_cv.notify_all();
        }
        loop {
            let Some(r) = g.get_mut(&round) else {
                return fail(INTERNAL_ERROR, C, Kind::InvalidState, "the split vanished");
            };
            if let Some(res) = &r.result {
                let h = res[c.rank];
                r.taken += 1;
                if r.taken == cl.nranks {
                    g.remove(&round);
                }
                // SAFETY: the caller's non-null out-pointer.
                unsafe { *newcomm = h };
                return SUCCESS;
            }
            if cl.split_cv.wait_until(&mut g, deadline).timed_out() {
                return fail(
                    SYSTEM_ERROR,
                    C,
                    Kind::InvalidState,
                    format!(
                        "rank {} timed out waiting for the other ranks to split",
                        c.rank
                    ),
                );
            }
        }
    })
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: usize, err: *mut NcclResult) -> NcclResult {
    const C: &str = "ncclCommGetAsyncError";
    api(C, || {
        let c = match comm_of(comm, C) {
            Ok(c) => c,
            Err(r) => return r,
        };
        if err.is_null() {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                "`asyncError` is null",
            );
        }
        let v = if c.async_error.lock().is_some() {
            SYSTEM_ERROR
        } else if c.clique.aborted.load(Ordering::SeqCst) {
            REMOTE_ERROR
        } else {
            SUCCESS
        };
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *err = v };
        SUCCESS
    })
}

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

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    const C: &str = "ncclGroupEnd";
    api(C, || {
        let (ops, inits) = match GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return None;
            }
            g.depth -= 1;
            if g.depth > 0 {
                return Some((vec![], vec![]));
            }
            Some((std::mem::take(&mut g.ops), std::mem::take(&mut g.inits)))
        }) {
            Some(x) => x,
            None => {
                return fail(
                    INVALID_USAGE,
                    C,
                    Kind::InvalidState,
                    "ncclGroupEnd without ncclGroupStart",
                );
            }
        };
        for (_, nranks, id, rank, ctx) in &inits {
            if let Err(r) = join(*id, *nranks, *rank, ctx.clone(), C) {
                return r;
            }
        }
        for (out, _, id, rank, _) in &inits {
            match wait_joined(*id, *rank, C) {
                // SAFETY: the out-pointer given to the deferred ncclCommInitRank.
                Ok(h) => unsafe { *(*out as *mut usize) = h },
                Err(r) => return r,
            }
        }
        // One stream operation per stream, holding all its parts.
        let mut by_stream: Vec<(Arc<StreamCore>, Vec<QueuedPart>)> = vec![];
        for (comm, s, key, part) in ops {
            match by_stream.iter_mut().find(|(x, _)| Arc::ptr_eq(x, &s)) {
                Some((_, v)) => v.push((comm, key, part)),
                None => by_stream.push((s, vec![(comm, key, part)])),
            }
        }
        for (s, parts) in by_stream {
            if let Err(r) = issue(&s, parts, C) {
                return r;
            }
        }
        SUCCESS
    })
}

/// The local index of `rank` in a slot, and the slot's size.
fn local(key: SlotKey, rank: usize, nranks: usize) -> (usize, usize) {
    match key {
        SlotKey::Coll(_) => (rank, nranks),
        SlotKey::P2p(src, _, _) => (if rank == src { 0 } else { 1 }, 2),
    }
}

/// Queues `parts` (of one stream) as one operation.
fn issue(s: &Arc<StreamCore>, parts: Vec<QueuedPart>, call: &str) -> Result<(), NcclResult> {
    if s.capture().is_some() {
        return Err(fail(
            INVALID_USAGE,
            call,
            Kind::Unsupported,
            "collectives inside stream capture are not emulated",
        ));
    }
    // Register the parts first, so that a rank already waiting sees them.
    for (comm, key, part) in &parts {
        let (idx, n) = local(*key, comm.rank, comm.clique.nranks);
        let mut slots = comm.clique.slots.lock();
        let slot = slots.entry(*key).or_default();
        if slot.parts.is_empty() {
            slot.parts = vec![None; n];
            slot.queued = vec![None; n];
        }
        slot.parts[idx] = Some(part.clone());
    }
    let work_parts: Vec<(Arc<Comm>, SlotKey)> =
        parts.iter().map(|(c, k, _)| (c.clone(), *k)).collect();
    let f: stream::HostWork = Arc::new(move |call: &str| run_parts(&work_parts, call));
    let seq = stream::submit(s, Op::new(Work::Host(f), call)).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        UNHANDLED_CUDA_ERROR
    })?;
    for (comm, key, _) in &parts {
        let (idx, _) = local(*key, comm.rank, comm.clique.nranks);
        let mut slots = comm.clique.slots.lock();
        if let Some(slot) = slots.get_mut(key) {
            slot.queued[idx] = Some((s.clone(), seq));
            if slot.arrived > 0 {
                s.release(seq);
            }
        }
    }
    Ok(())
}

/// Runs on a stream's worker: arrives at every slot, then waits for each to be done.
fn run_parts(parts: &[(Arc<Comm>, SlotKey)], call: &str) -> EmuResult<()> {
    for (comm, key) in parts {
        let cl = &comm.clique;
        let (idx, _) = local(*key, comm.rank, cl.nranks);
        let mut slots = cl.slots.lock();
        let Some(slot) = slots.get_mut(key) else {
            continue;
        };
        slot.arrived += 1;
        for (i, q) in slot.queued.iter().enumerate() {
            if i != idx {
                if let Some((s, seq)) = q {
                    s.release(*seq);
                }
            }
        }
        if slot.arrived == slot.parts.len() {
            let r = perform(slot, *key, call);
            slot.done = Some(r);
            cl.cv.notify_all();
        }
    }
    let deadline = Instant::now() + timeout();
    let mut first_err: Option<EmuError> = None;
    for (comm, key) in parts {
        let cl = &comm.clique;
        let mut slots = cl.slots.lock();
        loop {
            let done = slots.get(key).map(|s| s.done.clone());
            match done {
                Some(Some(r)) => {
                    if let Err(msg) = r {
                        *comm.async_error.lock() = Some(msg.clone());
                        first_err.get_or_insert(EmuError::quiet(Code::LaunchFailed, msg));
                    }
                    let all = slots.get_mut(key).is_some_and(|s| {
                        s.finished += 1;
                        s.finished == s.parts.len()
                    });
                    if all {
                        slots.remove(key);
                    }
                    break;
                }
                None => break,
                Some(None) => {}
            }
            if cl.aborted.load(Ordering::SeqCst) {
                let msg = format!("clique {} was aborted", cl.id);
                first_err.get_or_insert(EmuError::quiet(Code::LaunchFailed, msg));
                break;
            }
            if cl.cv.wait_until(&mut slots, deadline).timed_out() {
                let missing: Vec<usize> = slots
                    .get(key)
                    .map(|s| {
                        s.parts
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| p.is_none())
                            .map(|(i, _)| i)
                            .collect()
                    })
                    .unwrap_or_default();
                let msg = format!(
                    "rank {} timed out in {call} (clique {}, {key:?}); participants that never issued it: {missing:?}",
                    comm.rank, cl.id
                );
                diag::record(Kind::InvalidState, call, msg.clone());
                *comm.async_error.lock() = Some(msg.clone());
                first_err.get_or_insert(EmuError::quiet(Code::LaunchFailed, msg));
                break;
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Reads `len` bytes of emulated memory (checked).
fn read(ptr: usize, len: usize, what: &str, call: &str) -> Result<Vec<u8>, String> {
    crate::memory::check(ptr, len, what, call, Code::IllegalAddress).map_err(|e| e.message)?;
    if len == 0 {
        return Ok(vec![]);
    }
    // SAFETY: `len` bytes at `ptr` lie inside a live allocation (checked under the execution
    // lock held by the caller).
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec())
}

/// Writes `data` to emulated memory (checked).
fn write(ptr: usize, data: &[u8], what: &str, call: &str) -> Result<(), String> {
    crate::memory::check(ptr, data.len(), what, call, Code::IllegalAddress)
        .map_err(|e| e.message)?;
    if !data.is_empty() {
        // SAFETY: as in `read`, for writing.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr as *mut u8, data.len()) };
    }
    Ok(())
}

/// Moves a complete slot's data: every input is read before any output is written.
fn perform(slot: &Slot, key: SlotKey, call: &str) -> Result<(), String> {
    let _x = stream::EXEC.lock();
    let parts: Vec<&Part> = slot.parts.iter().flatten().collect();
    if parts.len() != slot.parts.len() {
        return Err("a participant is missing".into());
    }
    let first = parts[0];
    let same_kind = parts
        .iter()
        .all(|p| std::mem::discriminant(*p) == std::mem::discriminant(first));
    if !matches!(key, SlotKey::P2p(..)) && !same_kind {
        let names: Vec<&str> = parts.iter().map(|p| p.name()).collect();
        let msg = format!("ranks issued different collectives in the same position: {names:?}");
        diag::record(Kind::InvalidValue, call, msg.clone());
        return Err(msg);
    }
    let n = parts.len();
    let mismatch = |msg: String| {
        diag::record(Kind::InvalidValue, call, msg.clone());
        msg
    };
    let mut writes: Vec<(usize, Vec<u8>)> = vec![];
    match first {
        Part::AllReduce { bytes, dt, op, .. } | Part::ReduceScatter { bytes, dt, op, .. } => {
            let mut inputs = vec![];
            for (r, p) in parts.iter().enumerate() {
                let (s, b) = match p {
                    Part::AllReduce {
                        send,
                        bytes,
                        dt: d,
                        op: o,
                        ..
                    }
                    | Part::ReduceScatter {
                        send,
                        bytes,
                        dt: d,
                        op: o,
                        ..
                    } => {
                        if d != dt || o != op || *bytes != *first_bytes(first) {
                            return Err(mismatch(format!(
                                "rank {r} passed another count, type or operator than rank 0"
                            )));
                        }
                        (*send, *bytes)
                    }
                    _ => return Err("mixed collectives".into()),
                };
                let len = if matches!(first, Part::ReduceScatter { .. }) {
                    b * n
                } else {
                    b
                };
                inputs.push(read(s, len, &format!("send buffer of rank {r}"), call)?);
            }
            let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            let red = reduce(*dt, *op, &views);
            for (r, p) in parts.iter().enumerate() {
                if let Part::AllReduce { recv, .. } = p {
                    writes.push((*recv, red.clone()));
                } else if let Part::ReduceScatter { recv, .. } = p {
                    writes.push((*recv, red[r * bytes..(r + 1) * bytes].to_vec()));
                }
            }
        }
        Part::Reduce {
            bytes,
            dt,
            op,
            root,
            ..
        } => {
            let mut inputs = vec![];
            for (r, p) in parts.iter().enumerate() {
                let Part::Reduce { send, .. } = p else {
                    return Err("mixed collectives".into());
                };
                inputs.push(read(
                    *send,
                    *bytes,
                    &format!("send buffer of rank {r}"),
                    call,
                )?);
            }
            let views: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            if let Some(Part::Reduce { recv, .. }) = parts.get(*root) {
                writes.push((*recv, reduce(*dt, *op, &views)));
            }
        }
        Part::Broadcast { bytes, root, .. } => {
            let Some(Part::Broadcast { send, .. }) = parts.get(*root) else {
                return Err(mismatch(format!("root {root} is not a rank")));
            };
            let data = read(*send, *bytes, "send buffer of the root", call)?;
            for p in &parts {
                if let Part::Broadcast { recv, .. } = p {
                    writes.push((*recv, data.clone()));
                }
            }
        }
        Part::AllGather { bytes, .. } => {
            let mut all = vec![];
            for (r, p) in parts.iter().enumerate() {
                let Part::AllGather { send, .. } = p else {
                    return Err("mixed collectives".into());
                };
                all.extend(read(
                    *send,
                    *bytes,
                    &format!("send buffer of rank {r}"),
                    call,
                )?);
            }
            for p in &parts {
                if let Part::AllGather { recv, .. } = p {
                    writes.push((*recv, all.clone()));
                }
            }
        }
        Part::Send { .. } | Part::Recv { .. } => {
            let (mut src, mut dst) = (None, None);
            for p in &parts {
                match p {
                    Part::Send { send, bytes } => src = Some((*send, *bytes)),
                    Part::Recv { recv, bytes } => dst = Some((*recv, *bytes)),
                    _ => {}
                }
            }
            let (Some((s, sb)), Some((d, db))) = (src, dst) else {
                return Err(mismatch("a send met no matching receive".into()));
            };
            if sb != db {
                return Err(mismatch(format!(
                    "send of {sb} bytes, receive of {db} bytes"
                )));
            }
            writes.push((d, read(s, sb, "send buffer", call)?));
        }
    }
    for (ptr, data) in writes {
        write(ptr, &data, "receive buffer", call)?;
    }
    Ok(())
}

fn first_bytes(p: &Part) -> &usize {
    match p {
        Part::AllReduce { bytes, .. }
        | Part::Broadcast { bytes, .. }
        | Part::Reduce { bytes, .. }
        | Part::AllGather { bytes, .. }
        | Part::ReduceScatter { bytes, .. }
        | Part::Send { bytes, .. }
        | Part::Recv { bytes, .. } => bytes,
    }
}

/// The stream a collective names (NULL: the rank's context's legacy stream).
fn coll_stream(comm: &Comm, h: usize, call: &str) -> Result<Arc<StreamCore>, NcclResult> {
    if h == 0 || h == stream::STREAM_LEGACY || h == stream::STREAM_PER_THREAD {
        return Ok(comm.ctx.legacy.clone());
    }
    STREAMS.get(h, call).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        INVALID_ARGUMENT
    })
}

/// Checks a buffer at the call (the data is checked again when it moves).
fn check_buf(ptr: usize, len: usize, what: &str, call: &str) -> Result<(), NcclResult> {
    crate::memory::check(ptr, len, what, call, Code::InvalidValue)
        .map(|_| ())
        .map_err(|e| {
            LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
            INVALID_ARGUMENT
        })
}

/// Validates and queues (or defers, inside a group) one collective part.
fn submit_part(
    comm: usize,
    stream_h: usize,
    key_of: impl FnOnce(&Comm) -> SlotKey,
    part: Part,
    buffers: &[(usize, usize, &str)],
    call: &str,
) -> NcclResult {
    let c = match comm_of(comm, call) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if c.clique.aborted.load(Ordering::SeqCst) {
        return fail(
            INVALID_USAGE,
            call,
            Kind::InvalidState,
            "the communicator was aborted",
        );
    }
    for (p, len, what) in buffers {
        if let Err(r) = check_buf(*p, *len, what, call) {
            return r;
        }
    }
    let s = match coll_stream(&c, stream_h, call) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = key_of(&c);
    if GROUP.with(|g| g.borrow().depth > 0) {
        GROUP.with(|g| g.borrow_mut().ops.push((c, s, key, part)));
        return SUCCESS;
    }
    match issue(&s, vec![(c, key, part)], call) {
        Ok(()) => SUCCESS,
        Err(r) => r,
    }
}

fn coll_key(c: &Comm) -> SlotKey {
    SlotKey::Coll(c.next_coll.fetch_add(1, Ordering::SeqCst))
}

fn dt_op(dt: c_int, op: Option<c_int>, call: &str) -> Result<(Dt, Red), NcclResult> {
    let Some(d) = Dt::from(dt) else {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("unknown ncclDataType_t {dt}"),
        ));
    };
    let r = match op.unwrap_or(0) {
        0 => Red::Sum,
        1 => Red::Prod,
        2 => Red::Max,
        3 => Red::Min,
        4 => Red::Avg,
        o => {
            return Err(fail(
                INVALID_ARGUMENT,
                call,
                Kind::InvalidValue,
                format!("unknown ncclRedOp_t {o}"),
            ));
        }
    };
    Ok((d, r))
}

fn bytes(count: usize, dt: Dt, call: &str) -> Result<usize, NcclResult> {
    count.checked_mul(dt.size()).ok_or_else(|| {
        fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            "count overflows",
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclAllReduce";
    api(C, || {
        let (d, r) = match dt_op(dt, Some(op), C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(count, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let (s, rv) = (send as usize, recv as usize);
        submit_part(
            comm,
            stream,
            coll_key,
            Part::AllReduce {
                send: s,
                recv: rv,
                bytes: b,
                dt: d,
                op: r,
            },
            &[(s, b, "sendbuff"), (rv, b, "recvbuff")],
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclBroadcast";
    api(C, || {
        let (d, _) = match dt_op(dt, None, C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(count, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let nranks = match comm_of(comm, C) {
            Ok(c) => c.clique.nranks,
            Err(r) => return r,
        };
        if root < 0 || root as usize >= nranks {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                format!("root {root} of {nranks} ranks"),
            );
        }
        let (s, rv) = (send as usize, recv as usize);
        let rank = COMMS.try_get(comm).map(|c| c.rank).unwrap_or(0);
        let mut bufs = vec![(rv, b, "recvbuff")];
        if rank == root as usize {
            bufs.push((s, b, "sendbuff"));
        }
        submit_part(
            comm,
            stream,
            coll_key,
            Part::Broadcast {
                send: s,
                recv: rv,
                bytes: b,
                root: root as usize,
            },
            &bufs,
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    root: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclReduce";
    api(C, || {
        let (d, r) = match dt_op(dt, Some(op), C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(count, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let c = match comm_of(comm, C) {
            Ok(c) => c,
            Err(r) => return r,
        };
        if root < 0 || root as usize >= c.clique.nranks {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                format!("root {root}"),
            );
        }
        let (s, rv) = (send as usize, recv as usize);
        let mut bufs = vec![(s, b, "sendbuff")];
        if c.rank == root as usize {
            bufs.push((rv, b, "recvbuff"));
        }
        submit_part(
            comm,
            stream,
            coll_key,
            Part::Reduce {
                send: s,
                recv: rv,
                bytes: b,
                dt: d,
                op: r,
                root: root as usize,
            },
            &bufs,
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dt: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclAllGather";
    api(C, || {
        let (d, _) = match dt_op(dt, None, C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(sendcount, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let nranks = match comm_of(comm, C) {
            Ok(c) => c.clique.nranks,
            Err(r) => return r,
        };
        let (s, rv) = (send as usize, recv as usize);
        submit_part(
            comm,
            stream,
            coll_key,
            Part::AllGather {
                send: s,
                recv: rv,
                bytes: b,
            },
            &[(s, b, "sendbuff"), (rv, b * nranks, "recvbuff")],
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dt: c_int,
    op: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclReduceScatter";
    api(C, || {
        let (d, r) = match dt_op(dt, Some(op), C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(recvcount, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let nranks = match comm_of(comm, C) {
            Ok(c) => c.clique.nranks,
            Err(r) => return r,
        };
        let (s, rv) = (send as usize, recv as usize);
        submit_part(
            comm,
            stream,
            coll_key,
            Part::ReduceScatter {
                send: s,
                recv: rv,
                bytes: b,
                dt: d,
                op: r,
            },
            &[(s, b * nranks, "sendbuff"), (rv, b, "recvbuff")],
            C,
        )
    })
}

fn p2p(
    buf: usize,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
    is_send: bool,
) -> NcclResult {
    let call = if is_send { "ncclSend" } else { "ncclRecv" };
    let (d, _) = match dt_op(dt, None, call) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let b = match bytes(count, d, call) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let c = match comm_of(comm, call) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if peer < 0 || peer as usize >= c.clique.nranks {
        return fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("peer {peer}"),
        );
    }
    let peer = peer as usize;
    let key_of = move |c: &Comm| {
        if is_send {
            let mut m = c.next_send.lock();
            let n = m.entry(peer).or_insert(0);
            *n += 1;
            SlotKey::P2p(c.rank, peer, *n)
        } else {
            let mut m = c.next_recv.lock();
            let n = m.entry(peer).or_insert(0);
            *n += 1;
            SlotKey::P2p(peer, c.rank, *n)
        }
    };
    let part = if is_send {
        Part::Send {
            send: buf,
            bytes: b,
        }
    } else {
        Part::Recv {
            recv: buf,
            bytes: b,
        }
    };
    submit_part(
        comm,
        stream,
        key_of,
        part,
        &[(buf, b, if is_send { "sendbuff" } else { "recvbuff" })],
        call,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    api("ncclSend", || {
        p2p(send as usize, count, dt, peer, comm, stream, true)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    api("ncclRecv", || {
        p2p(recv as usize, count, dt, peer, comm, stream, false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions() {
        let a = 1.5f32.to_le_bytes();
        let b = 2.25f32.to_le_bytes();
        let r = reduce(Dt::F32, Red::Sum, &[&a, &b]);
        assert_eq!(r, 3.75f32.to_le_bytes());
        let r = reduce(Dt::F32, Red::Avg, &[&a, &b]);
        assert_eq!(r, 1.875f32.to_le_bytes());
        let x = i32::MAX.to_le_bytes();
        let y = 1i32.to_le_bytes();
        assert_eq!(reduce(Dt::I32, Red::Sum, &[&x, &y]), i32::MIN.to_le_bytes());
        assert_eq!(reduce(Dt::I32, Red::Max, &[&x, &y]), i32::MAX.to_le_bytes());
        let h = f16::from_f32(1.0).to_bits().to_le_bytes();
        assert_eq!(
            reduce(Dt::F16, Red::Prod, &[&h, &h]),
            f16::from_f32(1.0).to_bits().to_le_bytes()
        );
    }
}
