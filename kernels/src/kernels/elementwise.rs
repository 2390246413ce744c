//! Host implementations of the elementwise kernels: fill, iota, convert, unary, binary, row
//! broadcast, axpy and scale.
//!
//! Inputs are read in blocks of [`BLOCK`] elements into local arrays, computed, and written:
//! aliasing with an output that starts at the same address (in-place) is exact, and any other
//! overlap is resolved by [`Src`] with a snapshot copy. All reads and writes are unaligned.

use super::args::{Raw, Src, buffer, expect_count, extent, product, scalar};
use super::elem::{Arith, BLOCK, Elem, Real, Wide};
use super::{HostArg, KernelError};

/// A unary operation over compute type `C`.
pub(crate) trait UnaryOp<C> {
    const NAME: &'static str;
    fn apply(x: C) -> C;
}

/// A binary operation over any compute type.
pub(crate) trait BinaryOp {
    const NAME: &'static str;
    fn apply<C: Arith>(a: C, b: C) -> C;
}

macro_rules! unary_ops {
    ($($(#[$m:meta])* $op:ident $name:literal <$bound:ident> |$x:ident| $body:expr;)*) => {$(
        $(#[$m])*
        pub(crate) struct $op;
        impl<C: $bound> UnaryOp<C> for $op {
            const NAME: &'static str = $name;
            #[inline(always)]
            fn apply($x: C) -> C {
                $body
            }
        }
    )*};
}

unary_ops! {
    /// `-x` (wrapping for integers).
    Neg "neg" <Arith> |x| x.neg();
    /// `|x|` (wrapping for integers: `abs(MIN) = MIN`).
    Abs "abs" <Arith> |x| x.abs();
    /// `x > 0 ? x : 0` (NaN -> 0).
    Relu "relu" <Arith> |x| if x > C::ZERO { x } else { C::ZERO };
    Exp "exp" <Real> |x| x.exp();
    /// Natural logarithm.
    Log "log" <Real> |x| x.ln();
    Sqrt "sqrt" <Real> |x| x.sqrt();
    /// `1 / sqrt(x)`.
    Rsqrt "rsqrt" <Real> |x| C::constant(1.0).div(x.sqrt());
    Tanh "tanh" <Real> |x| x.tanh();
    /// `1 / (1 + exp(-x))`.
    Sigmoid "sigmoid" <Real> |x| C::constant(1.0).div(C::constant(1.0).add(x.neg().exp()));
    /// Tanh approximation: `0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))`.
    Gelu "gelu" <Real> |x| {
        let inner = C::constant(0.797_884_560_802_865_4)
            .mul(x.add(C::constant(0.044715).mul(x).mul(x).mul(x)));
        C::constant(0.5).mul(x).mul(C::constant(1.0).add(inner.tanh()))
    };
    /// Exact form: `0.5 * x * (1 + erf(x * 0.7071067811865476))`.
    GeluErf "gelu_erf" <Real> |x| {
        C::constant(0.5)
            .mul(x)
            .mul(C::constant(1.0).add(x.mul(C::constant(std::f64::consts::FRAC_1_SQRT_2)).erf()))
    };
}

macro_rules! binary_ops {
    ($($op:ident $name:literal $method:ident;)*) => {$(
        pub(crate) struct $op;
        impl BinaryOp for $op {
            const NAME: &'static str = $name;
            #[inline(always)]
            fn apply<C: Arith>(a: C, b: C) -> C {
                a.$method(b)
            }
        }
    )*};
}

binary_ops! {
    Add "add" add;
    Sub "sub" sub;
    Mul "mul" mul;
    Div "div" div;
    Max "max" max;
    Min "min" min;
}

/// `out[i] = f(i)` for `i < n`.
///
/// # Safety
/// `out` must be valid for writing `n * O::SIZE` bytes.
#[inline(always)]
unsafe fn generate<O: Elem>(out: *mut u8, n: usize, f: impl Fn(usize) -> O) {
    let mut xo = [O::ZERO; BLOCK];
    let mut start = 0;
    while start < n {
        let m = BLOCK.min(n - start);
        for (j, o) in xo[..m].iter_mut().enumerate() {
            *o = f(start + j);
        }
        for (j, o) in xo[..m].iter().enumerate() {
            // SAFETY: `start + j < n`, so the element lies inside the `n * O::SIZE` writable
            // bytes at `out`.
            unsafe { o.store(out.add((start + j) * O::SIZE)) };
        }
        start += m;
    }
}

/// `out[i] = f(a[i])` for `i < n`.
///
/// # Safety
/// `a` must be valid for reading `n * A::SIZE` bytes and `out` for writing `n * O::SIZE`
/// bytes; if they overlap they start at the same address and `A::SIZE == O::SIZE`.
#[inline(always)]
unsafe fn map1<A: Elem, O: Elem>(a: *const u8, out: *mut u8, n: usize, f: impl Fn(A) -> O) {
    let mut xa = [A::ZERO; BLOCK];
    let mut xo = [O::ZERO; BLOCK];
    let mut start = 0;
    while start < n {
        let m = BLOCK.min(n - start);
        for (j, x) in xa[..m].iter_mut().enumerate() {
            // SAFETY: `start + j < n`: inside the readable bytes at `a`.
            *x = unsafe { A::load(a.add((start + j) * A::SIZE)) };
        }
        for (o, x) in xo[..m].iter_mut().zip(&xa[..m]) {
            *o = f(*x);
        }
        for (j, o) in xo[..m].iter().enumerate() {
            // SAFETY: `start + j < n`: inside the writable bytes at `out`. This block of the
            // input was read above, and an aliasing input is the same block.
            unsafe { o.store(out.add((start + j) * O::SIZE)) };
        }
        start += m;
    }
}

/// `out[i] = f(a[i])` for `i < n`, in compute types (block conversions).
///
/// # Safety
/// As [`map1`].
#[inline(always)]
unsafe fn map1c<A: Elem, O: Elem>(a: *const u8, out: *mut u8, n: usize, f: impl Fn(A::C) -> O::C) {
    let mut xa = [<A::C as Arith>::ZERO; BLOCK];
    let mut xo = [<O::C as Arith>::ZERO; BLOCK];
    let mut start = 0;
    while start < n {
        let m = BLOCK.min(n - start);
        // SAFETY: elements `start..start + m` (`<= n`) are inside the readable bytes at `a`.
        unsafe { A::load_block(a.add(start * A::SIZE), &mut xa[..m]) };
        for (o, x) in xo[..m].iter_mut().zip(&xa[..m]) {
            *o = f(*x);
        }
        // SAFETY: elements `start..start + m` are inside the writable bytes at `out`; this
        // block of the input was read above, and an aliasing input is the same block.
        unsafe { O::store_block(&xo[..m], out.add(start * O::SIZE)) };
        start += m;
    }
}

/// `out[i] = f(a[i], b[i])` for `i < n`, in the compute type (block conversions).
///
/// # Safety
/// As [`map1`], for both inputs.
#[inline(always)]
unsafe fn map2c<T: Elem>(
    a: *const u8,
    b: *const u8,
    out: *mut u8,
    n: usize,
    f: impl Fn(T::C, T::C) -> T::C,
) {
    let zero = <T::C as Arith>::ZERO;
    let (mut xa, mut xb, mut xo) = ([zero; BLOCK], [zero; BLOCK], [zero; BLOCK]);
    let mut start = 0;
    while start < n {
        let m = BLOCK.min(n - start);
        // SAFETY: elements `start..start + m` (`<= n`) are inside the readable bytes at `a`
        // and `b`.
        unsafe {
            T::load_block(a.add(start * T::SIZE), &mut xa[..m]);
            T::load_block(b.add(start * T::SIZE), &mut xb[..m]);
        }
        for ((o, x), y) in xo[..m].iter_mut().zip(&xa[..m]).zip(&xb[..m]) {
            *o = f(*x, *y);
        }
        // SAFETY: elements `start..start + m` are inside the writable bytes at `out`; both
        // inputs' blocks were read above.
        unsafe { T::store_block(&xo[..m], out.add(start * T::SIZE)) };
        start += m;
    }
}

/// `fill_<t>(out: W [n], value: t, n: i64)`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn fill<T: Elem>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 3)?;
    let n = extent(args, 2)?;
    let value: T = scalar(args, 1)?;
    let out = buffer::<T>(args, 0, n)?;
    // SAFETY: `out` holds exactly `n` elements (checked), writable per the caller's contract.
    unsafe { generate(out.ptr, n, |_| value) };
    Ok(())
}

/// `iota_<t>(out: W [n], start: t, step: t, n: i64)`: `out[i] = start + i * step` in the
/// compute type.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn iota<T: Elem>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 4)?;
    let n = extent(args, 3)?;
    let start = scalar::<T>(args, 1)?.to_c();
    let step = scalar::<T>(args, 2)?.to_c();
    let out = buffer::<T>(args, 0, n)?;
    // SAFETY: `out` holds exactly `n` elements (checked), writable per the caller's contract.
    unsafe {
        generate(out.ptr, n, |i| {
            T::from_c(start.add(<T::C as Arith>::from_index(i).mul(step)))
        })
    };
    Ok(())
}

