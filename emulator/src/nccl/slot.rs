//! Slots: the n-th operation of every rank (or the n-th message between two ranks) meets in
//! a slot; the stream operation that arrives at its slots, waits for them, and whoever
//! completes a slot (the last local rank to arrive, or the reader of the last remote part
//! when the clique spans processes) moves all the data.

use super::comm::{Clique, Comm};
use super::group::QueuedPart;
use super::perform::perform;
use super::reduce::{Dt, Red};
use super::remote::{self, Outbox};
use super::{INVALID_USAGE, LAST_ERROR, NcclResult, UNHANDLED_CUDA_ERROR, fail, timeout};
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult};
use crate::stream::{self, Op, StreamCore, Work};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    Send,
    Recv,
}

impl OpKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "ncclAllReduce",
            OpKind::Broadcast => "ncclBroadcast",
            OpKind::Reduce => "ncclReduce",
            OpKind::AllGather => "ncclAllGather",
            OpKind::ReduceScatter => "ncclReduceScatter",
            OpKind::Send => "ncclSend",
            OpKind::Recv => "ncclRecv",
        }
    }

    const ALL: [OpKind; 7] = [
        OpKind::AllReduce,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Send,
        OpKind::Recv,
    ];

    pub(super) fn code(self) -> u8 {
        OpKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u8
    }

    pub(super) fn from_code(c: u8) -> Option<OpKind> {
        OpKind::ALL.get(c as usize).copied()
    }

    /// Whether the operation reduces (its type and operator must agree across ranks).
    pub(super) fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter
        )
    }

    /// Whether the operation has a root (which must agree across ranks).
    pub(super) fn rooted(self) -> bool {
        matches!(self, OpKind::Broadcast | OpKind::Reduce)
    }
}

/// What one rank's part of an operation is, without its buffers (what travels to the other
/// processes of a clique).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) kind: OpKind,
    /// The call's count in bytes (a reduce-scatter's receive count, an all-gather's send
    /// count).
    pub(super) bytes: usize,
    pub(super) dt: Dt,
    /// `Sum` for operations that do not reduce.
    pub(super) op: Red,
    /// 0 for operations without a root.
    pub(super) root: usize,
}

impl Meta {
    /// The bytes of this part's input in a clique of `nranks` (none for a receive).
    pub(super) fn input_len(&self, nranks: usize) -> Option<usize> {
        match self.kind {
            OpKind::ReduceScatter => self.bytes.checked_mul(nranks),
            OpKind::Recv => Some(0),
            _ => Some(self.bytes),
        }
    }
}

/// What one local rank contributes to a slot: its metadata and its buffers (`send` unused by
/// a receive, `recv` by a send).
#[derive(Clone, Debug)]
pub(super) struct Part {
    pub(super) meta: Meta,
    pub(super) send: usize,
    pub(super) recv: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum SlotKey {
    Coll(u64),
    /// (sender, receiver, n-th message between them)
    P2p(usize, usize, u64),
}

/// A part of a rank in another process, as received.
#[derive(Debug)]
pub(super) struct Remote {
    pub(super) meta: Meta,
    /// The input when this process needs it, or why the rank could not read it.
    pub(super) input: Result<Option<Vec<u8>>, String>,
}

/// Why an operation failed: the NCCL result its communicators report and the message.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub(super) code: NcclResult,
    pub(super) msg: String,
}

#[derive(Default)]
pub(super) struct Slot {
    /// Per place (a rank of a collective; the send and the receive of a message): the local
    /// part and its queued position.
    pub(super) parts: Vec<Option<Part>>,
    pub(super) queued: Vec<Option<(Arc<StreamCore>, u64)>>,
    /// Per place: the part of a rank in another process.
    pub(super) remote: Vec<Option<Remote>>,
    /// Per place: the local part's stream has reached it.
    pub(super) reached: Vec<bool>,
    /// Local participants that have seen the result (the slot is dropped when all have).
    pub(super) finished: usize,
    pub(super) done: Option<Result<(), Failure>>,
}

