//! Helpers: seeded random inputs per element type, encoding to and from device bytes (f16 and
//! bf16 through `half`, with an independent correctly rounded f64 → f16/bf16 conversion),
//! poisoned outputs, comparisons at explicit tolerances, and running one-off programs on a
//! device.
//!
//! # Tolerances
//!
//! Float results are compared as `|got - expected| <= rtol * |expected| + atol + extra`, where
//! `expected` is the exact (f64) reference value and `extra` is a per-element term a check adds
//! for error that grows with the computation (sums, dot products, cancellation). The base
//! `(rtol, atol)` per element type ([`Tol::of`]):
//!
//! | dtype | rtol | atol | why |
//! |---|---|---|---|
//! | f64 | 1e-12 | 1e-14 | a few ulps (2^-52 ≈ 2.2e-16) |
//! | f32 | 1e-5 | 1e-6 | ~80 ulps (2^-23 ≈ 1.2e-7): room for GPU fast paths |
//! | f16 | 2e-3 | 1e-5 | ~2 ulps (2^-10 ≈ 9.8e-4) after computing in f32 |
//! | bf16 | 1.6e-2 | 1e-5 | ~2 ulps (2^-7 ≈ 7.8e-3) after computing in f32 |
//!
//! Transcendental kernels (exp, log, rsqrt, tanh, sigmoid, gelu, softmax, layer norm) use
//! [`Tol::transcendental`]: rtol ×4 for f32 and f64 (f16/bf16 are dominated by the final
//! rounding and keep their base tolerance). Integers, conversions, fills, transposes and maxima
//! are compared exactly.

use crate::failure::CheckFailure;
use half::{bf16, f16};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Buffer, Device, DeviceMemory, DevicePtr};
use xthunk_core::executor::{ExecuteOptions, LoadedExecutable};
use xthunk_core::ir::{DType, Executable, MemorySpace, Scalar, f8};

/// What a check returns.
pub type CheckResult<T = ()> = Result<T, CheckFailure>;

/// The random generator of checks.
pub type CheckRng = ChaCha8Rng;

/// A mismatch with this message.
pub fn fail(msg: impl Into<String>) -> CheckFailure {
    CheckFailure::Mismatch(msg.into())
}

/// The message of a panic payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Fails with `msg()` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> CheckResult {
    if cond { Ok(()) } else { Err(fail(msg())) }
}

