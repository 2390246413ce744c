//! `ncclCommSplit`: the ranks of a communicator regroup by color into new communicators.
//!
//! Every rank registers (color, key) in the round's entry (ranks in other processes send
//! theirs: `Split` messages); once every rank's is there, each process computes the same
//! groups. A color whose ranks are all in this process becomes a clique at once; a color with
//! ranks in other processes is a new clique made from an id derived from the parent's, the
//! round and the color (the same in every process), which its ranks join as
//! `ncclCommInitRank` would.

use super::comm::{
    COMMS, Clique, Local, NewComm, SplitRound, new_clique, new_comm, ready_comm, released,
};
use super::deferred::GROUP;
use super::init::{config_blocking, derived_id, join, wait_ready, watch};
use super::net::Net;
use super::types::{Failure, Init};
use super::wire::Msg;
use super::{
    IN_PROGRESS, INTERNAL_ERROR, INVALID_ARGUMENT, INVALID_USAGE, NcclResult, REMOTE_ERROR,
    SUCCESS, SYSTEM_ERROR, api, fail, timeout,
};
use crate::diag::Kind;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// `NCCL_SPLIT_NOCOLOR`.
const NOCOLOR: c_int = -1;

const C: &str = "ncclCommSplit";

/// Registers rank `rank`'s entry of `round`, and computes the groups once all are there.
fn enter(
    cl: &Clique,
    r: &mut SplitRound,
    round: u64,
    rank: usize,
    entry: (c_int, c_int, Option<Local>),
) -> Result<(), String> {
    if r.entries.is_empty() {
        r.entries = vec![None; cl.nranks];
    }
    if r.entries[rank].is_some() {
        return Err(format!("rank {rank} entered split round {round} twice"));
    }
    r.entries[rank] = Some(entry);
    if r.entries.iter().any(Option::is_none) {
        return Ok(());
    }
    let entries: Vec<(c_int, c_int, Option<Local>)> = r.entries.iter().flatten().cloned().collect();
    let mut out: Vec<NewComm> = vec![(0, None); cl.nranks];
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
        let all_local = members.iter().all(|(_, old)| entries[*old].2.is_some());
        if all_local {
            let sub = new_clique(members.len(), None, true);
            for (new_rank, (_, old)) in members.iter().enumerate() {
                if let Some((ctx, blocking)) = &entries[*old].2 {
                    let h = new_comm(&sub, new_rank, ctx.clone(), *blocking);
                    out[*old] = (h, Some((sub.clone(), new_rank)));
                }
            }
            continue;
        }
        let Some(parent) = cl.uid else {
            return Err("a clique across processes without a unique id".into());
        };
        let uid = derived_id(&parent, round, col);
        for (new_rank, (_, old)) in members.iter().enumerate() {
            if let Some((ctx, blocking)) = &entries[*old].2 {
                let (h, sub) = join(uid, members.len(), new_rank, ctx.clone(), *blocking, C)
                    .map_err(|_| {
                        format!("rank {old} could not join its new clique (color {col})")
                    })?;
                out[*old] = (h, Some((sub, new_rank)));
            }
        }
    }
    r.result = Some(out);
    cl.split_cv.notify_all();
    Ok(())
}

/// A rank in process `from` entered split round `round`.
pub(super) fn on_remote(
    cl: &Arc<Clique>,
    net: &Net,
    from: u32,
    round: u64,
    rank: usize,
    color: c_int,
    key: c_int,
) -> Result<(), String> {
    if rank >= cl.nranks || net.owner(rank) != Some(from) {
        return Err(format!(
            "a split entry for rank {rank}, which it does not hold"
        ));
    }
    let mut g = cl.splits.lock();
    let r = g.entry(round).or_default();
    if let Err(e) = enter(cl, r, round, rank, (color, key, None)) {
        r.failed.get_or_insert(Failure {
            code: INTERNAL_ERROR,
            msg: e,
        });
    }
    cl.split_cv.notify_all();
    Ok(())
}

/// Wakes the ranks waiting in a split (a peer process is gone).
pub(super) fn wake(cl: &Clique) {
    let _g = cl.splits.lock();
    cl.split_cv.notify_all();
}

