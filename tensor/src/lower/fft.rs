//! `fft`: one generated kernel per transformed dimension. A complex pass over a power-of-two
//! length n >= 4 is a radix-2 FFT (a thread per row: a bit-reversed copy, then log2 n
//! butterfly stages in place, O(n log n) per row); one over another length n > 8 is
//! Bluestein's algorithm (the chirp convolution by radix-2 FFTs of length m >= 2n - 1 in a
//! double scratch row, O(m log m) per row); the rest (lengths up to 8 that are not powers
//! of two) is a direct DFT along the dimension (a thread per output element, a sequential
//! sum over the dimension's n inputs, O(n) per element). RFFT's and IRFFT's last dimension,
//! when its length takes a fast pass, goes through a complex pass of the full length: the
//! real operand widened to complex, the pass, the first n/2 + 1 outputs kept; or the half
//! spectrum completed by symmetry, the inverse pass, the real parts kept. Shorter ones are
//! direct sums from the real values or over the half spectrum.
//! Twiddles are exact in their argument: the exponent's index j·k is reduced modulo n in
//! integers and the angle 2π·(jk mod n)/n taken in double, so no error grows with the index;
//! direct sums are accumulated in double for c64 and c128 alike and rounded once per pass;
//! butterflies are computed in double and rounded to the type once per stage.
//!
//! FFT and IFFT: a complex-to-complex pass per dimension (IFFT divides by n in each pass).
//! RFFT: the last dimension first, from the real operand to its n/2 + 1 non-negative
//! frequencies, then complex passes over the others. IRFFT: complex inverse passes over the
//! leading dimensions first, then the last one from n/2 + 1 frequencies to n real values,
//! the missing ones being the conjugates X[n - k] (the imaginary parts of X[0] and, for even
//! n, X[n/2] do not contribute, as in numpy's and XLA's irfft).

use super::emit::{KernelText, Scope, linear};
use super::{LowerError, Lowerer, scalar};
use crate::graph::{FftType, Node, TensorType};
use xthunk_core::ir::{DType, Slice, Thunk};