/// The seed of the check `name`: a hash of the name, mixed with `XTHUNK_CONFORMANCE_SEED`
/// when that is set (to run the suite on other inputs). Failures print it.
pub fn seed_for(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    if let Some(s) = std::env::var("XTHUNK_CONFORMANCE_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        h ^= s.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h
}

/// A generator seeded with `seed`.
pub fn rng_from(seed: u64) -> CheckRng {
    ChaCha8Rng::seed_from_u64(seed)
}

// ---------------------------------------------------------------------------------------------
// Element values and their encodings.

/// Host-side values of one buffer: exact f64 values for float types, integers (as i64; u8 as
/// 0..=255, pred as 0/1) for the others.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    F(Vec<f64>),
    I(Vec<i64>),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::F(v) => v.len(),
            Values::I(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The float values, or a failure naming `what`.
    pub fn floats(&self, what: &str) -> CheckResult<&[f64]> {
        match self {
            Values::F(v) => Ok(v),
            Values::I(_) => Err(fail(format!("{what}: expected float values, got integers"))),
        }
    }

    /// The integer values, or a failure naming `what`.
    pub fn ints(&self, what: &str) -> CheckResult<&[i64]> {
        match self {
            Values::I(v) => Ok(v),
            Values::F(_) => Err(fail(format!("{what}: expected integer values, got floats"))),
        }
    }
}

/// Smallest and largest value of an integer type.
pub fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::Pred => (0, 1),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::U8 => (0, u8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::U16 => (0, u16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        // Integers are i64 here: u64 inputs are its lower half, and a u64 result is its bit
        // pattern (wrapping arithmetic agrees bit for bit; order agrees below 2^63).
        DType::U64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    }
}

/// `v` reduced modulo 2^bits into the range of the integer type (two's complement wrapping).
pub fn wrap_int(dtype: DType, v: i128) -> i64 {
    match dtype {
        DType::Pred => (v & 1) as i64,
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I16 => v as i16 as i64,
        DType::U16 => v as u16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        _ => v as i64,
    }
}

/// `v` rounded to nearest even in a binary format with `precision` significand bits (the
/// implicit bit included), minimum normal exponent `emin` and largest finite value `max`;
/// overflow gives ±inf. Written independently of `half` and of the kernels under test.
fn round_to_format(v: f64, precision: i32, emin: i32, max: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let a = v.abs();
    let biased = ((a.to_bits() >> 52) & 0x7ff) as i32;
    // f64 subnormals are far below the range of every narrower format.
    let e = if biased == 0 { -1023 } else { biased - 1023 };
    let quantum = 2f64.powi(e.max(emin) - (precision - 1));
    // `a / quantum` is exact (a power-of-two scaling well inside f64's range).
    let r = (a / quantum).round_ties_even() * quantum;
    let r = if r > max { f64::INFINITY } else { r };
    r.copysign(v)
}

const F16_MAX: f64 = 65504.0;
const BF16_MAX: f64 = 3.389_531_389_251_535_5e38;

/// `v` rounded once, to nearest even, to the float type `dtype` (identity for f64).
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F16 => round_to_format(v, 11, -14, F16_MAX),
        DType::BF16 => round_to_format(v, 8, -126, BF16_MAX),
        DType::F32 | DType::C64 => v as f32 as f64,
        DType::F8E4M3FN => f8::E4M3FN.to_f64(f8::E4M3FN.from_f64(v)),
        DType::F8E5M2 => f8::E5M2.to_f64(f8::E5M2.from_f64(v)),
        _ => v,
    }
}

/// The f16 bits of `v` (rounded to nearest even first).
pub fn f16_bits(v: f64) -> u16 {
    // The rounded value is exactly representable in f32 and in f16: both conversions are exact.
    f16::from_f32(round_to(DType::F16, v) as f32).to_bits()
}

/// The bf16 bits of `v` (rounded to nearest even first).
pub fn bf16_bits(v: f64) -> u16 {
    bf16::from_f32(round_to(DType::BF16, v) as f32).to_bits()
}

/// Little-endian bytes of `values` as `dtype`. Float values are rounded to nearest even;
/// integer values must be in the type's range. A complex tensor takes its parts, real then
/// imaginary (as [`decode`] gives them).
pub fn encode(dtype: DType, values: &Values) -> CheckResult<Vec<u8>> {
    let mut out = Vec::with_capacity(values.len() * dtype.size());
    let floating = dtype.is_float() || dtype.is_complex() || dtype.is_f8();
    match (values, floating) {
        (Values::F(v), true) if dtype.is_complex() && v.len() % 2 != 0 => {
            return Err(fail(format!(
                "{} parts are not whole {dtype} elements",
                v.len()
            )));
        }
        (Values::F(v), true) => {
            for &x in v {
                match dtype {
                    DType::C64 => out.extend_from_slice(&(x as f32).to_le_bytes()),
                    DType::F8E4M3FN => out.push(f8::E4M3FN.from_f64(x)),
                    DType::F8E5M2 => out.push(f8::E5M2.from_f64(x)),
                    DType::F16 => out.extend_from_slice(&f16_bits(x).to_le_bytes()),
                    DType::BF16 => out.extend_from_slice(&bf16_bits(x).to_le_bytes()),
                    DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
                    _ => out.extend_from_slice(&x.to_le_bytes()),
                }
            }
        }
        (Values::I(v), false) => {
            let (lo, hi) = int_range(dtype);
            for &x in v {
                if x < lo || x > hi {
                    return Err(fail(format!("value {x} does not fit {dtype}")));
                }
                match dtype {
                    DType::Pred | DType::I8 | DType::U8 => out.push(x as u8),
                    DType::I16 | DType::U16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
                    DType::I32 | DType::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
                    _ => out.extend_from_slice(&x.to_le_bytes()),
                }
            }
        }
        _ => {
            return Err(fail(format!(
                "cannot encode {} values as {dtype}",
                if matches!(values, Values::F(_)) {
                    "float"
                } else {
                    "integer"
                }
            )));
        }
    }
    Ok(out)
}

