//! Element types of the standard kernels: unaligned little-endian loads and stores, immediates,
//! the compute type of each element type, and the arithmetic the kernels use.

use crate::ir::{DType, Scalar};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// Elements per block of the blocked elementwise drivers.
pub(crate) const BLOCK: usize = 256;

/// The arithmetic of a compute type (f32, f64, or a native integer).
///
/// Integers: `add`/`sub`/`mul`/`neg`/`abs` wrap; `div` by zero gives 0 and `MIN / -1` wraps.
/// Floats: IEEE; `max`/`min` return the other operand when one is NaN (C `fmax`/`fmin`).
pub(crate) trait Arith: Copy + PartialOrd + 'static {
    const ZERO: Self;
    /// The identity of `max` (-inf for floats, `MIN` for integers).
    const LOWEST: Self;
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
    fn div(self, b: Self) -> Self;
    fn max(self, b: Self) -> Self;
    fn min(self, b: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    /// An element index in this type (`i as f32` for floats; wrapping `i as T` for integers).
    fn from_index(i: usize) -> Self;
}

/// A floating-point compute type (f32 or f64).
pub(crate) trait Real: Arith {
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// A constant, rounded to nearest.
    fn constant(v: f64) -> Self;
}

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0;
            const LOWEST: Self = <$t>::MIN;
            #[inline(always)]
            fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            #[inline(always)]
            fn sub(self, b: Self) -> Self { self.wrapping_sub(b) }
            #[inline(always)]
            fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
            #[inline(always)]
            fn div(self, b: Self) -> Self { if b == 0 { 0 } else { self.wrapping_div(b) } }
            #[inline(always)]
            fn max(self, b: Self) -> Self { Ord::max(self, b) }
            #[inline(always)]
            fn min(self, b: Self) -> Self { Ord::min(self, b) }
            #[inline(always)]
            fn neg(self) -> Self { self.wrapping_neg() }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn abs(self) -> Self { if self < 0 { self.wrapping_neg() } else { self } }
            #[inline(always)]
            fn from_index(i: usize) -> Self { i as $t }
        }
    )*};
}
arith_int!(i8, u8, i32, i64);

macro_rules! arith_float {
    ($($t:ident),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0.0;
            const LOWEST: Self = $t::NEG_INFINITY;
            #[inline(always)]
            fn add(self, b: Self) -> Self { self + b }
            #[inline(always)]
            fn sub(self, b: Self) -> Self { self - b }
            #[inline(always)]
            fn mul(self, b: Self) -> Self { self * b }
            #[inline(always)]
            fn div(self, b: Self) -> Self { self / b }
            #[inline(always)]
            fn max(self, b: Self) -> Self { $t::max(self, b) }
            #[inline(always)]
            fn min(self, b: Self) -> Self { $t::min(self, b) }
            #[inline(always)]
            fn neg(self) -> Self { -self }
            #[inline(always)]
            fn abs(self) -> Self { $t::abs(self) }
            #[inline(always)]
            fn from_index(i: usize) -> Self { i as $t }
        }
        impl Real for $t {
            #[inline(always)]
            fn exp(self) -> Self { $t::exp(self) }
            #[inline(always)]
            fn ln(self) -> Self { $t::ln(self) }
            #[inline(always)]
            fn sqrt(self) -> Self { $t::sqrt(self) }
            #[inline(always)]
            fn tanh(self) -> Self { $t::tanh(self) }
            #[inline(always)]
            fn erf(self) -> Self { <$t as LibmErf>::erf(self) }
            #[inline(always)]
            fn constant(v: f64) -> Self { v as $t }
        }
    )*};
}
arith_float!(f32, f64);

/// `erf` of each float type from libm (Rust's std has none on stable).
trait LibmErf {
    fn erf(self) -> Self;
}
impl LibmErf for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
}
impl LibmErf for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
}

/// An element type of a kernel buffer.
pub(crate) trait Elem: Copy + 'static {
    const DTYPE: DType;
    /// Size in bytes (equals `DTYPE.size()`).
    const SIZE: usize;
    const ZERO: Self;
    /// The type arithmetic is done in: f32 for f16/bf16/f32, f64 for f64, itself for integers.
    type C: Arith;

    /// Reads one element (little-endian) from `p`.
    ///
    /// # Safety
    /// `p` must be valid for reading `SIZE` bytes (no alignment needed).
    unsafe fn load(p: *const u8) -> Self;

    /// Writes this element (little-endian) at `p`.
    ///
    /// # Safety
    /// `p` must be valid for writing `SIZE` bytes (no alignment needed).
    unsafe fn store(self, p: *mut u8);

    /// Loads `out.len()` consecutive elements at `p`, converted to the compute type.
    ///
    /// # Safety
    /// `p` must be valid for reading `out.len() * SIZE` bytes (no alignment needed).
    #[inline(always)]
    unsafe fn load_block(p: *const u8, out: &mut [Self::C]) {
        for (j, o) in out.iter_mut().enumerate() {
            // SAFETY: `j < out.len()`: inside the readable bytes at `p`.
            *o = unsafe { Self::load(p.add(j * Self::SIZE)) }.to_c();
        }
    }

    /// Stores `src` (rounded from the compute type) as consecutive elements at `p`.
    ///
    /// # Safety
    /// `p` must be valid for writing `src.len() * SIZE` bytes (no alignment needed).
    #[inline(always)]
    unsafe fn store_block(src: &[Self::C], p: *mut u8) {
        for (j, &c) in src.iter().enumerate() {
            // SAFETY: `j < src.len()`: inside the writable bytes at `p`.
            unsafe { Self::from_c(c).store(p.add(j * Self::SIZE)) };
        }
    }

    /// This type's immediate, if `s` has exactly this dtype.
    fn from_scalar(s: &Scalar) -> Option<Self>;

    fn to_c(self) -> Self::C;
    /// Rounds to nearest (even) for floats; identity for integers.
    fn from_c(c: Self::C) -> Self;
}

