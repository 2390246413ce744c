//! Issuing a `ragged_all_to_all` (the dispatch table's arm): the group's offsets and sizes are
//! exchanged and brought to the host once per call, checked against the buffers, and the
//! rows move as one group of sends and receives on the group's communicator (NCCL/RCCL, the
//! host collectives alike: the [`Communicator`] trait's `send` / `recv` in a group).
//!
//! Per call, on the thunk's stream: two all-to-alls of one entry per member (each member's
//! `output_offsets` and `send_sizes` entry for this rank: where its rows land here and how
//! many come) into a small device staging buffer, with this rank's `input_offsets`,
//! `send_sizes` and `recv_sizes` copied beside them; one wait for the stream (polling the
//! deadline, the completion timeout and the communicator's asynchronous errors); one copy of
//! the staging buffer to the host. The staging buffer is kept with the execution's pooled
//! state, so steady-state calls allocate nothing.

use super::collective::communicator;
use super::run::Run;
use super::state::ExecState;
use crate::backend::{Buffer, Stream};
use crate::collectives::{Communicator, StreamKind};
use crate::error::{Error, Result};
use crate::ir::{MemorySpace, RaggedAllToAllThunk, RaggedIndices, RaggedParts};
use std::time::Duration;

/// The staging regions, one entry per member each, in this order.
const REGIONS: u64 = 5;