/// Why round `r` cannot complete: a rank it waits for is in a process that is gone.
fn blocked(cl: &Clique, r: &SplitRound) -> Option<String> {
    let net = cl.net()?;
    (0..cl.nranks)
        .filter(|rank| r.entries.get(*rank).is_none_or(Option::is_none))
        .find_map(|rank| net.owner(rank).and_then(|p| net.gone(p)))
}

/// `ncclCommSplit`: every rank of `comm` calls it (one thread each); ranks of one color form a
/// new communicator, ordered by `key` then by their old rank. A null `config` inherits the
/// parent's blocking mode; a non-blocking new communicator may be returned still forming
/// (`ncclInProgress`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: usize,
    color: c_int,
    key: c_int,
    newcomm: *mut usize,
    config: *mut c_void,
) -> NcclResult {
    api(C, || {
        let c = match ready_comm(comm, C) {
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
        let blocking = match config_blocking(config, C) {
            Ok(b) => b.unwrap_or(c.blocking),
            Err(r) => return r,
        };
        let cl = c.clique.clone();
        let round = c.next_split.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + timeout();
        {
            let mut g = cl.splits.lock();
            let r = g.entry(round).or_default();
            let local = Some((c.ctx.clone(), blocking));
            if let Err(e) = enter(&cl, r, round, c.rank, (color, key, local)) {
                return fail(
                    INVALID_USAGE,
                    C,
                    Kind::InvalidState,
                    format!("{}: {e}", cl.label()),
                );
            }
        }
        if let Some(net) = cl.net() {
            let m = Msg::Split {
                round,
                rank: c.rank as u32,
                color,
                key,
            };
            for pid in net.remote_pids() {
                net.send(pid, &m);
            }
        }
        let locals = match cl.net() {
            Some(n) => (0..cl.nranks).filter(|r| n.is_local(*r)).count(),
            None => cl.nranks,
        };
        let mut g = cl.splits.lock();
        let (h, sub) = loop {
            let Some(r) = g.get_mut(&round) else {
                return fail(INTERNAL_ERROR, C, Kind::InvalidState, "the split vanished");
            };
            if let Some(f) = &r.failed {
                let msg = format!("{}: split round {round} failed: {}", cl.label(), f.msg);
                return fail(f.code, C, Kind::InvalidState, msg);
            }
            if let Some(res) = &r.result {
                let got = res[c.rank].clone();
                r.taken += 1;
                if r.taken == locals {
                    g.remove(&round);
                }
                break got;
            }
            if cl.aborted.load(Ordering::SeqCst) {
                let msg = format!(
                    "rank {} of {}: the communicator was aborted",
                    c.rank,
                    cl.label()
                );
                return fail(REMOTE_ERROR, C, Kind::InvalidState, msg);
            }
            if let Some(why) = blocked(&cl, r) {
                let msg = format!("rank {} of {}: {why}", c.rank, cl.label());
                return fail(REMOTE_ERROR, C, Kind::InvalidState, msg);
            }
            if cl.split_cv.wait_until(&mut g, deadline).timed_out() {
                let msg = format!(
                    "rank {} of {} timed out waiting for the other ranks to split",
                    c.rank,
                    cl.label()
                );
                return fail(SYSTEM_ERROR, C, Kind::InvalidState, msg);
            }
        };
        drop(g);
        let Some((sub, new_rank)) = sub else {
            // SAFETY: the caller's non-null out-pointer.
            unsafe { *newcomm = 0 };
            return SUCCESS;
        };
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *newcomm = h };
        if matches!(sub.init_state(), Init::Ready) {
            return SUCCESS;
        }
        if !blocking {
            watch(sub, new_rank, C);
            return IN_PROGRESS;
        }
        match wait_ready(&sub, new_rank, deadline, C) {
            Ok(()) => SUCCESS,
            Err(r) => {
                // SAFETY: as above.
                unsafe { *newcomm = 0 };
                if let Ok(x) = COMMS.remove(h, C) {
                    released(&x);
                }
                r
            }
        }
    })
}