/// `convert_<a>_<b>(in: R [n] a, out: W [n] b, n: i64)`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn convert<A: Wide, B: Wide>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 3)?;
    let n = extent(args, 2)?;
    let inp = buffer::<A>(args, 0, n)?;
    let out = buffer::<B>(args, 1, n)?;
    // SAFETY: `inp` is readable for its length per the caller's contract.
    let src = unsafe { Src::new(inp, A::SIZE, &[(out, B::SIZE)], true) };
    // SAFETY: both hold exactly `n` elements (checked); `Src` removed any overlap other than
    // the same start with the same element size.
    unsafe { map1(src.ptr(), out.ptr, n, |x: A| B::from_f64(x.to_f64())) };
    Ok(())
}

/// `<op>_<t>(in: R [n], out: W [n], n: i64)`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn unary<T: Elem, O: UnaryOp<T::C>>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 3)?;
    let n = extent(args, 2)?;
    let inp = buffer::<T>(args, 0, n)?;
    let out = buffer::<T>(args, 1, n)?;
    // SAFETY: `inp` is readable for its length per the caller's contract.
    let src = unsafe { Src::new(inp, T::SIZE, &[(out, T::SIZE)], true) };
    // SAFETY: both hold exactly `n` elements (checked); overlap resolved by `Src`.
    unsafe { map1c::<T, T>(src.ptr(), out.ptr, n, O::apply) };
    Ok(())
}