/// Issues `t` on `stream` for this rank of the run.
pub(super) fn issue(
    run: &Run<'_>,
    t: &RaggedAllToAllThunk,
    kind: StreamKind,
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<()> {
    let (rank, world) = run.rank_world();
    let group: Vec<u32> = if t.groups.is_empty() {
        (0..world).collect()
    } else {
        match t.groups.iter().find(|g| g.contains(&rank)) {
            Some(g) => g.clone(),
            // Not in any group: this rank skips the operation.
            None => return Ok(()),
        }
    };
    let n = group.len();
    let invalid = |m: String| Error::InvalidArgument(format!("ragged_all_to_all: {m}"));
    if t.entries() != n as u64 {
        return Err(invalid(format!(
            "{} entries per index array for a group of {n} ranks",
            t.entries()
        )));
    }
    let mut sorted = group.clone();
    sorted.sort_unstable();
    if sorted != group {
        return Err(Error::Unsupported {
            backend: "executor".into(),
            feature: format!("replica group {group:?} not in ascending rank order"),
        });
    }
    let me = group.iter().position(|r| *r == rank).unwrap_or(0);
    let _span = tracing::debug_span!(
        "collective",
        op = "ragged_all_to_all",
        dtype = %t.dtype,
        ranks = ?group
    )
    .entered();
    let comm = if n > 1 {
        Some(communicator(run, &group, kind)?)
    } else {
        None
    };
    let ix = indices(run, t, n, comm.as_deref(), stream, state)?;
    let parts = t.parts(n, me, &ix).map_err(|m| {
        invalid(format!(
            "{m} (rank {rank}, position {me} in a group of {n})"
        ))
    })?;
    move_rows(run, t, me, &parts, comm.as_deref(), stream)
}

/// Exchanges and reads this call's offsets and sizes (see the module's text).
fn indices(
    run: &Run<'_>,
    t: &RaggedAllToAllThunk,
    n: usize,
    comm: Option<&dyn Communicator>,
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<RaggedIndices> {
    let region = t.input_offsets.size;
    let total = region.checked_mul(REGIONS).ok_or_else(|| {
        Error::InvalidArgument("ragged_all_to_all: index arrays too large".into())
    })?;
    let staging = staging(run, state, total)?;
    let at = |i: u64| staging.offset(i * region);
    match comm {
        Some(c) => {
            c.all_to_all(stream, run.ptr(&t.output_offsets), at(0), 1, t.index_dtype)?;
            c.all_to_all(stream, run.ptr(&t.send_sizes), at(1), 1, t.index_dtype)?;
        }
        None => {
            stream.copy(run.ptr(&t.output_offsets), at(0), region)?;
            stream.copy(run.ptr(&t.send_sizes), at(1), region)?;
        }
    }
    stream.copy(run.ptr(&t.input_offsets), at(2), region)?;
    stream.copy(run.ptr(&t.send_sizes), at(3), region)?;
    stream.copy(run.ptr(&t.recv_sizes), at(4), region)?;
    wait(run, comm, stream, state)?;
    let mut host = vec![0u8; usize::try_from(total).unwrap_or(usize::MAX)];
    run.device.copy_to_host(staging, &mut host)?;
    let r = usize::try_from(region).unwrap_or(usize::MAX);
    let decode = |i: usize| t.decode(&host[i * r..(i + 1) * r]);
    let ix = RaggedIndices {
        offsets_from: decode(0),
        sizes_from: decode(1),
        input_offsets: decode(2),
        send_sizes: decode(3),
        recv_sizes: decode(4),
    };
    debug_assert!(ix.input_offsets.len() == n);
    Ok(ix)
}

/// The execution's staging buffer, at least `size` bytes of device memory (grown, never
/// shrunk).
fn staging(run: &Run<'_>, state: &mut ExecState, size: u64) -> Result<crate::backend::DevicePtr> {
    let fits = |b: &Buffer| b.size() >= size;
    if !state.ragged.as_ref().is_some_and(fits) {
        state.ragged = Some(run.device.allocate(size, 256, MemorySpace::Device)?);
    }
    match &state.ragged {
        Some(b) => Ok(b.ptr()),
        None => Err(Error::InvalidArgument(
            "internal: no ragged_all_to_all staging buffer".into(),
        )),
    }
}

/// Waits for `stream`'s work so far, failing on the deadline, the provider's completion
/// timeout or the communicator's asynchronous error (aborting the run's communicators then).
fn wait(
    run: &Run<'_>,
    comm: Option<&dyn Communicator>,
    stream: &dyn Stream,
    state: &ExecState,
) -> Result<()> {
    let mut sleep = Duration::from_micros(10);
    while !stream.query()? {
        run.check_stop(state)?;
        let failed = comm.and_then(|c| c.async_error().err());
        if let Some(e) = failed {
            let why = format!(
                "rank {}: ragged_all_to_all offsets exchange: {e}",
                run.rank_world().0
            );
            run.abort_communicators(&why);
            return Err(Error::backend("executor", "collective", why));
        }
        if let Some(stall) = run.stalled() {
            let why = format!(
                "rank {}: ragged_all_to_all offsets exchange did not complete: {stall}",
                run.rank_world().0
            );
            run.freeze_progress();
            run.abort_communicators(&why);
            return Err(Error::backend("executor", "collective timeout", why));
        }
        std::thread::sleep(sleep);
        sleep = (sleep * 2).min(Duration::from_millis(2));
    }
    Ok(())
}

/// This rank's own part as a copy on the stream, the others as one group of sends and
/// receives (empty parts skipped on both sides alike: the sizes agree).
fn move_rows(
    run: &Run<'_>,
    t: &RaggedAllToAllThunk,
    me: usize,
    parts: &RaggedParts,
    comm: Option<&dyn Communicator>,
    stream: &dyn Stream,
) -> Result<()> {
    let (operand, output) = (run.ptr(&t.operand), run.ptr(&t.output));
    let es = t.dtype.size() as u64;
    let (s, r) = (parts.sends[me], parts.recvs[me]);
    if s.bytes > 0 {
        stream.copy(operand.offset(s.offset), output.offset(r.offset), s.bytes)?;
    }
    let Some(comm) = comm else {
        return Ok(());
    };
    comm.group_start()?;
    let mut result = Ok(());
    for (j, (s, r)) in parts.sends.iter().zip(&parts.recvs).enumerate() {
        if j == me {
            continue;
        }
        if s.bytes > 0 {
            let p = operand.offset(s.offset);
            result = result.and_then(|()| comm.send(stream, p, s.bytes / es, t.dtype, j));
        }
        if r.bytes > 0 {
            let p = output.offset(r.offset);
            result = result.and_then(|()| comm.recv(stream, p, r.bytes / es, t.dtype, j));
        }
    }
    comm.group_end_on(stream).and(result)
}
