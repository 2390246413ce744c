//! The executor's one dispatch table over thunk kinds: what each kind becomes at load (an
//! [`Op`]) and how the kinds run as written are issued on a stream. Everything else the
//! executor needs of a thunk (its name, label, buffer uses, scope, trace description) comes
//! from the kind's home in the IR through [`crate::ir::ThunkKind`]; the composite kinds'
//! execution lives in `run.rs` (host-driven `while` / `conditional`), `device_control.rs`
//! (their conditional graph nodes), `command_buffer.rs` and `custom_call.rs`; the
//! collectives' in `collective.rs`.

use super::plan::{Op, Planner};
use super::run::Run;
use crate::backend::{LaunchDims, Stream};
use crate::collectives::StreamKind;
use crate::error::{Error, Result};
use crate::ir::{MemsetPattern, Thunk, ThunkPath};
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
        | Thunk::RankId(_) => direct(false),
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
        Thunk::CustomCall(c) => {
            Op::CustomCall(super::custom_call::resolve(planner.device(), c, path)?)
        }
        Thunk::Sequence(_) | Thunk::AsyncStart(_) | Thunk::AsyncDone(_) => {
            return Err(Error::InvalidArgument(format!(
                "internal: {} at {path} is not a schedulable step",
                t.kind()
            )));
        }
    })
}

impl Run<'_> {
    /// Issues a thunk the planner left as written ([`Op::Direct`]).
    pub(super) fn direct(&self, t: &Thunk, kind: StreamKind, stream: &dyn Stream) -> Result<()> {
        match t {
            Thunk::Copy(c) => stream.copy(self.ptr(&c.src), self.ptr(&c.dst), c.src.size),
            Thunk::Memset(m) => stream.memset(self.ptr(&m.dst), m.dst.size, m.pattern),
            Thunk::Gemm(g) => {
                stream.gemm(&g.with_operands(self.range(&g.a), self.range(&g.b), self.range(&g.c)))
            }
            Thunk::Collective(c) => self.collective(c, kind, stream),
            Thunk::CollectivePermute(p) => {
                self.permute(p.src, p.dst, p.dtype, &p.pairs, kind, stream)
            }
            Thunk::Send(s) => self.send(&s.src, s.dtype, s.peer, kind, stream),
            Thunk::Recv(r) => self.recv(&r.dst, r.dtype, r.peer, kind, stream),
            Thunk::RankId(r) => {
                stream.memset(self.ptr(&r.dst), 4, MemsetPattern::U32(self.rank_world().0))
            }
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
}
