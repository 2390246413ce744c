//! `memory/`: allocation in every memory space the device lists, host round trips, alignment,
//! accounting, errors of the synchronous host copies, and stream-ordered allocation where the
//! device declares it (`Unsupported` where it does not).

use super::seed::{seeded, seeded_exclusive};
use crate::check::Check;
use crate::util::{
    CheckResult, CheckRng, compare_bytes, download, download_all, ensure, expect_live_bytes, fail,
    random_bytes, upload,
};
use rand::Rng;
use std::sync::Arc;
use xthunk_core::backend::{Device, DevicePtr, MemoryStats};
use xthunk_core::ir::MemorySpace;

/// An address no backend hands out (the first page is never mapped).
pub(crate) const BOGUS: DevicePtr = DevicePtr(0x1000);

pub fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    for (label, size) in [("0", 0u64), ("1", 1), ("4099", 4099), ("64mib", 64 << 20)] {
        v.push(seeded_exclusive(
            format!("memory/size_{label}"),
            move |d, rng| sizes(d, rng, size),
        ));
    }
    v.push(seeded("memory/alignment", alignment));
    v.push(seeded("memory/distinct_allocations", distinct));
    v.push(seeded("memory/host_copy_ranges", host_copy_ranges));
    v.push(seeded("memory/bad_host_copies", bad_host_copies));
    v.push(seeded_exclusive(
        "memory/oversized_allocation_fails",
        oversized,
    ));
    v.push(seeded("memory/stream_ordered", stream_ordered));
    v
}

/// Stream-ordered allocation: where the capabilities declare it, buffers from
/// [`Stream::allocate_ordered`](xthunk_core::backend::Stream::allocate_ordered) are aligned,
/// counted, usable in the stream's order (written, copied out, read back), freed in that
/// order when dropped, and a second round of the same sizes works too; elsewhere the call is
/// `Unsupported`.
fn stream_ordered(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let stream = device.create_stream()?;
    if !device.capabilities().stream_ordered_alloc {
        return match stream.allocate_ordered(64, 256) {
            Err(xthunk_core::Error::Unsupported { .. }) => Ok(()),
            Err(e) => Err(fail(format!(
                "without the capability, allocate_ordered fails with {e}, not Unsupported"
            ))),
            Ok(_) => Err(fail(
                "allocate_ordered succeeded on a device that does not declare it",
            )),
        };
    }
    device.synchronize()?;
    let before = device.memory_stats();
    for round in 0..2 {
        let sizes = [1u64, 4099, 1 << 20];
        let out = device.allocate(sizes.iter().sum(), 256, MemorySpace::Device)?;
        let mut wrote = vec![];
        let mut at = 0u64;
        let mut live = vec![];
        for (i, size) in sizes.iter().enumerate() {
            let align = [256u64, 512, 4096][i];
            let buf = stream.allocate_ordered(*size, align)?;
            ensure(buf.ptr().0 % align == 0 && buf.size() == *size, || {
                format!(
                    "round {round}: {size} bytes aligned to {align}: {} bytes at {}",
                    buf.size(),
                    buf.ptr()
                )
            })?;
            let data = random_bytes(rng, *size as usize);
            let staged = device.allocate(*size, 256, MemorySpace::Device)?;
            device.copy_from_host(&data, staged.ptr())?;
            stream.copy(staged.ptr(), buf.ptr(), *size)?;
            stream.copy(buf.ptr(), out.ptr().offset(at), *size)?;
            stream.synchronize()?;
            wrote.extend_from_slice(&data);
            at += size;
            live.push(buf);
        }
        let during = device.memory_stats();
        ensure(during.live_bytes >= before.live_bytes + at, || {
            format!("round {round}: accounting {during:?} does not count {at} ordered bytes")
        })?;
        // Freed in the stream's order, after the copies queued before.
        drop(live);
        let back = download_all(device, out.as_ref())?;
        compare_bytes(&format!("round {round}: ordered buffers"), &back, &wrote)?;
        stream.synchronize()?;
    }
    expect_live_bytes(
        device,
        before.live_bytes,
        "after the ordered buffers were freed",
    )
}

