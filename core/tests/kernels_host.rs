//! Host implementations of the standard kernel library against an independent f64 / i128
//! reference: fresh random inputs seeded from the test name, poisoned outputs, guard bytes
//! around every buffer, unaligned buffers, explicit tolerances per dtype.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use xthunk_core::ir::{Access, DType, KernelArg, Scalar, Slice};
use xthunk_core::kernels::{Extent, HostArg, KernelError, ParamKind, standard_library};

use DType::{BF16, F16, F32, F64, I8, I32, I64, U8};

const FLOATS: [DType; 4] = [F16, BF16, F32, F64];
const INTS: [DType; 4] = [I8, U8, I32, I64];
const ALL: [DType; 8] = [F16, BF16, F32, F64, I8, U8, I32, I64];
const SIGNED: [DType; 3] = [I8, I32, I64];
const SIZES: [usize; 7] = [0, 1, 2, 7, 256, 257, 1000];
const SHAPES: [(usize, usize); 7] = [(0, 3), (3, 0), (1, 1), (1, 7), (5, 7), (17, 33), (3, 300)];

// ---------------------------------------------------------------------------------------------
// Values and encodings (independent of the implementation).

fn rng_for(name: &str) -> ChaCha8Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ChaCha8Rng::seed_from_u64(h)
}

fn enc_f(dt: DType, v: &[f64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &x in v {
        match dt {
            F16 => out.extend(f16::from_f32(x as f32).to_le_bytes()),
            BF16 => out.extend(bf16::from_f32(x as f32).to_le_bytes()),
            F32 => out.extend((x as f32).to_le_bytes()),
            F64 => out.extend(x.to_le_bytes()),
            _ => panic!("not a float: {dt}"),
        }
    }
    out
}

fn dec_f(dt: DType, b: &[u8]) -> Vec<f64> {
    b.chunks_exact(dt.size())
        .map(|c| match dt {
            F16 => f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
            BF16 => bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
            F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            F64 => f64::from_le_bytes(c.try_into().unwrap()),
            _ => panic!("not a float: {dt}"),
        })
        .collect()
}

fn enc_i(dt: DType, v: &[i128]) -> Vec<u8> {
    let mut out = Vec::new();
    for &x in v {
        match dt {
            I8 => out.extend((x as i8).to_le_bytes()),
            U8 => out.extend((x as u8).to_le_bytes()),
            I32 => out.extend((x as i32).to_le_bytes()),
            I64 => out.extend((x as i64).to_le_bytes()),
            _ => panic!("not an integer: {dt}"),
        }
    }
    out
}

fn dec_i(dt: DType, b: &[u8]) -> Vec<i128> {
    b.chunks_exact(dt.size())
        .map(|c| match dt {
            I8 => c[0] as i8 as i128,
            U8 => c[0] as i128,
            I32 => i32::from_le_bytes(c.try_into().unwrap()) as i128,
            I64 => i64::from_le_bytes(c.try_into().unwrap()) as i128,
            _ => panic!("not an integer: {dt}"),
        })
        .collect()
}

/// `x` reduced modulo 2^bits into the range of `dt`.
fn wrap(dt: DType, x: i128) -> i128 {
    dec_i(dt, &enc_i(dt, &[x]))[0]
}

/// The nearest value of `dt` (for generating inputs; any rounding will do).
fn q(dt: DType, x: f64) -> f64 {
    dec_f(dt, &enc_f(dt, &[x]))[0]
}

fn imm_f(dt: DType, x: f64) -> Scalar {
    match dt {
        F16 => Scalar::F16(f16::from_f32(x as f32).to_bits()),
        BF16 => Scalar::BF16(bf16::from_f32(x as f32).to_bits()),
        F32 => Scalar::F32(x as f32),
        F64 => Scalar::F64(x),
        _ => panic!("not a float: {dt}"),
    }
}

fn imm_i(dt: DType, x: i128) -> Scalar {
    match dt {
        I8 => Scalar::I8(x as i8),
        U8 => Scalar::U8(x as u8),
        I32 => Scalar::I32(x as i32),
        I64 => Scalar::I64(x as i64),
        _ => panic!("not an integer: {dt}"),
    }
}

fn ext(n: usize) -> A {
    A::I(Scalar::I64(n as i64))
}

fn rf(rng: &mut ChaCha8Rng, dt: DType, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|_| q(dt, rng.random_range(lo..hi))).collect()
}

/// Random integers of `dt`: full range, small, and edge values.
fn ri(rng: &mut ChaCha8Rng, dt: DType, n: usize) -> Vec<i128> {
    let (min, max): (i128, i128) = match dt {
        I8 => (i8::MIN as i128, i8::MAX as i128),
        U8 => (0, u8::MAX as i128),
        I32 => (i32::MIN as i128, i32::MAX as i128),
        I64 => (i64::MIN as i128, i64::MAX as i128),
        _ => panic!("not an integer: {dt}"),
    };
    (0..n)
        .map(|_| match rng.random_range(0..10) {
            0..=3 => wrap(dt, rng.random::<u64>() as i128),
            4..=7 => wrap(dt, rng.random_range(-60..60)),
            8 => [min, max, 0, 1][rng.random_range(0..4)],
            _ => wrap(dt, -1),
        })
        .collect()
}

/// Relative tolerance of results stored in `dt` (computed in f32 for f16/bf16/f32).
fn rel(dt: DType) -> f64 {
    match dt {
        F16 => 1e-3,
        BF16 => 8e-3,
        F32 => 1e-5,
        F64 => 1e-12,
        _ => 0.0,
    }
}

