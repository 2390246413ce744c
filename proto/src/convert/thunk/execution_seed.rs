//! `execution_seed` ↔ `ExecutionSeedThunk`.

use super::super::fields::slice_to;
use super::super::fields::{Loc, slice_from};
use crate::{ProtoError, pb};
use xthunk_core::ir::ExecutionSeedThunk;

pub(super) fn to(r: &ExecutionSeedThunk) -> pb::ExecutionSeedThunk {
    pb::ExecutionSeedThunk {
        dst: slice_to(&r.dst),
    }
}

pub(super) fn from(
    r: &pb::ExecutionSeedThunk,
    loc: &Loc<'_>,
) -> Result<ExecutionSeedThunk, ProtoError> {
    Ok(ExecutionSeedThunk {
        dst: slice_from(&r.dst, loc, "dst")?,
    })
}
