//! The reference interpreter: evaluates a graph element by element in plain Rust over f64
//! and i128 with StableHLO's rules (and XLA's where the spec leaves a choice), independent of
//! the generated C.

use crate::data::{Arr, max_of, min_of, rnd, width, wrap};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{
    BinaryOp, CompareDirection, CompareType, Graph, Op, UnaryOp, is_signed_int,
};

fn unravel(mut lin: usize, dims: &[u64]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = lin % dims[d] as usize;
        lin /= dims[d] as usize;
    }
    idx
}

fn ravel(idx: &[usize], dims: &[u64]) -> usize {
    idx.iter()
        .zip(dims)
        .fold(0, |a, (i, d)| a * *d as usize + i)
}

fn fmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() { b } else { a }
    } else {
        a.max(b)
    }
}

fn fmin(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() { a } else { b }
    } else {
        a.min(b)
    }
}

fn unary_f(op: UnaryOp, x: f64) -> f64 {
    use UnaryOp::*;
    match op {
        Abs => x.abs(),
        Cbrt => x.cbrt(),
        Ceil => x.ceil(),
        Cosine => x.cos(),
        Exponential => x.exp(),
        ExponentialMinusOne => x.exp_m1(),
        Floor => x.floor(),
        Log => x.ln(),
        LogPlusOne => x.ln_1p(),
        Logistic => 1.0 / (1.0 + (-x).exp()),
        Negate => -x,
        RoundNearestAfz => x.round(),
        RoundNearestEven => x.round_ties_even(),
        Rsqrt => 1.0 / x.sqrt(),
        Sign => {
            if x.is_nan() || x == 0.0 {
                x
            } else {
                x.signum()
            }
        }
        Sine => x.sin(),
        Sqrt => x.sqrt(),
        Tan => x.tan(),
        Tanh => x.tanh(),
        Acos => x.acos(),
        Acosh => x.acosh(),
        Asin => x.asin(),
        Asinh => x.asinh(),
        Atan => x.atan(),
        Atanh => x.atanh(),
        Cosh => x.cosh(),
        Sinh => x.sinh(),
        Real => x,
        Imag => 0.0,
        other => panic!("{} on floats", other.name()),
    }
}

fn unsigned_bits(d: DType, x: i128) -> u128 {
    (x as u128) & ((1u128 << width(d)) - 1)
}

fn unary_i(op: UnaryOp, d: DType, x: i128) -> i128 {
    use UnaryOp::*;
    let w = width(d);
    match op {
        Abs => wrap(d, x.abs()),
        Negate => wrap(d, -x),
        Not if d == DType::Pred => 1 - x,
        Not => wrap(d, !x),
        Popcnt => unsigned_bits(d, x).count_ones() as i128,
        CountLeadingZeros => (unsigned_bits(d, x).leading_zeros() - (128 - w)) as i128,
        Sign => x.signum(),
        other => panic!("{} on integers", other.name()),
    }
}

fn binary_f(op: BinaryOp, a: f64, b: f64) -> f64 {
    use BinaryOp::*;
    match op {
        Add => a + b,
        Subtract => a - b,
        Multiply => a * b,
        Divide => a / b,
        Remainder => a % b,
        Power => a.powf(b),
        Atan2 => a.atan2(b),
        Maximum => fmax(a, b),
        Minimum => fmin(a, b),
        other => panic!("{} on floats", other.name()),
    }
}