/// Decodes little-endian bytes of `dtype` (exactly; a trailing partial element is ignored).
pub fn decode(dtype: DType, bytes: &[u8]) -> Values {
    let chunks = bytes.chunks_exact(dtype.size());
    let le2 = |c: &[u8]| u16::from_le_bytes([c[0], c[1]]);
    let le4 = |c: &[u8]| [c[0], c[1], c[2], c[3]];
    let le8 = |c: &[u8]| [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
    match dtype {
        DType::F16 => Values::F(chunks.map(|c| f16::from_bits(le2(c)).to_f64()).collect()),
        DType::BF16 => Values::F(chunks.map(|c| bf16::from_bits(le2(c)).to_f64()).collect()),
        DType::F32 => Values::F(chunks.map(|c| f32::from_le_bytes(le4(c)) as f64).collect()),
        DType::F64 => Values::F(chunks.map(|c| f64::from_le_bytes(le8(c))).collect()),
        DType::Pred | DType::U8 => Values::I(chunks.map(|c| c[0] as i64).collect()),
        DType::I8 => Values::I(chunks.map(|c| c[0] as i8 as i64).collect()),
        DType::I32 => Values::I(chunks.map(|c| i32::from_le_bytes(le4(c)) as i64).collect()),
        DType::I64 => Values::I(chunks.map(|c| i64::from_le_bytes(le8(c))).collect()),
        DType::I16 => Values::I(chunks.map(|c| le2(c) as i16 as i64).collect()),
        DType::U16 => Values::I(chunks.map(|c| le2(c) as i64).collect()),
        DType::U32 => Values::I(chunks.map(|c| u32::from_le_bytes(le4(c)) as i64).collect()),
        // The bit pattern (see `int_range`).
        DType::U64 => Values::I(chunks.map(|c| u64::from_le_bytes(le8(c)) as i64).collect()),
        // The parts, real then imaginary, one value each.
        DType::C64 => Values::F(
            chunks
                .flat_map(|c| [f32::from_le_bytes(le4(c)), f32::from_le_bytes(le4(&c[4..]))])
                .map(f64::from)
                .collect(),
        ),
        DType::C128 => Values::F(
            chunks
                .flat_map(|c| [f64::from_le_bytes(le8(c)), f64::from_le_bytes(le8(&c[8..]))])
                .collect(),
        ),
        DType::F8E4M3FN => Values::F(chunks.map(|c| f8::E4M3FN.to_f64(c[0])).collect()),
        DType::F8E5M2 => Values::F(chunks.map(|c| f8::E5M2.to_f64(c[0])).collect()),
    }
}

/// An immediate of `dtype` holding `v` (rounded to nearest even for floats, wrapped for
/// integers).
pub fn scalar_f(dtype: DType, v: f64) -> Scalar {
    match dtype {
        DType::F16 => Scalar::F16(f16_bits(v)),
        DType::BF16 => Scalar::BF16(bf16_bits(v)),
        DType::F32 => Scalar::F32(v as f32),
        DType::F64 => Scalar::F64(v),
        other => scalar_i(other, v as i64),
    }
}

/// An immediate of the integer type `dtype` holding `v` (wrapped into its range).
pub fn scalar_i(dtype: DType, v: i64) -> Scalar {
    let w = wrap_int(dtype, v as i128);
    match dtype {
        DType::Pred => Scalar::Pred(w != 0),
        DType::I8 => Scalar::I8(w as i8),
        DType::U8 => Scalar::U8(w as u8),
        DType::I32 => Scalar::I32(w as i32),
        DType::I64 => Scalar::I64(w),
        DType::I16 => Scalar::I16(w as i16),
        DType::U16 => Scalar::U16(w as u16),
        DType::U32 => Scalar::U32(w as u32),
        DType::U64 => Scalar::U64(w as u64),
        other => scalar_f(other, v as f64),
    }
}

// ---------------------------------------------------------------------------------------------
// Random inputs.

/// `n` values uniform in `[lo, hi)`, rounded to `dtype` (so they are exact inputs).
pub fn uniform(rng: &mut CheckRng, dtype: DType, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| round_to(dtype, lo + (hi - lo) * rng.random::<f64>()))
        .collect()
}