impl Slot {
    pub(super) fn sized(n: usize) -> Slot {
        Slot {
            parts: vec![None; n],
            queued: vec![None; n],
            reached: vec![false; n],
            remote: (0..n).map(|_| None).collect(),
            ..Slot::default()
        }
    }

    /// Places whose part is there: local ones that arrived, remote ones received. A slot is
    /// performed when every place is filled (a message whose receive is in another process
    /// never is: it completes when that process says so).
    pub(super) fn filled(&self) -> usize {
        let reached = self.reached.iter().filter(|r| **r).count();
        reached + self.remote.iter().filter(|r| r.is_some()).count()
    }

    /// Lets the queued local parts' streams run up to them (but `except`).
    pub(super) fn release(&self, except: Option<usize>) {
        for (i, q) in self.queued.iter().enumerate() {
            if Some(i) != except {
                if let Some((s, seq)) = q {
                    s.release(*seq);
                }
            }
        }
    }
}

/// The number of places of slot `key` in a clique of `nranks`.
pub(super) fn slot_size(key: SlotKey, nranks: usize) -> usize {
    match key {
        SlotKey::Coll(_) => nranks,
        SlotKey::P2p(..) => 2,
    }
}

/// The place of `part` (of `rank`) in its slot. A message's slot has two places, the send's
/// (0) and the receive's (1), told apart by the part rather than by the rank: a send to the
/// rank itself and its receive are two parts of one slot.
pub(super) fn place(key: SlotKey, rank: usize, part: &Part) -> usize {
    match key {
        SlotKey::Coll(_) => rank,
        SlotKey::P2p(..) => usize::from(part.meta.kind == OpKind::Recv),
    }
}

/// The rank at `place` of slot `key`.
pub(super) fn rank_at(key: SlotKey, place: usize) -> usize {
    match key {
        SlotKey::Coll(_) => place,
        SlotKey::P2p(s, r, _) => {
            if place == 0 {
                s
            } else {
                r
            }
        }
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

/// Queues `parts` (of one stream) as one operation.
pub(super) fn issue(
    s: &Arc<StreamCore>,
    parts: Vec<QueuedPart>,
    call: &str,
) -> Result<(), NcclResult> {
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
        let idx = place(*key, comm.rank, part);
        let mut slots = comm.clique.slots.lock();
        let n = slot_size(*key, comm.clique.nranks);
        let slot = slots.entry(*key).or_insert_with(|| Slot::sized(n));
        slot.parts[idx] = Some(part.clone());
    }
    let work_parts: Vec<(Arc<Comm>, SlotKey, usize)> = parts
        .iter()
        .map(|(c, k, p)| (c.clone(), *k, place(*k, c.rank, p)))
        .collect();
    let f: stream::HostWork = Arc::new(move |call: &str| run_parts(&work_parts, call));
    let seq = stream::submit(s, Op::new(Work::Host(f), call)).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        UNHANDLED_CUDA_ERROR
    })?;
    for (comm, key, part) in &parts {
        let idx = place(*key, comm.rank, part);
        let mut slots = comm.clique.slots.lock();
        if let Some(slot) = slots.get_mut(key) {
            slot.queued[idx] = Some((s.clone(), seq));
            if slot.filled() > 0 {
                s.release(seq);
            }
        }
    }
    Ok(())
}

