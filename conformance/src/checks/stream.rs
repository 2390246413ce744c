//! `stream/`: in-order execution within a stream, cross-stream order through events, event
//! and stream queries, device-wide synchronization, and errors for bad addresses.

use super::memory::BOGUS;
use super::seed::{seeded, seeded_exclusive};
use crate::check::Check;
use crate::util::{
    CheckResult, CheckRng, compare_bytes, download, download_all, ensure, fail, random_bytes,
    upload,
};
use rand::Rng;
use std::sync::Arc;
use xthunk_core::backend::{
    Device, DevicePtr, DeviceRange, GemmLaunch, LaunchArg, LaunchDims, Stream,
};
use xthunk_core::ir::{DType, Dim3, MemorySpace, MemsetPattern, Module, ModuleImage, Scalar};

pub fn checks() -> Vec<Check> {
    vec![
        seeded("stream/in_order_chain", in_order_chain),
        seeded("stream/event_orders_streams", event_orders_streams),
        seeded("stream/event_query_synchronize", event_query_synchronize),
        seeded("stream/many_streams", many_streams),
        seeded("stream/device_synchronize", device_synchronize),
        seeded(
            "stream/host_copy_sees_queued_work",
            host_copy_sees_queued_work,
        ),
        seeded("stream/bad_addresses_fail", bad_addresses),
        seeded_exclusive("stream/freed_address_fails", freed_address),
    ]
}

/// 80 dependent copies and memsets over two buffers on one stream, mirrored on the host: the
/// result matches only if they ran in issue order.
fn in_order_chain(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 4099usize;
    let mut models = [random_bytes(rng, size), random_bytes(rng, size)];
    let bufs = [
        upload(device, &models[0], MemorySpace::Device)?,
        upload(device, &models[1], MemorySpace::Device)?,
    ];
    let stream = device.create_stream()?;
    for _ in 0..80 {
        if rng.random_range(0..3) == 0 {
            let width = [1usize, 2, 4][rng.random_range(0..3)];
            let t = rng.random_range(0..2usize);
            let elems = rng.random_range(0..600usize);
            let start = rng.random_range(0..size / width - elems);
            let off = start * width;
            let v: u32 = rng.random();
            let (p, bytes) = match width {
                1 => (MemsetPattern::U8(v as u8), vec![v as u8]),
                2 => (
                    MemsetPattern::U16(v as u16),
                    (v as u16).to_le_bytes().to_vec(),
                ),
                _ => (MemsetPattern::U32(v), v.to_le_bytes().to_vec()),
            };
            stream.memset(bufs[t].ptr().offset(off as u64), (elems * width) as u64, p)?;
            for e in 0..elems {
                models[t][off + e * width..off + (e + 1) * width].copy_from_slice(&bytes);
            }
        } else {
            let (s, d) = (rng.random_range(0..2usize), rng.random_range(0..2usize));
            let len = rng.random_range(1..1500usize);
            let (so, d_o) = loop {
                let so = rng.random_range(0..size - len);
                let d_o = rng.random_range(0..size - len);
                // Never overlapping (within one buffer the ranges must be disjoint).
                if s != d || so + len <= d_o || d_o + len <= so {
                    break (so, d_o);
                }
            };
            stream.copy(
                bufs[s].ptr().offset(so as u64),
                bufs[d].ptr().offset(d_o as u64),
                len as u64,
            )?;
            let tmp = models[s][so..so + len].to_vec();
            models[d][d_o..d_o + len].copy_from_slice(&tmp);
        }
    }
    stream.synchronize()?;
    for (i, (b, m)) in bufs.iter().zip(&models).enumerate() {
        compare_bytes(
            &format!("buffer {i} after the chain"),
            &download_all(device, b.as_ref())?,
            m,
        )?;
    }
    Ok(())
}

/// Slow work on stream 1 ends by writing the data; stream 2 waits on an event recorded after
/// it and copies the data: it must see the final data, not an intermediate state. A second
/// record of the same event (after more work) is what a later wait sees.
fn event_orders_streams(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 8 << 20;
    let data = random_bytes(rng, size);
    let data2 = random_bytes(rng, size);
    let src = upload(device, &data, MemorySpace::Device)?;
    let src2 = upload(device, &data2, MemorySpace::Device)?;
    let x = device.allocate(size as u64, 64, MemorySpace::Device)?;
    let z = device.allocate(size as u64, 64, MemorySpace::Device)?;
    let z2 = device.allocate(size as u64, 64, MemorySpace::Device)?;
    let (s1, s2) = (device.create_stream()?, device.create_stream()?);
    let ev = device.create_event()?;
    for i in 0..8u8 {
        s1.memset(x.ptr(), size as u64, MemsetPattern::U8(i))?;
    }
    s1.copy(src.ptr(), x.ptr(), size as u64)?;
    s1.record(ev.as_ref())?;
    s2.wait(ev.as_ref())?;
    s2.copy(x.ptr(), z.ptr(), size as u64)?;
    s2.synchronize()?;
    compare_bytes(
        "stream 2's copy after waiting on stream 1's event",
        &download_all(device, z.as_ref())?,
        &data,
    )?;
    // Record again after more work: a new wait sees the second state.
    for i in 0..4u8 {
        s1.memset(x.ptr(), size as u64, MemsetPattern::U8(0x80 | i))?;
    }
    s1.copy(src2.ptr(), x.ptr(), size as u64)?;
    s1.record(ev.as_ref())?;
    s2.wait(ev.as_ref())?;
    s2.copy(x.ptr(), z2.ptr(), size as u64)?;
    s2.synchronize()?;
    compare_bytes(
        "stream 2's copy after waiting on the second record",
        &download_all(device, z2.as_ref())?,
        &data2,
    )?;
    Ok(s1.synchronize()?)
}