pub(crate) fn spaces(device: &Arc<dyn Device>) -> CheckResult<Vec<MemorySpace>> {
    let s = device.capabilities().memory_spaces.clone();
    ensure(s.contains(&MemorySpace::Device), || {
        format!("the capabilities list no device memory space: {s:?}")
    })?;
    Ok(s)
}

fn space_bytes(stats: &MemoryStats, space: MemorySpace) -> u64 {
    stats
        .per_space
        .iter()
        .filter(|(s, _)| *s == space)
        .map(|(_, b)| *b)
        .sum()
}

fn consistent(stats: &MemoryStats, when: &str) -> CheckResult {
    let per: u64 = stats.per_space.iter().map(|(_, b)| *b).sum();
    ensure(per == stats.live_bytes, || {
        format!(
            "{when}: per-space live bytes sum to {per}, live_bytes is {}",
            stats.live_bytes
        )
    })?;
    ensure(stats.peak_bytes >= stats.live_bytes, || {
        format!(
            "{when}: peak_bytes {} < live_bytes {}",
            stats.peak_bytes, stats.live_bytes
        )
    })
}

/// Allocates `size` bytes in every space: size, space and alignment as asked; the accounting
/// grows by at least `size` in that space and returns to its value before after the drop;
/// random bytes round-trip.
fn sizes(device: &Arc<dyn Device>, rng: &mut CheckRng, size: u64) -> CheckResult {
    let data = random_bytes(rng, size as usize);
    device.synchronize()?;
    let before = device.memory_stats();
    consistent(&before, "before")?;
    for space in spaces(device)? {
        let buf = device.allocate(size, 256, space)?;
        ensure(buf.size() == size && buf.space() == space, || {
            format!(
                "{space}: asked for {size} bytes, the buffer says {} bytes of {}",
                buf.size(),
                buf.space()
            )
        })?;
        ensure(buf.ptr().0 % 256 == 0, || {
            format!("{space}: {} is not aligned to 256", buf.ptr())
        })?;
        let during = device.memory_stats();
        consistent(&during, "while allocated")?;
        ensure(
            during.live_bytes >= before.live_bytes + size
                && during.live_allocations > before.live_allocations
                && space_bytes(&during, space) >= space_bytes(&before, space) + size,
            || {
                format!(
                    "{space}: accounting did not grow by {size} bytes and one allocation: before {before:?}, during {during:?}"
                )
            },
        )?;
        device.copy_from_host(&data, buf.ptr())?;
        let back = download_all(device, buf.as_ref())?;
        compare_bytes(&format!("{space}: {size} bytes read back"), &back, &data)?;
        drop(buf);
        expect_live_bytes(
            device,
            before.live_bytes,
            &format!("{space}: after freeing {size} bytes"),
        )?;
        let after = device.memory_stats();
        ensure(
            after.live_allocations == before.live_allocations
                && space_bytes(&after, space) == space_bytes(&before, space),
            || format!("{space}: accounting after the free {after:?}, before {before:?}"),
        )?;
    }
    Ok(())
}

fn alignment(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    for space in spaces(device)? {
        for align in [1u64, 2, 8, 64, 256, 4096] {
            let size = rng.random_range(1..300u64);
            let buf = device.allocate(size, align, space)?;
            ensure(buf.ptr().0 % align == 0, || {
                format!(
                    "{space}: {size} bytes aligned to {align} came back at {}",
                    buf.ptr()
                )
            })?;
        }
    }
    Ok(())
}

