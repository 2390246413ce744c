//! The executor's one dispatch table over thunk kinds: what each kind becomes at load (an
//! [`Op`], [`op`]: the planner's [`PlanOp`](super::plan::PlanOp)) and how each step is
//! issued on a stream ([`step`]: the run's [`IssueStep`](super::run::IssueStep)). The loader
//! hands both to the planner and the run, which therefore name no thunk kind. Everything
//! else the executor needs of a thunk (its name, label, buffer uses, scope, trace
//! description) comes from the kind's home in the IR through [`crate::ir::ThunkKind`]. The
//! kinds' issue functions take the [`Run`]: the collectives' in `collective.rs`, command
//! buffers in `command_buffer.rs`, `while` / `conditional` inside a recording in
//! `device_control.rs` (host-driven: the run's own `host_while` / `host_conditional`),
//! custom calls in `custom_call.rs`.

use super::plan::{Op, Planner, Step};
use super::run::Run;
use super::state::ExecState;
use super::{collective, command_buffer, custom_call, device_control, ragged};
use crate::backend::{LaunchArg, LaunchDims, Stream};
use crate::collectives::StreamKind;
use crate::error::{Error, Result};
use crate::ir::{KernelArg, MemsetPattern, Thunk, ThunkPath};
use std::collections::BTreeSet;

/// What `t` (a schedulable thunk) becomes at load on the planner's device (the planner's
/// [`PlanOp`](super::plan::PlanOp)).
pub(super) fn op(planner: &mut Planner<'_>, t: &Thunk, path: &ThunkPath) -> Result<Op> {
    // Copies, memsets and gemms are plain stream operations a command buffer may record;
    // the communication steps and the rank id are not.
    let direct = |recordable| Op::Direct {
        thunk: t.clone(),
        recordable,
    };
    Ok(match t {
        Thunk::Copy(_) | Thunk::Memset(_) => direct(true),
        Thunk::Collective(_)
        | Thunk::CollectivePermute(_)
        | Thunk::Send(_)
        | Thunk::Recv(_)
        | Thunk::RankId(_)
        | Thunk::ExecutionSeed(_)
        | Thunk::RaggedAllToAll(_) => direct(false),
        Thunk::Gemm(g) => {
            if !planner
                .device()
                .capabilities()
                .gemm_dtypes
                .contains(&g.dtype)
            {
                return Err(Error::Unsupported {
                    backend: planner.device().backend_name().into(),
                    feature: format!("{} gemm", g.dtype),
                }
                .at_thunk(path, "gemm"));
            }
            direct(true)
        }
        Thunk::Kernel(k) => Op::Kernel {
            handle: planner.kernel(&k.module, &k.name, path)?,
            dims: LaunchDims {
                grid: k.grid,
                block: k.block,
                shared_mem: k.shared_mem,
            },
            kernel: k.clone(),
        },
        Thunk::While(w) => Op::While {
            cond: planner.list(&w.cond, path, t, 0)?,
            pred: w.pred,
            body: planner.list(&w.body, path, t, 1)?,
            trip_count: w.trip_count,
        },
        Thunk::Conditional(c) => Op::Conditional {
            index: c.index,
            index_type: c.index_type,
            branches: (0..c.branches.len())
                .map(|b| planner.list(&c.branches[b], path, t, b))
                .collect::<Result<_>>()?,
        },
        Thunk::CommandBuffer(c) => {
            let id = planner.command_buffer_id();
            let bindings: BTreeSet<u32> = t
                .all_buffer_uses()
                .iter()
                .map(|u| u.slice.allocation)
                .collect();
            Op::CommandBuffer {
                id,
                body: planner.list(&c.body, path, t, 0)?,
                bindings: bindings.into_iter().collect(),
            }
        }
        Thunk::CustomCall(c) => Op::CustomCall(custom_call::resolve(planner.device(), c, path)?),
        Thunk::Sequence(_) | Thunk::AsyncStart(_) | Thunk::AsyncDone(_) => {
            return Err(Error::InvalidArgument(format!(
                "internal: {} at {path} is not a schedulable step",
                t.kind()
            )));
        }
    })
}

