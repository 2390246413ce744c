//! Host implementations of the training kernels a small transformer block needs beyond the
//! elementwise and row families: fused bias + GELU (both forms), cross-entropy, the AdamW step
//! and embedding gather.
//!
//! Elementwise kernels (bias + GELU, AdamW, embedding) compute in the element type's compute
//! type (f32 for f16/bf16/f32, f64 for f64) in the order the portable source evaluates, and
//! round once to the element type; cross-entropy computes each row in f64 with a compensated
//! sum. Every input is read before the output element it determines is written; inputs that
//! overlap outputs otherwise are read from a snapshot ([`Src`]).

use super::args::{Src, buffer, expect_count, extent, product, scalar};
use super::elem::{Arith, Elem, Real, Wide};
use super::elementwise::UnaryOp;
use super::{HostArg, KernelError};

/// `bias_<op>_<t>(a: R [rows*cols], b: R [cols], out: W [rows*cols], rows, cols)`:
/// `out[r,c] = op(a[r,c] + b[c])`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn bias_unary<T: Elem, O: UnaryOp<T::C>>(
    args: &[HostArg],
) -> Result<(), KernelError> {
    expect_count(args, 5)?;
    let rows = extent(args, 3)?;
    let cols = extent(args, 4)?;
    let total = product(args, 4, rows, cols)?;
    let a = buffer::<T>(args, 0, total)?;
    let b = buffer::<T>(args, 1, cols)?;
    let out = buffer::<T>(args, 2, total)?;
    let outs = [(out, T::SIZE)];
    // SAFETY: inputs are readable for their lengths per the caller's contract; `b` is read once
    // per row, so any overlap of it with `out` makes a copy.
    let (sa, sb) = unsafe {
        (
            Src::new(a, T::SIZE, &outs, true),
            Src::new(b, T::SIZE, &outs, false),
        )
    };
    for i in 0..total {
        let c = i % cols;
        // SAFETY: `i < rows * cols` and `c < cols`: inside `a`, `b` and `out`.
        unsafe {
            let x = T::load(sa.ptr().add(i * T::SIZE)).to_c();
            let y = T::load(sb.ptr().add(c * T::SIZE)).to_c();
            T::from_c(O::apply(x.add(y))).store(out.ptr.add(i * T::SIZE));
        }
    }
    Ok(())
}

/// `cross_entropy_<t>(logits: R [rows*cols], labels: R i32 [rows], loss: W [rows], rows,
/// cols)`: `loss[r] = log(sum_c exp(x[r,c])) - x[r, labels[r]]`, in f64 (max-shifted); a
/// negative label gives 0 (ignored, as PyTorch's `ignore_index`), a label `>= cols` gives NaN.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn cross_entropy<T: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 5)?;
    let rows = extent(args, 3)?;
    let cols = extent(args, 4)?;
    let total = product(args, 4, rows, cols)?;
    let logits = buffer::<T>(args, 0, total)?;
    let labels = buffer::<i32>(args, 1, rows)?;
    let loss = buffer::<T>(args, 2, rows)?;
    let outs = [(loss, T::SIZE)];
    // SAFETY: inputs are readable for their lengths per the caller's contract; row `r` of the
    // logits is read after earlier losses were written, so any overlap makes a copy.
    let (sx, sl) = unsafe {
        (
            Src::new(logits, T::SIZE, &outs, false),
            Src::new(labels, 4, &outs, false),
        )
    };
    for r in 0..rows {
        // SAFETY: `r < rows`: inside `labels`.
        let label = unsafe { i32::load(sl.ptr().add(r * 4)) };
        let x = |c: usize| {
            // SAFETY: `r * cols + c < rows * cols` for `c < cols`: inside the logits.
            unsafe { T::load(sx.ptr().add((r * cols + c) * T::SIZE)) }.to_f64()
        };
        let v = if label < 0 {
            0.0
        } else if label as usize >= cols {
            f64::NAN
        } else {
            let m = (0..cols).fold(f64::NEG_INFINITY, |m, c| m.max(x(c)));
            let (mut s, mut comp) = (0.0f64, 0.0f64);
            for c in 0..cols {
                // Neumaier: a tight reference whatever the row length.
                let e = (x(c) - m).exp();
                let t = s + e;
                comp += if s.abs() >= e.abs() {
                    (s - t) + e
                } else {
                    (e - t) + s
                };
                s = t;
            }
            let s = if s.is_finite() { s + comp } else { s };
            m + s.ln() - x(label as usize)
        };
        // SAFETY: `r < rows`: inside `loss`.
        unsafe { T::from_f64(v).store(loss.ptr.add(r * T::SIZE)) };
    }
    Ok(())
}

