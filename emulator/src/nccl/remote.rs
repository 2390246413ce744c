//! The slot side of a clique that spans processes: what a local part sends when its stream
//! reaches it, what a part received from another process does to its slot, and failing the
//! operations that wait for a process that is gone.
//!
//! - A collective part sends its metadata to every other process of the clique, with its
//!   input to the processes that need it (all of them for all-reduce, all-gather and
//!   reduce-scatter; for a broadcast only the root's input travels; for a reduce only to the
//!   root's process). Every process then performs the slot itself, writing only its ranks'
//!   outputs.
//! - A send whose receiver is in another process sends its input there; the receiver's
//!   process performs the message and answers `Done` (success, or the failure it recorded),
//!   which completes the send, so a send without a receive, or of another size, fails on
//!   both sides as in one process.
//! - Messages are sent after the slot lock is released ([`Outbox`]).

use super::comm::{Clique, describe};
use super::net::Net;
use super::perform::perform;
use super::types::{Failure, Meta, OpKind, Remote, Slot, SlotKey, rank_at, read, slot_size};
use super::wire::Msg;
use crate::diag::{self, Kind};
use crate::stream;
use std::sync::Arc;

/// Messages to send once the slot lock is released.
#[derive(Default)]
pub(super) struct Outbox(Vec<(Arc<Net>, u32, Msg)>);

impl Outbox {
    fn push(&mut self, net: &Arc<Net>, pid: u32, m: Msg) {
        self.0.push((net.clone(), pid, m));
    }

    /// Sends the messages (waiting for each to be written).
    pub(super) fn send(self) {
        for (net, pid, m) in self.0 {
            net.send(pid, &m);
        }
    }

    /// Queues the messages (a reader thread must not wait for a write).
    pub(super) fn post(self) {
        for (net, pid, m) in self.0 {
            net.post(pid, m);
        }
    }
}

/// Local part `place` of `slot` arrived: its metadata and input go where they are needed.
pub(super) fn arrived(
    cl: &Clique,
    net: &Arc<Net>,
    key: SlotKey,
    place: usize,
    slot: &Slot,
    out: &mut Outbox,
) {
    let Some(part) = &slot.parts[place] else {
        return;
    };
    let meta = part.meta;
    // (process, whether it needs the input)
    let dests: Vec<(u32, bool)> = match key {
        SlotKey::Coll(_) => net
            .remote_pids()
            .into_iter()
            .map(|pid| {
                let needs = match meta.kind {
                    OpKind::Broadcast => place == meta.root,
                    OpKind::Reduce => net.owner(meta.root) == Some(pid),
                    _ => true,
                };
                (pid, needs)
            })
            .collect(),
        SlotKey::P2p(_, r, _) => match net.owner(r) {
            Some(p) if place == 0 && p != net.pid => vec![(p, true)],
            _ => vec![],
        },
    };
    if dests.is_empty() {
        return;
    }
    let input = dests.iter().any(|d| d.1).then(|| {
        let _x = stream::EXEC.lock();
        let what = format!("send buffer of rank {}", rank_at(key, place));
        match meta.input_len(cl.nranks) {
            Some(len) => read(part.send, len, &what, meta.kind.name()),
            None => Err("the input size overflows".to_string()),
        }
    });
    for (pid, needs) in dests {
        let input = match (&input, needs) {
            (Some(Ok(d)), true) => Ok(Some(d.clone())),
            (Some(Err(e)), true) => Err(e.clone()),
            _ => Ok(None),
        };
        let place = place as u32;
        out.push(
            net,
            pid,
            Msg::Data {
                key,
                place,
                meta,
                input,
            },
        );
    }
}

/// This process performed `key`: a message whose sender is elsewhere is answered.
pub(super) fn performed(
    _cl: &Clique,
    net: &Arc<Net>,
    key: SlotKey,
    r: &Result<(), Failure>,
    out: &mut Outbox,
) {
    if let SlotKey::P2p(s, _, _) = key
        && let Some(p) = net.owner(s).filter(|p| *p != net.pid)
    {
        let result = r.clone().map_err(|f| (f.code, f.msg));
        out.push(net, p, Msg::Done { key, result });
    }
}

