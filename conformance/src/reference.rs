//! Independent f64 references for the standard kernels and gemm, written from the library's
//! documented semantics (never calling core's kernel code).
//!
//! Float references compute in f64 on the exact input values; integer references compute in
//! i128 and wrap to the element type, which equals the kernels' wrapping arithmetic.

use crate::util::wrap_int;
use xthunk_core::ir::DType;

/// Elementwise unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Relu,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Gelu,
    GeluErf,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 11] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluErf => "gelu_erf",
        }
    }

    /// True for the operations defined on (signed) integers too.
    pub fn has_int(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }

    /// True for operations compared at the transcendental tolerance.
    pub fn transcendental(self) -> bool {
        matches!(
            self,
            UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Rsqrt
                | UnaryOp::Tanh
                | UnaryOp::Sigmoid
                | UnaryOp::Gelu
                | UnaryOp::GeluErf
        )
    }
}

/// Elementwise binary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
        }
    }
}

/// What a standard kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Fill,
    Iota,
    /// Conversion from this type to the kernel's dtype.
    Convert(DType),
    Unary(UnaryOp),
    Binary(BinaryOp),
    BinaryRow(BinaryOp),
    Axpy,
    Scale,
    ReduceSum,
    ReduceMax,
    ReduceMean,
    Softmax,
    LayerNorm,
    Transpose,
    /// `op(a[r,c] + b[c])` (fused bias + GELU).
    BiasUnary(UnaryOp),
    CrossEntropy,
    AdamW,
    Embedding,
}

impl Op {
    /// True for kernels over `rows × cols` (the others take `n`).
    pub fn is_row(self) -> bool {
        matches!(
            self,
            Op::BinaryRow(_)
                | Op::ReduceSum
                | Op::ReduceMax
                | Op::ReduceMean
                | Op::Softmax
                | Op::LayerNorm
                | Op::Transpose
                | Op::BiasUnary(_)
                | Op::CrossEntropy
        )
    }
}

/// A standard kernel identified by name: the operation and the element type (for conversions,
/// the destination type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelId {
    pub op: Op,
    pub dtype: DType,
}

/// Parses a standard kernel name (`<op>_<dtype>`, `<op>_row_<dtype>`, `convert_<a>_<b>`).
pub fn parse_kernel_name(name: &str) -> Option<KernelId> {
    if let Some(rest) = name.strip_prefix("convert_") {
        let (a, b) = rest.split_once('_')?;
        let (from, to) = (DType::from_name(a)?, DType::from_name(b)?);
        return (from != to).then_some(KernelId {
            op: Op::Convert(from),
            dtype: to,
        });
    }
    let (op, dt) = name.rsplit_once('_')?;
    let dtype = DType::from_name(dt)?;
    let op = match op {
        "fill" => Op::Fill,
        "iota" => Op::Iota,
        "axpy" => Op::Axpy,
        "scale" => Op::Scale,
        "reduce_sum" => Op::ReduceSum,
        "reduce_max" => Op::ReduceMax,
        "reduce_mean" => Op::ReduceMean,
        "softmax" => Op::Softmax,
        "layer_norm" => Op::LayerNorm,
        "transpose" => Op::Transpose,
        "cross_entropy" => Op::CrossEntropy,
        "adamw" => Op::AdamW,
        "embedding" => Op::Embedding,
        other if other.starts_with("bias_") => {
            let base = other.strip_prefix("bias_")?;
            Op::BiasUnary(UnaryOp::ALL.into_iter().find(|u| u.name() == base)?)
        }
        other => {
            let (base, row) = match other.strip_suffix("_row") {
                Some(b) => (b, true),
                None => (other, false),
            };
            if let Some(b) = BinaryOp::ALL.into_iter().find(|b| b.name() == base) {
                if row { Op::BinaryRow(b) } else { Op::Binary(b) }
            } else if row {
                return None;
            } else {
                Op::Unary(UnaryOp::ALL.into_iter().find(|u| u.name() == base)?)
            }
        }
    };
    Some(KernelId { op, dtype })
}

/// The tanh approximation of GELU, exactly as documented.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// `erf(x)` by the series `2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))`
/// (all terms of one sign: no cancellation), summed until the terms vanish; NaN stays NaN and
/// beyond |x| = 6 the result is ±1 to f64 precision.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() > 6.0 {
        return x.signum();
    }
    let (mut term, mut sum) = (x, x);
    let mut k = 0.0;
    while term.abs() > sum.abs() * 1e-18 {
        k += 1.0;
        term *= 2.0 * x * x / (2.0 * k + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
}

/// GELU, exact form: `x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// `log(sum exp(x)) - x[label]` of one row; a negative label gives 0, one `>= x.len()` NaN.
pub fn cross_entropy(x: &[f64], label: i64) -> f64 {
    if label < 0 {
        return 0.0;
    }
    let Some(&xl) = x.get(label as usize) else {
        return f64::NAN;
    };
    let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln() - xl
}

/// The inputs of one AdamW step (PyTorch's `torch.optim.AdamW`).
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// From 1.
    pub step: i64,
}

