//! `collective_permute` ↔ `CollectivePermuteThunk`.

use super::super::fields::{Loc, dtype_from, slice_from};
use super::super::fields::{dtype_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::CollectivePermuteThunk;

pub(super) fn to(p: &CollectivePermuteThunk) -> pb::CollectivePermuteThunk {
    pb::CollectivePermuteThunk {
        src: slice_to(&p.src),
        dst: slice_to(&p.dst),
        dtype: dtype_to(p.dtype) as i32,
        pairs: p
            .pairs
            .iter()
            .map(|(s, t)| pb::SourceTargetPair {
                source: *s,
                target: *t,
            })
            .collect(),
    }
}

pub(super) fn from(
    c: &pb::CollectivePermuteThunk,
    loc: &Loc<'_>,
) -> Result<CollectivePermuteThunk, ProtoError> {
    Ok(CollectivePermuteThunk {
        src: slice_from(&c.src, loc, "src")?,
        dst: slice_from(&c.dst, loc, "dst")?,
        dtype: dtype_from(c.dtype, loc, "dtype")?,
        pairs: c.pairs.iter().map(|p| (p.source, p.target)).collect(),
    })
}