/// `<op>_<t>(a: R [n], b: R [n], out: W [n], n: i64)`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn binary<T: Elem, O: BinaryOp>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 4)?;
    let n = extent(args, 3)?;
    let a = buffer::<T>(args, 0, n)?;
    let b = buffer::<T>(args, 1, n)?;
    let out = buffer::<T>(args, 2, n)?;
    let outs = [(out, T::SIZE)];
    // SAFETY: inputs are readable for their lengths per the caller's contract.
    let (sa, sb) = unsafe {
        (
            Src::new(a, T::SIZE, &outs, true),
            Src::new(b, T::SIZE, &outs, true),
        )
    };
    // SAFETY: all hold exactly `n` elements (checked); overlap resolved by `Src`.
    unsafe { map2c::<T>(sa.ptr(), sb.ptr(), out.ptr, n, O::apply) };
    Ok(())
}

/// `<op>_row_<t>(a: R [rows*cols], b: R [cols], out: W [rows*cols], rows: i64, cols: i64)`:
/// `out[r,c] = a[r,c] op b[c]`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn binary_row<T: Elem, O: BinaryOp>(args: &[HostArg]) -> Result<(), KernelError> {
    expect_count(args, 5)?;
    let rows = extent(args, 3)?;
    let cols = extent(args, 4)?;
    let total = product(args, 4, rows, cols)?;
    let a = buffer::<T>(args, 0, total)?;
    let b = buffer::<T>(args, 1, cols)?;
    let out = buffer::<T>(args, 2, total)?;
    let outs = [(out, T::SIZE)];
    // SAFETY: inputs are readable for their lengths per the caller's contract. `b` is read
    // once per row, so any overlap of `b` with `out` makes a copy.
    let (sa, sb) = unsafe {
        (
            Src::new(a, T::SIZE, &outs, true),
            Src::new(b, T::SIZE, &outs, false),
        )
    };
    let row_bytes = cols * T::SIZE;
    for r in 0..rows {
        // SAFETY: row `r < rows` of `a` and `out` holds `cols` elements inside their
        // `rows * cols` (checked); `b` holds `cols`; overlap resolved by `Src`.
        unsafe {
            map2c::<T>(
                sa.ptr().add(r * row_bytes),
                sb.ptr(),
                out.ptr.add(r * row_bytes),
                cols,
                O::apply,
            )
        };
    }
    Ok(())
}

/// `axpy_<t>(x: R [n], y: RW [n], alpha: t, n: i64)`: `y = alpha * x + y` (no FMA).
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn axpy<T: Elem>(args: &[HostArg]) -> Result<(), KernelError>
where
    T::C: Real,
{
    expect_count(args, 4)?;
    let n = extent(args, 3)?;
    let alpha = scalar::<T>(args, 2)?.to_c();
    let x = buffer::<T>(args, 0, n)?;
    let y: Raw = buffer::<T>(args, 1, n)?;
    // SAFETY: `x` is readable for its length per the caller's contract.
    let sx = unsafe { Src::new(x, T::SIZE, &[(y, T::SIZE)], true) };
    // SAFETY: both hold exactly `n` elements (checked); `y` is read and written element by
    // element (same block), `x` overlap resolved by `Src`.
    unsafe { map2c::<T>(sx.ptr(), y.ptr, y.ptr, n, |x, y| alpha.mul(x).add(y)) };
    Ok(())
}

/// `scale_<t>(x: RW [n], alpha: t, n: i64)`: `x = alpha * x`.
///
/// # Safety
/// See [`super::HostKernelFn`].
pub(crate) unsafe fn scale<T: Elem>(args: &[HostArg]) -> Result<(), KernelError>
where
    T::C: Real,
{
    expect_count(args, 3)?;
    let n = extent(args, 2)?;
    let alpha = scalar::<T>(args, 1)?.to_c();
    let x = buffer::<T>(args, 0, n)?;
    // SAFETY: `x` holds exactly `n` elements (checked), read and written block by block.
    unsafe { map1c::<T, T>(x.ptr, x.ptr, n, |v| alpha.mul(v)) };
    Ok(())
}
