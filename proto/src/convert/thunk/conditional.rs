//! `conditional` ↔ `ConditionalThunk`: branches as messages of their own, so each branch's
//! thunks sit at `branches[i].thunks[j]`.

use super::super::fields::{ListFrom, ListTo, Loc, dtype_from, slice_from};
use super::super::fields::{dtype_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::ConditionalThunk;

pub(super) fn to(c: &ConditionalThunk, list_to: ListTo) -> pb::ConditionalThunk {
    pb::ConditionalThunk {
        index: slice_to(&c.index),
        index_type: dtype_to(c.index_type) as i32,
        branches: c
            .branches
            .iter()
            .map(|b| pb::Branch { thunks: list_to(b) })
            .collect(),
    }
}

pub(super) fn from(
    c: &pb::ConditionalThunk,
    loc: &Loc<'_>,
    list_from: ListFrom,
) -> Result<ConditionalThunk, ProtoError> {
    Ok(ConditionalThunk {
        index: slice_from(&c.index, loc, "index")?,
        index_type: dtype_from(c.index_type, loc, "index_type")?,
        branches: c
            .branches
            .iter()
            .enumerate()
            .map(|(b, br)| {
                list_from(
                    &br.thunks,
                    &Loc::Step {
                        parent: loc,
                        field: "branches",
                        index: b,
                    },
                    "thunks",
                )
            })
            .collect::<Result<Vec<_>, _>>()?,
    })
}