/// `n` values of magnitude in `[lo, hi)` with a random sign, rounded to `dtype`.
pub fn uniform_signed(rng: &mut CheckRng, dtype: DType, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let m = lo + (hi - lo) * rng.random::<f64>();
            round_to(dtype, if rng.random::<bool>() { m } else { -m })
        })
        .collect()
}

/// `n` values spread over many binades (`±m·2^e`, `e` uniform in `[emin, emax]`), rounded to
/// `dtype`: exercises rounding, subnormals and overflow of conversions.
pub fn log_uniform(rng: &mut CheckRng, dtype: DType, n: usize, emin: i32, emax: i32) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let e = rng.random_range(emin..=emax);
            let m = 1.0 + rng.random::<f64>();
            let v = m * 2f64.powi(e);
            round_to(dtype, if rng.random::<bool>() { v } else { -v })
        })
        .collect()
}

/// Replaces about one element in `every` with NaN (none when `every` is 0).
pub fn sprinkle_nan(rng: &mut CheckRng, v: &mut [f64], every: u32) {
    if every == 0 {
        return;
    }
    for x in v.iter_mut() {
        if rng.random_range(0..every) == 0 {
            *x = f64::NAN;
        }
    }
}

/// `n` integers over the whole range of `dtype`, one in eight replaced by a special value
/// (0, ±1, MIN, MAX).
pub fn random_ints(rng: &mut CheckRng, dtype: DType, n: usize) -> Vec<i64> {
    let (lo, hi) = int_range(dtype);
    let specials = [0, 1, -1, lo, hi, lo + 1, hi - 1];
    (0..n)
        .map(|_| {
            if rng.random_range(0..8) == 0 {
                let s = specials[rng.random_range(0..specials.len())];
                s.clamp(lo, hi)
            } else {
                rng.random_range(lo..=hi)
            }
        })
        .collect()
}

/// `n` random bytes (a splitmix64 stream seeded from `rng`: fast for large buffers even in
/// debug builds).
pub fn random_bytes(rng: &mut CheckRng, n: usize) -> Vec<u8> {
    let mut state = rng.next_u64();
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// The poison byte of outputs of `dtype`: 0xFF is a NaN for every float type; 0xA5 for integers.
pub fn poison_byte(dtype: DType) -> u8 {
    if dtype.is_float() { 0xFF } else { 0xA5 }
}

// ---------------------------------------------------------------------------------------------
// Tolerances and comparisons.

/// Base tolerance of an element type (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

impl Tol {
    /// Exact comparison.
    pub const EXACT: Tol = Tol {
        rtol: 0.0,
        atol: 0.0,
    };

    /// Arithmetic kernels.
    pub fn of(dtype: DType) -> Tol {
        match dtype {
            DType::F64 => Tol {
                rtol: 1e-12,
                atol: 1e-14,
            },
            DType::F32 => Tol {
                rtol: 1e-5,
                atol: 1e-6,
            },
            DType::F16 => Tol {
                rtol: 2e-3,
                atol: 1e-5,
            },
            DType::BF16 => Tol {
                rtol: 1.6e-2,
                atol: 1e-5,
            },
            _ => Tol::EXACT,
        }
    }

    /// Transcendental kernels: rtol ×4 for f32/f64.
    pub fn transcendental(dtype: DType) -> Tol {
        let t = Tol::of(dtype);
        match dtype {
            DType::F32 | DType::F64 => Tol {
                rtol: 4.0 * t.rtol,
                atol: t.atol,
            },
            _ => t,
        }
    }

    /// The absolute tolerance for an expected value (before any extra term).
    pub fn bound(&self, expected: f64) -> f64 {
        self.atol + self.rtol * expected.abs()
    }
}

/// Machine epsilon of the compute type of `dtype`: f32 for f16, bf16 and f32; f64 for f64.
pub fn compute_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        _ => f32::EPSILON as f64,
    }
}

