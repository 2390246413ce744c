//! Thunks ↔ protobuf: the one table over thunk kinds of the schema's side ([`to`] and
//! [`from`]), one module per kind beside it (the IR's `ir/src/ir/thunk/` mirrored). Adding
//! a kind: its message in `xthunk.proto`, a module here with its `to` and `from`, and an arm
//! in each of the two functions below.

mod async_scope;
mod collective;
mod command_buffer;
mod conditional;
mod copy;
pub(super) mod custom_call;
mod execution_seed;
mod gemm;
mod kernel;
mod memset;
mod p2p;
mod permute;
mod ragged;
mod rank_id;
mod while_loop;

use super::fields::Loc;
use crate::{ProtoError, pb};
use pb::thunk::Kind;
use xthunk_core::ir::Thunk;

/// The kinds a thunk message may hold, as an error lists them.
const THUNK_KINDS: &str = "copy, memset, kernel, gemm, sequence, while, conditional, async_start, async_done, command_buffer, collectives, rank_id, custom_call, ragged_all_to_all or execution_seed";

/// A thunk's message.
pub(super) fn to(t: &Thunk) -> pb::Thunk {
    let kind = match t {
        Thunk::Copy(c) => Kind::Copy(copy::to(c)),
        Thunk::Memset(m) => Kind::Memset(memset::to(m)),
        Thunk::Kernel(k) => Kind::Kernel(kernel::to(k)),
        Thunk::Gemm(g) => Kind::Gemm(gemm::to(g)),
        Thunk::Sequence(body) => Kind::Sequence(pb::SequenceThunk {
            thunks: list_to(body),
        }),
        Thunk::While(w) => Kind::While(while_loop::to(w, list_to)),
        Thunk::Conditional(c) => Kind::Conditional(conditional::to(c, list_to)),
        Thunk::AsyncStart(a) => Kind::AsyncStart(async_scope::start_to(a, list_to)),
        Thunk::AsyncDone(d) => Kind::AsyncDone(async_scope::done_to(d)),
        Thunk::CommandBuffer(c) => Kind::CommandBuffer(command_buffer::to(c, list_to)),
        Thunk::Collective(c) => collective::to(c),
        Thunk::CollectivePermute(p) => Kind::CollectivePermute(permute::to(p)),
        Thunk::Send(s) => Kind::Send(p2p::send_to(s)),
        Thunk::Recv(r) => Kind::Recv(p2p::recv_to(r)),
        Thunk::RankId(r) => Kind::RankId(rank_id::to(r)),
        Thunk::CustomCall(c) => Kind::CustomCall(custom_call::to(c)),
        Thunk::RaggedAllToAll(r) => Kind::RaggedAllToAll(ragged::to(r)),
        Thunk::ExecutionSeed(r) => Kind::ExecutionSeed(execution_seed::to(r)),
    };
    pb::Thunk { kind: Some(kind) }
}

/// The messages of a thunk list.
pub(super) fn list_to(list: &[Thunk]) -> Vec<pb::Thunk> {
    list.iter().map(to).collect()
}

/// A thunk from its message, at `loc`.
pub(super) fn from(t: &pb::Thunk, loc: &Loc<'_>) -> Result<Thunk, ProtoError> {
    Ok(match &t.kind {
        Some(Kind::Copy(c)) => copy::from(c, loc)?.into(),
        Some(Kind::Memset(m)) => memset::from(m, loc)?.into(),
        Some(Kind::Kernel(k)) => kernel::from(k, loc)?.into(),
        Some(Kind::Gemm(g)) => gemm::from(g, loc)?.into(),
        Some(Kind::Sequence(s)) => Thunk::Sequence(list_from(&s.thunks, loc, "thunks")?),
        Some(Kind::While(w)) => while_loop::from(w, loc, list_from)?.into(),
        Some(Kind::Conditional(c)) => conditional::from(c, loc, list_from)?.into(),
        Some(Kind::AsyncStart(a)) => async_scope::start_from(a, loc, list_from)?.into(),
        Some(Kind::AsyncDone(d)) => async_scope::done_from(d).into(),
        Some(Kind::CommandBuffer(c)) => command_buffer::from(c, loc, list_from)?.into(),
        Some(Kind::AllReduce(c)) => collective::all_reduce_from(c, loc)?.into(),
        Some(Kind::AllGather(c)) => collective::all_gather_from(c, loc)?.into(),
        Some(Kind::ReduceScatter(c)) => collective::reduce_scatter_from(c, loc)?.into(),
        Some(Kind::AllToAll(c)) => collective::all_to_all_from(c, loc)?.into(),
        Some(Kind::Broadcast(c)) => collective::broadcast_from(c, loc)?.into(),
        Some(Kind::CollectivePermute(c)) => permute::from(c, loc)?.into(),
        Some(Kind::Send(c)) => p2p::send_from(c, loc)?.into(),
        Some(Kind::Recv(c)) => p2p::recv_from(c, loc)?.into(),
        Some(Kind::RankId(c)) => rank_id::from(c, loc)?.into(),
        Some(Kind::CustomCall(c)) => custom_call::from(c, loc)?.into(),
        Some(Kind::RaggedAllToAll(c)) => ragged::from(c, loc)?.into(),
        Some(Kind::ExecutionSeed(c)) => execution_seed::from(c, loc)?.into(),
        None => {
            return Err(loc.invalid(
                "kind",
                format!(
                    "no thunk kind is set, or it is one this build does not know (expected {THUNK_KINDS})"
                ),
            ));
        }
    })
}

/// The thunks of the list `field` of the thunk at `loc`.
pub(super) fn list_from(
    list: &[pb::Thunk],
    loc: &Loc<'_>,
    field: &'static str,
) -> Result<Vec<Thunk>, ProtoError> {
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            from(
                c,
                &Loc::Step {
                    parent: loc,
                    field,
                    index: i,
                },
            )
        })
        .collect()
}
