//! Host-side tensor bytes: bounded host buffers (random inputs, output read-backs, `.npy`
//! data), random inputs, element decoding, checksums and short summaries.
//!
//! Every host buffer whose size comes from a program or a file is taken through
//! [`reserve`]/[`host_buffer`]: refused with a [`HostAllocError`] (never an abort) when it does
//! not fit the address space, exceeds the memory available now ([`available_host_memory`]),
//! or the allocator says no.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xthunk::ir::{DType, TensorSpec, f8};

/// A host buffer that could not be had: its size and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {requested} bytes of host memory: {reason}")]
pub struct HostAllocError {
    pub requested: u64,
    pub reason: String,
}

/// Host memory this process can still take, in bytes (the machine's available memory within
/// its cgroups' limits, less what host devices have mapped and not touched yet: one reckoning
/// with the host backend's, [`xthunk::core::host::available_memory`]); `None` where the system
/// does not say.
pub fn available_host_memory() -> Option<u64> {
    xthunk::core::host::available_memory()
}

/// `2.5 GiB`-style text of a byte count.
fn bytes_text(n: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let f = n as f64;
    if f >= GIB {
        format!("{:.1} GiB", f / GIB)
    } else {
        format!("{:.1} MiB", f / MIB)
    }
}

/// An empty vector with room for exactly `size` bytes, or why not: larger than the address
/// space, more than the host memory available now, or refused by the allocator.
pub fn reserve(size: u64) -> Result<Vec<u8>, HostAllocError> {
    let fail = |reason: String| HostAllocError {
        requested: size,
        reason,
    };
    let n = usize::try_from(size)
        .ok()
        .filter(|n| isize::try_from(*n).is_ok())
        .ok_or_else(|| fail("more than the address space holds".into()))?;
    if let Some(available) = available_host_memory()
        && size > available
    {
        return Err(fail(format!(
            "more than the {} ({available} bytes) of host memory available",
            bytes_text(available)
        )));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| fail(e.to_string()))?;
    Ok(v)
}

/// A zeroed host buffer of `size` bytes (see [`reserve`]).
pub fn host_buffer(size: u64) -> Result<Vec<u8>, HostAllocError> {
    let mut v = reserve(size)?;
    // `reserve` checked that the size fits a usize.
    v.resize(usize::try_from(size).unwrap_or_default(), 0);
    Ok(v)
}

/// Copies every output of a session's last execution to the host, each into a
/// [`host_buffer`]; a buffer that cannot be had fails the read-back with an error naming the
/// output.
pub fn read_back(session: &xthunk::core::executor::Session) -> xthunk::Result<Vec<Vec<u8>>> {
    session.read_outputs_with(&host_output)
}

/// The [`host_buffer`] of an output's read-back (see [`read_back`]).
pub fn host_output(spec: &TensorSpec, size: u64) -> xthunk::Result<Vec<u8>> {
    host_buffer(size).map_err(|e| {
        xthunk::Error::backend(
            "host",
            &format!("reading back output `{}` ({size} bytes)", spec.name),
            e.to_string(),
        )
    })
}

/// Seeded random bytes for a tensor of `count` elements: floats uniform in [-1, 1), signed
/// integers in [-8, 8), u8 in [0, 16), pred 0 or 1. `stream` separates the tensors of one
/// program, so a tensor's values depend only on the seed and its position. The buffer is
/// taken through [`reserve`]: too large a tensor is an error before any value is drawn.
pub fn random_bytes(
    dtype: DType,
    count: u64,
    seed: u64,
    stream: u64,
) -> Result<Vec<u8>, HostAllocError> {
    let size = count
        .checked_mul(dtype.size() as u64)
        .ok_or_else(|| HostAllocError {
            requested: u64::MAX,
            reason: format!("{count} elements of {dtype} overflow a 64-bit byte count"),
        })?;
    let mut out = reserve(size)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
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
            DType::I16 => out.extend(rng.random_range(-8i16..8).to_le_bytes()),
            DType::U16 => out.extend(rng.random_range(0u16..16).to_le_bytes()),
            DType::U32 => out.extend(rng.random_range(0u32..16).to_le_bytes()),
            DType::U64 => out.extend(rng.random_range(0u64..16).to_le_bytes()),
            DType::C64 => {
                out.extend(rng.random_range(-1.0f32..1.0).to_le_bytes());
                out.extend(rng.random_range(-1.0f32..1.0).to_le_bytes());
            }
            DType::C128 => {
                out.extend(rng.random_range(-1.0f64..1.0).to_le_bytes());
                out.extend(rng.random_range(-1.0f64..1.0).to_le_bytes());
            }
            DType::F8E4M3FN => out.push(f8::E4M3FN.from_f64(rng.random_range(-1.0f64..1.0))),
            DType::F8E5M2 => out.push(f8::E5M2.from_f64(rng.random_range(-1.0f64..1.0))),
        }
    }
    Ok(out)
}