/// Unit roundoff (half an ulp, relative) of storing a result as `dtype`.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => 2f64.powi(-24),
        DType::F64 => 2f64.powi(-53),
        _ => 0.0,
    }
}

fn position(i: usize, cols: usize) -> String {
    match (i.checked_div(cols), i.checked_rem(cols)) {
        (Some(r), Some(c)) => format!("index {i} (row {r}, col {c})"),
        _ => format!("index {i}"),
    }
}

/// Compares floats: `got[i]` must be within `tol(i)` of `expected[i]`; NaN matches NaN and
/// infinities must be equal. `cols > 0` adds the row and column to the message.
pub fn compare_floats(
    what: &str,
    got: &[f64],
    expected: &[f64],
    cols: usize,
    tol: impl Fn(usize) -> f64,
) -> CheckResult {
    if got.len() != expected.len() {
        return Err(fail(format!(
            "{what}: got {} elements, expected {}",
            got.len(),
            expected.len()
        )));
    }
    let mut first = None;
    let mut count = 0usize;
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            g.is_nan()
        } else if e.is_infinite() || g.is_nan() || g.is_infinite() {
            g == e
        } else {
            (g - e).abs() <= tol(i)
        };
        if !ok {
            count += 1;
            first.get_or_insert(i);
        }
    }
    match first {
        None => Ok(()),
        Some(i) => Err(fail(format!(
            "{what}: {count} of {} elements differ; first at {}: expected {:e}, got {:e} (|diff| {:e}, tolerance {:e})",
            got.len(),
            position(i, cols),
            expected[i],
            got[i],
            (got[i] - expected[i]).abs(),
            tol(i)
        ))),
    }
}

/// Compares integers exactly.
pub fn compare_ints(what: &str, got: &[i64], expected: &[i64], cols: usize) -> CheckResult {
    if got.len() != expected.len() {
        return Err(fail(format!(
            "{what}: got {} elements, expected {}",
            got.len(),
            expected.len()
        )));
    }
    let count = got.iter().zip(expected).filter(|(g, e)| g != e).count();
    match got.iter().zip(expected).position(|(g, e)| g != e) {
        None => Ok(()),
        Some(i) => Err(fail(format!(
            "{what}: {count} of {} elements differ; first at {}: expected {}, got {}",
            got.len(),
            position(i, cols),
            expected[i],
            got[i]
        ))),
    }
}

/// Compares bytes exactly.
pub fn compare_bytes(what: &str, got: &[u8], expected: &[u8]) -> CheckResult {
    if got == expected {
        return Ok(());
    }
    if got.len() != expected.len() {
        return Err(fail(format!(
            "{what}: got {} bytes, expected {}",
            got.len(),
            expected.len()
        )));
    }
    let count = got.iter().zip(expected).filter(|(g, e)| g != e).count();
    let i = got
        .iter()
        .zip(expected)
        .position(|(g, e)| g != e)
        .unwrap_or(0);
    Err(fail(format!(
        "{what}: {count} of {} bytes differ; first at byte {i}: expected {:#04x}, got {:#04x}",
        got.len(),
        expected[i],
        got[i]
    )))
}

// ---------------------------------------------------------------------------------------------
// Device helpers.

/// Allocates `bytes.len()` bytes in `space` (aligned to 64) and uploads `bytes`.
pub fn upload(device: &Arc<dyn Device>, bytes: &[u8], space: MemorySpace) -> CheckResult<Buffer> {
    let buf = device.allocate(bytes.len() as u64, 64, space)?;
    device.copy_from_host(bytes, buf.ptr())?;
    Ok(buf)
}

