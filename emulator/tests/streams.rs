//! Lazy streams (strict mode), events, the legacy default stream, queries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cuda, ok, serial};
use xthunk_emulator::cuda;
use xthunk_emulator::error::cu;
use xthunk_emulator::memory::POISON;

#[test]
fn a_missing_synchronization_reads_poison_every_time() {
    let _g = serial();
    let c = Cuda::new();
    let s = c.stream(false);
    let d = c.alloc(256);
    for _ in 0..20 {
        ok(c.memset8(d, 0x11, 256, s), "memset");
        // The bug: reading through the legacy stream without waiting for `s` (non-blocking).
        assert!(
            c.read(d, 256).iter().all(|&b| b == POISON),
            "the memset ran early"
        );
        ok(c.sync(s), "sync");
        assert!(c.read(d, 256).iter().all(|&b| b == 0x11));
        ok(c.memset8(d, POISON, 256, s), "reset");
        ok(c.sync(s), "sync");
    }
    // An asynchronous copy into pinned memory is not there before the stream is waited for.
    let h = c.alloc_host(256);
    ok(c.memset8(d, 0x22, 256, s), "memset");
    ok(c.copy(h as u64, d, 256, s), "copy to pinned");
    // SAFETY: `h` is a live 256-byte pinned allocation; no emulated work is running (lazy).
    let host = unsafe { std::slice::from_raw_parts(h, 256) };
    assert!(host.iter().all(|&b| b == POISON));
    ok(c.sync(s), "sync");
    // SAFETY: as above; the stream is idle now.
    let host = unsafe { std::slice::from_raw_parts(h, 256) };
    assert!(host.iter().all(|&b| b == 0x22));
    ok(c.free_host(h), "free host");
    ok(c.free(d), "free");
    c.destroy_stream(s);
}

#[test]
fn events_order_two_streams() {
    let _g = serial();
    let c = Cuda::new();
    let (s1, s2) = (c.stream(false), c.stream(false));
    let (a, b) = (c.alloc(64), c.alloc(64));
    let e = c.event();
    ok(c.memset8(a, 0x33, 64, s1), "memset");
    // SAFETY: live handles.
    ok(unsafe { cuda::cuEventRecord(e, s1) }, "record");
    // SAFETY: live handles.
    ok(unsafe { cuda::cuStreamWaitEvent(s2, e, 0) }, "wait");
    ok(c.copy(b, a, 64, s2), "copy");
    // Only s2 is synchronized: its wait makes s1 run first.
    ok(c.sync(s2), "sync s2");
    assert!(c.read(b, 64).iter().all(|&x| x == 0x33));

    // Without the event, s2 copies what is there: poison.
    let (a2, b2) = (c.alloc(64), c.alloc(64));
    ok(c.memset8(a2, 0x44, 64, s1), "memset");
    ok(c.copy(b2, a2, 64, s2), "copy");
    ok(c.sync(s2), "sync s2");
    assert!(c.read(b2, 64).iter().all(|&x| x == POISON));
    ok(c.sync(s1), "sync s1");
    for p in [a, b, a2, b2] {
        ok(c.free(p), "free");
    }
    c.destroy_event(e);
    c.destroy_stream(s1);
    c.destroy_stream(s2);
}

#[test]
fn event_and_stream_queries_report_progress() {
    let _g = serial();
    let c = Cuda::new();
    let s = c.stream(false);
    let e = c.event();
    let d = c.alloc(64);
    // SAFETY: live handles.
    ok(
        unsafe { cuda::cuEventQuery(e) },
        "a never-recorded event is complete",
    );
    ok(c.memset8(d, 1, 64, s), "memset");
    // SAFETY: live handles.
    ok(unsafe { cuda::cuEventRecord(e, s) }, "record");
    // SAFETY: live handle.
    assert_eq!(unsafe { cuda::cuStreamQuery(s) }, cu::NOT_READY);
    // Polling makes progress (the query released the work).
    let start = std::time::Instant::now();
    // SAFETY: live handle.
    while unsafe { cuda::cuEventQuery(e) } == cu::NOT_READY {
        assert!(start.elapsed().as_secs() < 30, "the event never completed");
        std::thread::yield_now();
    }
    // SAFETY: live handle.
    ok(unsafe { cuda::cuStreamQuery(s) }, "idle");
    // SAFETY: live handle.
    ok(unsafe { cuda::cuEventSynchronize(e) }, "event sync");
    ok(c.free(d), "free");
    c.destroy_event(e);
    c.destroy_stream(s);
}

#[test]
fn the_legacy_stream_orders_with_blocking_streams_only() {
    let _g = serial();
    let c = Cuda::new();
    let blocking = c.stream(true);
    let d = c.alloc(32);
    ok(c.memset8(d, 0x55, 32, blocking), "memset");
    // A synchronous copy is ordered after the blocking stream's work.
    assert!(c.read(d, 32).iter().all(|&x| x == 0x55));
    let nonblocking = c.stream(false);
    ok(c.memset8(d, 0x66, 32, nonblocking), "memset");
    assert!(c.read(d, 32).iter().all(|&x| x == 0x55));
    ok(c.sync(nonblocking), "sync");
    assert!(c.read(d, 32).iter().all(|&x| x == 0x66));
    // Work on the legacy stream itself (NULL) is ordered with the synchronous copy.
    ok(c.memset8(d, 0x77, 32, 0), "memset on NULL");
    assert!(c.read(d, 32).iter().all(|&x| x == 0x77));
    // A blocking stream waits for earlier legacy-stream work.
    let e = c.alloc(32);
    ok(c.memset8(d, 0x78, 32, 0), "memset on NULL");
    ok(c.copy(e, d, 32, blocking), "copy on blocking");
    ok(c.sync(blocking), "sync blocking");
    assert!(c.read(e, 32).iter().all(|&x| x == 0x78));
    ok(c.free(d), "free");
    ok(c.free(e), "free");
    c.destroy_stream(blocking);
    c.destroy_stream(nonblocking);
}

#[test]
fn destroyed_handles_are_invalid() {
    let _g = serial();
    let c = Cuda::new();
    let s = c.stream(false);
    c.destroy_stream(s);
    assert_eq!(c.sync(s), cu::INVALID_HANDLE);
    let d = common::take(xthunk_emulator::diag::Kind::InvalidHandle);
    assert!(d[0].message.contains("already destroyed"), "{d:?}");
    let e = c.event();
    // SAFETY: any handles; the emulator checks them.
    assert_eq!(unsafe { cuda::cuEventRecord(s, e) }, cu::INVALID_HANDLE);
    c.destroy_event(e);
}

#[test]
fn without_strict_mode_work_runs_eagerly() {
    let _g = serial();
    common::set("strict", "0");
    let c = Cuda::new();
    let s = c.stream(false);
    let d = c.alloc(16);
    ok(c.memset8(d, 9, 16, s), "memset");
    // Nothing waits for `s`, yet the memset happens (reads through the legacy stream do not
    // wait for a non-blocking stream, so this loop would never end in strict mode).
    let start = std::time::Instant::now();
    while !c.read(d, 16).iter().all(|&x| x == 9) {
        assert!(start.elapsed().as_secs() < 30, "the memset never ran");
        std::thread::yield_now();
    }
    ok(c.free(d), "free");
    c.destroy_stream(s);
    drop(c);
    common::set("strict", "1");
}
