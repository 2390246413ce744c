//! Parameter lists of the standard kernels (buffers first, then immediates). Buffer extents
//! are products of the `i64` extent parameters, by index.

use super::{Extent, Param, ParamKind};
use crate::ir::{Access, DType};

fn buf(name: &'static str, dtype: DType, access: Access, elems: &[usize]) -> Param {
    Param {
        name,
        kind: ParamKind::Buffer {
            dtype,
            access,
            elems: Extent::Product(elems.to_vec()),
        },
    }
}

fn imm(name: &'static str, dtype: DType) -> Param {
    Param {
        name,
        kind: ParamKind::Scalar(dtype),
    }
}

use Access::{Read as R, ReadWrite as RW, Write as W};
use DType::{F32, I32, I64};

/// `(out: W [n], value: t, n)`.
pub(crate) fn fill(t: DType) -> Vec<Param> {
    vec![buf("out", t, W, &[2]), imm("value", t), imm("n", I64)]
}

/// `(out: W [n], start: t, step: t, n)`.
pub(crate) fn iota(t: DType) -> Vec<Param> {
    vec![
        buf("out", t, W, &[3]),
        imm("start", t),
        imm("step", t),
        imm("n", I64),
    ]
}

/// `(in: R [n] a, out: W [n] b, n)`.
pub(crate) fn convert(a: DType, b: DType) -> Vec<Param> {
    vec![buf("in", a, R, &[2]), buf("out", b, W, &[2]), imm("n", I64)]
}

/// `(in: R [n], out: W [n], n)`.
pub(crate) fn unary(t: DType) -> Vec<Param> {
    vec![buf("in", t, R, &[2]), buf("out", t, W, &[2]), imm("n", I64)]
}

/// `(a: R [n], b: R [n], out: W [n], n)`.
pub(crate) fn binary(t: DType) -> Vec<Param> {
    vec![
        buf("a", t, R, &[3]),
        buf("b", t, R, &[3]),
        buf("out", t, W, &[3]),
        imm("n", I64),
    ]
}

/// `(a: R [rows*cols], b: R [cols], out: W [rows*cols], rows, cols)`.
pub(crate) fn binary_row(t: DType) -> Vec<Param> {
    vec![
        buf("a", t, R, &[3, 4]),
        buf("b", t, R, &[4]),
        buf("out", t, W, &[3, 4]),
        imm("rows", I64),
        imm("cols", I64),
    ]
}

/// `(x: R [n], y: RW [n], alpha: t, n)`.
pub(crate) fn axpy(t: DType) -> Vec<Param> {
    vec![
        buf("x", t, R, &[3]),
        buf("y", t, RW, &[3]),
        imm("alpha", t),
        imm("n", I64),
    ]
}

/// `(x: RW [n], alpha: t, n)`.
pub(crate) fn scale(t: DType) -> Vec<Param> {
    vec![buf("x", t, RW, &[2]), imm("alpha", t), imm("n", I64)]
}

/// `(in: R [rows*cols], out: W [rows], rows, cols)`.
pub(crate) fn reduce(t: DType) -> Vec<Param> {
    vec![
        buf("in", t, R, &[2, 3]),
        buf("out", t, W, &[2]),
        imm("rows", I64),
        imm("cols", I64),
    ]
}

/// `(in: R [rows*cols], out: W [rows*cols], rows, cols)`.
pub(crate) fn softmax(t: DType) -> Vec<Param> {
    vec![
        buf("in", t, R, &[2, 3]),
        buf("out", t, W, &[2, 3]),
        imm("rows", I64),
        imm("cols", I64),
    ]
}

/// `(in: R [rows*cols], gamma: R [cols], beta: R [cols], out: W [rows*cols], eps: f32, rows,
/// cols)`.
pub(crate) fn layer_norm(t: DType) -> Vec<Param> {
    vec![
        buf("in", t, R, &[5, 6]),
        buf("gamma", t, R, &[6]),
        buf("beta", t, R, &[6]),
        buf("out", t, W, &[5, 6]),
        imm("eps", F32),
        imm("rows", I64),
        imm("cols", I64),
    ]
}

/// `(in: R [rows*cols], out: W [cols*rows], rows, cols)`.
pub(crate) fn transpose(t: DType) -> Vec<Param> {
    vec![
        buf("in", t, R, &[2, 3]),
        buf("out", t, W, &[3, 2]),
        imm("rows", I64),
        imm("cols", I64),
    ]
}

/// `(logits: R [rows*cols], labels: R i32 [rows], loss: W [rows], rows, cols)`.
pub(crate) fn cross_entropy(t: DType) -> Vec<Param> {
    vec![
        buf("logits", t, R, &[3, 4]),
        buf("labels", I32, R, &[3]),
        buf("loss", t, W, &[3]),
        imm("rows", I64),
        imm("cols", I64),
    ]
}

/// `(param: RW [n], grad: R [n], m: RW [n] s, v: RW [n] s, lr, beta1, beta2, eps,
/// weight_decay: f32, step: i64, n)`.
pub(crate) fn adamw(t: DType, state: DType) -> Vec<Param> {
    vec![
        buf("param", t, RW, &[10]),
        buf("grad", t, R, &[10]),
        buf("m", state, RW, &[10]),
        buf("v", state, RW, &[10]),
        imm("lr", F32),
        imm("beta1", F32),
        imm("beta2", F32),
        imm("eps", F32),
        imm("weight_decay", F32),
        imm("step", I64),
        imm("n", I64),
    ]
}

/// `(table: R [vocab*dim], ids: R i32 [n], out: W [n*dim], n, vocab, dim)`.
pub(crate) fn embedding(t: DType) -> Vec<Param> {
    vec![
        buf("table", t, R, &[4, 5]),
        buf("ids", I32, R, &[3]),
        buf("out", t, W, &[3, 5]),
        imm("n", I64),
        imm("vocab", I64),
        imm("dim", I64),
    ]
}
