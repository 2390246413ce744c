//! `kernels/user/nan_minmax`: float max/min where operands are NaN, quiet or signalling, of
//! either sign: every pair of a pool of special and ordinary values, as raw bits (a
//! conversion could quiet a signalling NaN before the device sees it). The number wins; the
//! result is NaN only when both operands are; two zeros may give either zero.

use super::cases::{i64s, poison};
use super::types::{Arg, Case, Expect};
use crate::util::{CheckResult, CheckRng};
use rand::Rng;
use xthunk_core::ir::DType;

/// The f32 pool: signalling NaNs (+, −, with payload), quiet NaNs (+, −), ±0, ±inf, numbers.
const F32_POOL: [u32; 10] = [
    0x7FA0_0000,
    0xFF80_0001,
    0x7FC0_0000,
    0xFFC0_0123,
    0x0000_0000,
    0x8000_0000,
    0x7F80_0000,
    0xFF80_0000,
    0x3FC0_0000,
    0xC010_0000,
];
/// The same kinds in f64.
const F64_POOL: [u64; 10] = [
    0x7FF4_0000_0000_0000,
    0xFFF0_0000_0000_0001,
    0x7FF8_0000_0000_0000,
    0xFFF8_0000_0000_0123,
    0,
    0x8000_0000_0000_0000,
    0x7FF0_0000_0000_0000,
    0xFFF0_0000_0000_0000,
    0x3FF8_0000_0000_0000,
    0xC002_0000_0000_0000,
];

/// What max (or min) of `a` and `b` may give: `Err` with the reason when `got` is not it.
fn allowed(a: f64, b: f64, got: f64, max: bool) -> Result<(), String> {
    let ok = match (a.is_nan(), b.is_nan()) {
        (true, true) => got.is_nan(),
        (true, false) => got.to_bits() == b.to_bits(),
        (false, true) => got.to_bits() == a.to_bits(),
        (false, false) if a == b => got == a,
        (false, false) => got.to_bits() == if (a > b) == max { a } else { b }.to_bits(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{}({a:e} [{:#x}], {b:e} [{:#x}]) = {got:e} [{:#x}]: the number wins, NaN only \
             when both operands are",
            if max { "max" } else { "min" },
            a.to_bits(),
            b.to_bits(),
            got.to_bits()
        ))
    }
}

pub(super) fn nan_minmax(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    // Every ordered pair of the pool, in a random order.
    let p = F32_POOL.len();
    let mut pairs: Vec<(usize, usize)> = (0..p * p).map(|k| (k / p, k % p)).collect();
    for i in (1..pairs.len()).rev() {
        pairs.swap(i, rng.random_range(0..=i));
    }
    let n = pairs.len();
    let a32: Vec<u32> = pairs.iter().map(|&(i, _)| F32_POOL[i]).collect();
    let b32: Vec<u32> = pairs.iter().map(|&(_, j)| F32_POOL[j]).collect();
    let a64: Vec<u64> = pairs.iter().map(|&(i, _)| F64_POOL[i]).collect();
    let b64: Vec<u64> = pairs.iter().map(|&(_, j)| F64_POOL[j]).collect();
    let le32 = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let le64 = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let inputs = [le32(&a32), le32(&b32), le64(&a64), le64(&b64)].map(Arg::Buf);
    let names32 = [
        "fmaxf",
        "fminf",
        "xt_max",
        "xt_min",
        "xt_atomic_max",
        "xt_atomic_min",
    ];
    let f32s = move |out: &[u8], _: &[Vec<u8>]| -> Result<(), String> {
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if got.len() != 6 * n {
            return Err(format!("{} values, want {}", got.len(), 6 * n));
        }
        for (k, name) in names32.iter().enumerate() {
            for i in 0..n {
                let (a, b) = (f32::from_bits(a32[i]), f32::from_bits(b32[i]));
                let g = got[k * n + i];
                // Compared in f64: widening keeps NaN-ness, zeros' signs and every number.
                allowed(f64::from(a), f64::from(b), f64::from(g), k % 2 == 0)
                    .map_err(|e| format!("{name}: {e}"))?;
            }
        }
        Ok(())
    };
    let f64s = move |out: &[u8], _: &[Vec<u8>]| -> Result<(), String> {
        let got: Vec<f64> = out
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        if got.len() != 2 * n {
            return Err(format!("{} values, want {}", got.len(), 2 * n));
        }
        for (k, name) in ["fmax", "fmin"].iter().enumerate() {
            for i in 0..n {
                let (a, b) = (f64::from_bits(a64[i]), f64::from_bits(b64[i]));
                allowed(a, b, got[k * n + i], k == 0).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        Ok(())
    };
    Ok(vec![Case {
        what: format!("nan_minmax n={n}"),
        kernel: "nan_minmax",
        grid: 2,
        block: 64,
        shared: 0,
        args: [poison(DType::F32, 6 * n), poison(DType::F64, 2 * n)]
            .into_iter()
            .chain(inputs)
            .chain([i64s(n)])
            .collect(),
        expect: vec![
            Expect::Holds {
                arg: 0,
                check: Box::new(f32s),
            },
            Expect::Holds {
                arg: 1,
                check: Box::new(f64s),
            },
        ],
    }])
}
