//! Host-side tensor bytes: random inputs, element decoding, checksums and short summaries.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xthunk::ir::DType;

/// Seeded random bytes for a tensor of `count` elements: floats uniform in [-1, 1), signed
/// integers in [-8, 8), u8 in [0, 16), pred 0 or 1. `stream` separates the tensors of one
/// program, so a tensor's values depend only on the seed and its position.
pub fn random_bytes(dtype: DType, count: usize, seed: u64, stream: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    let mut out = Vec::with_capacity(count * dtype.size());
    for _ in 0..count {
        match dtype {
            DType::Pred => out.push(rng.random_range(0u8..2)),
            DType::I8 => out.extend(rng.random_range(-8i8..8).to_le_bytes()),
            DType::U8 => out.push(rng.random_range(0u8..16)),
            DType::I32 => out.extend(rng.random_range(-8i32..8).to_le_bytes()),
            DType::I64 => out.extend(rng.random_range(-8i64..8).to_le_bytes()),
            DType::F16 => out.extend(
                half::f16::from_f32(rng.random_range(-1.0f32..1.0))
                    .to_bits()
                    .to_le_bytes(),
            ),
            DType::BF16 => out.extend(
                half::bf16::from_f32(rng.random_range(-1.0f32..1.0))
                    .to_bits()
                    .to_le_bytes(),
            ),
            DType::F32 => out.extend(rng.random_range(-1.0f32..1.0).to_le_bytes()),
            DType::F64 => out.extend(rng.random_range(-1.0f64..1.0).to_le_bytes()),
        }
    }
    out
}

/// One element as f64 (`chunk` is its little-endian bytes, exactly `dtype.size()` long).
fn element(dtype: DType, chunk: &[u8]) -> f64 {
    let b2 = || [chunk[0], chunk[1]];
    let b4 = || [chunk[0], chunk[1], chunk[2], chunk[3]];
    let b8 = || {
        let mut a = [0u8; 8];
        a.copy_from_slice(&chunk[..8]);
        a
    };
    match dtype {
        DType::Pred | DType::U8 => chunk[0] as f64,
        DType::I8 => chunk[0] as i8 as f64,
        DType::I32 => i32::from_le_bytes(b4()) as f64,
        DType::I64 => i64::from_le_bytes(b8()) as f64,
        DType::F16 => half::f16::from_bits(u16::from_le_bytes(b2())).to_f64(),
        DType::BF16 => half::bf16::from_bits(u16::from_le_bytes(b2())).to_f64(),
        DType::F32 => f32::from_le_bytes(b4()) as f64,
        DType::F64 => f64::from_le_bytes(b8()),
    }
}

/// One element as text, in its own type's shortest form.
fn element_text(dtype: DType, chunk: &[u8]) -> String {
    match dtype {
        DType::Pred => (chunk[0] != 0).to_string(),
        DType::I64 => i64::from_le_bytes({
            let mut a = [0u8; 8];
            a.copy_from_slice(&chunk[..8]);
            a
        })
        .to_string(),
        DType::F16 => {
            float_text(half::f16::from_bits(u16::from_le_bytes([chunk[0], chunk[1]])).to_f32())
        }
        DType::BF16 => {
            float_text(half::bf16::from_bits(u16::from_le_bytes([chunk[0], chunk[1]])).to_f32())
        }
        DType::F32 => float_text(f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]])),
        DType::F64 => float_text(element(dtype, chunk)),
        _ => element(dtype, chunk).to_string(),
    }
}

/// A float in its shortest round-trip form: positional for moderate magnitudes, with an
/// exponent otherwise (`0.25`, `-3`, `1.5e-9`, `2e12`).
pub fn float_text<T: Into<f64> + std::fmt::Display + std::fmt::LowerExp + Copy>(v: T) -> String {
    let a = v.into().abs();
    if a == 0.0 || !a.is_finite() || (1e-4..1e9).contains(&a) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// Sum of all elements in f64.
pub fn sum(dtype: DType, bytes: &[u8]) -> f64 {
    bytes
        .chunks_exact(dtype.size())
        .map(|c| element(dtype, c))
        .sum()
}

/// 64-bit FNV-1a of the bytes: a cheap fingerprint to compare runs bit for bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    xthunk_core::hash::fnv1a64(bytes)
}

/// The first `n` elements as text, e.g. `[0.1, -0.5, ...]`.
pub fn first_values(dtype: DType, bytes: &[u8], n: usize) -> String {
    let total = bytes.len() / dtype.size();
    let shown: Vec<String> = bytes
        .chunks_exact(dtype.size())
        .take(n)
        .map(|c| element_text(dtype, c))
        .collect();
    let more = if total > n { ", ..." } else { "" };
    format!("[{}{more}]", shown.join(", "))
}

/// `f32[64,10]`.
pub fn type_text(dtype: DType, dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("{dtype}[{}]", d.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_is_seeded_and_in_range() {
        let a = random_bytes(DType::F32, 1000, 7, 0);
        assert_eq!(a, random_bytes(DType::F32, 1000, 7, 0));
        assert_ne!(a, random_bytes(DType::F32, 1000, 7, 1));
        assert_ne!(a, random_bytes(DType::F32, 1000, 8, 0));
        for c in a.chunks_exact(4) {
            let v = element(DType::F32, c);
            assert!((-1.0..1.0).contains(&v));
        }
        for dt in DType::ALL {
            let b = random_bytes(dt, 100, 1, 2);
            assert_eq!(b.len(), 100 * dt.size());
            for c in b.chunks_exact(dt.size()) {
                let v = element(dt, c);
                assert!((-8.0..16.0).contains(&v), "{dt}: {v}");
                if dt == DType::Pred {
                    assert!(v == 0.0 || v == 1.0);
                }
            }
        }
    }

    #[test]
    fn summaries() {
        let bytes: Vec<u8> = [1.5f32, -0.5, 2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(sum(DType::F32, &bytes), 3.0);
        assert_eq!(first_values(DType::F32, &bytes, 2), "[1.5, -0.5, ...]");
        assert_eq!(first_values(DType::F32, &bytes, 8), "[1.5, -0.5, 2]");
        assert_eq!(first_values(DType::Pred, &[1, 0], 8), "[true, false]");
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(type_text(DType::F32, &[64, 10]), "f32[64,10]");
        assert_eq!(type_text(DType::I32, &[]), "i32[]");
        assert_eq!(float_text(2.0713934e-36f32), "2.0713934e-36");
        assert_eq!(float_text(0.25f32), "0.25");
        assert_eq!(float_text(-3.0f64), "-3");
        assert_eq!(float_text(2e12f64), "2e12");
        assert_eq!(float_text(f32::NAN), "NaN");
    }
}
