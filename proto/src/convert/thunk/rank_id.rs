//! `rank_id` ↔ `RankIdThunk`.

use super::super::fields::slice_to;
use super::super::fields::{Loc, slice_from};
use crate::{ProtoError, pb};
use xthunk_core::ir::RankIdThunk;

pub(super) fn to(r: &RankIdThunk) -> pb::RankIdThunk {
    pb::RankIdThunk {
        dst: slice_to(&r.dst),
    }
}

pub(super) fn from(r: &pb::RankIdThunk, loc: &Loc<'_>) -> Result<RankIdThunk, ProtoError> {
    Ok(RankIdThunk {
        dst: slice_from(&r.dst, loc, "dst")?,
    })
}