/// Many live allocations of odd sizes in all spaces: disjoint address ranges, and each keeps
/// its own contents.
fn distinct(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let spaces = spaces(device)?;
    let mut bufs = Vec::new();
    for i in 0..48 {
        let size = rng.random_range(1..5000usize);
        let space = spaces[i % spaces.len()];
        let data = random_bytes(rng, size);
        bufs.push((upload(device, &data, space)?, data));
    }
    let mut ranges: Vec<(u64, u64)> = bufs
        .iter()
        .map(|(b, _)| (b.ptr().0, b.ptr().0 + b.size()))
        .collect();
    ranges.sort();
    for w in ranges.windows(2) {
        ensure(w[0].1 <= w[1].0, || {
            format!(
                "allocations overlap: [{:#x}, {:#x}) and [{:#x}, {:#x})",
                w[0].0, w[0].1, w[1].0, w[1].1
            )
        })?;
    }
    for (i, (b, data)) in bufs.iter().enumerate() {
        let back = download_all(device, b.as_ref())?;
        compare_bytes(
            &format!("allocation {i} ({} bytes)", data.len()),
            &back,
            data,
        )?;
    }
    Ok(())
}

/// Synchronous host copies of sub-ranges at odd offsets leave the rest alone.
fn host_copy_ranges(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    for space in spaces(device)? {
        let size = 10_007usize;
        let mut model = random_bytes(rng, size);
        let buf = upload(device, &model, space)?;
        for (off, len) in [
            (3usize, 4099usize),
            (0, 1),
            (size - 1, 1),
            (1001, 0),
            (7, 9000),
        ] {
            let data = random_bytes(rng, len);
            device.copy_from_host(&data, buf.ptr().offset(off as u64))?;
            model[off..off + len].copy_from_slice(&data);
            let part = download(device, buf.ptr().offset(off as u64), len)?;
            compare_bytes(
                &format!("{space}: bytes [{off}, {}) read back", off + len),
                &part,
                &data,
            )?;
        }
        let all = download_all(device, buf.as_ref())?;
        compare_bytes(
            &format!("{space}: whole buffer after partial writes"),
            &all,
            &model,
        )?;
    }
    Ok(())
}

/// Host copies from or to a wrong or out-of-range address fail without touching memory.
fn bad_host_copies(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 4099usize;
    let data = random_bytes(rng, size);
    let buf = upload(device, &data, MemorySpace::Device)?;
    let junk = vec![0x77u8; 16];
    let mut sink = vec![0u8; 16];
    let cases: Vec<(&str, bool)> = vec![
        (
            "copy_to_host from an address outside every allocation",
            device.copy_to_host(BOGUS, &mut sink).is_err(),
        ),
        (
            "copy_from_host to an address outside every allocation",
            device.copy_from_host(&junk, BOGUS).is_err(),
        ),
        (
            "copy_to_host running 1 byte past the end",
            device
                .copy_to_host(buf.ptr().offset(size as u64 - 15), &mut sink)
                .is_err(),
        ),
        (
            "copy_from_host running 1 byte past the end",
            device
                .copy_from_host(&junk, buf.ptr().offset(size as u64 - 15))
                .is_err(),
        ),
    ];
    for (what, errored) in cases {
        ensure(errored, || format!("{what} did not fail"))?;
    }
    let back = download_all(device, buf.as_ref())?;
    compare_bytes("buffer after the failed copies", &back, &data)
}

/// Allocations no device can satisfy fail with an error and leave the accounting alone.
fn oversized(device: &Arc<dyn Device>, _rng: &mut CheckRng) -> CheckResult {
    device.synchronize()?;
    let before = device.memory_stats().live_bytes;
    for size in [1u64 << 62, u64::MAX] {
        if let Ok(b) = device.allocate(size, 64, MemorySpace::Device) {
            return Err(fail(format!(
                "allocating {size} bytes succeeded (buffer of {} bytes)",
                b.size()
            )));
        }
    }
    expect_live_bytes(device, before, "after failed allocations")
}