fn binary_i(op: BinaryOp, d: DType, a: i128, b: i128) -> i128 {
    use BinaryOp::*;
    let w = width(d) as u128;
    let signed = is_signed_int(d);
    if d == DType::Pred {
        return match op {
            Add | Or | Maximum => a | b,
            Multiply | And | Minimum => a & b,
            Xor => a ^ b,
            other => panic!("{} on pred", other.name()),
        };
    }
    match op {
        Add => wrap(d, a + b),
        Subtract => wrap(d, a - b),
        // Wrapping in i128 first: u64 products pass 2^127 (2^64 divides 2^128).
        Multiply => wrap(d, a.wrapping_mul(b)),
        // XLA: x / 0 = -1, INT_MIN / -1 = INT_MIN; x % 0 = x, INT_MIN % -1 = 0.
        Divide if b == 0 => wrap(d, -1),
        Divide => wrap(d, a / b),
        Remainder if b == 0 => a,
        Remainder => wrap(d, a % b),
        Power => {
            if signed && b < 0 {
                // XLA's rule for negative exponents.
                match a {
                    1 => 1,
                    -1 => {
                        if b % 2 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                }
            } else {
                let mut r: i128 = 1;
                for _ in 0..b.min(200) {
                    r = wrap(d, r.wrapping_mul(a));
                }
                // Exponents past 200 only matter for |a| ≤ 1 or even bases (which reach 0).
                if b > 200 {
                    let mut acc: i128 = 1;
                    let (mut x, mut e) = (a, b as u128);
                    while e > 0 {
                        if e & 1 == 1 {
                            acc = wrap(d, acc.wrapping_mul(x));
                        }
                        x = wrap(d, x.wrapping_mul(x));
                        e >>= 1;
                    }
                    r = acc;
                }
                r
            }
        }
        Maximum => a.max(b),
        Minimum => a.min(b),
        And => wrap(d, a & b),
        Or => wrap(d, a | b),
        Xor => wrap(d, a ^ b),
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => {
            let amount = unsigned_bits(d, b);
            let ua = unsigned_bits(d, a);
            // The operand read as the signed type of its width.
            let signed_of = match w {
                8 => DType::I8,
                16 => DType::I16,
                32 => DType::I32,
                _ => DType::I64,
            };
            let sa = wrap(signed_of, a);
            if amount >= w {
                return match op {
                    ShiftRightArithmetic => wrap(d, if sa < 0 { -1 } else { 0 }),
                    _ => 0,
                };
            }
            match op {
                ShiftLeft => wrap(d, (ua << amount) as i128),
                ShiftRightLogical => wrap(d, (ua >> amount) as i128),
                _ => wrap(d, sa >> amount),
            }
        }
        Atan2 | NextAfter | Polygamma | Zeta | Complex => panic!("{} on integers", op.name()),
    }
}

fn key(x: f64) -> i128 {
    let b = x.to_bits() as i64;
    (if b < 0 { b ^ i64::MAX } else { b }) as i128
}

fn compare(dir: CompareDirection, kind: CompareType, d: DType, a: &Arr, b: &Arr, k: usize) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = if d.is_float() {
        if kind == CompareType::TotalOrder {
            Some(key(a.f[k]).cmp(&key(b.f[k])))
        } else {
            a.f[k].partial_cmp(&b.f[k])
        }
    } else {
        Some(a.i[k].cmp(&b.i[k]))
    };
    match (dir, ord) {
        (CompareDirection::Ne, None) => true,
        (_, None) => false,
        (CompareDirection::Eq, Some(o)) => o == Ordering::Equal,
        (CompareDirection::Ne, Some(o)) => o != Ordering::Equal,
        (CompareDirection::Lt, Some(o)) => o == Ordering::Less,
        (CompareDirection::Le, Some(o)) => o != Ordering::Greater,
        (CompareDirection::Gt, Some(o)) => o == Ordering::Greater,
        (CompareDirection::Ge, Some(o)) => o != Ordering::Less,
    }
}

/// `convert` of one element.
pub fn convert_el(from: DType, to: DType, f: f64, i: i128) -> (f64, i128) {
    if to == DType::Pred {
        return (
            0.0,
            if from.is_float() {
                (f != 0.0 || f.is_nan()) as i128
            } else {
                (i != 0) as i128
            },
        );
    }
    match (from.is_float(), to.is_float()) {
        // To f16/bf16 through f32, as XLA converts (the spec leaves inexact conversions open).
        (true, true) if matches!(to, DType::F16 | DType::BF16) => (rnd(to, f as f32 as f64), 0),
        (true, true) => (rnd(to, f), 0),
        (false, true) if to == DType::F64 => (i as f64, 0),
        (false, true) => (rnd(to, i as f32 as f64), 0),
        (true, false) => {
            let v = if f.is_nan() {
                0
            } else if f <= min_of(to) as f64 {
                min_of(to)
            } else if f >= max_of(to) as f64 + 1.0 {
                max_of(to)
            } else {
                (f.trunc() as i128).clamp(min_of(to), max_of(to))
            };
            (0.0, v)
        }
        (false, false) => (0.0, wrap(to, i)),
    }
}