/// Correctly rounded (nearest, ties to even) conversion of `x` to f16 or bf16, by binary search
/// over the monotonic bit patterns of the positive finite values.
fn round16(dt: DType, x: f64) -> f64 {
    let (max_bits, overflow_at, dec): (u16, f64, fn(u16) -> f64) = match dt {
        F16 => (0x7BFF, 65536.0, |b| f16::from_bits(b).to_f64()),
        BF16 => (0x7F7F, 2f64.powi(128), |b| bf16::from_bits(b).to_f64()),
        _ => panic!("not a 16-bit float: {dt}"),
    };
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let (mut lo, mut hi) = (0u16, max_bits);
    if dec(max_bits) <= a {
        lo = max_bits;
    } else {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if dec(mid) <= a {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    let vlo = dec(lo);
    let vhi = if lo == max_bits {
        overflow_at
    } else {
        dec(lo + 1)
    };
    let r = if a == vlo {
        vlo
    } else if a >= vhi {
        f64::INFINITY
    } else {
        let (dlo, dhi) = (a - vlo, vhi - a);
        let up = dhi < dlo || (dhi == dlo && lo & 1 == 1);
        if !up {
            vlo
        } else if lo == max_bits {
            f64::INFINITY
        } else {
            vhi
        }
    };
    r.copysign(x)
}

/// Exact reference conversion of the exact value `x` to `dt`, as f64.
fn round_to(dt: DType, x: f64) -> f64 {
    match dt {
        F16 | BF16 => round16(dt, x),
        F32 => x as f32 as f64,
        F64 => x,
        I32 => {
            if x.is_nan() {
                0.0
            } else {
                x.trunc().clamp(i32::MIN as f64, i32::MAX as f64)
            }
        }
        _ => panic!("no conversion to {dt}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Buffers and launches.

const GUARD: u8 = 0xCD;
const POISON: u8 = 0xAB;
const TAIL: usize = 16;

/// A buffer at byte offset `off` inside its storage, with guard bytes on both sides.
struct Buf {
    store: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(bytes: Vec<u8>, off: usize) -> Buf {
        let len = bytes.len();
        let mut store = vec![GUARD; off];
        store.extend(bytes);
        store.extend([GUARD; TAIL]);
        Buf { store, off, len }
    }
    fn poisoned(len: usize, off: usize) -> Buf {
        Buf::new(vec![POISON; len], off)
    }
    fn data(&self) -> &[u8] {
        &self.store[self.off..self.off + self.len]
    }
    fn check_guards(&self, kernel: &str) {
        let before = self.store[..self.off].iter().all(|&b| b == GUARD);
        let after = self.store[self.off + self.len..]
            .iter()
            .all(|&b| b == GUARD);
        assert!(before && after, "{kernel} wrote outside a buffer");
    }
}

/// A launch argument: a whole buffer, a byte range of one (offset, length), or an immediate.
#[derive(Clone, Copy)]
enum A {
    B(usize),
    Sub(usize, usize, usize),
    I(Scalar),
}

/// Launches `name` on the host, after checking that the signature's `check_args` accepts
/// exactly when the host implementation does.
fn launch(name: &str, bufs: &mut [Buf], args: &[A]) -> Result<(), KernelError> {
    let k = standard_library()
        .get(name)
        .unwrap_or_else(|| panic!("no kernel `{name}`"));
    let kargs: Vec<KernelArg> = args
        .iter()
        .enumerate()
        .map(|(j, a)| {
            let access = match k.signature.params.get(j).map(|p| &p.kind) {
                Some(ParamKind::Buffer { access, .. }) => *access,
                _ => Access::Read,
            };
            match *a {
                A::B(i) => KernelArg::Buffer {
                    slice: Slice::new(i as u32, 0, bufs[i].len as u64),
                    access,
                },
                A::Sub(i, off, len) => KernelArg::Buffer {
                    slice: Slice::new(i as u32, off as u64, len as u64),
                    access,
                },
                A::I(s) => KernelArg::Scalar(s),
            }
        })
        .collect();
    let checked = k.signature.check_args(&kargs);
    let host: Vec<HostArg> = args
        .iter()
        .map(|a| match *a {
            A::B(i) => HostArg::Buffer {
                ptr: bufs[i].store.as_mut_ptr().wrapping_add(bufs[i].off),
                len: bufs[i].len,
            },
            A::Sub(i, off, len) => {
                assert!(off + len <= bufs[i].len);
                HostArg::Buffer {
                    ptr: bufs[i].store.as_mut_ptr().wrapping_add(bufs[i].off + off),
                    len,
                }
            }
            A::I(s) => HostArg::Scalar(s),
        })
        .collect();
    // SAFETY: every buffer argument points inside the data region of a live `Buf` of `bufs`
    // (which this function borrows mutably, so nothing else touches them during the call),
    // with its exact length.
    let r = unsafe { (k.func)(&host) };
    for b in bufs.iter() {
        b.check_guards(name);
    }
    assert_eq!(
        checked.is_ok(),
        r.is_ok(),
        "{name}: check_args says {checked:?}, the host implementation {r:?}"
    );
    r
}

fn off(rng: &mut ChaCha8Rng) -> usize {
    rng.random_range(0..4)
}

/// `|got - want| <= bound(i, want)` elementwise; NaNs and infinities must match.
fn assert_close(ctx: &str, got: &[f64], want: &[f64], bound: impl Fn(usize, f64) -> f64) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= bound(i, w)
        };
        assert!(
            ok,
            "{ctx}: element {i}: got {g:e}, want {w:e} (diff {:e}, bound {:e})",
            (g - w).abs(),
            bound(i, w)
        );
    }
}

fn rel_close(ctx: &str, dt: DType, got: &[f64], want: &[f64]) {
    assert_close(ctx, got, want, |_, w| rel(dt) * w.abs());
}

// ---------------------------------------------------------------------------------------------
// Fill, iota, convert.

#[test]
fn fill() {
    let mut rng = rng_for("fill");
    for dt in ALL {
        for n in SIZES {
            let name = format!("fill_{dt}");
            let mut bufs = vec![Buf::poisoned(n * dt.size(), off(&mut rng))];
            if dt.is_float() {
                let v = q(dt, rng.random_range(-100.0..100.0));
                launch(&name, &mut bufs, &[A::B(0), A::I(imm_f(dt, v)), ext(n)]).unwrap();
                assert!(dec_f(dt, bufs[0].data()).iter().all(|&x| x == v), "{name}");
            } else {
                let v = ri(&mut rng, dt, 1)[0];
                launch(&name, &mut bufs, &[A::B(0), A::I(imm_i(dt, v)), ext(n)]).unwrap();
                assert!(dec_i(dt, bufs[0].data()).iter().all(|&x| x == v), "{name}");
            }
        }
    }
}

#[test]
fn iota() {
    let mut rng = rng_for("iota");
    for dt in ALL {
        for n in SIZES {
            let name = format!("iota_{dt}");
            let mut bufs = vec![Buf::poisoned(n * dt.size(), off(&mut rng))];
            if dt.is_float() {
                let start = q(dt, rng.random_range(-10.0..10.0));
                let step = q(dt, rng.random_range(-0.5..0.5));
                let args = [
                    A::B(0),
                    A::I(imm_f(dt, start)),
                    A::I(imm_f(dt, step)),
                    ext(n),
                ];
                launch(&name, &mut bufs, &args).unwrap();
                let want: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
                assert_close(&name, &dec_f(dt, bufs[0].data()), &want, |i, _| {
                    2.0 * rel(dt) * (start.abs() + i as f64 * step.abs())
                });
            } else {
                let v = ri(&mut rng, dt, 2);
                let args = [
                    A::B(0),
                    A::I(imm_i(dt, v[0])),
                    A::I(imm_i(dt, v[1])),
                    ext(n),
                ];
                launch(&name, &mut bufs, &args).unwrap();
                let want: Vec<i128> = (0..n).map(|i| wrap(dt, v[0] + i as i128 * v[1])).collect();
                assert_eq!(dec_i(dt, bufs[0].data()), want, "{name}");
            }
        }
    }
}

/// Inputs of a conversion from `dt`, as raw bytes: random bit patterns and tricky values.
fn convert_inputs(rng: &mut ChaCha8Rng, dt: DType) -> Vec<u8> {
    let p = |k: i32| 2f64.powi(k);
    let tricky: Vec<f64> = vec![
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0,
        -1.0,
        0.4999,
        -0.9999,
        1.5,
        -2.5,
        // f16 rounding: exact tie to even, tie plus a bit below f64's upper word, above tie.
        1.0 + p(-11),
        1.0 + p(-11) + p(-40),
        1.0 + 3.0 * p(-11),
        -(1.0 + p(-11) + p(-45)),
        // bf16 rounding.
        1.0 + p(-8),
        1.0 + p(-8) + p(-40),
        -(1.0 + 3.0 * p(-8)),
        // f32 rounding (from f64).
        1.0 + p(-24),
        1.0 + p(-24) + p(-50),
        // f16 overflow and underflow.
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        p(-25),
        p(-25) + p(-60),
        -p(-25) - p(-60),
        p(-24) * 1.5,
        // bf16 / f32 range.
        3.4e38,
        3.4028235677973366e38,
        -3.5e38,
        1e-40,
        1.5e-45,
        1e-320,
        // i32 range.
        2147483647.0,
        2147483647.9,
        2147483648.0,
        -2147483648.0,
        -2147483648.9,
        -2147483649.0,
        1e10,
        -1e10,
        16777217.0,
        123456789.75,
    ];
    let mut out = Vec::new();
    match dt {
        F16 | BF16 => {
            for _ in 0..2000 {
                out.extend(rng.random::<u16>().to_le_bytes());
            }
            for &x in &tricky {
                let b = if dt == F16 {
                    f16::from_f32(x as f32).to_bits()
                } else {
                    bf16::from_f32(x as f32).to_bits()
                };
                out.extend(b.to_le_bytes());
            }
        }
        F32 => {
            for _ in 0..2000 {
                out.extend(rng.random::<u32>().to_le_bytes());
            }
            for _ in 0..500 {
                let x: f32 = rng.random_range(-3e9..3e9);
                out.extend(x.to_le_bytes());
            }
            for &x in &tricky {
                out.extend((x as f32).to_le_bytes());
            }
        }
        F64 => {
            for _ in 0..1000 {
                out.extend(rng.random::<u64>().to_le_bytes());
            }
            for _ in 0..1000 {
                let e: f64 = rng.random_range(-30.0..40.0);
                let s = if rng.random_bool(0.5) { -1.0 } else { 1.0 };
                out.extend((s * e.exp2() * rng.random_range(1.0..2.0)).to_le_bytes());
            }
            for &x in &tricky {
                out.extend(x.to_le_bytes());
            }
        }
        I32 => {
            for _ in 0..2000 {
                out.extend(rng.random::<i32>().to_le_bytes());
            }
            for _ in 0..500 {
                out.extend(rng.random_range(-70000i32..70000).to_le_bytes());
            }
            for x in [
                0,
                1,
                -1,
                i32::MIN,
                i32::MAX,
                16777217,
                -16777217,
                65504,
                65519,
                65520,
                65536,
                -65520,
                33554435,
            ] {
                out.extend(x.to_le_bytes());
            }
        }
        _ => panic!("no conversion from {dt}"),
    }
    out
}

fn values(dt: DType, b: &[u8]) -> Vec<f64> {
    if dt == I32 {
        dec_i(dt, b).into_iter().map(|x| x as f64).collect()
    } else {
        dec_f(dt, b)
    }
}

#[test]
fn convert() {
    let mut rng = rng_for("convert");
    let types = [F16, BF16, F32, F64, I32];
    for a in types {
        for b in types {
            if a == b {
                continue;
            }
            let name = format!("convert_{a}_{b}");
            let input = convert_inputs(&mut rng, a);
            let n = input.len() / a.size();
            let x = values(a, &input);
            let (o1, o2) = (off(&mut rng), off(&mut rng));
            let mut bufs = vec![Buf::new(input, o1), Buf::poisoned(n * b.size(), o2)];
            launch(&name, &mut bufs, &[A::B(0), A::B(1), ext(n)]).unwrap();
            let got = values(b, bufs[1].data());
            for (i, (&g, &xv)) in got.iter().zip(&x).enumerate() {
                let w = round_to(b, xv);
                let same = (g.is_nan() && w.is_nan())
                    || (g == w && (b == I32 || g.is_sign_negative() == w.is_sign_negative()));
                assert!(same, "{name}: element {i}: {xv:e} -> got {g:e}, want {w:e}");
            }
            // Short and empty conversions.
            for n in [0, 1, 3] {
                let mut bufs = vec![
                    Buf::new(bufs[0].data()[..n * a.size()].to_vec(), 1),
                    Buf::poisoned(n * b.size(), 3),
                ];
                launch(&name, &mut bufs, &[A::B(0), A::B(1), ext(n)]).unwrap();
                assert_eq!(values(b, bufs[1].data()).len(), n);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Elementwise.

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn unary_floats() {
    type Op = (&'static str, f64, f64, fn(f64) -> f64);
    let ops: [Op; 10] = [
        ("neg", -4.0, 4.0, |x| -x),
        ("abs", -4.0, 4.0, f64::abs),
        ("exp", -6.0, 6.0, f64::exp),
        ("log", 0.01, 50.0, f64::ln),
        ("sqrt", 0.0, 50.0, f64::sqrt),
        ("rsqrt", 0.01, 50.0, |x| 1.0 / x.sqrt()),
        ("tanh", -4.0, 4.0, f64::tanh),
        ("sigmoid", -8.0, 8.0, |x| 1.0 / (1.0 + (-x).exp())),
        ("relu", -4.0, 4.0, |x| if x > 0.0 { x } else { 0.0 }),
        ("gelu", -5.0, 5.0, gelu),
    ];
    let mut rng = rng_for("unary_floats");
    for (op, lo, hi, f) in ops {
        for dt in FLOATS {
            for n in SIZES {
                let name = format!("{op}_{dt}");
                let x = rf(&mut rng, dt, n, lo, hi);
                let (o1, o2) = (off(&mut rng), off(&mut rng));
                let mut bufs = vec![
                    Buf::new(enc_f(dt, &x), o1),
                    Buf::poisoned(x.len() * dt.size(), o2),
                ];
                launch(&name, &mut bufs, &[A::B(0), A::B(1), ext(n)]).unwrap();
                let want: Vec<f64> = x.iter().map(|&v| f(v)).collect();
                // gelu cancels in 1 + tanh(..) for negative x: an absolute floor of the
                // compute type's precision.
                let floor = if dt == F64 { 1e-14 } else { 1e-6 };
                assert_close(&name, &dec_f(dt, bufs[1].data()), &want, |_, w| {
                    rel(dt) * w.abs() + if op == "gelu" { floor } else { 0.0 }
                });
            }
        }
    }
}

#[test]
fn unary_ints() {
    type Op = (&'static str, fn(i128) -> i128);
    let ops: [Op; 3] = [("neg", |x| -x), ("abs", i128::abs), ("relu", |x| x.max(0))];
    let mut rng = rng_for("unary_ints");
    for (op, f) in ops {
        for dt in SIGNED {
            for n in SIZES {
                let name = format!("{op}_{dt}");
                let x = ri(&mut rng, dt, n);
                let (o1, o2) = (off(&mut rng), off(&mut rng));
                let mut bufs = vec![
                    Buf::new(enc_i(dt, &x), o1),
                    Buf::poisoned(n * dt.size(), o2),
                ];
                launch(&name, &mut bufs, &[A::B(0), A::B(1), ext(n)]).unwrap();
                let want: Vec<i128> = x.iter().map(|&v| wrap(dt, f(v))).collect();
                assert_eq!(dec_i(dt, bufs[1].data()), want, "{name}");
            }
        }
    }
}

type FBin = fn(f64, f64) -> f64;
type IBin = fn(i128, i128) -> i128;
const BIN_OPS: [(&str, FBin, IBin); 6] = [
    ("add", |a, b| a + b, |a, b| a + b),
    ("sub", |a, b| a - b, |a, b| a - b),
    ("mul", |a, b| a * b, |a, b| a * b),
    ("div", |a, b| a / b, |a, b| if b == 0 { 0 } else { a / b }),
    ("max", f64::max, i128::max),
    ("min", f64::min, i128::min),
];

/// Float operands for `op`: divisors stay away from zero.
fn float_operands(rng: &mut ChaCha8Rng, op: &str, dt: DType, n: usize) -> (Vec<f64>, Vec<f64>) {
    let a = rf(rng, dt, n, -4.0, 4.0);
    let b = if op == "div" {
        (0..n)
            .map(|_| {
                let m = rng.random_range(0.25..4.0);
                q(dt, if rng.random_bool(0.5) { m } else { -m })
            })
            .collect()
    } else {
        rf(rng, dt, n, -4.0, 4.0)
    };
    (a, b)
}

/// Integer operands, with `MIN / -1` and division by zero included.
fn int_operands(rng: &mut ChaCha8Rng, dt: DType, n: usize) -> (Vec<i128>, Vec<i128>) {
    let mut a = ri(rng, dt, n);
    let mut b = ri(rng, dt, n);
    if n > 2 && dt != U8 {
        a[0] = wrap(dt, 1i128 << (dt.size() * 8 - 1));
        b[0] = -1;
        b[1] = 0;
    }
    (a, b)
}

#[test]
fn binary() {
    let mut rng = rng_for("binary");
    for (op, ff, fi) in BIN_OPS {
        for dt in ALL {
            for n in SIZES {
                let name = format!("{op}_{dt}");
                let o: Vec<usize> = (0..3).map(|_| off(&mut rng)).collect();
                let args = [A::B(0), A::B(1), A::B(2), ext(n)];
                if dt.is_float() {
                    let (a, b) = float_operands(&mut rng, op, dt, n);
                    let mut bufs = vec![
                        Buf::new(enc_f(dt, &a), o[0]),
                        Buf::new(enc_f(dt, &b), o[1]),
                        Buf::poisoned(n * dt.size(), o[2]),
                    ];
                    launch(&name, &mut bufs, &args).unwrap();
                    let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| ff(x, y)).collect();
                    rel_close(&name, dt, &dec_f(dt, bufs[2].data()), &want);
                } else {
                    let (a, b) = int_operands(&mut rng, dt, n);
                    let mut bufs = vec![
                        Buf::new(enc_i(dt, &a), o[0]),
                        Buf::new(enc_i(dt, &b), o[1]),
                        Buf::poisoned(n * dt.size(), o[2]),
                    ];
                    launch(&name, &mut bufs, &args).unwrap();
                    let want: Vec<i128> = a
                        .iter()
                        .zip(&b)
                        .map(|(&x, &y)| wrap(dt, fi(x, y)))
                        .collect();
                    assert_eq!(dec_i(dt, bufs[2].data()), want, "{name}");
                }
            }
        }
    }
}

#[test]
fn binary_row() {
    let mut rng = rng_for("binary_row");
    for (op, ff, fi) in BIN_OPS {
        for dt in ALL {
            for (rows, cols) in SHAPES {
                let name = format!("{op}_row_{dt}");
                let o: Vec<usize> = (0..3).map(|_| off(&mut rng)).collect();
                let args = [A::B(0), A::B(1), A::B(2), ext(rows), ext(cols)];
                let total = rows * cols;
                if dt.is_float() {
                    let (a, _) = float_operands(&mut rng, op, dt, total);
                    let (_, b) = float_operands(&mut rng, op, dt, cols);
                    let mut bufs = vec![
                        Buf::new(enc_f(dt, &a), o[0]),
                        Buf::new(enc_f(dt, &b), o[1]),
                        Buf::poisoned(total * dt.size(), o[2]),
                    ];
                    launch(&name, &mut bufs, &args).unwrap();
                    let want: Vec<f64> = (0..total).map(|i| ff(a[i], b[i % cols])).collect();
                    rel_close(&name, dt, &dec_f(dt, bufs[2].data()), &want);
                } else {
                    let (a, _) = int_operands(&mut rng, dt, total);
                    let (_, b) = int_operands(&mut rng, dt, cols);
                    let mut bufs = vec![
                        Buf::new(enc_i(dt, &a), o[0]),
                        Buf::new(enc_i(dt, &b), o[1]),
                        Buf::poisoned(total * dt.size(), o[2]),
                    ];
                    launch(&name, &mut bufs, &args).unwrap();
                    let want: Vec<i128> = (0..total)
                        .map(|i| wrap(dt, fi(a[i], b[i % cols])))
                        .collect();
                    assert_eq!(dec_i(dt, bufs[2].data()), want, "{name}");
                }
            }
        }
    }
}

#[test]
fn axpy_and_scale() {
    let mut rng = rng_for("axpy_and_scale");
    for dt in FLOATS {
        for n in SIZES {
            let x = rf(&mut rng, dt, n, -4.0, 4.0);
            let y = rf(&mut rng, dt, n, -4.0, 4.0);
            let alpha = q(dt, rng.random_range(-3.0..3.0));
            let name = format!("axpy_{dt}");
            let (o1, o2) = (off(&mut rng), off(&mut rng));
            let mut bufs = vec![Buf::new(enc_f(dt, &x), o1), Buf::new(enc_f(dt, &y), o2)];
            let args = [A::B(0), A::B(1), A::I(imm_f(dt, alpha)), ext(n)];
            launch(&name, &mut bufs, &args).unwrap();
            let want: Vec<f64> = x.iter().zip(&y).map(|(&a, &b)| alpha * a + b).collect();
            assert_close(&name, &dec_f(dt, bufs[1].data()), &want, |i, _| {
                rel(dt) * ((alpha * x[i]).abs() + y[i].abs())
            });
            assert_eq!(dec_f(dt, bufs[0].data()), x, "{name} changed x");

            let name = format!("scale_{dt}");
            let mut bufs = vec![Buf::new(enc_f(dt, &x), o1)];
            launch(&name, &mut bufs, &[A::B(0), A::I(imm_f(dt, alpha)), ext(n)]).unwrap();
            let want: Vec<f64> = x.iter().map(|&a| alpha * a).collect();
            rel_close(&name, dt, &dec_f(dt, bufs[0].data()), &want);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Row kernels.

/// Runs a `(in: [rows*cols], out: [rows*k], rows, cols)` kernel on float input `x`.
fn run_rows_f(
    rng: &mut ChaCha8Rng,
    name: &str,
    dt: DType,
    x: &[f64],
    out_len: usize,
    rows: usize,
    cols: usize,
) -> Vec<f64> {
    let (o1, o2) = (off(rng), off(rng));
    let mut bufs = vec![
        Buf::new(enc_f(dt, x), o1),
        Buf::poisoned(out_len * dt.size(), o2),
    ];
    launch(name, &mut bufs, &[A::B(0), A::B(1), ext(rows), ext(cols)]).unwrap();
    dec_f(dt, bufs[1].data())
}

#[test]
fn reductions_float() {
    let mut rng = rng_for("reductions_float");
    for dt in FLOATS {
        for (rows, cols) in SHAPES {
            let x = rf(&mut rng, dt, rows * cols, -3.0, 3.0);
            let row = |r: usize| &x[r * cols..(r + 1) * cols];
            let sums: Vec<f64> = (0..rows).map(|r| row(r).iter().sum()).collect();
            let abs: Vec<f64> = (0..rows)
                .map(|r| row(r).iter().map(|v| v.abs()).sum())
                .collect();
            let bound = |i: usize, w: f64| rel(dt) * w.abs() + 0.1 * rel(dt) * abs[i];

            let name = format!("reduce_sum_{dt}");
            let got = run_rows_f(&mut rng, &name, dt, &x, rows, rows, cols);
            assert_close(&name, &got, &sums, bound);

            let name = format!("reduce_mean_{dt}");
            let got = run_rows_f(&mut rng, &name, dt, &x, rows, rows, cols);
            let want: Vec<f64> = sums.iter().map(|s| s / cols as f64).collect();
            assert_close(&name, &got, &want, |i, w| {
                rel(dt) * w.abs() + 0.1 * rel(dt) * abs[i] / cols as f64
            });

            let name = format!("reduce_max_{dt}");
            let got = run_rows_f(&mut rng, &name, dt, &x, rows, rows, cols);
            let want: Vec<f64> = (0..rows)
                .map(|r| row(r).iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v)))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}

#[test]
fn reductions_int() {
    let mut rng = rng_for("reductions_int");
    for dt in INTS {
        for (rows, cols) in SHAPES {
            let x = ri(&mut rng, dt, rows * cols);
            let row = |r: usize| &x[r * cols..(r + 1) * cols];
            let mut kernels = vec![("reduce_max", true)];
            if dt == I32 || dt == I64 {
                kernels.push(("reduce_sum", false));
            }
            for (op, is_max) in kernels {
                let name = format!("{op}_{dt}");
                let (o1, o2) = (off(&mut rng), off(&mut rng));
                let mut bufs = vec![
                    Buf::new(enc_i(dt, &x), o1),
                    Buf::poisoned(rows * dt.size(), o2),
                ];
                launch(&name, &mut bufs, &[A::B(0), A::B(1), ext(rows), ext(cols)]).unwrap();
                let min = wrap(dt, 1i128 << (dt.size() * 8 - 1)).min(0);
                let want: Vec<i128> = (0..rows)
                    .map(|r| {
                        if is_max {
                            row(r).iter().copied().fold(min, i128::max)
                        } else {
                            wrap(dt, row(r).iter().sum())
                        }
                    })
                    .collect();
                assert_eq!(dec_i(dt, bufs[1].data()), want, "{name}");
            }
        }
    }
}

#[test]
fn softmax() {
    let mut rng = rng_for("softmax");
    for dt in FLOATS {
        for (rows, cols) in SHAPES {
            let mut x = rf(&mut rng, dt, rows * cols, -5.0, 5.0);
            // Large offsets on odd rows: exp(1000) overflows even f64, so only a
            // max-subtracting softmax survives them.
            for r in (1..rows).step_by(2) {
                for v in &mut x[r * cols..(r + 1) * cols] {
                    *v = q(dt, *v + 1000.0);
                }
            }
            let name = format!("softmax_{dt}");
            let got = run_rows_f(&mut rng, &name, dt, &x, rows * cols, rows, cols);
            let mut want = Vec::new();
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
                let s: f64 = row.iter().map(|&v| (v - m).exp()).sum();
                want.extend(row.iter().map(|&v| (v - m).exp() / s));
            }
            let floor = if dt == F16 { 6e-8 } else { 0.0 };
            assert_close(&name, &got, &want, |_, w| rel(dt) * w.abs() + floor);
            for r in 0..rows {
                let s: f64 = got[r * cols..(r + 1) * cols].iter().sum();
                assert!(
                    cols == 0 || (s - 1.0).abs() <= rel(dt) * 2.0 + 1e-12,
                    "{name}: row {r} sums to {s}"
                );
            }
        }
    }
}

#[test]
fn layer_norm() {
    let mut rng = rng_for("layer_norm");
    for dt in FLOATS {
        for (rows, cols) in SHAPES {
            let mut x = rf(&mut rng, dt, rows * cols, -2.0, 2.0);
            for r in 0..rows {
                let shift = rng.random_range(-5.0..5.0);
                for v in &mut x[r * cols..(r + 1) * cols] {
                    *v = q(dt, *v + shift);
                }
            }
            let g = rf(&mut rng, dt, cols, 0.5, 1.5);
            let b = rf(&mut rng, dt, cols, -1.0, 1.0);
            let eps = 1e-5f32;
            let name = format!("layer_norm_{dt}");
            let o: Vec<usize> = (0..4).map(|_| off(&mut rng)).collect();
            let mut bufs = vec![
                Buf::new(enc_f(dt, &x), o[0]),
                Buf::new(enc_f(dt, &g), o[1]),
                Buf::new(enc_f(dt, &b), o[2]),
                Buf::poisoned(rows * cols * dt.size(), o[3]),
            ];
            let args = [
                A::B(0),
                A::B(1),
                A::B(2),
                A::B(3),
                A::I(Scalar::F32(eps)),
                ext(rows),
                ext(cols),
            ];
            launch(&name, &mut bufs, &args).unwrap();
            let mut want = Vec::new();
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let mean = row.iter().sum::<f64>() / cols as f64;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
                let rstd = 1.0 / (var + eps as f64).sqrt();
                want.extend((0..cols).map(|c| (row[c] - mean) * rstd * g[c] + b[c]));
            }
            let got = dec_f(dt, bufs[3].data());
            assert_close(&name, &got, &want, |_, w| rel(dt) * (w.abs() + 1e-2));
        }
    }
}

#[test]
fn transpose() {
    let mut rng = rng_for("transpose");
    for dt in ALL {
        for (rows, cols) in SHAPES.into_iter().chain([(33, 65), (64, 32)]) {
            let name = format!("transpose_{dt}");
            let n = rows * cols;
            let input: Vec<u8> = (0..n * dt.size()).map(|_| rng.random()).collect();
            let (o1, o2) = (off(&mut rng), off(&mut rng));
            let mut bufs = vec![
                Buf::new(input.clone(), o1),
                Buf::poisoned(n * dt.size(), o2),
            ];
            launch(&name, &mut bufs, &[A::B(0), A::B(1), ext(rows), ext(cols)]).unwrap();
            let s = dt.size();
            let out = bufs[1].data();
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        out[(c * rows + r) * s..(c * rows + r + 1) * s],
                        input[(r * cols + c) * s..(r * cols + c + 1) * s],
                        "{name} {rows}x{cols} at ({r},{c})"
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Aliasing.

#[test]
fn in_place_aliasing() {
    let mut rng = rng_for("in_place_aliasing");
    for n in SIZES {
        // add_f32 with out == a, and out == b == a.
        let a = rf(&mut rng, F32, n, -4.0, 4.0);
        let b = rf(&mut rng, F32, n, -4.0, 4.0);
        let mut bufs = vec![Buf::new(enc_f(F32, &a), 1), Buf::new(enc_f(F32, &b), 2)];
        launch("add_f32", &mut bufs, &[A::B(0), A::B(1), A::B(0), ext(n)]).unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        rel_close("add_f32 in place", F32, &dec_f(F32, bufs[0].data()), &want);
        launch("add_f32", &mut bufs, &[A::B(0), A::B(0), A::B(0), ext(n)]).unwrap();
        let want: Vec<f64> = want.iter().map(|x| 2.0 * x).collect();
        rel_close("add_f32 a+a->a", F32, &dec_f(F32, bufs[0].data()), &want);

        // sub_i32 with out == b.
        let a = ri(&mut rng, I32, n);
        let b = ri(&mut rng, I32, n);
        let mut bufs = vec![Buf::new(enc_i(I32, &a), 0), Buf::new(enc_i(I32, &b), 3)];
        launch("sub_i32", &mut bufs, &[A::B(0), A::B(1), A::B(1), ext(n)]).unwrap();
        let want: Vec<i128> = a.iter().zip(&b).map(|(x, y)| wrap(I32, x - y)).collect();
        assert_eq!(dec_i(I32, bufs[1].data()), want, "sub_i32 into b");

        // exp_f16 in place.
        let x = rf(&mut rng, F16, n, -3.0, 3.0);
        let mut bufs = vec![Buf::new(enc_f(F16, &x), 1)];
        launch("exp_f16", &mut bufs, &[A::B(0), A::B(0), ext(n)]).unwrap();
        let want: Vec<f64> = x.iter().map(|v| v.exp()).collect();
        rel_close("exp_f16 in place", F16, &dec_f(F16, bufs[0].data()), &want);

        // axpy with x == y: y = (alpha + 1) y.
        let y = rf(&mut rng, F64, n, -4.0, 4.0);
        let mut bufs = vec![Buf::new(enc_f(F64, &y), 0)];
        let args = [A::B(0), A::B(0), A::I(Scalar::F64(2.0)), ext(n)];
        launch("axpy_f64", &mut bufs, &args).unwrap();
        let want: Vec<f64> = y.iter().map(|v| 3.0 * v).collect();
        rel_close("axpy x == y", F64, &dec_f(F64, bufs[0].data()), &want);

        // convert_f32_i32 in place (same element size).
        let x = rf(&mut rng, F32, n, -1e6, 1e6);
        let mut bufs = vec![Buf::new(enc_f(F32, &x), 2)];
        launch("convert_f32_i32", &mut bufs, &[A::B(0), A::B(0), ext(n)]).unwrap();
        let want: Vec<i128> = x.iter().map(|v| v.trunc() as i128).collect();
        assert_eq!(dec_i(I32, bufs[0].data()), want, "convert_f32_i32 in place");

        // Shifted overlap: out starts one element after a; the host reads a's original values.
        let a = rf(&mut rng, F32, n + 1, -4.0, 4.0);
        let b = rf(&mut rng, F32, n, -4.0, 4.0);
        let mut bufs = vec![Buf::new(enc_f(F32, &a), 1), Buf::new(enc_f(F32, &b), 0)];
        let args = [A::Sub(0, 0, 4 * n), A::B(1), A::Sub(0, 4, 4 * n), ext(n)];
        launch("mul_f32", &mut bufs, &args).unwrap();
        let want: Vec<f64> = (0..n).map(|i| a[i] * b[i]).collect();
        rel_close(
            "mul_f32 shifted",
            F32,
            &dec_f(F32, &bufs[0].data()[4..]),
            &want,
        );
        assert_eq!(dec_f(F32, &bufs[0].data()[..4])[0], a[0]);

        // Widening conversion in place at the same address (different element sizes): the
        // output covers the input, which is read first.
        let x = rf(&mut rng, F16, n, -100.0, 100.0);
        let mut bytes = enc_f(F16, &x);
        bytes.resize(n * 4, 0);
        let mut bufs = vec![Buf::new(bytes, 3)];
        let args = [A::Sub(0, 0, 2 * n), A::B(0), ext(n)];
        launch("convert_f16_f32", &mut bufs, &args).unwrap();
        assert_eq!(
            dec_f(F32, bufs[0].data()),
            x,
            "convert_f16_f32 over its input"
        );
    }
    for (rows, cols) in SHAPES {
        let total = rows * cols;
        // softmax in place.
        let x = rf(&mut rng, F32, total, -5.0, 5.0);
        let mut bufs = vec![Buf::new(enc_f(F32, &x), 1)];
        launch(
            "softmax_f32",
            &mut bufs,
            &[A::B(0), A::B(0), ext(rows), ext(cols)],
        )
        .unwrap();
        let mut reference = vec![Buf::new(enc_f(F32, &x), 0), Buf::poisoned(total * 4, 0)];
        launch(
            "softmax_f32",
            &mut reference,
            &[A::B(0), A::B(1), ext(rows), ext(cols)],
        )
        .unwrap();
        assert_eq!(bufs[0].data(), reference[1].data(), "softmax in place");

        // Row bias add into a.
        let a = rf(&mut rng, BF16, total, -4.0, 4.0);
        let b = rf(&mut rng, BF16, cols, -4.0, 4.0);
        let mut bufs = vec![Buf::new(enc_f(BF16, &a), 1), Buf::new(enc_f(BF16, &b), 0)];
        let args = [A::B(0), A::B(1), A::B(0), ext(rows), ext(cols)];
        launch("add_row_bf16", &mut bufs, &args).unwrap();
        let want: Vec<f64> = (0..total).map(|i| a[i] + b[i % cols]).collect();
        rel_close(
            "add_row in place",
            BF16,
            &dec_f(BF16, bufs[0].data()),
            &want,
        );

        // reduce_sum in place (the output is the start of the input).
        if cols == 0 {
            continue;
        }
        let x = rf(&mut rng, F64, total, -3.0, 3.0);
        let mut bufs = vec![Buf::new(enc_f(F64, &x), 0)];
        let args = [A::B(0), A::Sub(0, 0, rows * 8), ext(rows), ext(cols)];
        launch("reduce_sum_f64", &mut bufs, &args).unwrap();
        let want: Vec<f64> = (0..rows)
            .map(|r| x[r * cols..(r + 1) * cols].iter().sum())
            .collect();
        let got = dec_f(F64, &bufs[0].data()[..rows * 8]);
        assert_close("reduce_sum in place", &got, &want, |_, w| {
            1e-12 * (w.abs() + 10.0)
        });

        // layer_norm in place.
        let x = rf(&mut rng, F32, total, -3.0, 3.0);
        let g = vec![1.0; cols];
        let z = vec![0.0; cols];
        let ln = |in_place: bool| {
            let mut bufs = vec![
                Buf::new(enc_f(F32, &x), 0),
                Buf::new(enc_f(F32, &g), 0),
                Buf::new(enc_f(F32, &z), 0),
                Buf::poisoned(total * 4, 0),
            ];
            let out = if in_place { 0 } else { 3 };
            let args = [
                A::B(0),
                A::B(1),
                A::B(2),
                A::B(out),
                A::I(Scalar::F32(1e-5)),
                ext(rows),
                ext(cols),
            ];
            launch("layer_norm_f32", &mut bufs, &args).unwrap();
            bufs[out].data().to_vec()
        };
        assert_eq!(ln(true), ln(false), "layer_norm in place");

        // transpose in place (square or not): the host copies the input first.
        let bytes: Vec<u8> = (0..total * 2).map(|_| rng.random()).collect();
        let mut bufs = vec![Buf::new(bytes.clone(), 1)];
        launch(
            "transpose_u8",
            &mut bufs,
            &[
                A::Sub(0, 0, total),
                A::Sub(0, 0, total),
                ext(rows),
                ext(cols),
            ],
        )
        .unwrap();
        for r in 0..rows {
            for c in 0..cols {
                assert_eq!(bufs[0].data()[c * rows + r], bytes[r * cols + c]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Argument checking.

#[test]
fn empty_buffers_with_null_pointers() {
    let lib = standard_library();
    for name in ["add_f32", "exp_bf16", "convert_f64_i32", "fill_i8"] {
        let k = lib.get(name).unwrap();
        let args: Vec<HostArg> = k
            .signature
            .params
            .iter()
            .map(|p| match &p.kind {
                ParamKind::Buffer { .. } => HostArg::Buffer {
                    ptr: std::ptr::null_mut(),
                    len: 0,
                },
                ParamKind::Scalar(DType::I64) => HostArg::Scalar(Scalar::I64(0)),
                ParamKind::Scalar(DType::I8) => HostArg::Scalar(Scalar::I8(0)),
                ParamKind::Scalar(dt) => panic!("unexpected scalar {dt}"),
            })
            .collect();
        // SAFETY: every buffer is empty, so nothing is read or written.
        unsafe { (k.func)(&args) }.unwrap();
    }
}

#[test]
fn host_rejects_bad_arguments() {
    let mut bufs = vec![
        Buf::poisoned(16, 1),
        Buf::poisoned(16, 0),
        Buf::poisoned(16, 2),
    ];
    let bad = |r: Result<(), KernelError>, index: usize| match r {
        Err(KernelError::BadArgument { index: i, .. }) => assert_eq!(i, index),
        other => panic!("expected a bad argument {index}, got {other:?}"),
    };
    // Wrong element count (16 bytes = 4 f32, n = 5).
    bad(
        launch("add_f32", &mut bufs, &[A::B(0), A::B(1), A::B(2), ext(5)]),
        0,
    );
    // Output too short.
    bad(
        launch(
            "add_f32",
            &mut bufs,
            &[A::B(0), A::B(1), A::Sub(2, 0, 12), ext(4)],
        ),
        2,
    );
    // n of the wrong type, negative n.
    bad(
        launch(
            "add_f32",
            &mut bufs,
            &[A::B(0), A::B(1), A::B(2), A::I(Scalar::I32(4))],
        ),
        3,
    );
    bad(
        launch(
            "add_f32",
            &mut bufs,
            &[A::B(0), A::B(1), A::B(2), A::I(Scalar::I64(-1))],
        ),
        3,
    );
    // Missing and extra arguments.
    assert!(launch("add_f32", &mut bufs, &[A::B(0), A::B(1), A::B(2)]).is_err());
    assert!(
        launch(
            "add_f32",
            &mut bufs,
            &[A::B(0), A::B(1), A::B(2), ext(4), ext(4)]
        )
        .is_err()
    );
    // Immediate where a buffer goes, and a buffer where an immediate goes.
    bad(
        launch(
            "neg_f32",
            &mut bufs,
            &[A::I(Scalar::F32(1.0)), A::B(1), ext(4)],
        ),
        0,
    );
    bad(
        launch("scale_f32", &mut bufs, &[A::B(0), A::B(1), ext(4)]),
        1,
    );
    // Value immediate of the wrong dtype (f16 fill with an f32 value).
    bad(
        launch(
            "fill_f16",
            &mut bufs,
            &[A::B(0), A::I(Scalar::F32(1.0)), ext(8)],
        ),
        1,
    );
    // eps must be f32, even for f64 layer norm.
    let args = [
        A::B(0),
        A::Sub(1, 0, 8),
        A::Sub(2, 0, 8),
        A::B(0),
        A::I(Scalar::F64(1e-5)),
        ext(2),
        ext(1),
    ];
    bad(launch("layer_norm_f64", &mut bufs, &args), 4);
    // Extents whose product overflows.
    let args = [A::B(0), A::B(1), ext(1 << 40), ext(1 << 40)];
    assert!(launch("transpose_u8", &mut bufs, &args).is_err());
    // Nothing was written.
    for b in &bufs {
        assert!(b.data().iter().all(|&x| x == POISON));
    }
}

fn slice(bytes: u64) -> Slice {
    Slice::new(0, 0, bytes)
}

fn buf_arg(bytes: u64, access: Access) -> KernelArg {
    KernelArg::Buffer {
        slice: slice(bytes),
        access,
    }
}

fn imm(s: Scalar) -> KernelArg {
    KernelArg::Scalar(s)
}

#[test]
fn check_args_rejects() {
    use Access::{Read as R, ReadWrite as RW, Write as W};
    let lib = standard_library();
    let sig = |name: &str| &lib.get(name).unwrap().signature;
    let n = |v: i64| imm(Scalar::I64(v));

    // add_f32 over 10 elements.
    let ok = [buf_arg(40, R), buf_arg(40, R), buf_arg(40, W), n(10)];
    sig("add_f32").check_args(&ok).unwrap();
    // Stronger access than declared is fine.
    sig("add_f32")
        .check_args(&[buf_arg(40, RW), buf_arg(40, R), buf_arg(40, RW), n(10)])
        .unwrap();
    // Wrong element counts.
    assert_eq!(
        sig("add_f32")
            .check_args(&[buf_arg(40, R), buf_arg(40, R), buf_arg(40, W), n(11)])
            .unwrap_err()
            .0,
        0
    );
    assert_eq!(
        sig("add_f32")
            .check_args(&[buf_arg(40, R), buf_arg(36, R), buf_arg(40, W), n(10)])
            .unwrap_err()
            .0,
        1
    );
    assert!(
        sig("add_f32")
            .check_args(&[buf_arg(0, R), buf_arg(0, R), buf_arg(0, W), n(-1)])
            .is_err()
    );
    // Wrong access: output declared read-only, input declared write-only.
    assert_eq!(
        sig("add_f32")
            .check_args(&[buf_arg(40, R), buf_arg(40, R), buf_arg(40, R), n(10)])
            .unwrap_err()
            .0,
        2
    );
    assert_eq!(
        sig("add_f32")
            .check_args(&[buf_arg(40, W), buf_arg(40, R), buf_arg(40, W), n(10)])
            .unwrap_err()
            .0,
        0
    );
    // axpy's y must be read-write.
    assert_eq!(
        sig("axpy_f32")
            .check_args(&[buf_arg(40, R), buf_arg(40, W), imm(Scalar::F32(2.0)), n(10)])
            .unwrap_err()
            .0,
        1
    );
    sig("axpy_f32")
        .check_args(&[
            buf_arg(40, R),
            buf_arg(40, RW),
            imm(Scalar::F32(2.0)),
            n(10),
        ])
        .unwrap();
    // Wrong scalar dtypes: n as i32, value as f32 for f16, alpha as f64 for f32, eps as f64.
    assert_eq!(
        sig("add_f32")
            .check_args(&[
                buf_arg(40, R),
                buf_arg(40, R),
                buf_arg(40, W),
                imm(Scalar::I32(10))
            ])
            .unwrap_err()
            .0,
        3
    );
    assert_eq!(
        sig("fill_f16")
            .check_args(&[buf_arg(20, W), imm(Scalar::F32(1.0)), n(10)])
            .unwrap_err()
            .0,
        1
    );
    sig("fill_f16")
        .check_args(&[buf_arg(20, W), imm(Scalar::F16(0x3C00)), n(10)])
        .unwrap();
    assert_eq!(
        sig("scale_f32")
            .check_args(&[buf_arg(40, RW), imm(Scalar::F64(2.0)), n(10)])
            .unwrap_err()
            .0,
        1
    );
    let ln = |eps: Scalar| {
        sig("layer_norm_bf16").check_args(&[
            buf_arg(2 * 12, R),
            buf_arg(2 * 4, R),
            buf_arg(2 * 4, R),
            buf_arg(2 * 12, W),
            imm(eps),
            n(3),
            n(4),
        ])
    };
    ln(Scalar::F32(1e-5)).unwrap();
    assert_eq!(ln(Scalar::BF16(0x3C00)).unwrap_err().0, 4);
    // Row kernels: the extents multiply; transpose's output is cols x rows.
    let t = |out: u64, rows: i64, cols: i64| {
        sig("transpose_f64").check_args(&[buf_arg(8 * 6, R), buf_arg(out, W), n(rows), n(cols)])
    };
    t(48, 2, 3).unwrap();
    assert_eq!(t(48, 2, 4).unwrap_err().0, 0);
    assert_eq!(t(40, 2, 3).unwrap_err().0, 1);
    let r =
        |out: u64| sig("reduce_max_i8").check_args(&[buf_arg(6, R), buf_arg(out, W), n(2), n(3)]);
    r(2).unwrap();
    assert_eq!(r(3).unwrap_err().0, 1);
    let row = |b: u64| {
        sig("add_row_i64").check_args(&[
            buf_arg(8 * 6, R),
            buf_arg(b, R),
            buf_arg(8 * 6, W),
            n(2),
            n(3),
        ])
    };
    row(24).unwrap();
    assert_eq!(row(16).unwrap_err().0, 1);
    // Conversions: each side has its own dtype.
    let c = |inb: u64, outb: u64| {
        sig("convert_bf16_f64").check_args(&[buf_arg(inb, R), buf_arg(outb, W), n(5)])
    };
    c(10, 40).unwrap();
    assert_eq!(c(40, 40).unwrap_err().0, 0);
    assert_eq!(c(10, 10).unwrap_err().0, 1);
    // Kinds and counts.
    assert!(
        sig("neg_f32")
            .check_args(&[imm(Scalar::F32(0.0)), buf_arg(4, W), n(1)])
            .is_err()
    );
    assert!(
        sig("neg_f32")
            .check_args(&[buf_arg(4, R), buf_arg(4, W)])
            .is_err()
    );
}

// ---------------------------------------------------------------------------------------------
// The library as a whole.

#[test]
fn signatures_are_consistent() {
    let lib = standard_library();
    assert_eq!(lib.name, "xthunk.std");
    for k in lib.kernels() {
        let sig = &k.signature;
        let name = sig.name.as_str();
        let params = &sig.params;
        // Buffers first, then immediates; at least one written buffer.
        let first_scalar = params
            .iter()
            .position(|p| matches!(p.kind, ParamKind::Scalar(_)))
            .unwrap_or(params.len());
        assert!(
            params[first_scalar..]
                .iter()
                .all(|p| matches!(p.kind, ParamKind::Scalar(_))),
            "{name}: buffers must come first"
        );
        assert!(
            params
                .iter()
                .any(|p| matches!(p.kind, ParamKind::Buffer { access, .. } if access.writes())),
            "{name}: writes nothing"
        );
        // Unique parameter names.
        let mut names: Vec<&str> = params.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            params.len(),
            "{name}: duplicate parameter names"
        );
        // Extents point at i64 immediates named n, rows or cols.
        for p in params {
            if let ParamKind::Buffer { elems, .. } = &p.kind {
                let Extent::Product(idx) = elems else {
                    panic!("{name}: `{}` has a fixed extent", p.name)
                };
                assert!(!idx.is_empty(), "{name}: `{}` has an empty product", p.name);
                for &j in idx {
                    let q = params
                        .get(j)
                        .unwrap_or_else(|| panic!("{name}: index {j} out of range"));
                    assert_eq!(
                        q.kind,
                        ParamKind::Scalar(I64),
                        "{name}: extent `{}`",
                        q.name
                    );
                    assert!(
                        ["n", "rows", "cols", "vocab", "dim"].contains(&q.name),
                        "{name}: extent `{}`",
                        q.name
                    );
                }
            }
        }
        // Dtypes agree with the name.
        let parts: Vec<&str> = name.split('_').collect();
        let buffers: Vec<DType> = params
            .iter()
            .filter_map(|p| match p.kind {
                ParamKind::Buffer { dtype, .. } => Some(dtype),
                _ => None,
            })
            .collect();
        if parts[0] == "convert" {
            assert_eq!(parts.len(), 3, "{name}");
            let a = DType::from_name(parts[1]).unwrap();
            let b = DType::from_name(parts[2]).unwrap();
            assert_ne!(a, b);
            assert_eq!(buffers, vec![a, b], "{name}");
        } else {
            let t = DType::from_name(parts[parts.len() - 1]).unwrap();
            // Class labels and token ids are i32; AdamW's moments f32 (f64 for f64).
            let state = if t == F64 { F64 } else { F32 };
            for p in params {
                if let ParamKind::Buffer { dtype, .. } = p.kind {
                    let want = match p.name {
                        "labels" | "ids" => I32,
                        "m" | "v" => state,
                        _ => t,
                    };
                    assert_eq!(dtype, want, "{name}: buffer `{}`", p.name);
                }
            }
            assert_eq!(
                buffers.len(),
                params
                    .iter()
                    .filter(|p| matches!(p.kind, ParamKind::Buffer { .. }))
                    .count()
            );
            for p in params {
                if let ParamKind::Scalar(d) = p.kind {
                    let want = match p.name {
                        "n" | "rows" | "cols" | "vocab" | "dim" => I64,
                        "step" if parts[0] == "adamw" => I64,
                        "eps" | "lr" | "beta1" | "beta2" | "weight_decay" => F32,
                        _ => t,
                    };
                    assert_eq!(d, want, "{name}: `{}`", p.name);
                }
            }
        }
    }
}

#[test]
fn kernel_counts_per_family() {
    let lib = standard_library();
    let mut families: BTreeMap<String, usize> = BTreeMap::new();
    for name in lib.names() {
        let family = if name.starts_with("convert_") {
            "convert".to_string()
        } else {
            name[..name.rfind('_').unwrap()].to_string()
        };
        *families.entry(family).or_default() += 1;
    }
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    let mut set = |f: &str, n: usize| {
        want.insert(f.to_string(), n);
    };
    set("fill", 8);
    set("iota", 8);
    set("convert", 20);
    for op in ["add", "sub", "mul", "div", "max", "min"] {
        set(op, 8);
        set(&format!("{op}_row"), 8);
    }
    for op in ["neg", "abs", "relu"] {
        set(op, 7);
    }
    for op in [
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "tanh",
        "sigmoid",
        "gelu",
        "gelu_erf",
        "bias_gelu",
        "bias_gelu_erf",
        "cross_entropy",
        "adamw",
        "embedding",
    ] {
        set(op, 4);
    }
    set("axpy", 4);
    set("scale", 4);
    set("reduce_sum", 6);
    set("reduce_max", 8);
    set("reduce_mean", 4);
    set("softmax", 4);
    set("layer_norm", 4);
    set("transpose", 8);
    assert_eq!(families, want);
    assert_eq!(lib.len(), 247);
    assert_eq!(lib.len(), want.values().sum::<usize>());
}
