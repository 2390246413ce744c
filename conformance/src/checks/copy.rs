//! `copy/` and `memset/`: stream copies and memsets at odd offsets inside larger buffers whose
//! other bytes are poisoned (random) and must stay untouched. No check relies on overlapping
//! copies (their semantics are not part of the interface).

use super::memory::spaces;
use super::seed::seeded;
use crate::check::Check;
use crate::util::{CheckResult, CheckRng, compare_bytes, download_all, random_bytes, upload};
use rand::Rng;
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::ir::{MemorySpace, MemsetPattern};

pub fn checks() -> Vec<Check> {
    vec![
        seeded("copy/odd_offsets", odd_offsets),
        seeded("copy/within_buffer", within_buffer),
        seeded("copy/across_spaces", across_spaces),
        seeded("copy/zero_length", copy_zero_length),
        seeded("copy/large", copy_large),
        seeded("memset/u8_odd", |d, r| memset_case(d, r, 1)),
        seeded("memset/u16", |d, r| memset_case(d, r, 2)),
        seeded("memset/u32", |d, r| memset_case(d, r, 4)),
        seeded("memset/zero_length", memset_zero_length),
        seeded("memset/large", memset_large),
    ]
}

/// Device-to-device copies between two buffers at odd offsets and lengths.
fn odd_offsets(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 70_001usize;
    let src_data = random_bytes(rng, size);
    let mut model = random_bytes(rng, size);
    let src = upload(device, &src_data, MemorySpace::Device)?;
    let dst = upload(device, &model, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    let cases = [
        (0usize, 0usize, 1usize),
        (1, 3, 7),
        (3, 1, 4099),
        (4097, 5, 65_537),
        (7, 8191, 0),
        (size - 2, 0, 2),
        (0, size - 1001, 1001),
        (12_345, 23_457, 33),
    ];
    for (so, d_o, len) in cases {
        stream.copy(
            src.ptr().offset(so as u64),
            dst.ptr().offset(d_o as u64),
            len as u64,
        )?;
        model[d_o..d_o + len].copy_from_slice(&src_data[so..so + len]);
    }
    stream.synchronize()?;
    compare_bytes(
        "destination after the copies",
        &download_all(device, dst.as_ref())?,
        &model,
    )?;
    compare_bytes(
        "source after the copies",
        &download_all(device, src.as_ref())?,
        &src_data,
    )
}

/// Copies between disjoint ranges of one buffer.
fn within_buffer(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 20_011usize;
    let mut model = random_bytes(rng, size);
    let buf = upload(device, &model, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    for _ in 0..40 {
        let len = rng.random_range(1..2000usize);
        // Pick disjoint ranges: the source in one half, the destination in the other.
        let half = size / 2;
        let a = rng.random_range(0..half - len);
        let b = half + rng.random_range(0..half - len);
        let (s, d) = if rng.random::<bool>() { (a, b) } else { (b, a) };
        stream.copy(
            buf.ptr().offset(s as u64),
            buf.ptr().offset(d as u64),
            len as u64,
        )?;
        let tmp = model[s..s + len].to_vec();
        model[d..d + len].copy_from_slice(&tmp);
    }
    stream.synchronize()?;
    compare_bytes(
        "buffer after 40 dependent copies",
        &download_all(device, buf.as_ref())?,
        &model,
    )
}

/// Copies between every pair of memory spaces the device lists.
fn across_spaces(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let spaces = spaces(device)?;
    let stream = device.create_stream()?;
    for &from in &spaces {
        for &to in &spaces {
            let size = 3001usize;
            let data = random_bytes(rng, size);
            let mut model = random_bytes(rng, size);
            let src = upload(device, &data, from)?;
            let dst = upload(device, &model, to)?;
            stream.copy(src.ptr().offset(1), dst.ptr().offset(2), 2997)?;
            model[2..2999].copy_from_slice(&data[1..2998]);
            stream.synchronize()?;
            compare_bytes(
                &format!("copy from {from} to {to}"),
                &download_all(device, dst.as_ref())?,
                &model,
            )?;
        }
    }
    Ok(())
}

/// Zero-byte copies (also at the very end of a buffer) succeed and change nothing.
fn copy_zero_length(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let data = random_bytes(rng, 100);
    let a = upload(device, &data, MemorySpace::Device)?;
    let b = upload(device, &data, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    stream.copy(a.ptr(), b.ptr().offset(50), 0)?;
    stream.copy(a.ptr().offset(100), b.ptr().offset(100), 0)?;
    stream.synchronize()?;
    compare_bytes(
        "after zero-length copies",
        &download_all(device, b.as_ref())?,
        &data,
    )
}

/// A 16 MiB copy between odd offsets.
fn copy_large(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = (16 << 20) + 7;
    let data = random_bytes(rng, size);
    let mut model = vec![0x3Cu8; size];
    let src = upload(device, &data, MemorySpace::Device)?;
    let dst = upload(device, &model, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    let len = size - 5;
    stream.copy(src.ptr().offset(1), dst.ptr().offset(3), len as u64)?;
    model[3..3 + len].copy_from_slice(&data[1..1 + len]);
    stream.synchronize()?;
    compare_bytes("16 MiB copy", &download_all(device, dst.as_ref())?, &model)
}

fn pattern(width: usize, rng: &mut CheckRng) -> (MemsetPattern, Vec<u8>) {
    match width {
        1 => {
            let v: u8 = rng.random();
            (MemsetPattern::U8(v), vec![v])
        }
        2 => {
            let v: u16 = rng.random();
            (MemsetPattern::U16(v), v.to_le_bytes().to_vec())
        }
        _ => {
            let v: u32 = rng.random();
            (MemsetPattern::U32(v), v.to_le_bytes().to_vec())
        }
    }
}

/// Memsets of `width`-byte patterns at offsets that are odd multiples of the width (odd byte
/// offsets for 8-bit patterns), with odd element counts; every other byte keeps its poison.
fn memset_case(device: &Arc<dyn Device>, rng: &mut CheckRng, width: usize) -> CheckResult {
    let size = 40_000usize;
    let mut model = random_bytes(rng, size);
    let buf = upload(device, &model, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    for elems in [1usize, 3, 7, 1001, 4099] {
        let max_start = (size / width - elems) / 2;
        let start = 2 * rng.random_range(0..max_start) + 1;
        let off = start * width;
        let (p, bytes) = pattern(width, rng);
        stream.memset(buf.ptr().offset(off as u64), (elems * width) as u64, p)?;
        for e in 0..elems {
            model[off + e * width..off + (e + 1) * width].copy_from_slice(&bytes);
        }
    }
    stream.synchronize()?;
    compare_bytes(
        &format!("buffer after {width}-byte memsets (little-endian patterns)"),
        &download_all(device, buf.as_ref())?,
        &model,
    )
}

fn memset_zero_length(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let data = random_bytes(rng, 64);
    let buf = upload(device, &data, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    stream.memset(buf.ptr().offset(3), 0, MemsetPattern::U8(1))?;
    stream.memset(buf.ptr().offset(8), 0, MemsetPattern::U32(1))?;
    stream.memset(buf.ptr().offset(64), 0, MemsetPattern::U16(1))?;
    stream.synchronize()?;
    compare_bytes(
        "after zero-length memsets",
        &download_all(device, buf.as_ref())?,
        &data,
    )
}

/// 4 MiB memsets of each width inside a larger poisoned buffer.
fn memset_large(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = (4 << 20) + 64;
    let mut model = random_bytes(rng, size);
    let buf = upload(device, &model, MemorySpace::Device)?;
    let stream = device.create_stream()?;
    let len = 4 << 20;
    for width in [1usize, 2, 4] {
        let off = 4 * width;
        let (p, bytes) = pattern(width, rng);
        stream.memset(buf.ptr().offset(off as u64), len as u64, p)?;
        for c in model[off..off + len].chunks_exact_mut(width) {
            c.copy_from_slice(&bytes);
        }
    }
    stream.synchronize()?;
    compare_bytes(
        "after 4 MiB memsets",
        &download_all(device, buf.as_ref())?,
        &model,
    )
}