/// One pass: along dimension `axis` of a buffer of type `from` into one of type `to` (the
/// dimension's length may differ: RFFT's n → n/2 + 1, IRFFT's n/2 + 1 → n).
#[derive(Clone, Copy)]
struct Pass {
    axis: usize,
    /// The transform's length along the axis.
    n: u64,
    /// -1 forward, +1 inverse.
    sign: f64,
    kind: PassKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PassKind {
    /// Complex in, complex out, n of each.
    Complex,
    /// Real in (n), complex out (n/2 + 1).
    RealToHalf,
    /// Complex in (n/2 + 1, completed by symmetry), real out (n).
    HalfToReal,
}

impl Lowerer {
    /// Lowers the fft `node` into `dest`.
    pub(super) fn fft(
        &mut self,
        s: &Scope,
        node: &Node,
        kind: FftType,
        lengths: &[u64],
        dest: Slice,
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let x = node.operands[0];
        let t = s.graph.ty(x).clone();
        let rt = s.graph.ty(node.results[0]).clone();
        if rt.elements() == 0 {
            return Ok(());
        }
        let rank = t.rank();
        let lead = rank - lengths.len();
        let last = rank - 1;
        let mut passes = vec![];
        match kind {
            FftType::Fft | FftType::Ifft => {
                let sign = if kind == FftType::Fft { -1.0 } else { 1.0 };
                for (i, &n) in lengths.iter().enumerate().rev() {
                    passes.push(Pass {
                        axis: lead + i,
                        n,
                        sign,
                        kind: PassKind::Complex,
                    });
                }
            }
            FftType::Rfft => {
                for (i, &n) in lengths.iter().enumerate().rev() {
                    let kind = if lead + i == last {
                        PassKind::RealToHalf
                    } else {
                        PassKind::Complex
                    };
                    passes.push(Pass {
                        axis: lead + i,
                        n,
                        sign: -1.0,
                        kind,
                    });
                }
            }
            FftType::Irfft => {
                for (i, &n) in lengths.iter().enumerate() {
                    let kind = if lead + i == last {
                        PassKind::HalfToReal
                    } else {
                        PassKind::Complex
                    };
                    passes.push(Pass {
                        axis: lead + i,
                        n,
                        sign: 1.0,
                        kind,
                    });
                }
            }
        }
        let mut src = self.buffer_of(s, x, out)?;
        let mut cur = t.clone();
        let count = passes.len();
        for (p, pass) in passes.iter().enumerate() {
            let mut dims = cur.dims.clone();
            let dtype = match pass.kind {
                PassKind::Complex => cur.dtype,
                PassKind::RealToHalf => {
                    dims[pass.axis] = pass.n / 2 + 1;
                    cur.dtype.complex_of().unwrap_or(cur.dtype)
                }
                PassKind::HalfToReal => {
                    dims[pass.axis] = pass.n;
                    cur.dtype.complex_part().unwrap_or(cur.dtype)
                }
            };
            let next_t = TensorType::new(dtype, &dims);
            let dst = if p + 1 == count {
                dest
            } else {
                self.temp(&next_t)
            };
            match pass.kind {
                PassKind::Complex => self.complex_pass(pass, src, &cur, dst, out),
                // The real sides of a long dimension through a complex pass of the full
                // length: real -> complex, the pass, the first n/2 + 1 kept; or the half
                // spectrum completed by symmetry, the inverse pass, the real parts kept.
                PassKind::RealToHalf if fast(pass.n) => {
                    let full = TensorType::new(next_t.dtype, &cur.dims);
                    let (a, b) = (self.temp(&full), self.temp(&full));
                    let k = map_kernel(src, &cur, a, &full, |k, x, _| {
                        let c = scalar::compute(cur.dtype);
                        let v = k.var(c, scalar::load(cur.dtype, &x("i")));
                        format!("{}({v}, ({c})0)", scalar::compute(full.dtype))
                    });
                    out.extend(self.launch(k, full.elements()));
                    self.complex_pass(pass, a, &full, b, out);
                    let k = map_kernel(b, &full, dst, &next_t, |k, x, idx| {
                        let lin = linear(idx, &full.dims);
                        let _ = k;
                        x(&lin)
                    });
                    out.extend(self.launch(k, next_t.elements()));
                }
                PassKind::HalfToReal if fast(pass.n) => {
                    let full = TensorType::new(cur.dtype, &next_t.dims);
                    let (a, b) = (self.temp(&full), self.temp(&full));
                    let (n, axis, half) = (pass.n, pass.axis, pass.n / 2);
                    let k = map_kernel(src, &cur, a, &full, |k, x, idx| {
                        let mut sub = idx.to_vec();
                        let kk = k.var("long long", &idx[axis]);
                        sub[axis] = format!("({kk} <= {half}LL ? {kk} : {n}LL - {kk})");
                        let v = k.var(scalar::compute(cur.dtype), x(&linear(&sub, &cur.dims)));
                        format!(
                            "({kk} <= {half}LL ? {v} : {}({v}.re, -{v}.im))",
                            scalar::compute(cur.dtype)
                        )
                    });
                    out.extend(self.launch(k, full.elements()));
                    self.complex_pass(pass, a, &full, b, out);
                    let k = map_kernel(b, &full, dst, &next_t, |_, x, _| {
                        let c = scalar::compute(next_t.dtype);
                        scalar::store(next_t.dtype, &format!("({c})({}).re", x("i")))
                    });
                    out.extend(self.launch(k, next_t.elements()));
                }
                _ => {
                    let k = fft_pass(pass, src, &cur, dst, &next_t);
                    out.extend(self.launch(k, next_t.elements()));
                }
            }
            src = dst;
            cur = next_t;
        }
        Ok(())
    }

