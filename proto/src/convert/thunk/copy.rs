//! `copy` ↔ `CopyThunk`.

use super::super::fields::slice_to;
use super::super::fields::{Loc, slice_from};
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
