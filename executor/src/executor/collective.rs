//! The communication steps of a [`Run`], issued by the dispatch table: cliques acquired from
//! the SPMD rank's provider (each communicator noted in the run, to be aborted if it fails),
//! collectives over replica groups, collective permutes, point-to-point sends and receives.

use super::run::Run;
use crate::backend::Stream;
use crate::collectives::{CliqueKey, Communicator, StreamKind};
use crate::error::{Error, Result};
use crate::ir::{
    CollectiveOp, CollectiveThunk, DType, MemsetPattern, Slice, check_collective_sizes,
};
use std::sync::Arc;

pub(super) fn communicator(
    run: &Run<'_>,
    ranks: &[u32],
    kind: StreamKind,
) -> Result<Arc<dyn Communicator>> {
    let (rank, world) = run.rank_world();
    let Some(ctx) = run.collectives else {
        return Err(Error::InvalidArgument(format!(
            "a collective among ranks {ranks:?} needs an SPMD run (this execution is rank 0 of a world of 1)"
        )));
    };
    if let Some(bad) = ranks.iter().find(|r| **r >= world) {
        return Err(Error::InvalidArgument(format!(
            "rank {bad} does not exist in a world of {world}"
        )));
    }
    let key = CliqueKey::new(ranks.iter().map(|r| *r as usize), kind)?;
    let _clique = tracing::debug_span!("clique", key = %key, rank).entered();
    let t = run.trace.as_ref().map(|_| std::time::Instant::now());
    let comm = ctx.cliques.acquire(&key, rank as usize)?;
    if let (Some(tr), Some(t)) = (&run.trace, t) {
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        tr.add_clique_wait(ns);
    }
    let mut used = run.used.borrow_mut();
    if !used.iter().any(|c| Arc::ptr_eq(c, &comm)) {
        used.push(comm.clone());
    }
    Ok(comm)
}

/// Registers the collective memory `slices` lie in with `comm` (the first time) and notes in
/// the trace when the collective's buffers are all registered.
fn note_registered(run: &Run<'_>, comm: &Arc<dyn Communicator>, slices: &[&Slice]) -> Result<()> {
    let Some(memory) = run.collective_memory else {
        return Ok(());
    };
    if let Some(kind) = memory.register(comm, slices)?
        && let Some(tr) = &run.trace
    {
        tr.note_registered(kind);
    }
    Ok(())
}

/// The clique of this rank and `peer`, and the peer's position in it.
fn pair(run: &Run<'_>, peer: u32, kind: StreamKind) -> Result<(Arc<dyn Communicator>, usize)> {
    let (rank, _) = run.rank_world();
    if peer == rank {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} cannot send to or receive from itself"
        )));
    }
    let mut ranks = vec![rank, peer];
    ranks.sort_unstable();
    let comm = communicator(run, &ranks, kind)?;
    let pos = usize::from(ranks[0] != peer);
    Ok((comm, pos))
}

