//! `gemm` ↔ `GemmThunk` (alpha 1 and batch 1 when the message leaves them out).

use super::super::fields::{Loc, dtype_from, slice_from};
use super::super::fields::{dtype_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::GemmThunk;

pub(super) fn to(g: &GemmThunk) -> pb::GemmThunk {
    pb::GemmThunk {
        a: slice_to(&g.a),
        b: slice_to(&g.b),
        c: slice_to(&g.c),
        m: g.m,
        n: g.n,
        k: g.k,
        lda: g.lda,
        ldb: g.ldb,
        ldc: g.ldc,
        trans_a: g.trans_a,
        trans_b: g.trans_b,
        alpha: Some(g.alpha),
        beta: g.beta,
        dtype: dtype_to(g.dtype) as i32,
        batch: Some(g.batch),
        stride_a: g.stride_a,
        stride_b: g.stride_b,
        stride_c: g.stride_c,
    }
}

pub(super) fn from(g: &pb::GemmThunk, loc: &Loc<'_>) -> Result<GemmThunk, ProtoError> {
    Ok(GemmThunk {
        a: slice_from(&g.a, loc, "a")?,
        b: slice_from(&g.b, loc, "b")?,
        c: slice_from(&g.c, loc, "c")?,
        m: g.m,
        n: g.n,
        k: g.k,
        lda: g.lda,
        ldb: g.ldb,
        ldc: g.ldc,
        trans_a: g.trans_a,
        trans_b: g.trans_b,
        alpha: g.alpha.unwrap_or(1.0),
        beta: g.beta,
        dtype: dtype_from(g.dtype, loc, "dtype")?,
        batch: g.batch.unwrap_or(1),
        stride_a: g.stride_a,
        stride_b: g.stride_b,
        stride_c: g.stride_c,
    })
}