/// `adamw_<t>(param: RW [n], grad: R [n], m: RW [n] s, v: RW [n] s, lr, beta1, beta2, eps,
/// weight_decay: f32, step: i64, n)` with state type `s` = f32 (f64 for f64 parameters), in the
/// compute type `C`, in this order (PyTorch's AdamW):
/// `p = p * (1 - lr*wd)`, `m = b1*m + (1-b1)*g`, `v = b2*v + (1-b2)*g*g`,
/// `p = p - lr * (m / bc1) / (sqrt(v / bc2) + eps)` with `bc1 = 1 - b1^step`,
/// `bc2 = 1 - b2^step` computed in f64. `step` counts from 1.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn adamw<T: Wide, S: Wide + Elem<C = T::C>>(
    args: &[HostArg],
) -> Result<(), KernelError>
where
    T::C: Real,
{
    expect_count(args, 11)?;
    let n = extent(args, 10)?;
    let param = buffer::<T>(args, 0, n)?;
    let grad = buffer::<T>(args, 1, n)?;
    let m = buffer::<S>(args, 2, n)?;
    let v = buffer::<S>(args, 3, n)?;
    let f = |i: usize| scalar::<f32>(args, i).map(f64::from);
    let (lr, b1, b2, eps, wd) = (f(4)?, f(5)?, f(6)?, f(7)?, f(8)?);
    let step = scalar::<i64>(args, 9)?;
    let c = <T::C as Real>::constant;
    let bc1 = c(1.0 - b1.powf(step as f64));
    let bc2 = c(1.0 - b2.powf(step as f64));
    let (lr, b1, b2, eps, wd) = (c(lr), c(b1), c(b2), c(eps), c(wd));
    let one = c(1.0);
    let decay = one.sub(lr.mul(wd));
    let outs = [(param, T::SIZE), (m, S::SIZE), (v, S::SIZE)];
    // SAFETY: `grad` is readable for its length per the caller's contract. Element `i` of the
    // gradient is read before element `i` of each output is written; other overlaps copy.
    let sg = unsafe { Src::new(grad, T::SIZE, &outs, true) };
    for i in 0..n {
        // SAFETY: `i < n`: inside every buffer; param, m and v are read and written element by
        // element (in place).
        unsafe {
            let g = T::load(sg.ptr().add(i * T::SIZE)).to_c();
            let p = T::load(param.ptr.add(i * T::SIZE)).to_c().mul(decay);
            let mi = b1
                .mul(S::load(m.ptr.add(i * S::SIZE)).to_c())
                .add(one.sub(b1).mul(g));
            let vi = b2
                .mul(S::load(v.ptr.add(i * S::SIZE)).to_c())
                .add(one.sub(b2).mul(g).mul(g));
            let upd = lr.mul(mi.div(bc1)).div(vi.div(bc2).sqrt().add(eps));
            S::from_c(mi).store(m.ptr.add(i * S::SIZE));
            S::from_c(vi).store(v.ptr.add(i * S::SIZE));
            T::from_c(p.sub(upd)).store(param.ptr.add(i * T::SIZE));
        }
    }
    Ok(())
}

/// `embedding_<t>(table: R [vocab*dim], ids: R i32 [n], out: W [n*dim], n, vocab, dim)`:
/// `out[i,d] = table[ids[i], d]`; an id outside `[0, vocab)` gives a row of NaN.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn embedding<T: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 6)?;
    let n = extent(args, 3)?;
    let vocab = extent(args, 4)?;
    let dim = extent(args, 5)?;
    let table_len = product(args, 5, vocab, dim)?;
    let out_len = product(args, 5, n, dim)?;
    let table = buffer::<T>(args, 0, table_len)?;
    let ids = buffer::<i32>(args, 1, n)?;
    let out = buffer::<T>(args, 2, out_len)?;
    let outs = [(out, T::SIZE)];
    // SAFETY: inputs are readable for their lengths per the caller's contract; gathers read
    // anywhere, so any overlap with the output makes a copy.
    let (st, si) = unsafe {
        (
            Src::new(table, T::SIZE, &outs, false),
            Src::new(ids, 4, &outs, false),
        )
    };
    for i in 0..n {
        // SAFETY: `i < n`: inside `ids`.
        let id = unsafe { i32::load(si.ptr().add(i * 4)) };
        let row = usize::try_from(id).ok().filter(|&r| r < vocab);
        for d in 0..dim {
            let x = match row {
                // SAFETY: `r < vocab`, `d < dim`: inside the table.
                Some(r) => unsafe { T::load(st.ptr().add((r * dim + d) * T::SIZE)) },
                None => T::from_f64(f64::NAN),
            };
            // SAFETY: `i * dim + d < n * dim`: inside `out`.
            unsafe { x.store(out.ptr.add((i * dim + d) * T::SIZE)) };
        }
    }
    Ok(())
}