impl AdamW {
    /// `(param, m, v)` after one step from `(p, g, m, v)`.
    pub fn apply(&self, p: f64, g: f64, m: f64, v: f64) -> (f64, f64, f64) {
        let p = p * (1.0 - self.lr * self.weight_decay);
        let m = self.beta1 * m + (1.0 - self.beta1) * g;
        let v = self.beta2 * v + (1.0 - self.beta2) * g * g;
        let mhat = m / (1.0 - self.beta1.powi(self.step as i32));
        let vhat = v / (1.0 - self.beta2.powi(self.step as i32));
        (p - self.lr * mhat / (vhat.sqrt() + self.eps), m, v)
    }
}

/// A unary operation on a float.
pub fn unary_f(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        // NaN -> 0.
        UnaryOp::Relu => {
            if x > 0.0 {
                x
            } else {
                0.0
            }
        }
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Gelu => gelu(x),
        UnaryOp::GeluErf => gelu_erf(x),
    }
}

/// A unary operation on an integer of `dtype` (wrapping), `None` where undefined.
pub fn unary_i(op: UnaryOp, dtype: DType, x: i64) -> Option<i64> {
    let x = x as i128;
    Some(wrap_int(
        dtype,
        match op {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Relu => x.max(0),
            _ => return None,
        },
    ))
}

/// C `fmax`: the other operand when one is NaN.
pub fn fmax(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        b
    } else if b.is_nan() || a >= b {
        a
    } else {
        b
    }
}

/// C `fmin`: the other operand when one is NaN.
pub fn fmin(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        b
    } else if b.is_nan() || a <= b {
        a
    } else {
        b
    }
}

/// A binary operation on floats.
pub fn binary_f(op: BinaryOp, a: f64, b: f64) -> f64 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => fmax(a, b),
        BinaryOp::Min => fmin(a, b),
    }
}

/// A binary operation on integers of `dtype`: wrapping; division truncates, by zero gives 0,
/// and `MIN / -1` wraps to `MIN`.
pub fn binary_i(op: BinaryOp, dtype: DType, a: i64, b: i64) -> i64 {
    let (a, b) = (a as i128, b as i128);
    wrap_int(
        dtype,
        match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => {
                if b == 0 {
                    0
                } else {
                    a / b
                }
            }
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
        },
    )
}

/// Float → i32: toward zero, saturating, NaN → 0.
pub fn float_to_i32(v: f64) -> i64 {
    if v.is_nan() {
        0
    } else {
        v.trunc().clamp(i32::MIN as f64, i32::MAX as f64) as i64
    }
}

/// An exactly rounded f64 sum (Neumaier), used for references of row reductions.
pub fn sum(xs: impl IntoIterator<Item = f64>) -> f64 {
    let (mut s, mut c) = (0.0f64, 0.0f64);
    for x in xs {
        let t = s + x;
        if s.abs() >= x.abs() {
            c += (s - t) + x;
        } else {
            c += (x - t) + s;
        }
        s = t;
    }
    if s.is_finite() { s + c } else { s }
}

/// Row sums of a row-major `rows × cols` matrix.
pub fn row_sums(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..rows)
        .map(|r| sum(x[r * cols..(r + 1) * cols].iter().copied()))
        .collect()
}

/// Row maxima (`fmax`; empty rows give -inf).
pub fn row_max_f(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..rows)
        .map(|r| {
            x[r * cols..(r + 1) * cols]
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| fmax(m, v))
        })
        .collect()
}

/// Row maxima of integers (empty rows give `min`).
pub fn row_max_i(x: &[i64], rows: usize, cols: usize, min: i64) -> Vec<i64> {
    (0..rows)
        .map(|r| {
            x[r * cols..(r + 1) * cols]
                .iter()
                .fold(min, |m, &v| m.max(v))
        })
        .collect()
}

/// Wrapping row sums of integers.
pub fn row_sums_i(dtype: DType, x: &[i64], rows: usize, cols: usize) -> Vec<i64> {
    (0..rows)
        .map(|r| {
            let s: i128 = x[r * cols..(r + 1) * cols].iter().map(|&v| v as i128).sum();
            wrap_int(dtype, s)
        })
        .collect()
}

/// Row-wise softmax `exp(x - max) / sum(exp(x - max))`.
pub fn softmax(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        let e: Vec<f64> = row.iter().map(|&v| (v - m).exp()).collect();
        let s = sum(e.iter().copied());
        out.extend(e.iter().map(|v| v / s));
    }
    out
}