/// `reduce_precision` by arithmetic on the value (the kernels work on the bits): round to a
/// multiple of 2^(k - m), k the value's binade (at least the source's smallest normal
/// exponent), ties to the even multiple; with no mantissa bit left, ties go to the candidate
/// whose biased source exponent is even (XLA's bit rounding); then at or above
/// 2^(bias + 1) of the reduced format ±inf, below its smallest normal ±0.
fn reduce_precision(d: DType, v: f64, e: u32, m: u32) -> f64 {
    let (se, sm): (u32, u32) = match d {
        DType::F16 => (5, 10),
        DType::BF16 => (8, 7),
        DType::F32 => (8, 23),
        _ => (11, 52),
    };
    if !v.is_finite() {
        return v;
    }
    let src_bias = (1i32 << (se - 1)) - 1;
    let mut r = v;
    if m < sm && v != 0.0 {
        let m = m as i32;
        let k = (v.abs().log2().floor() as i32).max(1 - src_bias);
        let q = 2f64.powi(k - m);
        let t = v.abs() / q;
        let fl = t.floor();
        let frac = t - fl;
        let lower_even = if m > 0 || fl == 0.0 {
            fl % 2.0 == 0.0
        } else {
            (k + src_bias) % 2 == 0
        };
        let up = frac > 0.5 || (frac == 0.5 && !lower_even);
        r = ((fl + if up { 1.0 } else { 0.0 }) * q).copysign(v);
    }
    if e < se {
        let bias = (1i32 << (e - 1)) - 1;
        if r.abs() >= 2f64.powi(bias + 1) {
            r = f64::INFINITY.copysign(v);
        } else if r.abs() < 2f64.powi(1 - bias) {
            r = 0.0f64.copysign(v);
        }
    }
    r
}

/// Cholesky of one n x n matrix (row-major, f64) by the outer-product (right-looking) order;
/// returns the factor laid out as the kernels write it and the 1-based failing column.
fn cholesky(a: &[f64], n: usize, lower: bool, lapack: bool) -> (Vec<f64>, i128) {
    let at = |i: usize, j: usize| if lower { i * n + j } else { j * n + i };
    let mut w = a.to_vec();
    let mut fail = 0;
    for k in 0..n {
        let p = w[at(k, k)];
        if p.is_nan() || p <= 0.0 {
            fail = k as i128 + 1;
            break;
        }
        let l = p.sqrt();
        w[at(k, k)] = l;
        for i in k + 1..n {
            w[at(i, k)] /= l;
        }
        for j in k + 1..n {
            for i in j..n {
                w[at(i, j)] -= w[at(i, k)] * w[at(j, k)];
            }
        }
    }
    if !lapack {
        for i in 0..n {
            for j in 0..n {
                if fail != 0 {
                    w[i * n + j] = f64::NAN;
                } else if (lower && j > i) || (!lower && j < i) {
                    w[i * n + j] = 0.0;
                }
            }
        }
    }
    (w, fail)
}

fn scalar_i(a: &Arr) -> i128 {
    if a.dtype.is_float() {
        a.f[0] as i128
    } else {
        a.i[0]
    }
}

