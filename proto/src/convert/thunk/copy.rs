//! `copy` ↔ `CopyThunk`.

use super::super::from_proto::{Loc, slice_from};
use super::super::to_proto::slice_to;
use crate::{ProtoError, pb};
use xthunk_core::ir::CopyThunk;

pub(super) fn to(c: &CopyThunk) -> pb::CopyThunk {
    pb::CopyThunk {
        src: slice_to(&c.src),
        dst: slice_to(&c.dst),
    }
}

pub(super) fn from(c: &pb::CopyThunk, loc: &Loc<'_>) -> Result<CopyThunk, ProtoError> {
    Ok(CopyThunk {
        src: slice_from(&c.src, loc, "src")?,
        dst: slice_from(&c.dst, loc, "dst")?,
    })
}