/// Row-wise layer norm: `(x - mean) / sqrt(var + eps) * gamma[c] + beta[c]` with the biased
/// variance. Also returns, per row, the largest `|x - mean| / sqrt(var + eps)`.
pub fn layer_norm(
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
    rows: usize,
    cols: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = Vec::with_capacity(rows * cols);
    let mut zmax = Vec::with_capacity(rows);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = sum(row.iter().copied()) / cols as f64;
        let var = sum(row.iter().map(|v| (v - mean) * (v - mean))) / cols as f64;
        let inv = 1.0 / (var + eps).sqrt();
        let mut zm = 0.0f64;
        for (c, &v) in row.iter().enumerate() {
            let z = (v - mean) * inv;
            zm = zm.max(z.abs());
            out.push(z * gamma[c] + beta[c]);
        }
        zmax.push(zm);
    }
    (out, zmax)
}

/// Transpose of a row-major `rows × cols` matrix.
pub fn transpose<T: Copy>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(rows * cols);
    for c in 0..cols {
        for r in 0..rows {
            out.push(x[r * cols + c]);
        }
    }
    out
}

/// Shape, layout and scalars of a (batched) gemm; fields as in `GemmThunk` (row-major; `ld*`
/// row strides and `stride_*` batch strides in elements).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f64,
    pub beta: f64,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

impl GemmShape {
    /// Rows and columns of A as stored.
    pub fn stored_a(&self) -> (usize, usize) {
        if self.trans_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// Rows and columns of B as stored.
    pub fn stored_b(&self) -> (usize, usize) {
        if self.trans_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }

    /// Index of `op(A)[i, l]` of batch entry `b`.
    pub fn a_index(&self, b: usize, i: usize, l: usize) -> usize {
        b * self.stride_a
            + if self.trans_a {
                l * self.lda + i
            } else {
                i * self.lda + l
            }
    }

    /// Index of `op(B)[l, j]` of batch entry `b`.
    pub fn b_index(&self, b: usize, l: usize, j: usize) -> usize {
        b * self.stride_b
            + if self.trans_b {
                j * self.ldb + l
            } else {
                l * self.ldb + j
            }
    }

    /// Index of `C[i, j]` of batch entry `b`.
    pub fn c_index(&self, b: usize, i: usize, j: usize) -> usize {
        b * self.stride_c + i * self.ldc + j
    }
}

/// The reference gemm: for every `(b, i, j)` of C, returns `(index, value, scale)` where value
/// is `alpha * Σ op(A)[i,l] op(B)[l,j] + beta * C[i,j]` in f64 (C is not read when beta is 0)
/// and scale is `|alpha| Σ |a||b| + |beta| |c|`, the magnitude rounding errors scale with.
pub fn gemm(s: &GemmShape, a: &[f64], b: &[f64], c: &[f64]) -> Vec<(usize, f64, f64)> {
    let mut out = Vec::with_capacity(s.batch * s.m * s.n);
    for bi in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let (mut acc, mut mag) = (0.0f64, 0.0f64);
                for l in 0..s.k {
                    let p = a[s.a_index(bi, i, l)] * b[s.b_index(bi, l, j)];
                    acc += p;
                    mag += p.abs();
                }
                let ci = s.c_index(bi, i, j);
                let (mut v, mut sc) = (s.alpha * acc, s.alpha.abs() * mag);
                if s.beta != 0.0 {
                    v += s.beta * c[ci];
                    sc += (s.beta * c[ci]).abs();
                }
                out.push((ci, v, sc));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!(
            parse_kernel_name("add_row_f16"),
            Some(KernelId {
                op: Op::BinaryRow(BinaryOp::Add),
                dtype: DType::F16
            })
        );
        assert_eq!(
            parse_kernel_name("convert_bf16_i32"),
            Some(KernelId {
                op: Op::Convert(DType::BF16),
                dtype: DType::I32
            })
        );
        assert_eq!(
            parse_kernel_name("layer_norm_f64").map(|k| k.op),
            Some(Op::LayerNorm)
        );
        assert_eq!(
            parse_kernel_name("gelu_bf16").map(|k| k.op),
            Some(Op::Unary(UnaryOp::Gelu))
        );
        assert_eq!(parse_kernel_name("exp_row_f32"), None);
        assert_eq!(parse_kernel_name("frobnicate_f32"), None);
        assert_eq!(parse_kernel_name("convert_f32_f32"), None);
    }

    #[test]
    fn integer_semantics() {
        assert_eq!(binary_i(BinaryOp::Div, DType::I8, -128, -1), -128);
        assert_eq!(binary_i(BinaryOp::Div, DType::I32, 7, 0), 0);
        assert_eq!(binary_i(BinaryOp::Div, DType::I32, -7, 2), -3);
        assert_eq!(binary_i(BinaryOp::Mul, DType::U8, 16, 16), 0);
        assert_eq!(unary_i(UnaryOp::Abs, DType::I8, -128), Some(-128));
        assert_eq!(float_to_i32(f64::NAN), 0);
        assert_eq!(float_to_i32(-3e10), i32::MIN as i64);
        assert_eq!(float_to_i32(-2.9), -2);
    }

    #[test]
    fn fmax_fmin() {
        assert_eq!(fmax(f64::NAN, 1.0), 1.0);
        assert_eq!(fmin(2.0, f64::NAN), 2.0);
        assert!(fmax(f64::NAN, f64::NAN).is_nan());
    }
}
