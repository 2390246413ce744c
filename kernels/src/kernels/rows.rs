//! Host implementations of the row kernels: reductions, softmax, layer norm, transpose.
//!
//! Float sums (reduce_sum/mean, softmax denominators, layer-norm statistics) accumulate in f64
//! with Neumaier compensation, and every result is rounded once to the element type, so the
//! host is a tight reference. Each row is read completely before anything of it is written.

use super::args::{Src, buffer, expect_count, extent, product, scalar};
use super::elem::{Arith, Elem, Wide};
use super::{HostArg, KernelError};

/// Compensated (Neumaier) f64 sum.
#[derive(Clone, Copy, Default)]
struct Sum {
    s: f64,
    c: f64,
}

impl Sum {
    #[inline(always)]
    fn add(&mut self, x: f64) {
        let t = self.s + x;
        if self.s.abs() >= x.abs() {
            self.c += (self.s - t) + x;
        } else {
            self.c += (x - t) + self.s;
        }
        self.s = t;
    }
    #[inline(always)]
    fn get(&self) -> f64 {
        // Non-finite partial sums would turn the compensation into NaN.
        if self.s.is_finite() {
            self.s + self.c
        } else {
            self.s
        }
    }
}

/// Reads `cols` elements at `p` into `row` as f64.
///
/// # Safety
/// `p` must be valid for reading `cols * T::SIZE` bytes.
#[inline(always)]
unsafe fn load_row<T: Wide>(p: *const u8, cols: usize, row: &mut Vec<f64>) {
    row.clear();
    for c in 0..cols {
        // SAFETY: `c < cols`: inside the readable bytes at `p`.
        row.push(unsafe { T::load(p.add(c * T::SIZE)) }.to_f64());
    }
}

/// Common decoding of `(in: R [rows*cols], out: W [rows*k], rows, cols)` where `k` is 1
/// (reductions) or `cols` (softmax).
///
/// # Safety
/// `args`' buffers must satisfy [`super::HostKernelFn`]'s contract.
unsafe fn row_args<T: Elem>(
    args: &[HostArg],
    per_row_out: bool,
) -> Result<(Src, super::args::Raw, usize, usize), KernelError> {
    expect_count(args, 4)?;
    let rows = extent(args, 2)?;
    let cols = extent(args, 3)?;
    let total = product(args, 3, rows, cols)?;
    let inp = buffer::<T>(args, 0, total)?;
    let out = buffer::<T>(args, 1, if per_row_out { rows } else { total })?;
    // SAFETY: `inp` is readable for its length per the caller's contract. Row `r` is read
    // completely before output `r` is written; an output at the same address with the same
    // element size only writes at or before what was read (reductions write element `r`,
    // which lies in row `r / cols <= r`; softmax writes row `r`).
    let src = unsafe { Src::new(inp, T::SIZE, &[(out, T::SIZE)], true) };
    Ok((src, out, rows, cols))
}

/// `reduce_sum_<t>(in: R [rows*cols], out: W [rows], rows, cols)` for floats (f64 accumulator).
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn reduce_sum_float<T: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    // SAFETY: forwarded caller contract.
    let (src, out, rows, cols) = unsafe { row_args::<T>(args, true)? };
    let p = src.ptr();
    for r in 0..rows {
        let mut s = Sum::default();
        for c in 0..cols {
            // SAFETY: `r * cols + c < rows * cols`: inside the input.
            s.add(unsafe { T::load(p.add((r * cols + c) * T::SIZE)) }.to_f64());
        }
        // SAFETY: `r < rows`: inside the output.
        unsafe { T::from_f64(s.get()).store(out.ptr.add(r * T::SIZE)) };
    }
    Ok(())
}

/// `reduce_mean_<t>(in: R [rows*cols], out: W [rows], rows, cols)`: sum / cols (NaN when
/// `cols == 0`).
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn reduce_mean<T: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    // SAFETY: forwarded caller contract.
    let (src, out, rows, cols) = unsafe { row_args::<T>(args, true)? };
    let p = src.ptr();
    for r in 0..rows {
        let mut s = Sum::default();
        for c in 0..cols {
            // SAFETY: `r * cols + c < rows * cols`: inside the input.
            s.add(unsafe { T::load(p.add((r * cols + c) * T::SIZE)) }.to_f64());
        }
        // SAFETY: `r < rows`: inside the output.
        unsafe { T::from_f64(s.get() / cols as f64).store(out.ptr.add(r * T::SIZE)) };
    }
    Ok(())
}

/// `reduce_sum_<t>` for integers (wrapping), and `reduce_max_<t>` for every type (`max`
/// semantics of [`Arith`]; empty rows give the identity, -inf or `MIN`).
///
/// # Safety
/// See [`super::HostKernelFn`].
unsafe fn reduce_native<T: Elem>(
    args: &[HostArg],
    init: T::C,
    f: impl Fn(T::C, T::C) -> T::C,
) -> Result<(), KernelError> {
    // SAFETY: forwarded caller contract.
    let (src, out, rows, cols) = unsafe { row_args::<T>(args, true)? };
    let p = src.ptr();
    for r in 0..rows {
        let mut acc = init;
        for c in 0..cols {
            // SAFETY: `r * cols + c < rows * cols`: inside the input.
            acc = f(
                acc,
                unsafe { T::load(p.add((r * cols + c) * T::SIZE)) }.to_c(),
            );
        }
        // SAFETY: `r < rows`: inside the output.
        unsafe { T::from_c(acc).store(out.ptr.add(r * T::SIZE)) };
    }
    Ok(())
}