/// Downloads `len` bytes at `ptr`.
pub fn download(device: &Arc<dyn Device>, ptr: DevicePtr, len: usize) -> CheckResult<Vec<u8>> {
    let mut v = vec![0u8; len];
    device.copy_to_host(ptr, &mut v)?;
    Ok(v)
}

/// Downloads a whole buffer.
pub fn download_all(device: &Arc<dyn Device>, buf: &dyn DeviceMemory) -> CheckResult<Vec<u8>> {
    download(device, buf.ptr(), buf.size() as usize)
}

/// Synchronizes the device, then waits (up to two seconds, for backends that free
/// asynchronously) until the live bytes are `expected`; fails naming `what` otherwise.
pub fn expect_live_bytes(device: &Arc<dyn Device>, expected: u64, what: &str) -> CheckResult {
    device.synchronize()?;
    let start = Instant::now();
    loop {
        let live = device.memory_stats().live_bytes;
        if live == expected {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(2) {
            return Err(fail(format!(
                "{what}: {live} live bytes, expected {expected} (the value before; {} leaked)",
                live as i128 - expected as i128
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Bytes past the end of every output buffer that a run checks are left alone.
pub const TAIL: usize = 64;
/// The value of those bytes.
pub const TAIL_BYTE: u8 = 0x5A;

/// Runs a loaded executable with fresh device buffers: parameters uploaded from `params`,
/// outputs allocated [`TAIL`] bytes larger than needed and initialised with `outputs_init`
/// (poison, or data a program reads) followed by [`TAIL_BYTE`]s. Checks that the tails and the
/// parameters are unchanged, and returns the outputs' bytes.
pub fn execute_loaded(
    device: &Arc<dyn Device>,
    loaded: &LoadedExecutable,
    params: &[Vec<u8>],
    outputs_init: &[Vec<u8>],
    opts: &ExecuteOptions,
) -> CheckResult<Vec<Vec<u8>>> {
    let exe = loaded.executable();
    let sig = &exe.signature;
    let need = |alloc: u32| exe.allocations.get(alloc as usize).map(|a| a.size);
    ensure(
        params.len() == sig.parameters.len() && outputs_init.len() == sig.outputs.len(),
        || {
            format!(
                "`{}` takes {} parameters and {} outputs; the check supplied {} and {}",
                exe.name,
                sig.parameters.len(),
                sig.outputs.len(),
                params.len(),
                outputs_init.len()
            )
        },
    )?;
    let mut pbufs = Vec::with_capacity(params.len());
    for (spec, data) in sig.parameters.iter().zip(params) {
        ensure(need(spec.allocation) == Some(data.len() as u64), || {
            format!(
                "parameter `{}` needs {:?} bytes, the check supplied {}",
                spec.name,
                need(spec.allocation),
                data.len()
            )
        })?;
        pbufs.push(upload(device, data, MemorySpace::Device)?);
    }
    let mut obufs = Vec::with_capacity(outputs_init.len());
    for (spec, init) in sig.outputs.iter().zip(outputs_init) {
        ensure(need(spec.allocation) == Some(init.len() as u64), || {
            format!(
                "output `{}` needs {:?} bytes, the check supplied {}",
                spec.name,
                need(spec.allocation),
                init.len()
            )
        })?;
        let mut bytes = init.clone();
        bytes.resize(init.len() + TAIL, TAIL_BYTE);
        obufs.push(upload(device, &bytes, MemorySpace::Device)?);
    }
    let pr: Vec<&dyn DeviceMemory> = pbufs.iter().map(|b| b.as_ref() as _).collect();
    let or: Vec<&dyn DeviceMemory> = obufs.iter().map(|b| b.as_ref() as _).collect();
    loaded.execute(&pr, &or, opts)?;
    let mut outs = Vec::with_capacity(obufs.len());
    for ((spec, init), buf) in sig.outputs.iter().zip(outputs_init).zip(&obufs) {
        let mut bytes = download_all(device, buf.as_ref())?;
        let tail = bytes.split_off(init.len());
        if let Some(i) = tail.iter().position(|&b| b != TAIL_BYTE) {
            return Err(fail(format!(
                "output `{}`: byte {} past its end ({} bytes) was overwritten ({:#04x})",
                spec.name,
                i,
                init.len(),
                tail[i]
            )));
        }
        outs.push(bytes);
    }
    for ((spec, data), buf) in sig.parameters.iter().zip(params).zip(&pbufs) {
        let now = download_all(device, buf.as_ref())?;
        compare_bytes(
            &format!("parameter `{}` (read-only) after the run", spec.name),
            &now,
            data,
        )?;
    }
    Ok(outs)
}

/// Loads `exe` and runs it once through [`execute_loaded`].
pub fn run_program(
    device: &Arc<dyn Device>,
    exe: Executable,
    params: &[Vec<u8>],
    outputs_init: &[Vec<u8>],
) -> CheckResult<Vec<Vec<u8>>> {
    let loaded = LoadedExecutable::load(device.clone(), exe)?;
    execute_loaded(
        device,
        &loaded,
        params,
        outputs_init,
        &ExecuteOptions::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_half_on_f32_inputs() {
        let mut rng = rng_from(1);
        for i in 0..200_000u32 {
            // Bit patterns over the whole f32 range, and values near the f16 range.
            let x = if i % 2 == 0 {
                f32::from_bits(rng.next_u32())
            } else {
                (rng.random::<f32>() - 0.5) * 2f32.powi(rng.random_range(-30..20))
            };
            if x.is_nan() {
                continue;
            }
            assert_eq!(
                f16_bits(x as f64),
                f16::from_f32(x).to_bits(),
                "f16 of {x:e}"
            );
            assert_eq!(
                bf16_bits(x as f64),
                bf16::from_f32(x).to_bits(),
                "bf16 of {x:e}"
            );
        }
    }

    #[test]
    fn rounding_is_single_on_f64_inputs() {
        // 1 + 2^-11 + 2^-40 is above the f16 halfway point 1 + 2^-11: rounds up. Rounding
        // through f32 first would give the tie 1 + 2^-11 and round to even (down).
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(round_to(DType::F16, v), 1.0 + 2f64.powi(-10));
        assert_eq!(round_to(DType::F16, 65520.0), f64::INFINITY);
        assert_eq!(round_to(DType::F16, 65519.99), 65504.0);
        assert_eq!(round_to(DType::F16, 2f64.powi(-25)), 0.0);
        assert_eq!(round_to(DType::F16, 1.5 * 2f64.powi(-25)), 2f64.powi(-24));
    }

    #[test]
    fn encode_decode_roundtrip() {
        let mut rng = rng_from(2);
        for dt in DType::ALL {
            let v = if dt.is_complex() {
                // 50 elements, as their parts.
                Values::F(uniform(&mut rng, dt, 100, -10.0, 10.0))
            } else if dt.is_f8() {
                // Values the type holds exactly.
                let f = if dt == DType::F8E4M3FN {
                    f8::E4M3FN
                } else {
                    f8::E5M2
                };
                Values::F((0..100u8).map(|i| f.to_f64(i % 0x78)).collect())
            } else if dt.is_float() {
                Values::F(uniform(&mut rng, dt, 100, -10.0, 10.0))
            } else {
                Values::I(random_ints(&mut rng, dt, 100))
            };
            let bytes = encode(dt, &v).unwrap_or_default();
            let elems = if dt.is_complex() { 50 } else { 100 };
            assert_eq!(bytes.len(), elems * dt.size(), "{dt}");
            assert_eq!(decode(dt, &bytes), v, "{dt}");
        }
    }

    #[test]
    fn wrapping() {
        assert_eq!(wrap_int(DType::I8, 128), -128);
        assert_eq!(wrap_int(DType::U8, -1), 255);
        assert_eq!(wrap_int(DType::I32, 1 << 31), i32::MIN as i64);
        assert_eq!(wrap_int(DType::I64, (i64::MAX as i128) + 1), i64::MIN);
    }
}