/// An element type with exact widening to f64 and a rounding conversion from f64 (the float
/// types and i32): used by conversions and by the f64 accumulations of row kernels.
pub(crate) trait Wide: Elem {
    /// Exact.
    fn to_f64(self) -> f64;
    /// Floats: round to nearest even, single rounding. Integers: toward zero, saturating,
    /// NaN -> 0.
    fn from_f64(v: f64) -> Self;
}

macro_rules! load_store {
    ($n:literal, $from:expr, $to:expr) => {
        #[inline(always)]
        unsafe fn load(p: *const u8) -> Self {
            // SAFETY: the caller guarantees `p` is valid for reading SIZE bytes; the read is
            // unaligned and `[u8; N]` has no invalid values.
            let b = unsafe { std::ptr::read_unaligned(p.cast::<[u8; $n]>()) };
            $from(b)
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut u8) {
            let b: [u8; $n] = $to(self);
            // SAFETY: the caller guarantees `p` is valid for writing SIZE bytes; the write is
            // unaligned.
            unsafe { std::ptr::write_unaligned(p.cast::<[u8; $n]>(), b) }
        }
    };
}

macro_rules! elem_native {
    ($t:ident, $dt:ident, $n:literal, $variant:ident, $c:ty) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$dt;
            const SIZE: usize = $n;
            const ZERO: Self = 0 as $t;
            type C = $c;
            load_store!($n, $t::from_le_bytes, $t::to_le_bytes);
            #[inline]
            fn from_scalar(s: &Scalar) -> Option<Self> {
                match *s {
                    Scalar::$variant(v) => Some(v),
                    _ => None,
                }
            }
            #[inline(always)]
            fn to_c(self) -> $c {
                self as $c
            }
            #[inline(always)]
            fn from_c(c: $c) -> Self {
                c as $t
            }
        }
    };
}
elem_native!(i8, I8, 1, I8, i8);
elem_native!(u8, U8, 1, U8, u8);
elem_native!(i32, I32, 4, I32, i32);
elem_native!(i64, I64, 8, I64, i64);
elem_native!(f32, F32, 4, F32, f32);
elem_native!(f64, F64, 8, F64, f64);

macro_rules! elem_half {
    ($t:ident, $dt:ident, $variant:ident, {$($extra:tt)*}) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$dt;
            const SIZE: usize = 2;
            const ZERO: Self = $t::ZERO;
            type C = f32;
            load_store!(2, $t::from_le_bytes, $t::to_le_bytes);
            $($extra)*
            #[inline]
            fn from_scalar(s: &Scalar) -> Option<Self> {
                match *s {
                    Scalar::$variant(v) => Some($t::from_bits(v)),
                    _ => None,
                }
            }
            #[inline(always)]
            fn to_c(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn from_c(c: f32) -> Self {
                $t::from_f32(c)
            }
        }
        impl Wide for $t {
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                // Round to odd into f32, then to nearest even: a single correct rounding (f32
                // has more than two extra bits of precision and covers the exponent range).
                // `half`'s own `from_f64` ignores the low 32 mantissa bits (double rounding).
                $t::from_f32(f64_to_f32_odd(v))
            }
        }
    };
}
elem_half!(f16, F16, F16, {
    // Blocks of f16 convert with half's slice conversions (F16C when the CPU has it).
    #[inline(always)]
    unsafe fn load_block(p: *const u8, out: &mut [f32]) {
        let mut tmp = [f16::ZERO; BLOCK];
        let mut done = 0;
        for chunk in out.chunks_mut(BLOCK) {
            let tmp = &mut tmp[..chunk.len()];
            for (j, t) in tmp.iter_mut().enumerate() {
                // SAFETY: `done + j < out.len()`: inside the readable bytes at `p`.
                *t = unsafe { f16::load(p.add((done + j) * 2)) };
            }
            tmp.convert_to_f32_slice(chunk);
            done += chunk.len();
        }
    }
    #[inline(always)]
    unsafe fn store_block(src: &[f32], p: *mut u8) {
        let mut tmp = [f16::ZERO; BLOCK];
        let mut done = 0;
        for chunk in src.chunks(BLOCK) {
            let tmp = &mut tmp[..chunk.len()];
            tmp.convert_from_f32_slice(chunk);
            for (j, t) in tmp.iter().enumerate() {
                // SAFETY: `done + j < src.len()`: inside the writable bytes at `p`.
                unsafe { t.store(p.add((done + j) * 2)) };
            }
            done += chunk.len();
        }
    }
});
elem_half!(bf16, BF16, BF16, {});

impl Wide for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Wide for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl Wide for i32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        // Rust's `as` truncates toward zero, saturates, and maps NaN to 0.
        v as i32
    }
}

/// `v` rounded to f32 with round-to-odd: truncate toward zero, and if inexact set the lowest
/// mantissa bit. Finite values beyond f32's range give ±f32::MAX (which rounds on to ±inf in
/// any narrower format, as the exact value would).
#[inline]
pub(crate) fn f64_to_f32_odd(v: f64) -> f32 {
    let f = v as f32;
    if v.is_nan() || f as f64 == v {
        return f;
    }
    if f.is_infinite() {
        return f32::MAX.copysign(v as f32);
    }
    let mut bits = f.to_bits();
    if (f as f64).abs() > v.abs() {
        // Rounded away from zero: step one ulp back toward zero (f is not zero here).
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}
