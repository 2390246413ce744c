//! Slots: the n-th operation of every rank (or the n-th message between two ranks) meets in
//! a slot; the stream operation that arrives at its slots, waits for them, and whoever
//! completes a slot (the last local rank to arrive, or the reader of the last remote part
//! when the clique spans processes) moves all the data. The slot's data is in `types`.

use super::comm::{Comm, describe};
use super::deferred::QueuedPart;
use super::perform::perform;
use super::remote::{self, Outbox};
use super::types::{Failure, OpKind, Slot, SlotKey, place, slot_size};
use super::{INVALID_USAGE, LAST_ERROR, NcclResult, UNHANDLED_CUDA_ERROR, fail, timeout};
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult};
use crate::stream::{self, Op, StreamCore, Work};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

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