    /// A complex pass (forward or inverse by `pass.sign`) from `src` into `dst`, both of
    /// type `t`: radix-2, Bluestein or the direct sum by the length.
    fn complex_pass(
        &mut self,
        pass: &Pass,
        src: Slice,
        t: &TensorType,
        dst: Slice,
        out: &mut Vec<Thunk>,
    ) {
        let pass = &Pass {
            kind: PassKind::Complex,
            ..*pass
        };
        if pass.n.is_power_of_two() && pass.n >= 4 {
            let k = radix2_pass(pass, src, t, dst);
            out.extend(self.launch(k, t.elements() / pass.n));
        } else if pass.n > BLUESTEIN_FROM {
            let rows = t.elements() / pass.n;
            let m = (2 * pass.n - 1).next_power_of_two();
            let scratch = self.temp(&TensorType::new(DType::C128, &[rows, 2 * m]));
            let k = bluestein_pass(pass, src, t, dst, scratch, m);
            out.extend(self.launch(k, rows));
        } else {
            let k = fft_pass(pass, src, t, dst, t);
            out.extend(self.launch(k, t.elements()));
        }
    }
}

/// Whether a length takes the fast complex passes (radix-2 or Bluestein).
fn fast(n: u64) -> bool {
    (n.is_power_of_two() && n >= 4) || n > BLUESTEIN_FROM
}

/// A kernel writing each element `i` of `dst` (type `to`) as `f(kernel, read, index)`, where
/// `read(lin)` is element `lin` of `src` (type `from`) and `index` the element's indices in
/// `to`'s dimensions.
fn map_kernel(
    src: Slice,
    from: &TensorType,
    dst: Slice,
    to: &TensorType,
    f: impl FnOnce(&mut KernelText, &dyn Fn(&str) -> String, &[String]) -> String,
) -> KernelText {
    let mut k = KernelText::new();
    let o = k.output(dst, to.dtype);
    let p = k.input(src, from.dtype);
    k.open("XT_FOR(i, n) {");
    let idx = k.delinearize("i", &to.dims);
    let read = |lin: &str| format!("{p}[{lin}]");
    let v = f(&mut k, &read, &idx);
    k.line(format!("{o}[i] = {v};"));
    k.close("}");
    k
}

/// Lengths above which a complex pass of a length that is not a power of two uses
/// Bluestein's algorithm instead of the direct sum.
const BLUESTEIN_FROM: u64 = 8;

/// What a pass over the rows of `t` along `axis` needs, once its row loop is open.
struct Rows {
    /// Elements between two of a row's.
    stride: u64,
    /// The C types of an element and of one of its parts.
    ct: &'static str,
    c: &'static str,
    /// The variable holding the row's first element's offset.
    base: String,
}

/// Opens the loop over the rows of `t` along `axis` (a thread per row).
fn open_rows(k: &mut KernelText, t: &TensorType, axis: usize) -> Rows {
    let stride: u64 = t.dims[axis + 1..].iter().product();
    let mut row_dims = t.dims.clone();
    row_dims.remove(axis);
    k.open("XT_FOR(r, n) {");
    let mut idx = k.delinearize("r", &row_dims);
    idx.insert(axis, "0LL".into());
    let base = k.var("long long", linear(&idx, &t.dims));
    Rows {
        stride,
        ct: scalar::compute(t.dtype),
        c: scalar::compute(t.dtype.complex_part().unwrap_or(DType::F64)),
        base,
    }
}

/// A complex pass over any length n by Bluestein's algorithm: with c_j = e^{s·πi·j²/n}
/// (j² reduced modulo 2n in integers), X_k = c_k · Σ_j (x_j c_j) conj(c_{k−j}), the
/// convolution taken by radix-2 FFTs of length m ≥ 2n − 1 on a thread's two rows of the
/// double `scratch` (rows × 2m): O(m log m) per row, in double, rounded once at the end.
fn bluestein_pass(
    pass: &Pass,
    src: Slice,
    t: &TensorType,
    dst: Slice,
    scratch: Slice,
    m: u64,
) -> KernelText {
    let mut k = KernelText::new();
    let o = k.output(dst, t.dtype);
    let p = k.input(src, t.dtype);
    let w = k.inout(scratch, DType::C128);
    let (n, s) = (pass.n, pass.sign);
    let Rows {
        stride,
        ct,
        c,
        base,
    } = open_rows(&mut k, t, pass.axis);
    k.line(format!("xt_c128* A = {w} + r * {}LL;", 2 * m));
    k.line(format!("xt_c128* B = A + {m}LL;"));
    k.line(format!(
        "for (long long j = 0; j < {m}LL; ++j) {{ A[j] = xt_c128(0.0, 0.0); B[j] = xt_c128(0.0, 0.0); }}"
    ));
    k.open(format!("for (long long j = 0; j < {n}LL; ++j) {{"));
    k.line(format!(
        "const double ang = {s:?} * 3.141592653589793 * (double)((j * j) % {}LL) / {n}.0;",
        2 * n
    ));
    k.line("const double cr = cos(ang), ci = sin(ang);");
    k.line(format!(
        "const double xr = (double){p}[{base} + j * {stride}LL].re, xi = (double){p}[{base} + j * {stride}LL].im;"
    ));
    k.line("A[j] = xt_c128(xr * cr - xi * ci, xr * ci + xi * cr);");
    k.line("B[j] = xt_c128(cr, -ci);");
    k.line(format!("if (j > 0) B[{m}LL - j] = xt_c128(cr, -ci);"));
    k.close("}");
    k.line(format!("xh_fft_pow2(A, {m}LL, -1.0);"));
    k.line(format!("xh_fft_pow2(B, {m}LL, -1.0);"));
    k.line(format!(
        "for (long long j = 0; j < {m}LL; ++j) A[j] = xh_cmul(A[j], B[j]);"
    ));
    k.line(format!("xh_fft_pow2(A, {m}LL, 1.0);"));
    let scale = if s > 0.0 {
        format!("{}.0 * {n}.0", m)
    } else {
        format!("{m}.0")
    };
    k.open(format!("for (long long j = 0; j < {n}LL; ++j) {{"));
    k.line(format!(
        "const double ang = {s:?} * 3.141592653589793 * (double)((j * j) % {}LL) / {n}.0;",
        2 * n
    ));
    k.line("const double cr = cos(ang), ci = sin(ang);");
    k.line(format!(
        "const double yr = A[j].re / ({scale}), yi = A[j].im / ({scale});"
    ));
    k.line(format!(
        "{o}[{base} + j * {stride}LL] = {ct}(({c})(yr * cr - yi * ci), ({c})(yr * ci + yi * cr));"
    ));
    k.close("}");
    k.close("}");
    k
}

/// A complex pass over a power-of-two length: a thread per row along the axis, the row
/// copied into `dst` in bit-reversed order, then log2(n) in-place radix-2 butterfly stages
/// (each butterfly in double, its two results rounded to the type), then the 1/n of an
/// inverse transform (exact: a power of two).
fn radix2_pass(pass: &Pass, src: Slice, t: &TensorType, dst: Slice) -> KernelText {
    let mut k = KernelText::new();
    let o = k.inout(dst, t.dtype);
    let p = k.input(src, t.dtype);
    let n = pass.n;
    let bits = n.trailing_zeros();
    let Rows {
        stride,
        ct,
        c,
        base,
    } = open_rows(&mut k, t, pass.axis);
    k.open(format!("for (long long j = 0; j < {n}LL; ++j) {{"));
    k.line(format!(
        "long long rj = 0; for (int b = 0; b < {bits}; ++b) rj |= ((j >> b) & 1LL) << ({} - b);",
        bits - 1
    ));
    k.line(format!(
        "{o}[{base} + rj * {stride}LL] = {p}[{base} + j * {stride}LL];"
    ));
    k.close("}");
    k.open(format!(
        "for (long long len = 2; len <= {n}LL; len <<= 1) {{"
    ));
    k.line("const long long half = len >> 1;");
    k.open(format!("for (long long i0 = 0; i0 < {n}LL; i0 += len) {{"));
    k.open("for (long long j = 0; j < half; ++j) {");
    // The twiddle e^{sign·2πi·j/len} = e^{sign·2πi·(j·n/len)/n}, exact in its index.
    k.line(format!(
        "const double ang = {:?} * 6.283185307179586 * (double)(j * ({n}LL / len)) / {n}.0;",
        pass.sign
    ));
    k.line("const double w_re = cos(ang), w_im = sin(ang);");
    k.line(format!(
        "const long long ia = {base} + (i0 + j) * {stride}LL, ib = ia + half * {stride}LL;"
    ));
    k.line(format!(
        "const double ur = (double){o}[ia].re, ui = (double){o}[ia].im, xr = (double){o}[ib].re, xi = (double){o}[ib].im;"
    ));
    k.line("const double vr = xr * w_re - xi * w_im, vi = xr * w_im + xi * w_re;");
    k.line(format!("{o}[ia] = {ct}(({c})(ur + vr), ({c})(ui + vi));"));
    k.line(format!("{o}[ib] = {ct}(({c})(ur - vr), ({c})(ui - vi));"));
    k.close("}");
    k.close("}");
    k.close("}");
    if pass.sign > 0.0 {
        k.open(format!("for (long long j = 0; j < {n}LL; ++j) {{"));
        k.line(format!("const long long ia = {base} + j * {stride}LL;"));
        k.line(format!(
            "{o}[ia] = {ct}(({c})((double){o}[ia].re / {n}.0), ({c})((double){o}[ia].im / {n}.0));"
        ));
        k.close("}");
    }
    k.close("}");
    k
}

/// The kernel of one pass from `src` (of type `from`) into `dst` (of type `to`).
fn fft_pass(pass: &Pass, src: Slice, from: &TensorType, dst: Slice, to: &TensorType) -> KernelText {
    let mut k = KernelText::new();
    let o = k.output(dst, to.dtype);
    let p = k.input(src, from.dtype);
    let n = pass.n;
    let axis = pass.axis;
    // The number of inputs summed: n, or the n/2 + 1 stored frequencies for HalfToReal
    // (the others by symmetry: the loop still runs over all n).
    k.open("XT_FOR(i, n) {");
    let idx = k.delinearize("i", &to.dims);
    k.line("double ar = 0.0, ai = 0.0;");
    k.line(format!("const long long kk = {};", idx[axis]));
    k.open(format!("for (long long c = 0; c < {n}LL; ++c) {{"));
    // The twiddle e^{sign·2πi·(kk·c mod n)/n}, exact in its index.
    k.line(format!(
        "const double ang = {:?} * 6.283185307179586 * (double)((kk * c) % {n}LL) / {n}.0;",
        pass.sign
    ));
    k.line("const double w_re = cos(ang), w_im = sin(ang);");
    let mut sub = idx.clone();
    match pass.kind {
        PassKind::Complex => {
            sub[axis] = "c".into();
            let lin = linear(&sub, &from.dims);
            k.line(format!(
                "const double x_re = (double){p}[{lin}].re, x_im = (double){p}[{lin}].im;"
            ));
        }
        PassKind::RealToHalf => {
            sub[axis] = "c".into();
            let lin = linear(&sub, &from.dims);
            k.line(format!(
                "const double x_re = (double){}, x_im = 0.0;",
                scalar::load(from.dtype, &format!("{p}[{lin}]"))
            ));
        }
        PassKind::HalfToReal => {
            // X[c] for c <= n/2, else conj(X[n - c]).
            sub[axis] = "cc".into();
            let lin = linear(&sub, &from.dims);
            let half = n / 2;
            k.line(format!(
                "const long long cc = c <= {half}LL ? c : {n}LL - c;"
            ));
            k.line(format!(
                "const double x_re = (double){p}[{lin}].re, x_im = c <= {half}LL ? (double){p}[{lin}].im : -(double){p}[{lin}].im;"
            ));
        }
    }
    k.line("ar += x_re * w_re - x_im * w_im;");
    k.line("ai += x_re * w_im + x_im * w_re;");
    k.close("}");
    if pass.sign > 0.0 {
        k.line(format!("ar /= {n}.0; ai /= {n}.0;"));
    }
    match pass.kind {
        PassKind::HalfToReal => {
            let part = to.dtype;
            let c = scalar::compute(part);
            k.line(format!(
                "{o}[i] = {};",
                scalar::store(part, &format!("({c})ar"))
            ));
        }
        _ => {
            let part = to.dtype.complex_part().unwrap_or(DType::F64);
            let c = scalar::compute(part);
            k.line(format!(
                "{o}[i] = {}(({c})ar, ({c})ai);",
                scalar::compute(to.dtype)
            ));
        }
    }
    k.close("}");
    k
}