/// Evaluates `g` on `inputs`; returns its results.
pub fn eval(g: &Graph, inputs: &[Arr]) -> Vec<Arr> {
    let mut env: Vec<Option<Arr>> = vec![None; g.values().len()];
    for node in g.nodes() {
        let arg = |i: usize| env[node.operands[i].0 as usize].clone().unwrap();
        let rt = g.ty(node.results[0]).clone();
        let (d, dims, n) = (rt.dtype, rt.dims.clone(), rt.elements() as usize);
        let mk = |f: Vec<f64>, i: Vec<i128>| Arr {
            dtype: d,
            dims: dims.clone(),
            f,
            i,
        };
        let results: Vec<Arr> = match &node.op {
            Op::Parameter { index, .. } => vec![inputs[*index].clone()],
            Op::CustomCall(c) => panic!("no handler for custom_call @{} here", c.target),
            Op::Collective(c) => panic!("{} needs other ranks", c.kind.name()),
            // Complex values are outside this reference: fft is checked against jnp.fft in
            // stablehlo/jax/cases_fft.py.
            Op::Fft { .. } => panic!("fft is not evaluated here"),
            Op::Constant { bytes } => vec![Arr::from_bytes(d, &dims, bytes)],
            Op::Iota { dim } => {
                let v: Vec<usize> = (0..n).map(|k| unravel(k, &dims)[*dim]).collect();
                if d.is_float() {
                    vec![mk(v.iter().map(|&x| rnd(d, x as f64)).collect(), vec![])]
                } else {
                    vec![mk(vec![], v.iter().map(|&x| wrap(d, x as i128)).collect())]
                }
            }
            Op::Unary(op) => {
                let x = arg(0);
                if x.dtype.is_float() && op.result(x.dtype) == DType::Pred {
                    let test = |v: f64| match op {
                        UnaryOp::IsFinite => v.is_finite(),
                        UnaryOp::IsInf => v.is_infinite(),
                        UnaryOp::IsNegInf => v == f64::NEG_INFINITY,
                        _ => v == f64::INFINITY,
                    };
                    vec![mk(vec![], x.f.iter().map(|v| test(*v) as i128).collect())]
                } else if x.dtype.is_float() {
                    vec![mk(
                        x.f.iter().map(|v| rnd(d, unary_f(*op, *v))).collect(),
                        vec![],
                    )]
                } else {
                    vec![mk(
                        vec![],
                        x.i.iter().map(|v| unary_i(*op, d, *v)).collect(),
                    )]
                }
            }
            Op::Binary(op) => {
                let (a, b) = (arg(0), arg(1));
                if d.is_float() {
                    vec![mk(
                        (0..n)
                            .map(|k| rnd(d, binary_f(*op, a.f[k], b.f[k])))
                            .collect(),
                        vec![],
                    )]
                } else {
                    vec![mk(
                        vec![],
                        (0..n).map(|k| binary_i(*op, d, a.i[k], b.i[k])).collect(),
                    )]
                }
            }
            Op::Compare { direction, kind } => {
                let (a, b) = (arg(0), arg(1));
                vec![mk(
                    vec![],
                    (0..n)
                        .map(|k| compare(*direction, *kind, a.dtype, &a, &b, k) as i128)
                        .collect(),
                )]
            }
            Op::Select => {
                let (p, a, b) = (arg(0), arg(1), arg(2));
                let pick = |k: usize| p.i[if p.dims.is_empty() { 0 } else { k }] != 0;
                vec![Arr {
                    dtype: d,
                    dims: dims.clone(),
                    f: if d.is_float() {
                        (0..n)
                            .map(|k| if pick(k) { a.f[k] } else { b.f[k] })
                            .collect()
                    } else {
                        vec![]
                    },
                    i: if d.is_float() {
                        vec![]
                    } else {
                        (0..n)
                            .map(|k| if pick(k) { a.i[k] } else { b.i[k] })
                            .collect()
                    },
                }]
            }
            Op::Clamp => {
                let (lo, x, hi) = (arg(0), arg(1), arg(2));
                let at = |a: &Arr, k: usize| if a.dims.is_empty() { 0 } else { k };
                if d.is_float() {
                    vec![mk(
                        (0..n)
                            .map(|k| fmin(hi.f[at(&hi, k)], fmax(lo.f[at(&lo, k)], x.f[k])))
                            .collect(),
                        vec![],
                    )]
                } else {
                    vec![mk(
                        vec![],
                        (0..n)
                            .map(|k| hi.i[at(&hi, k)].min(lo.i[at(&lo, k)].max(x.i[k])))
                            .collect(),
                    )]
                }
            }
            Op::Convert => {
                let x = arg(0);
                let (mut f, mut i) = (vec![], vec![]);
                for k in 0..n {
                    let (a, b) = convert_el(
                        x.dtype,
                        d,
                        if x.dtype.is_float() { x.f[k] } else { 0.0 },
                        if x.dtype.is_float() { 0 } else { x.i[k] },
                    );
                    if d.is_float() { f.push(a) } else { i.push(b) }
                }
                vec![mk(f, i)]
            }
            Op::ReducePrecision {
                exponent_bits,
                mantissa_bits,
            } => {
                let x = arg(0);
                let f = (0..n)
                    .map(|k| reduce_precision(d, x.f[k], *exponent_bits, *mantissa_bits))
                    .collect();
                vec![mk(f, vec![])]
            }
            Op::RngBitGenerator { .. } => {
                panic!("rng_bit_generator: checked bit for bit against XLA (stablehlo/jax)")
            }
            Op::Map { body } => {
                let xs: Vec<Arr> = (0..node.operands.len()).map(arg).collect();
                let mut out = mk(vec![], vec![]);
                for k in 0..n {
                    let args: Vec<Arr> = xs.iter().map(|x| x.gather(&[], |_| k)).collect();
                    let r = eval(body, &args).remove(0);
                    out.f.extend(r.f);
                    out.i.extend(r.i);
                }
                vec![out]
            }
            Op::Rng { .. } => {
                panic!(
                    "rng: its numbers are the implementation's; tested statistically (stablehlo/jax)"
                )
            }
            Op::Cholesky { lower, lapack } => {
                let a = arg(0);
                let m = dims[dims.len() - 1] as usize;
                let (mut f, mut info) = (vec![], vec![]);
                for mat in a.f.chunks(m * m.max(1)).take(n / (m * m).max(1)) {
                    let (w, fail) = cholesky(mat, m, *lower, *lapack);
                    f.extend(w.into_iter().map(|v| rnd(d, v)));
                    info.push(fail);
                }
                let mut out = vec![mk(f, vec![])];
                if *lapack {
                    let bd = &dims[..dims.len() - 2];
                    out.push(Arr {
                        dtype: DType::I32,
                        dims: bd.to_vec(),
                        f: vec![],
                        i: info,
                    });
                }
                out
            }
            Op::TriangularSolve {
                left_side,
                lower,
                unit_diagonal,
                transpose_a,
            } => {
                let (a, b) = (arg(0), arg(1));
                let r = dims.len();
                let (rows, cols) = (dims[r - 2] as usize, dims[r - 1] as usize);
                let m = if *left_side { rows } else { cols };
                let mut f = b.f.clone();
                let batches = n / (rows * cols).max(1);
                for bi in 0..batches {
                    let am = &a.f[bi * m * m..(bi + 1) * m * m];
                    // op(a)(i, j), zero outside the stored triangle.
                    let op_a = |i: usize, j: usize| {
                        let (p, q) = if *transpose_a { (j, i) } else { (i, j) };
                        let inside = if *lower { q <= p } else { q >= p };
                        if p == q && *unit_diagonal {
                            1.0
                        } else if inside {
                            am[p * m + q]
                        } else {
                            0.0
                        }
                    };
                    let x = &mut f[bi * rows * cols..(bi + 1) * rows * cols];
                    // Gaussian elimination on the dense op(a) (it is triangular), one
                    // right-hand side at a time.
                    let sides = if *left_side { cols } else { rows };
                    for c in 0..sides {
                        let idx = |p: usize| {
                            if *left_side {
                                p * cols + c
                            } else {
                                c * cols + p
                            }
                        };
                        let mut y: Vec<f64> = (0..m).map(|p| x[idx(p)]).collect();
                        // left: op(a) y = b; right: y op(a) = b, i.e. op(a)^T y = b.
                        let mat = |p: usize, q: usize| {
                            if *left_side { op_a(p, q) } else { op_a(q, p) }
                        };
                        let lower_system = (0..m).all(|p| (p + 1..m).all(|q| mat(p, q) == 0.0));
                        let order: Vec<usize> = if lower_system {
                            (0..m).collect()
                        } else {
                            (0..m).rev().collect()
                        };
                        for &p in &order {
                            let mut v = y[p];
                            for (q, yq) in y.iter().enumerate() {
                                if q != p && mat(p, q) != 0.0 {
                                    v -= mat(p, q) * yq;
                                }
                            }
                            y[p] = rnd(d, v / mat(p, p));
                        }
                        for p in 0..m {
                            x[idx(p)] = y[p];
                        }
                    }
                }
                vec![mk(f, vec![])]
            }
            Op::BitcastConvert | Op::Reshape => {
                let x = arg(0);
                vec![Arr::from_bytes(d, &dims, &x.to_bytes())]
            }
            Op::BroadcastInDim { dims: map } => {
                let x = arg(0);
                vec![x.gather(&dims, |k| {
                    let idx = unravel(k, &dims);
                    let sub: Vec<usize> = map
                        .iter()
                        .enumerate()
                        .map(|(i, &m)| if x.dims[i] == 1 { 0 } else { idx[m] })
                        .collect();
                    ravel(&sub, &x.dims)
                })]
            }
            Op::Transpose { perm } => {
                let x = arg(0);
                vec![x.gather(&dims, |k| {
                    let idx = unravel(k, &dims);
                    let mut sub = vec![0; perm.len()];
                    for (i, &p) in perm.iter().enumerate() {
                        sub[p] = idx[i];
                    }
                    ravel(&sub, &x.dims)
                })]
            }
            Op::Slice { start, strides, .. } => {
                let x = arg(0);
                vec![x.gather(&dims, |k| {
                    let idx = unravel(k, &dims);
                    let sub: Vec<usize> = (0..idx.len())
                        .map(|j| (start[j] + idx[j] as u64 * strides[j]) as usize)
                        .collect();
                    ravel(&sub, &x.dims)
                })]
            }
            Op::Reverse { dims: rev } => {
                let x = arg(0);
                vec![x.gather(&dims, |k| {
                    let mut idx = unravel(k, &dims);
                    for &r in rev {
                        idx[r] = dims[r] as usize - 1 - idx[r];
                    }
                    ravel(&idx, &x.dims)
                })]
            }
            Op::Concatenate { dim } => {
                let parts: Vec<Arr> = (0..node.operands.len()).map(arg).collect();
                let mut f = vec![];
                let mut i = vec![];
                for k in 0..n {
                    let mut idx = unravel(k, &dims);
                    let mut p = 0;
                    while idx[*dim] >= parts[p].dims[*dim] as usize {
                        idx[*dim] -= parts[p].dims[*dim] as usize;
                        p += 1;
                    }
                    let j = ravel(&idx, &parts[p].dims);
                    if d.is_float() {
                        f.push(parts[p].f[j])
                    } else {
                        i.push(parts[p].i[j])
                    }
                }
                vec![mk(f, i)]
            }
            Op::Pad { low, interior, .. } => {
                let (x, pv) = (arg(0), arg(1));
                let mut f = vec![];
                let mut i = vec![];
                for k in 0..n {
                    let idx = unravel(k, &dims);
                    let mut sub = vec![];
                    for j in 0..idx.len() {
                        let t = idx[j] as i64 - low[j];
                        let step = interior[j] as i64 + 1;
                        if t >= 0 && t % step == 0 && ((t / step) as u64) < x.dims[j] {
                            sub.push((t / step) as usize);
                        }
                    }
                    let inside = sub.len() == idx.len();
                    if d.is_float() {
                        f.push(if inside {
                            x.f[ravel(&sub, &x.dims)]
                        } else {
                            pv.f[0]
                        });
                    } else {
                        i.push(if inside {
                            x.i[ravel(&sub, &x.dims)]
                        } else {
                            pv.i[0]
                        });
                    }
                }
                vec![mk(f, i)]
            }
            Op::DynamicSlice { sizes } => {
                let x = arg(0);
                let starts: Vec<usize> = (0..x.dims.len())
                    .map(|j| {
                        scalar_i(&arg(1 + j)).clamp(0, (x.dims[j] - sizes[j]) as i128) as usize
                    })
                    .collect();
                vec![x.gather(&dims, |k| {
                    let idx = unravel(k, &dims);
                    let sub: Vec<usize> = (0..idx.len()).map(|j| idx[j] + starts[j]).collect();
                    ravel(&sub, &x.dims)
                })]
            }
            Op::DynamicUpdateSlice => {
                let (x, u) = (arg(0), arg(1));
                let starts: Vec<usize> = (0..x.dims.len())
                    .map(|j| {
                        scalar_i(&arg(2 + j)).clamp(0, (x.dims[j] - u.dims[j]) as i128) as usize
                    })
                    .collect();
                let mut r = x.clone();
                for k in 0..u.len() {
                    let idx = unravel(k, &u.dims);
                    let sub: Vec<usize> = (0..idx.len()).map(|j| idx[j] + starts[j]).collect();
                    let t = ravel(&sub, &x.dims);
                    if d.is_float() {
                        r.f[t] = u.f[k]
                    } else {
                        r.i[t] = u.i[k]
                    }
                }
                vec![r]
            }
            Op::Gather {
                dims: gd,
                slice_sizes,
            } => {
                // The spec's formulas, one result index at a time.
                let (x, si) = (arg(0), arg(1));
                let ivd = gd.index_vector_dim;
                vec![x.gather(&dims, |k| {
                    let ri = unravel(k, &dims);
                    let batch: Vec<usize> = (0..ri.len())
                        .filter(|d| !gd.offset_dims.contains(d))
                        .map(|d| ri[d])
                        .collect();
                    let start: Vec<i128> = if ivd < si.dims.len() {
                        (0..si.dims[ivd] as usize)
                            .map(|j| {
                                let mut b = batch.clone();
                                b.insert(ivd, j);
                                si.i[ravel(&b, &si.dims)]
                            })
                            .collect()
                    } else {
                        vec![si.i[ravel(&batch, &si.dims)]]
                    };
                    let mut full_start = vec![0usize; x.dims.len()];
                    for (ds, &dop) in gd.start_index_map.iter().enumerate() {
                        full_start[dop] =
                            start[ds].clamp(0, (x.dims[dop] - slice_sizes[dop]) as i128) as usize;
                    }
                    let mut full_batching = vec![0usize; x.dims.len()];
                    for (&dop, &dst) in gd
                        .operand_batching_dims
                        .iter()
                        .zip(&gd.start_indices_batching_dims)
                    {
                        full_batching[dop] = batch[if dst < ivd { dst } else { dst - 1 }];
                    }
                    let offset: Vec<usize> = gd.offset_dims.iter().map(|&d| ri[d]).collect();
                    let mut full_offset = vec![0usize; x.dims.len()];
                    let mut o = offset.into_iter();
                    for (d, f) in full_offset.iter_mut().enumerate() {
                        if !gd.collapsed_slice_dims.contains(&d)
                            && !gd.operand_batching_dims.contains(&d)
                        {
                            *f = o.next().unwrap();
                        }
                    }
                    let oi: Vec<usize> = (0..x.dims.len())
                        .map(|d| full_start[d] + full_batching[d] + full_offset[d])
                        .collect();
                    ravel(&oi, &x.dims)
                })]
            }
            Op::Scatter { dims: sd, body, .. } => {
                // The spec's formulas; updates applied in row-major order, out-of-range skipped.
                let m = (node.operands.len() - 1) / 2;
                let mut res: Vec<Arr> = (0..m).map(arg).collect();
                let si = arg(m);
                let ups: Vec<Arr> = (m + 1..2 * m + 1).map(arg).collect();
                let (ud, xd) = (ups[0].dims.clone(), res[0].dims.clone());
                let ivd = sd.index_vector_dim;
                for u in 0..ups[0].len() {
                    let ui = unravel(u, &ud);
                    let usi: Vec<usize> = (0..ui.len())
                        .filter(|d| !sd.update_window_dims.contains(d))
                        .map(|d| ui[d])
                        .collect();
                    let start: Vec<i128> = if ivd < si.dims.len() {
                        (0..si.dims[ivd] as usize)
                            .map(|j| {
                                let mut b = usi.clone();
                                b.insert(ivd, j);
                                si.i[ravel(&b, &si.dims)]
                            })
                            .collect()
                    } else {
                        vec![si.i[ravel(&usi, &si.dims)]]
                    };
                    let mut ri = vec![0i128; xd.len()];
                    for (ds, &dop) in sd.scatter_dims_to_operand_dims.iter().enumerate() {
                        ri[dop] += start[ds];
                    }
                    for (&dop, &dst) in sd
                        .input_batching_dims
                        .iter()
                        .zip(&sd.scatter_indices_batching_dims)
                    {
                        ri[dop] += usi[if dst < ivd { dst } else { dst - 1 }] as i128;
                    }
                    // XLA: a window not wholly inside is skipped whole.
                    let mut w = sd.update_window_dims.iter().map(|&d| (ui[d], ud[d]));
                    let mut whole = true;
                    for (d, r) in ri.iter_mut().enumerate() {
                        if !sd.inserted_window_dims.contains(&d)
                            && !sd.input_batching_dims.contains(&d)
                        {
                            let (wi, size) = w.next().unwrap();
                            whole &= *r >= 0 && *r + size as i128 <= xd[d] as i128;
                            *r += wi as i128;
                        } else {
                            whole &= *r >= 0 && *r < xd[d] as i128;
                        }
                    }
                    if !whole {
                        continue;
                    }
                    let target = ravel(&ri.iter().map(|r| *r as usize).collect::<Vec<_>>(), &xd);
                    let mut args: Vec<Arr> =
                        res.iter().map(|a| a.gather(&[], |_| target)).collect();
                    args.extend(ups.iter().map(|a| a.gather(&[], |_| u)));
                    let new = eval(body, &args);
                    for (r, v) in res.iter_mut().zip(new) {
                        if r.dtype.is_float() {
                            r.f[target] = v.f[0]
                        } else {
                            r.i[target] = v.i[0]
                        }
                    }
                }
                res
            }
            Op::Sort {
                dimension,
                comparator,
                ..
            } => {
                let xs: Vec<Arr> = (0..node.operands.len()).map(arg).collect();
                crate::sort::reference(&xs, *dimension, comparator)
            }
            Op::DotGeneral(dd) => {
                let (a, b) = (arg(0), arg(1));
                let lf: Vec<usize> = (0..a.dims.len())
                    .filter(|x| !dd.lhs_batch.contains(x) && !dd.lhs_contracting.contains(x))
                    .collect();
                let rf: Vec<usize> = (0..b.dims.len())
                    .filter(|x| !dd.rhs_batch.contains(x) && !dd.rhs_contracting.contains(x))
                    .collect();
                let cdims: Vec<u64> = dd.lhs_contracting.iter().map(|&c| a.dims[c]).collect();
                let kn: u64 = cdims.iter().product();
                let (mut f, mut i) = (vec![], vec![]);
                for k in 0..n {
                    let idx = unravel(k, &dims);
                    let nb = dd.lhs_batch.len();
                    let (mut ai, mut bi) = (vec![0; a.dims.len()], vec![0; b.dims.len()]);
                    for (j, (&x, &y)) in dd.lhs_batch.iter().zip(&dd.rhs_batch).enumerate() {
                        ai[x] = idx[j];
                        bi[y] = idx[j];
                    }
                    for (j, &x) in lf.iter().enumerate() {
                        ai[x] = idx[nb + j];
                    }
                    for (j, &y) in rf.iter().enumerate() {
                        bi[y] = idx[nb + lf.len() + j];
                    }
                    let (mut sf, mut si) = (0.0f64, 0i128);
                    for c in 0..kn as usize {
                        let cidx = unravel(c, &cdims);
                        for (j, (&x, &y)) in dd
                            .lhs_contracting
                            .iter()
                            .zip(&dd.rhs_contracting)
                            .enumerate()
                        {
                            ai[x] = cidx[j];
                            bi[y] = cidx[j];
                        }
                        let (p, q) = (ravel(&ai, &a.dims), ravel(&bi, &b.dims));
                        if d.is_float() {
                            sf += a.get_f(p) * b.get_f(q)
                        } else {
                            si = wrap(d, si + a.i[p] * b.i[q])
                        }
                    }
                    if d.is_float() {
                        f.push(rnd(d, sf))
                    } else {
                        i.push(si)
                    }
                }
                vec![mk(f, i)]
            }
            Op::Reduce { dims: rd, body } => {
                let m = node.operands.len() / 2;
                let xs: Vec<Arr> = (0..m).map(arg).collect();
                let inits: Vec<Arr> = (m..2 * m).map(arg).collect();
                let shape = xs[0].dims.clone();
                let mut red = rd.clone();
                red.sort_unstable();
                let kept: Vec<usize> = (0..shape.len()).filter(|x| !red.contains(x)).collect();
                let red_dims: Vec<u64> = red.iter().map(|&x| shape[x]).collect();
                let count: u64 = red_dims.iter().product();
                let mut outs: Vec<Arr> = node
                    .results
                    .iter()
                    .map(|r| {
                        let t = g.ty(*r);
                        Arr {
                            dtype: t.dtype,
                            dims: t.dims.clone(),
                            f: vec![],
                            i: vec![],
                        }
                    })
                    .collect();
                for o in 0..n {
                    let oidx = unravel(o, &dims);
                    let mut accs = inits.clone();
                    for r in 0..count as usize {
                        let ridx = unravel(r, &red_dims);
                        let mut idx = vec![0; shape.len()];
                        for (i, &x) in kept.iter().enumerate() {
                            idx[x] = oidx[i];
                        }
                        for (i, &x) in red.iter().enumerate() {
                            idx[x] = ridx[i];
                        }
                        let p = ravel(&idx, &shape);
                        let mut args = accs.clone();
                        for x in &xs {
                            args.push(x.gather(&[], |_| p));
                        }
                        accs = eval(body, &args);
                    }
                    for (j, a) in accs.iter().enumerate() {
                        if a.dtype.is_float() {
                            outs[j].f.push(a.f[0])
                        } else {
                            outs[j].i.push(a.i[0])
                        }
                    }
                }
                outs
            }
            Op::While { cond, body } => {
                let mut vals: Vec<Arr> = (0..node.operands.len()).map(arg).collect();
                while eval(cond, &vals)[0].i[0] != 0 {
                    vals = eval(body, &vals);
                }
                vals
            }
            Op::Case { branches } => {
                let idx = arg(0);
                let ops: Vec<Arr> = (1..node.operands.len()).map(arg).collect();
                let b = if idx.dtype == DType::Pred {
                    if idx.i[0] != 0 { 0 } else { 1 }
                } else if idx.i[0] < 0 || idx.i[0] as usize >= branches.len() {
                    branches.len() - 1
                } else {
                    idx.i[0] as usize
                };
                eval(&branches[b], &ops)
            }
        };
        for (r, a) in node.results.iter().zip(results) {
            env[r.0 as usize] = Some(a);
        }
    }
    g.results()
        .iter()
        .map(|(_, v)| env[v.0 as usize].clone().unwrap())
        .collect()
}