/// Issues `step` on `stream` in `run` (the run's [`IssueStep`](super::run::IssueStep)).
pub(super) fn step(
    run: &Run<'_>,
    step: &Step,
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<()> {
    match &step.op {
        Op::Direct { thunk: t, .. } => {
            match (run.progress, t.is_collective() && run.numbering.get()) {
                (Some((p, rank)), true) => {
                    p.issue(rank, run.device, stream, &step.path, &step.label)?;
                    let r = direct(run, t, step.stream_kind, stream, state);
                    r.and(p.issued(rank, stream))
                }
                _ => direct(run, t, step.stream_kind, stream, state),
            }
        }
        Op::Kernel {
            handle,
            dims,
            kernel,
        } => {
            let la: smallvec::SmallVec<[LaunchArg; 8]> = kernel
                .args
                .iter()
                .map(|a| match a {
                    KernelArg::Buffer { slice, .. } => LaunchArg::Buffer {
                        ptr: run.ptr(slice),
                        len: slice.size,
                    },
                    KernelArg::Scalar(s) => LaunchArg::Scalar(*s),
                })
                .collect();
            stream.launch(handle, *dims, &la)
        }
        // Inside a recording, control flow becomes conditional graph nodes.
        Op::While {
            cond,
            pred,
            body,
            trip_count,
        } if run.capturing.get() => {
            device_control::device_while(run, cond, pred, body, *trip_count, stream, state)
        }
        Op::Conditional {
            index,
            index_type,
            branches,
        } if run.capturing.get() => {
            device_control::device_conditional(run, index, *index_type, branches, stream, state)
        }
        Op::While {
            cond,
            pred,
            body,
            trip_count,
        } => run.host_while(step, (cond, pred, body, *trip_count), stream, state),
        Op::Conditional {
            index,
            index_type,
            branches,
        } => run.host_conditional(index, *index_type, branches, stream, state),
        Op::CustomCall(c) => custom_call::issue(c, &|s| run.ptr(s), run.device, stream, &step.path),
        Op::CommandBuffer { id, body, bindings } => {
            // A command buffer's steps are recorded once and replayed: not numbered in the
            // progress record.
            let numbering = run.numbering.replace(false);
            let r = command_buffer::issue(run, *id, body, bindings, stream, state);
            run.numbering.set(numbering);
            r
        }
    }
}

/// Issues a thunk the planner left as written ([`Op::Direct`]).
fn direct(
    run: &Run<'_>,
    t: &Thunk,
    kind: StreamKind,
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<()> {
    match t {
        Thunk::Copy(c) => stream.copy(run.ptr(&c.src), run.ptr(&c.dst), c.src.size),
        Thunk::Memset(m) => stream.memset(run.ptr(&m.dst), m.dst.size, m.pattern),
        Thunk::Gemm(g) => {
            stream.gemm(&g.with_operands(run.range(&g.a), run.range(&g.b), run.range(&g.c)))
        }
        Thunk::Collective(c) => collective::collective(run, c, kind, stream),
        Thunk::CollectivePermute(p) => {
            collective::permute(run, p.src, p.dst, p.dtype, &p.pairs, kind, stream)
        }
        Thunk::Send(s) => collective::send(run, &s.src, s.dtype, s.peer, kind, stream),
        Thunk::Recv(r) => collective::recv(run, &r.dst, r.dtype, r.peer, kind, stream),
        Thunk::RankId(r) => {
            stream.memset(run.ptr(&r.dst), 4, MemsetPattern::U32(run.rank_world().0))
        }
        Thunk::ExecutionSeed(e) => {
            // Two 4-byte halves, little-endian: every backend has 32-bit memsets.
            let dst = run.ptr(&e.dst);
            stream.memset(dst, 4, MemsetPattern::U32(run.seed as u32))?;
            stream.memset(
                dst.offset(4),
                4,
                MemsetPattern::U32((run.seed >> 32) as u32),
            )
        }
        Thunk::RaggedAllToAll(r) => ragged::issue(run, r, kind, stream, state),
        Thunk::Kernel(_)
        | Thunk::While(_)
        | Thunk::Conditional(_)
        | Thunk::CommandBuffer(_)
        | Thunk::CustomCall(_)
        | Thunk::Sequence(_)
        | Thunk::AsyncStart(_)
        | Thunk::AsyncDone(_) => Err(Error::InvalidArgument(format!(
            "internal: a {} thunk is planned, not run as written",
            t.kind()
        ))),
    }
}