/// Events: a fresh event is complete; waiting on one is a no-op; after `synchronize` of a
/// recorded event, `query` is true and the work before the record is done.
fn event_query_synchronize(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let fresh = device.create_event()?;
    ensure(fresh.query()?, || {
        "query of a never recorded event is false".into()
    })?;
    fresh.synchronize()?;
    let size = 16 << 20;
    let buf = device.allocate(size, 64, MemorySpace::Device)?;
    let out = device.allocate(size, 64, MemorySpace::Device)?;
    let s = device.create_stream()?;
    s.wait(fresh.as_ref())?;
    let ev = device.create_event()?;
    let v: u32 = rng.random();
    for i in 0..3 {
        s.memset(buf.ptr(), size, MemsetPattern::U8(i))?;
    }
    s.memset(
        buf.ptr().offset(size - 64),
        64,
        MemsetPattern::U32(v.wrapping_add(3)),
    )?;
    s.copy(buf.ptr(), out.ptr(), size)?;
    s.record(ev.as_ref())?;
    // Either answer is fine while the work may still run; it must not fail.
    let _ = ev.query()?;
    let _ = s.query()?;
    ev.synchronize()?;
    ensure(ev.query()?, || {
        "query after event synchronize is false".into()
    })?;
    let want = v.wrapping_add(3).to_le_bytes();
    let tail = download(device, out.ptr().offset(size - 4), 4)?;
    compare_bytes("last word after the event completed", &tail, &want)?;
    s.synchronize()?;
    ensure(s.query()?, || {
        "stream query after synchronize is false".into()
    })?;
    // Synchronizing again (nothing new recorded) returns at once.
    Ok(ev.synchronize()?)
}

/// Eight streams each run their own chain at once.
fn many_streams(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 100_003usize;
    let mut work = Vec::new();
    for i in 0..8u8 {
        let data = random_bytes(rng, size);
        let src = upload(device, &data, MemorySpace::Device)?;
        let dst = device.allocate(size as u64, 64, MemorySpace::Device)?;
        let s = device.create_stream()?;
        s.memset(dst.ptr(), size as u64, MemsetPattern::U8(i))?;
        s.copy(src.ptr().offset(1), dst.ptr().offset(2), (size - 3) as u64)?;
        s.memset(dst.ptr().offset(size as u64 - 1), 1, MemsetPattern::U8(!i))?;
        let mut model = vec![i; size];
        model[2..size - 1].copy_from_slice(&data[1..size - 2]);
        model[size - 1] = !i;
        work.push((s, src, dst, model));
    }
    for (i, (s, _src, dst, model)) in work.iter().enumerate() {
        s.synchronize()?;
        compare_bytes(
            &format!("stream {i}'s buffer"),
            &download_all(device, dst.as_ref())?,
            model,
        )?;
    }
    Ok(())
}

/// After `Device::synchronize`, every stream of the device has finished.
fn device_synchronize(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 4u64 << 20;
    let mut streams = Vec::new();
    let mut bufs = Vec::new();
    for _ in 0..3 {
        let s = device.create_stream()?;
        let b = device.allocate(size, 64, MemorySpace::Device)?;
        for _ in 0..4 {
            s.memset(b.ptr(), size, MemsetPattern::U8(rng.random()))?;
        }
        streams.push(s);
        bufs.push(b);
    }
    device.synchronize()?;
    for (i, s) in streams.iter().enumerate() {
        ensure(s.query()?, || {
            format!("stream {i} still busy after Device::synchronize")
        })?;
    }
    Ok(())
}

/// `Device::copy_to_host` copies "after all queued work on it": a download issued right after
/// queueing (without synchronizing) must see the queued writes.
fn host_copy_sees_queued_work(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 32u64 << 20;
    let buf = device.allocate(size, 64, MemorySpace::Device)?;
    let s = device.create_stream()?;
    let v: u32 = rng.random();
    // Enough queued work (1 GiB of memsets) that a download that does not wait cannot finish
    // after it by chance.
    for i in 0..31 {
        s.memset(buf.ptr(), size, MemsetPattern::U8(i as u8))?;
    }
    s.memset(buf.ptr(), size, MemsetPattern::U32(v))?;
    let last = download(device, buf.ptr().offset(size - 4), 4)?;
    let want = v.to_le_bytes();
    s.synchronize()?;
    compare_bytes(
        "last word downloaded right after queueing memsets (without synchronizing)",
        &last,
        &want,
    )
}

