//! The collectives ↔ their five messages (`all_reduce`, `all_gather`, `reduce_scatter`,
//! `all_to_all`, `broadcast`), one IR type with the operation a field.

use super::super::fields::{Loc, dtype_from, slice_from};
use super::super::fields::{dtype_to, slice_to};
use crate::{ProtoError, pb};
use pb::thunk::Kind;
use xthunk_core::ir::{CollectiveOp, CollectiveThunk, ReduceOp};

pub(super) fn to(c: &CollectiveThunk) -> Kind {
    let groups: Vec<pb::ReplicaGroup> = c
        .groups
        .iter()
        .map(|g| pb::ReplicaGroup { ranks: g.clone() })
        .collect();
    let (src, dst, dtype) = (slice_to(&c.src), slice_to(&c.dst), dtype_to(c.dtype) as i32);
    match c.op {
        CollectiveOp::AllReduce { op } => Kind::AllReduce(pb::AllReduceThunk {
            src,
            dst,
            dtype,
            op: reduce_to(op) as i32,
            groups,
        }),
        CollectiveOp::AllGather => Kind::AllGather(pb::AllGatherThunk {
            src,
            dst,
            dtype,
            groups,
        }),
        CollectiveOp::ReduceScatter { op } => Kind::ReduceScatter(pb::ReduceScatterThunk {
            src,
            dst,
            dtype,
            op: reduce_to(op) as i32,
            groups,
        }),
        CollectiveOp::AllToAll => Kind::AllToAll(pb::AllToAllThunk {
            src,
            dst,
            dtype,
            groups,
        }),
        CollectiveOp::Broadcast { root } => Kind::Broadcast(pb::BroadcastThunk {
            src,
            dst,
            dtype,
            root,
            groups,
        }),
    }
}

fn reduce_to(op: ReduceOp) -> pb::ReduceOp {
    match op {
        ReduceOp::Sum => pb::ReduceOp::Sum,
        ReduceOp::Prod => pb::ReduceOp::Prod,
        ReduceOp::Min => pb::ReduceOp::Min,
        ReduceOp::Max => pb::ReduceOp::Max,
    }
}

fn reduce_from(v: i32, loc: &Loc<'_>) -> Result<ReduceOp, ProtoError> {
    match pb::ReduceOp::try_from(v) {
        Ok(pb::ReduceOp::Sum) => Ok(ReduceOp::Sum),
        Ok(pb::ReduceOp::Prod) => Ok(ReduceOp::Prod),
        Ok(pb::ReduceOp::Min) => Ok(ReduceOp::Min),
        Ok(pb::ReduceOp::Max) => Ok(ReduceOp::Max),
        Ok(pb::ReduceOp::Unspecified) => {
            Err(loc.invalid("op", "reduction operator is unspecified"))
        }
        Err(_) => Err(loc.invalid("op", format!("unknown reduction operator {v}"))),
    }
}

/// The fields every collective message has, with the operation.
fn collective(
    op: CollectiveOp,
    (src, dst, dtype, groups): (
        &Option<pb::Slice>,
        &Option<pb::Slice>,
        i32,
        &[pb::ReplicaGroup],
    ),
    loc: &Loc<'_>,
) -> Result<CollectiveThunk, ProtoError> {
    Ok(CollectiveThunk {
        op,
        src: slice_from(src, loc, "src")?,
        dst: slice_from(dst, loc, "dst")?,
        dtype: dtype_from(dtype, loc, "dtype")?,
        groups: groups.iter().map(|g| g.ranks.clone()).collect(),
    })
}

pub(super) fn all_reduce_from(
    c: &pb::AllReduceThunk,
    loc: &Loc<'_>,
) -> Result<CollectiveThunk, ProtoError> {
    let op = CollectiveOp::AllReduce {
        op: reduce_from(c.op, loc)?,
    };
    collective(op, (&c.src, &c.dst, c.dtype, &c.groups), loc)
}

pub(super) fn all_gather_from(
    c: &pb::AllGatherThunk,
    loc: &Loc<'_>,
) -> Result<CollectiveThunk, ProtoError> {
    let op = CollectiveOp::AllGather;
    collective(op, (&c.src, &c.dst, c.dtype, &c.groups), loc)
}

pub(super) fn reduce_scatter_from(
    c: &pb::ReduceScatterThunk,
    loc: &Loc<'_>,
) -> Result<CollectiveThunk, ProtoError> {
    let op = CollectiveOp::ReduceScatter {
        op: reduce_from(c.op, loc)?,
    };
    collective(op, (&c.src, &c.dst, c.dtype, &c.groups), loc)
}

pub(super) fn all_to_all_from(
    c: &pb::AllToAllThunk,
    loc: &Loc<'_>,
) -> Result<CollectiveThunk, ProtoError> {
    let op = CollectiveOp::AllToAll;
    collective(op, (&c.src, &c.dst, c.dtype, &c.groups), loc)
}

pub(super) fn broadcast_from(
    c: &pb::BroadcastThunk,
    loc: &Loc<'_>,
) -> Result<CollectiveThunk, ProtoError> {
    let op = CollectiveOp::Broadcast { root: c.root };
    collective(op, (&c.src, &c.dst, c.dtype, &c.groups), loc)
}