/// Process `from` sent the part at `place` of `key`.
pub(super) fn on_data(
    cl: &Arc<Clique>,
    net: &Arc<Net>,
    from: u32,
    key: SlotKey,
    place: usize,
    meta: Meta,
    input: Result<Option<Vec<u8>>, String>,
) -> Result<(), String> {
    let n = slot_size(key, cl.nranks);
    if let SlotKey::P2p(s, r, _) = key {
        let ours = r < cl.nranks && net.is_local(r);
        if s >= cl.nranks || !ours || place != 0 || meta.kind != OpKind::Send {
            return Err(format!("a message part for {key:?} at place {place}"));
        }
    }
    if place >= n {
        return Err(format!("a part for place {place} of {n}"));
    }
    let rank = rank_at(key, place);
    if net.owner(rank) != Some(from) {
        return Err(format!("the part of rank {rank}, which it does not hold"));
    }
    let mut out = Outbox::default();
    let result = {
        let mut slots = cl.slots.lock();
        let slot = slots.entry(key).or_insert_with(|| Slot::sized(n));
        if slot.parts[place].is_some() || slot.remote[place].is_some() {
            return Err(format!("the part of rank {rank} for {key:?} twice"));
        }
        slot.remote[place] = Some(Remote { meta, input });
        // As a local arrival does: the local ranks' streams may run up to their parts.
        slot.release(None);
        cl.cv.notify_all();
        if slot.done.is_some() || slot.filled() < n {
            return Ok(());
        }
        let r = perform(slot, key, cl);
        performed(cl, net, key, &r, &mut out);
        r
    };
    // The answer to the sender is queued before the local waiter learns the result (and a
    // process flushes what is queued when it exits or leaves the clique).
    out.post();
    let mut slots = cl.slots.lock();
    if let Some(slot) = slots.get_mut(&key) {
        slot.done.get_or_insert(result);
    }
    cl.cv.notify_all();
    Ok(())
}

/// Process `from` performed (or failed) a message this process sent.
pub(super) fn on_done(
    cl: &Arc<Clique>,
    net: &Arc<Net>,
    from: u32,
    key: SlotKey,
    result: Result<(), (i32, String)>,
) -> Result<(), String> {
    let SlotKey::P2p(s, r, _) = key else {
        return Err("a completion for a collective".into());
    };
    if net.owner(r) != Some(from) || !net.is_local(s) {
        return Err(format!(
            "a completion for {key:?}, which is not its to complete"
        ));
    }
    let mut slots = cl.slots.lock();
    if let Some(slot) = slots.get_mut(&key)
        && slot.done.is_none()
    {
        slot.done = Some(result.map_err(|(code, msg)| {
            let msg = format!("{msg} (reported by process {from}, which holds rank {r})");
            diag::record(Kind::InvalidValue, "ncclSend", msg.clone());
            Failure { code, msg }
        }));
        cl.cv.notify_all();
    }
    Ok(())
}

/// Whether `slot` waits for a process that is gone: the failure, recorded.
pub(super) fn dead_needed(cl: &Clique, net: &Net, key: SlotKey, slot: &Slot) -> Option<Failure> {
    for place in 0..slot.parts.len() {
        if slot.parts[place].is_some() || slot.remote[place].is_some() {
            continue;
        }
        let rank = rank_at(key, place);
        let Some(pid) = net.owner(rank).filter(|p| *p != net.pid) else {
            continue;
        };
        if let Some(why) = net.gone(pid) {
            let kind = slot
                .parts
                .iter()
                .flatten()
                .map(|p| p.meta.kind)
                .next()
                .unwrap_or(OpKind::AllReduce);
            let msg = format!(
                "{} failed: it needs rank {rank}, and {why}",
                describe(cl, key, kind)
            );
            diag::record(Kind::InvalidState, kind.name(), msg.clone());
            return Some(Failure {
                code: super::REMOTE_ERROR,
                msg,
            });
        }
    }
    None
}

/// Process `pid` is gone: every waiting operation that needs it fails now.
pub(super) fn fail_needing(cl: &Clique, net: &Net) {
    let mut slots = cl.slots.lock();
    for (key, slot) in slots.iter_mut() {
        if slot.done.is_none()
            && slot.reached.iter().any(|r| *r)
            && let Some(f) = dead_needed(cl, net, *key, slot)
        {
            slot.done = Some(Err(f));
        }
    }
    cl.cv.notify_all();
}

/// What a timed-out operation still waits for.
pub(super) fn missing(cl: &Clique, key: SlotKey, slot: &Slot) -> String {
    let net = cl.net();
    let mut waiting = vec![];
    for place in 0..slot.parts.len() {
        if slot.reached[place] || slot.remote[place].is_some() {
            continue;
        }
        let rank = rank_at(key, place);
        let what = match (key, place) {
            (SlotKey::P2p(..), 1) => format!("the receive of rank {rank}"),
            (SlotKey::P2p(..), _) => format!("the send of rank {rank}"),
            _ => format!("rank {rank}"),
        };
        let remote = net.and_then(|n| n.owner(rank).filter(|p| *p != n.pid));
        waiting.push(match remote {
            Some(pid) => format!("{what} (process {pid})"),
            None if slot.parts[place].is_some() => {
                format!("{what} (issued; its stream has not reached it)")
            }
            None => format!("{what} (never issued)"),
        });
    }
    format!("waiting for {}", waiting.join(", "))
}