/// Runs `f` (which queues work on a fresh stream) and synchronizes: an error must come back,
/// either when queueing or when synchronizing.
fn expect_stream_error(
    device: &Arc<dyn Device>,
    what: &str,
    f: impl FnOnce(&dyn Stream) -> xthunk_core::Result<()>,
) -> CheckResult {
    let s = device.create_stream()?;
    let queued = f(s.as_ref());
    let synced = s.synchronize();
    match (queued, synced) {
        (Err(_), _) | (_, Err(_)) => Ok(()),
        (Ok(()), Ok(())) => Err(fail(format!("{what}: no error"))),
    }
}

/// Copies, memsets, launches and gemms on addresses outside every allocation, or running past
/// the end of one, fail with an error (not a crash), and the device stays usable.
fn bad_addresses(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let size = 4096u64;
    let data = random_bytes(rng, size as usize);
    let buf = upload(device, &data, MemorySpace::Device)?;
    let end = buf.ptr().offset(size - 8);
    expect_stream_error(device, "copy to a bogus address", |s| {
        s.copy(buf.ptr(), BOGUS, 64)
    })?;
    expect_stream_error(device, "copy from a bogus address", |s| {
        s.copy(BOGUS, buf.ptr(), 64)
    })?;
    expect_stream_error(device, "copy running past the end", |s| {
        s.copy(buf.ptr(), end, 16)
    })?;
    expect_stream_error(device, "memset of a bogus address", |s| {
        s.memset(BOGUS, 64, MemsetPattern::U8(1))
    })?;
    expect_stream_error(device, "memset running past the end", |s| {
        s.memset(end, 16, MemsetPattern::U32(1))
    })?;
    let module = device.load_module(&Module {
        name: "std".into(),
        images: vec![ModuleImage::Standard],
        options: Default::default(),
    })?;
    let kernel = module.kernel("neg_f32")?;
    let dims = LaunchDims {
        grid: Dim3::x(1),
        block: Dim3::x(256),
        shared_mem: 0,
    };
    expect_stream_error(device, "kernel reading a bogus address", |s| {
        s.launch(
            &kernel,
            dims,
            &[
                LaunchArg::Buffer {
                    ptr: BOGUS,
                    len: 64,
                },
                LaunchArg::Buffer {
                    ptr: buf.ptr(),
                    len: 64,
                },
                LaunchArg::Scalar(Scalar::I64(16)),
            ],
        )
    })?;
    let gemm = GemmLaunch {
        a: DeviceRange {
            ptr: BOGUS,
            len: 64,
        },
        b: DeviceRange {
            ptr: buf.ptr(),
            len: 64,
        },
        c: DeviceRange {
            ptr: buf.ptr().offset(2048),
            len: 64,
        },
        m: 4,
        n: 4,
        k: 4,
        lda: 4,
        ldb: 4,
        ldc: 4,
        trans_a: false,
        trans_b: false,
        alpha: 1.0,
        beta: 0.0,
        dtype: DType::F32,
        batch: 1,
        stride_a: 16,
        stride_b: 16,
        stride_c: 16,
    };
    expect_stream_error(device, "gemm reading a bogus address", |s| s.gemm(&gemm))?;
    compare_bytes(
        "buffer after the failed operations",
        &download_all(device, buf.as_ref())?,
        &data,
    )?;
    // The device still works.
    let other = upload(device, &data, MemorySpace::Device)?;
    let s = device.create_stream()?;
    s.memset(other.ptr(), 8, MemsetPattern::U8(0xEE))?;
    s.synchronize()?;
    let mut model = data.clone();
    model[..8].fill(0xEE);
    compare_bytes(
        "a fresh stream after the errors",
        &download_all(device, other.as_ref())?,
        &model,
    )
}

/// The address of a freed buffer is rejected like any bad address (runs alone, so that nothing
/// reuses the address meanwhile).
fn freed_address(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let data = random_bytes(rng, 4096);
    let keep = upload(device, &data, MemorySpace::Device)?;
    let gone = device.allocate(4096, 64, MemorySpace::Device)?;
    let ptr: DevicePtr = gone.ptr();
    drop(gone);
    device.synchronize()?;
    expect_stream_error(device, "copy to a freed buffer", |s| {
        s.copy(keep.ptr(), ptr, 64)
    })?;
    expect_stream_error(device, "copy from a freed buffer", |s| {
        s.copy(ptr, keep.ptr(), 64)
    })?;
    let mut sink = vec![0u8; 64];
    ensure(device.copy_to_host(ptr, &mut sink).is_err(), || {
        "copy_to_host from a freed buffer did not fail".into()
    })?;
    compare_bytes(
        "buffer after the failed copies",
        &download_all(device, keep.as_ref())?,
        &data,
    )
}