/// Runs on a stream's worker: arrives at every slot, then waits for each to be done.
pub(super) fn run_parts(parts: &[(Arc<Comm>, SlotKey, usize)], call: &str) -> EmuResult<()> {
    let mut outbox = Outbox::default();
    for (comm, key, idx) in parts {
        let (cl, idx) = (&comm.clique, *idx);
        let mut slots = cl.slots.lock();
        let Some(slot) = slots.get_mut(key) else {
            continue;
        };
        slot.reached[idx] = true;
        slot.release(Some(idx));
        let net = cl.net();
        if let Some(net) = net {
            remote::arrived(cl, net, *key, idx, slot, &mut outbox);
        }
        if slot.done.is_some() {
            continue;
        }
        if slot.filled() == slot.parts.len() {
            let r = perform(slot, *key, cl);
            if let Some(net) = net {
                remote::performed(cl, net, *key, &r, &mut outbox);
            }
            slot.done = Some(r);
            cl.cv.notify_all();
        } else if let Some(f) = net.and_then(|n| remote::dead_needed(cl, n, *key, slot)) {
            slot.done = Some(Err(f));
            cl.cv.notify_all();
        }
    }
    outbox.send();
    let deadline = Instant::now() + timeout();
    let mut first_err: Option<EmuError> = None;
    for (comm, key, idx) in parts {
        let cl = &comm.clique;
        let kind = {
            let slots = cl.slots.lock();
            slots
                .get(key)
                .and_then(|s| s.parts[*idx].as_ref().map(|p| p.meta.kind))
        };
        let what = || describe(cl, *key, kind.unwrap_or(OpKind::AllReduce));
        let mut slots = cl.slots.lock();
        loop {
            let done = slots.get(key).map(|s| s.done.clone());
            match done {
                Some(Some(r)) => {
                    if let Err(f) = r {
                        *comm.async_error.lock() = Some((f.code, f.msg.clone()));
                        first_err.get_or_insert(EmuError::quiet(Code::LaunchFailed, f.msg));
                    }
                    let local = cl.local_places(*key);
                    let all = slots.get_mut(key).is_some_and(|s| {
                        s.finished += 1;
                        s.finished >= local
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
                let msg = format!(
                    "rank {}: {} failed: the communicator was aborted",
                    comm.rank,
                    what()
                );
                diag::record(Kind::InvalidState, call, msg.clone());
                first_err.get_or_insert(EmuError::quiet(Code::LaunchFailed, msg));
                break;
            }
            if cl.cv.wait_until(&mut slots, deadline).timed_out() {
                let missing = slots
                    .get(key)
                    .map(|s| remote::missing(cl, *key, s))
                    .unwrap_or_default();
                let msg = format!(
                    "rank {} timed out in {} after {} s ({missing})",
                    comm.rank,
                    what(),
                    timeout().as_secs()
                );
                diag::record(Kind::InvalidState, call, msg.clone());
                *comm.async_error.lock() = Some((super::SYSTEM_ERROR, msg.clone()));
                // The operation is over: a part arriving late must not write into the
                // buffers of a rank that gave up, and it is not failed a second time.
                let local = cl.local_places(*key);
                if let Some(s) = slots.get_mut(key) {
                    s.done.get_or_insert(Err(Failure {
                        code: super::SYSTEM_ERROR,
                        msg: msg.clone(),
                    }));
                    s.finished += 1;
                    if s.finished >= local {
                        slots.remove(key);
                    }
                }
                cl.cv.notify_all();
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
pub(super) fn read(ptr: usize, len: usize, what: &str, call: &str) -> Result<Vec<u8>, String> {
    crate::memory::check(ptr, len, what, call, Code::IllegalAddress).map_err(|e| e.message)?;
    if len == 0 {
        return Ok(vec![]);
    }
    // SAFETY: `len` bytes at `ptr` lie inside a live allocation (checked under the execution
    // lock held by the caller).
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec())
}

/// Writes `data` to emulated memory (checked).
pub(super) fn write(ptr: usize, data: &[u8], what: &str, call: &str) -> Result<(), String> {
    crate::memory::check(ptr, data.len(), what, call, Code::IllegalAddress)
        .map_err(|e| e.message)?;
    if !data.is_empty() {
        // SAFETY: as in `read`, for writing.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr as *mut u8, data.len()) };
    }
    Ok(())
}