/// Issues collective `c` among this rank's replica group (a copy in a group of one).
pub(super) fn collective(
    run: &Run<'_>,
    c: &CollectiveThunk,
    kind: StreamKind,
    stream: &dyn Stream,
) -> Result<()> {
    let (rank, world) = run.rank_world();
    let group: Vec<u32> = if c.groups.is_empty() {
        (0..world).collect()
    } else {
        match c.groups.iter().find(|g| g.contains(&rank)) {
            Some(g) => g.clone(),
            // Not in any group: this rank skips the collective.
            None => return Ok(()),
        }
    };
    let n = group.len() as u64;
    check_collective_sizes(c, n).map_err(|(field, m)| {
        Error::InvalidArgument(format!("{field}: {m} (group of {n} ranks)"))
    })?;
    let es = c.dtype.size() as u64;
    let (src, dst) = (run.ptr(&c.src), run.ptr(&c.dst));
    if n == 1 {
        // A group of one: every collective is a copy (or nothing, in place).
        if src != dst {
            stream.copy(src, dst, c.dst.size.min(c.src.size))?;
        }
        return Ok(());
    }
    let mut sorted = group.clone();
    sorted.sort_unstable();
    if sorted != group {
        return Err(Error::Unsupported {
            backend: "executor".into(),
            feature: format!("replica group {group:?} not in ascending rank order"),
        });
    }
    let _span = tracing::debug_span!(
        "collective",
        op = c.op.name(),
        dtype = %c.dtype,
        bytes = c.src.size,
        ranks = ?sorted
    )
    .entered();
    let comm = communicator(run, &sorted, kind)?;
    note_registered(run, &comm, &[&c.src, &c.dst])?;
    match c.op {
        CollectiveOp::AllReduce { op } => {
            comm.all_reduce(stream, src, dst, c.src.size / es, c.dtype, op)
        }
        CollectiveOp::AllGather => comm.all_gather(stream, src, dst, c.src.size / es, c.dtype),
        CollectiveOp::ReduceScatter { op } => {
            comm.reduce_scatter(stream, src, dst, c.dst.size / es, c.dtype, op)
        }
        CollectiveOp::AllToAll => comm.all_to_all(stream, src, dst, c.src.size / es / n, c.dtype),
        CollectiveOp::Broadcast { root } => {
            comm.broadcast(stream, src, dst, c.src.size / es, c.dtype, root as usize)
        }
    }
}

/// Issues a collective permute: sends `src` to the rank `pairs` names for this rank and
/// receives `dst` from the one that names this rank (zeroed when none does).
pub(super) fn permute(
    run: &Run<'_>,
    src: Slice,
    dst: Slice,
    dtype: DType,
    pairs: &[(u32, u32)],
    kind: StreamKind,
    stream: &dyn Stream,
) -> Result<()> {
    let (rank, world) = run.rank_world();
    let to = pairs.iter().find(|p| p.0 == rank).map(|p| p.1);
    let from = pairs.iter().find(|p| p.1 == rank).map(|p| p.0);
    if from.is_none() {
        stream.memset(run.ptr(&dst), dst.size, MemsetPattern::U8(0))?;
    }
    let count = elements(&src, dtype);
    if world == 1 {
        return match (to, from) {
            (Some(0), Some(0)) => stream.copy(run.ptr(&src), run.ptr(&dst), src.size),
            (None, None) => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "collective_permute pairs {pairs:?} name ranks outside a world of 1"
            ))),
        };
    }
    // Every rank joins the world clique (its creation is collective), then sends and
    // receives as one group.
    let all: Vec<u32> = (0..world).collect();
    let comm = communicator(run, &all, kind)?;
    note_registered(run, &comm, &[&src, &dst])?;
    comm.group_start()?;
    let mut r = Ok(());
    if let Some(t) = to {
        r = r.and(comm.send(stream, run.ptr(&src), count, dtype, t as usize));
    }
    if let Some(f) = from {
        r = r.and(comm.recv(stream, run.ptr(&dst), count, dtype, f as usize));
    }
    comm.group_end_on(stream).and(r)
}

/// Sends `src` to global rank `peer`.
pub(super) fn send(
    run: &Run<'_>,
    src: &Slice,
    dtype: DType,
    peer: u32,
    kind: StreamKind,
    stream: &dyn Stream,
) -> Result<()> {
    let (comm, pos) = pair(run, peer, kind)?;
    comm.send(stream, run.ptr(src), elements(src, dtype), dtype, pos)
}

/// Receives `dst` from global rank `peer`.
pub(super) fn recv(
    run: &Run<'_>,
    dst: &Slice,
    dtype: DType,
    peer: u32,
    kind: StreamKind,
    stream: &dyn Stream,
) -> Result<()> {
    let (comm, pos) = pair(run, peer, kind)?;
    comm.recv(stream, run.ptr(dst), elements(dst, dtype), dtype, pos)
}

/// The number of `dtype` elements in `s`.
fn elements(s: &Slice, dtype: DType) -> u64 {
    s.size / dtype.size() as u64
}
