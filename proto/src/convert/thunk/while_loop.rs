//! `while` ↔ `WhileThunk`: a trip count is a non-negative i64 in the schema.

use super::super::fields::slice_to;
use super::super::fields::{ListFrom, ListTo, Loc, slice_from};
use crate::{ProtoError, pb};
use xthunk_core::ir::WhileThunk;

pub(super) fn to(w: &WhileThunk, list_to: ListTo) -> pb::WhileThunk {
    pb::WhileThunk {
        cond: list_to(&w.cond),
        pred: slice_to(&w.pred),
        body: list_to(&w.body),
        trip_count: w.trip_count.map(|n| n.min(i64::MAX as u64) as i64),
    }
}

pub(super) fn from(
    w: &pb::WhileThunk,
    loc: &Loc<'_>,
    list_from: ListFrom,
) -> Result<WhileThunk, ProtoError> {
    Ok(WhileThunk {
        cond: list_from(&w.cond, loc, "cond")?,
        pred: slice_from(&w.pred, loc, "pred")?,
        body: list_from(&w.body, loc, "body")?,
        trip_count: match w.trip_count {
            None => None,
            Some(n) if n >= 0 => Some(n as u64),
            Some(n) => {
                return Err(loc.invalid("trip_count", format!("{n} is negative")));
            }
        },
    })
}