/// One element as f64 (`chunk` is its little-endian bytes, exactly `dtype.size()` long); of a
/// complex, its real part.
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
        DType::I16 => i16::from_le_bytes(b2()) as f64,
        DType::U16 => u16::from_le_bytes(b2()) as f64,
        DType::U32 => u32::from_le_bytes(b4()) as f64,
        DType::U64 => u64::from_le_bytes(b8()) as f64,
        DType::C64 => f32::from_le_bytes(b4()) as f64,
        DType::C128 => f64::from_le_bytes(b8()),
        DType::F8E4M3FN => f8::E4M3FN.to_f64(chunk[0]),
        DType::F8E5M2 => f8::E5M2.to_f64(chunk[0]),
    }
}

/// The imaginary part of a complex element (`chunk` as in [`element`]); 0 for other types.
fn imaginary(dtype: DType, chunk: &[u8]) -> f64 {
    match dtype {
        DType::C64 => element(DType::F32, &chunk[4..]),
        DType::C128 => element(DType::F64, &chunk[8..]),
        _ => 0.0,
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
        DType::U64 => u64::from_le_bytes({
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
        DType::C64 | DType::C128 => {
            let (re, im) = (element(dtype, chunk), imaginary(dtype, chunk));
            let (re, im) = if dtype == DType::C64 {
                (float_text(re as f32), float_text(im as f32))
            } else {
                (float_text(re), float_text(im))
            };
            let sep = if im.starts_with('-') { "" } else { "+" };
            format!("{re}{sep}{im}i")
        }
        DType::F8E4M3FN | DType::F8E5M2 => float_text(element(dtype, chunk)),
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

/// Sum of all elements in f64 (of a complex tensor: of both parts of every element).
pub fn sum(dtype: DType, bytes: &[u8]) -> f64 {
    bytes
        .chunks_exact(dtype.size())
        .map(|c| element(dtype, c) + imaginary(dtype, c))
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn host_buffers_are_bounded() {
        assert_eq!(host_buffer(16).unwrap(), vec![0u8; 16]);
        assert!(host_buffer(0).unwrap().is_empty());
        for size in [u64::MAX, 1 << 63, 1 << 50] {
            let e = host_buffer(size).unwrap_err();
            assert_eq!(e.requested, size);
            assert!(e.to_string().contains(&size.to_string()), "{e}");
        }
        // Beyond what is available now: refused before the allocator is asked (on Linux).
        if let Some(available) = available_host_memory() {
            let e = reserve(available + 1).unwrap_err();
            assert!(e.reason.contains("available"), "{e}");
        }
        let e = random_bytes(DType::F64, u64::MAX / 4, 0, 0).unwrap_err();
        assert!(e.reason.contains("overflow"), "{e}");
        let e = random_bytes(DType::F32, 1 << 48, 0, 0).unwrap_err();
        assert_eq!(e.requested, 1 << 50);
    }

    #[test]
    fn read_back_copies_every_output() {
        use xthunk::core::executor::{ExecutorConfig, Program, Session};
        let backend = xthunk::core::host::HostBackend::new();
        let device = xthunk::Backend::device(&backend, 0).unwrap();
        let mut b = xthunk::builder::ExecutableBuilder::new("read_back");
        let x = b.parameter("x", DType::U8, &[8]);
        let y = b.output("y", DType::U8, &[8]);
        b.copy(x.slice(), y.slice());
        let program = Program::new(b.build().unwrap()).unwrap();
        let session = Session::load(device, &program, &ExecutorConfig::default(), None).unwrap();
        session.bind(&[[1u8, 2, 3, 4, 5, 6, 7, 8]]).unwrap();
        session.execute(&Default::default()).unwrap();
        let back = read_back(&session).unwrap();
        assert_eq!(back, vec![vec![1, 2, 3, 4, 5, 6, 7, 8]]);
    }

    #[test]
    fn random_is_seeded_and_in_range() {
        let r = |dt, n, seed, stream| random_bytes(dt, n, seed, stream).unwrap();
        let a = r(DType::F32, 1000, 7, 0);
        assert_eq!(a, r(DType::F32, 1000, 7, 0));
        assert_ne!(a, r(DType::F32, 1000, 7, 1));
        assert_ne!(a, r(DType::F32, 1000, 8, 0));
        for c in a.chunks_exact(4) {
            let v = element(DType::F32, c);
            assert!((-1.0..1.0).contains(&v));
        }
        for dt in DType::ALL {
            let b = r(dt, 100, 1, 2);
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
