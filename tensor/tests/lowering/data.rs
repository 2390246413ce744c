//! Test data: arrays as f64 (floats) or i128 (integers, pred) with their bytes, rounding and
//! wrapping to an element type, and random inputs rich in special values.

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xthunk_core::ir::DType;

/// An array of the reference interpreter.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr {
    pub dtype: DType,
    pub dims: Vec<u64>,
    /// Floats' values (empty for integers).
    pub f: Vec<f64>,
    /// Integers' and preds' values (empty for floats).
    pub i: Vec<i128>,
}

impl Arr {
    pub fn len(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }
    pub fn floats(dtype: DType, dims: &[u64], f: Vec<f64>) -> Arr {
        Arr {
            dtype,
            dims: dims.to_vec(),
            f,
            i: vec![],
        }
    }
    pub fn ints(dtype: DType, dims: &[u64], i: Vec<i128>) -> Arr {
        Arr {
            dtype,
            dims: dims.to_vec(),
            f: vec![],
            i,
        }
    }
    /// Element `k` as an f64 (integers converted).
    pub fn get_f(&self, k: usize) -> f64 {
        if self.dtype.is_float() {
            self.f[k]
        } else {
            self.i[k] as f64
        }
    }
    /// An array of the same type and shape from a per-element function.
    pub fn gather(&self, dims: &[u64], from: impl Fn(usize) -> usize) -> Arr {
        let n = dims.iter().product::<u64>() as usize;
        if self.dtype.is_float() {
            Arr::floats(self.dtype, dims, (0..n).map(|k| self.f[from(k)]).collect())
        } else {
            Arr::ints(self.dtype, dims, (0..n).map(|k| self.i[from(k)]).collect())
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![];
        for k in 0..self.len() {
            match self.dtype {
                DType::F16 => out.extend(f16::from_f64(self.f[k]).to_bits().to_le_bytes()),
                DType::BF16 => out.extend(bf16::from_f64(self.f[k]).to_bits().to_le_bytes()),
                DType::F32 => out.extend((self.f[k] as f32).to_le_bytes()),
                DType::F64 => out.extend(self.f[k].to_le_bytes()),
                d => {
                    let v = wrap(d, self.i[k]) as i64;
                    out.extend(&v.to_le_bytes()[..d.size()]);
                }
            }
        }
        out
    }

    pub fn from_bytes(dtype: DType, dims: &[u64], b: &[u8]) -> Arr {
        let s = dtype.size();
        let n = b.len() / s;
        let el = |k: usize| &b[k * s..(k + 1) * s];
        match dtype {
            DType::F16 => Arr::floats(
                dtype,
                dims,
                (0..n)
                    .map(|k| f16::from_le_bytes([el(k)[0], el(k)[1]]).to_f64())
                    .collect(),
            ),
            DType::BF16 => Arr::floats(
                dtype,
                dims,
                (0..n)
                    .map(|k| bf16::from_le_bytes([el(k)[0], el(k)[1]]).to_f64())
                    .collect(),
            ),
            DType::F32 => Arr::floats(
                dtype,
                dims,
                (0..n)
                    .map(|k| f32::from_le_bytes(el(k).try_into().unwrap()) as f64)
                    .collect(),
            ),
            DType::F64 => Arr::floats(
                dtype,
                dims,
                (0..n)
                    .map(|k| f64::from_le_bytes(el(k).try_into().unwrap()))
                    .collect(),
            ),
            DType::Pred | DType::U8 => {
                Arr::ints(dtype, dims, (0..n).map(|k| el(k)[0] as i128).collect())
            }
            DType::I8 => Arr::ints(
                dtype,
                dims,
                (0..n).map(|k| el(k)[0] as i8 as i128).collect(),
            ),
            DType::I32 => Arr::ints(
                dtype,
                dims,
                (0..n)
                    .map(|k| i32::from_le_bytes(el(k).try_into().unwrap()) as i128)
                    .collect(),
            ),
            DType::I64 => Arr::ints(
                dtype,
                dims,
                (0..n)
                    .map(|k| i64::from_le_bytes(el(k).try_into().unwrap()) as i128)
                    .collect(),
            ),
            // The other integer types: the bytes zero- or sign-extended, as `wrap` reads them.
            d => {
                let signed = d.is_signed_int();
                Arr::ints(
                    dtype,
                    dims,
                    (0..n)
                        .map(|k| {
                            let mut le = [0u8; 16];
                            le[..s].copy_from_slice(el(k));
                            if signed && el(k)[s - 1] & 0x80 != 0 {
                                le[s..].fill(0xff);
                            }
                            i128::from_le_bytes(le)
                        })
                        .collect(),
                )
            }
        }
    }
}

/// Rounds an f64 to the float type `d` (and back).
pub fn rnd(d: DType, x: f64) -> f64 {
    match d {
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        DType::F32 => x as f32 as f64,
        _ => x,
    }
}

/// Bits of an integer type.
pub fn width(d: DType) -> u32 {
    if d == DType::Pred {
        1
    } else {
        d.size() as u32 * 8
    }
}

/// Wraps an integer to the type `d` (two's complement; pred: nonzero is 1).
pub fn wrap(d: DType, x: i128) -> i128 {
    match d {
        DType::Pred => (x != 0) as i128,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => x.rem_euclid(1i128 << width(d)),
        _ => {
            let w = width(d);
            let m = 1i128 << w;
            let r = x.rem_euclid(m);
            if r >= m / 2 { r - m } else { r }
        }
    }
}

pub fn min_of(d: DType) -> i128 {
    match d {
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Pred => 0,
        _ => -(1i128 << (width(d) - 1)),
    }
}

pub fn max_of(d: DType) -> i128 {
    match d {
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => (1i128 << width(d)) - 1,
        DType::Pred => 1,
        _ => (1i128 << (width(d) - 1)) - 1,
    }
}

/// Random elements of `d`: a third special values (NaN, ±0, ±inf, extremes, small
/// integers), the rest spread over a moderate range.
pub fn random(d: DType, dims: &[u64], seed: u64) -> Arr {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let n = dims.iter().product::<u64>() as usize;
    if d.is_float() {
        let big = match d {
            DType::F16 => 60000.0,
            DType::BF16 | DType::F32 => 3.0e38,
            _ => 1.0e300,
        };
        let specials = [
            f64::NAN,
            -f64::NAN,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.0,
            -1.0,
            0.5,
            -2.5,
            2.5,
            big,
            -big,
            1e-6,
        ];
        let f = (0..n)
            .map(|_| {
                let x = if r.random_range(0..3) == 0 {
                    specials[r.random_range(0..specials.len())]
                } else {
                    r.random_range(-8.0..8.0)
                };
                rnd(d, x)
            })
            .collect();
        Arr::floats(d, dims, f)
    } else {
        let (lo, hi) = (min_of(d), max_of(d));
        let specials = [
            lo,
            hi,
            0,
            1,
            -1,
            2,
            7,
            8,
            31,
            32,
            33,
            63,
            64,
            65,
            lo + 1,
            hi - 1,
        ];
        let i = (0..n)
            .map(|_| {
                let x = if r.random_range(0..3) == 0 {
                    specials[r.random_range(0..specials.len())]
                } else {
                    r.random_range(-100i64..100) as i128
                };
                if d == DType::Pred {
                    r.random_range(0..2)
                } else {
                    wrap(d, x)
                }
            })
            .collect();
        Arr::ints(d, dims, i)
    }
}

/// Whether two results agree: bit for bit (NaN with any payload equals NaN), or for floats
/// within `rel` relative error (and the type's smallest normal absolute).
pub fn agree(want: &Arr, got: &Arr, rel: f64) -> Result<(), String> {
    if want.dtype.is_float() {
        let tiny = match want.dtype {
            DType::F16 => 6.2e-5,
            DType::BF16 | DType::F32 => 1.2e-38,
            _ => 2.3e-308,
        };
        for k in 0..want.len() {
            let (w, g) = (want.f[k], got.f[k]);
            let ok = if w.is_nan() || g.is_nan() {
                w.is_nan() && g.is_nan()
            } else if rel == 0.0 || w.is_infinite() || g.is_infinite() {
                w.to_bits() == g.to_bits()
            } else {
                (w - g).abs() <= rel * w.abs().max(g.abs()) + tiny
            };
            if !ok {
                return Err(format!("element {k}: want {w:e}, got {g:e}"));
            }
        }
    } else {
        for k in 0..want.len() {
            if want.i[k] != got.i[k] {
                return Err(format!("element {k}: want {}, got {}", want.i[k], got.i[k]));
            }
        }
    }
    Ok(())
}
