//! Slots: the n-th operation of every rank (or the n-th message between two ranks) meets in
//! a slot; the stream operation that arrives at its slots, waits for them, and the last rank
//! to arrive moves all the data.

use super::comm::Comm;
use super::group::QueuedPart;
use super::reduce::{Dt, Red, reduce};
use super::{INVALID_USAGE, LAST_ERROR, NcclResult, UNHANDLED_CUDA_ERROR, fail, timeout};
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult};
use crate::stream::{self, Op, StreamCore, Work};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What one rank contributes to a slot.
#[derive(Clone, Debug)]
pub(super) enum Part {
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
    pub(super) fn name(&self) -> &'static str {
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
pub(super) enum SlotKey {
    Coll(u64),
    /// (sender, receiver, n-th message between them)
    P2p(usize, usize, u64),
}

#[derive(Default)]
pub(super) struct Slot {
    /// Per local participant: its part, its queued position.
    pub(super) parts: Vec<Option<Part>>,
    pub(super) queued: Vec<Option<(Arc<StreamCore>, u64)>>,
    pub(super) arrived: usize,
    /// Participants that have seen the result (the slot is dropped when all have).
    pub(super) finished: usize,
    pub(super) done: Option<Result<(), String>>,
}

/// The index of `part` (of `rank`) in its slot, and the slot's size. A message's slot has
/// two places, the send's (0) and the receive's (1), told apart by the part rather than by
/// the rank: a send to the rank itself and its receive are two parts of one slot.
pub(super) fn local(key: SlotKey, rank: usize, nranks: usize, part: &Part) -> (usize, usize) {
    match key {
        SlotKey::Coll(_) => (rank, nranks),
        SlotKey::P2p(..) => (usize::from(matches!(part, Part::Recv { .. })), 2),
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
        let (idx, n) = local(*key, comm.rank, comm.clique.nranks, part);
        let mut slots = comm.clique.slots.lock();
        let slot = slots.entry(*key).or_default();
        if slot.parts.is_empty() {
            slot.parts = vec![None; n];
            slot.queued = vec![None; n];
        }
        slot.parts[idx] = Some(part.clone());
    }
    let work_parts: Vec<(Arc<Comm>, SlotKey, usize)> = parts
        .iter()
        .map(|(c, k, p)| (c.clone(), *k, local(*k, c.rank, c.clique.nranks, p).0))
        .collect();
    let f: stream::HostWork = Arc::new(move |call: &str| run_parts(&work_parts, call));
    let seq = stream::submit(s, Op::new(Work::Host(f), call)).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        UNHANDLED_CUDA_ERROR
    })?;
    for (comm, key, part) in &parts {
        let (idx, _) = local(*key, comm.rank, comm.clique.nranks, part);
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
pub(super) fn run_parts(parts: &[(Arc<Comm>, SlotKey, usize)], call: &str) -> EmuResult<()> {
    for (comm, key, idx) in parts {
        let (cl, idx) = (&comm.clique, *idx);
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
    for (comm, key, _) in parts {
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

/// Every rank's send buffer of `len` bytes, in rank order (`send_of`: a part's send buffer,
/// `None` for a part of another collective).
fn send_buffers(
    parts: &[&Part],
    len: usize,
    send_of: impl Fn(&Part) -> Option<usize>,
    call: &str,
) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::with_capacity(parts.len());
    for (r, p) in parts.iter().enumerate() {
        let Some(send) = send_of(p) else {
            return Err("mixed collectives".into());
        };
        out.push(read(send, len, &format!("send buffer of rank {r}"), call)?);
    }
    Ok(out)
}

/// Moves a complete slot's data: every input is read before any output is written.
pub(super) fn perform(slot: &Slot, key: SlotKey, call: &str) -> Result<(), String> {
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
            let send_of = |p: &Part| match p {
                Part::Reduce { send, .. } => Some(*send),
                _ => None,
            };
            let inputs = send_buffers(&parts, *bytes, send_of, call)?;
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
            let send_of = |p: &Part| match p {
                Part::AllGather { send, .. } => Some(*send),
                _ => None,
            };
            let all = send_buffers(&parts, *bytes, send_of, call)?.concat();
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

pub(super) fn first_bytes(p: &Part) -> &usize {
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