/// Integer `reduce_sum_<t>` (wrapping).
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn reduce_sum_int<T: Elem>(args: &[HostArg]) -> Result<(), KernelError> {
    // SAFETY: forwarded caller contract.
    unsafe { reduce_native::<T>(args, <T::C as Arith>::ZERO, Arith::add) }
}

/// `reduce_max_<t>`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn reduce_max<T: Elem>(args: &[HostArg]) -> Result<(), KernelError> {
    // SAFETY: forwarded caller contract.
    unsafe { reduce_native::<T>(args, <T::C as Arith>::LOWEST, Arith::max) }
}

/// `softmax_<t>(in: R [rows*cols], out: W [rows*cols], rows, cols)`:
/// `out[r,c] = exp(x[r,c] - m) / sum_c' exp(x[r,c'] - m)` with `m` the row max, in f64.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn softmax<T: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    // SAFETY: forwarded caller contract.
    let (src, out, rows, cols) = unsafe { row_args::<T>(args, false)? };
    let p = src.ptr();
    let mut row = Vec::with_capacity(cols);
    for r in 0..rows {
        // SAFETY: row `r` is inside the input.
        unsafe { load_row::<T>(p.add(r * cols * T::SIZE), cols, &mut row) };
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let mut s = Sum::default();
        for x in row.iter_mut() {
            *x = (*x - m).exp();
            s.add(*x);
        }
        let s = s.get();
        for (c, x) in row.iter().enumerate() {
            // SAFETY: `r * cols + c < rows * cols`: inside the output.
            unsafe { T::from_f64(x / s).store(out.ptr.add((r * cols + c) * T::SIZE)) };
        }
    }
    Ok(())
}

/// `layer_norm_<t>(in: R [rows*cols], gamma: R [cols], beta: R [cols], out: W [rows*cols],
/// eps: f32, rows, cols)`: `(x - mean) / sqrt(var + eps) * gamma + beta` per row, biased
/// variance, in f64.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn layer_norm<T: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 7)?;
    let rows = extent(args, 5)?;
    let cols = extent(args, 6)?;
    let total = product(args, 6, rows, cols)?;
    let eps = scalar::<f32>(args, 4)? as f64;
    let inp = buffer::<T>(args, 0, total)?;
    let gamma = buffer::<T>(args, 1, cols)?;
    let beta = buffer::<T>(args, 2, cols)?;
    let out = buffer::<T>(args, 3, total)?;
    let mut g = Vec::with_capacity(cols);
    let mut b = Vec::with_capacity(cols);
    // SAFETY: gamma and beta hold `cols` elements (checked); they are read completely here,
    // before anything is written.
    unsafe {
        load_row::<T>(gamma.ptr, cols, &mut g);
        load_row::<T>(beta.ptr, cols, &mut b);
    }
    // SAFETY: `inp` is readable for its length per the caller's contract; row `r` is read
    // completely before row `r` of the output is written.
    let src = unsafe { Src::new(inp, T::SIZE, &[(out, T::SIZE)], true) };
    let p = src.ptr();
    let mut row = Vec::with_capacity(cols);
    for r in 0..rows {
        // SAFETY: row `r` is inside the input.
        unsafe { load_row::<T>(p.add(r * cols * T::SIZE), cols, &mut row) };
        let mut s = Sum::default();
        row.iter().for_each(|&x| s.add(x));
        let mean = s.get() / cols as f64;
        let mut v = Sum::default();
        row.iter().for_each(|&x| v.add((x - mean) * (x - mean)));
        let rstd = 1.0 / (v.get() / cols as f64 + eps).sqrt();
        for (c, x) in row.iter().enumerate() {
            let y = (x - mean) * rstd * g[c] + b[c];
            // SAFETY: `r * cols + c < rows * cols`: inside the output.
            unsafe { T::from_f64(y).store(out.ptr.add((r * cols + c) * T::SIZE)) };
        }
    }
    Ok(())
}

/// `transpose_<t>(in: R [rows*cols], out: W [cols*rows], rows, cols)`: `out[c,r] = in[r,c]`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn transpose<T: Elem>(args: &[HostArg]) -> Result<(), KernelError> {
    const TILE: usize = 32;
    expect_count(args, 4)?;
    let rows = extent(args, 2)?;
    let cols = extent(args, 3)?;
    let total = product(args, 3, rows, cols)?;
    let inp = buffer::<T>(args, 0, total)?;
    let out = buffer::<T>(args, 1, total)?;
    // SAFETY: `inp` is readable for its length per the caller's contract; any overlap with
    // the output makes a copy.
    let src = unsafe { Src::new(inp, T::SIZE, &[(out, T::SIZE)], false) };
    let p = src.ptr();
    // Tiles go through a local buffer: each tile row is read contiguously and each tile
    // column written contiguously (power-of-two strides would thrash the cache otherwise).
    let mut tile = [T::ZERO; TILE * TILE];
    for r0 in (0..rows).step_by(TILE) {
        let h = TILE.min(rows - r0);
        for c0 in (0..cols).step_by(TILE) {
            let w = TILE.min(cols - c0);
            for i in 0..h {
                for j in 0..w {
                    // SAFETY: `r0 + i < rows`, `c0 + j < cols`: inside the input.
                    tile[j * TILE + i] =
                        unsafe { T::load(p.add(((r0 + i) * cols + c0 + j) * T::SIZE)) };
                }
            }
            for j in 0..w {
                for i in 0..h {
                    // SAFETY: `c0 + j < cols`, `r0 + i < rows`: inside the output.
                    unsafe {
                        tile[j * TILE + i].store(out.ptr.add(((c0 + j) * rows + r0 + i) * T::SIZE))
                    };
                }
            }
        }
    }
    Ok(())
}
