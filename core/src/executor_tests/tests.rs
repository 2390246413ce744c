//! Tests of the executor's limits on the host backend: load time of the dependency graph's
//! worst shape, the deadline inside loops, and the memory check at load.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use crate::backend::{Backend, Device};
use crate::bench::memsets_then_copies;
use crate::builder::ExecutableBuilder;
use crate::error::Error;
use crate::host::HostBackend;
use crate::ir::{DType, Executable, MemsetPattern, MemsetThunk, Thunk, WhileThunk};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

/// Runs `f` on its own thread and returns what it gave, or `None` after `limit` (the thread
/// is left behind: the test fails, and the process ends after the run).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn memsets_then_copies_load_quickly() {
    // Before the graph's bounds: over 2 minutes in a release build. Now well under a second
    // in release; the bound is generous for a debug build on a busy machine.
    let n = 10_000u64;
    let exe = memsets_then_copies(n, true).unwrap();
    let dev = device();
    let (loaded, took) = within(Duration::from_secs(60), move || {
        let start = Instant::now();
        let l = LoadedExecutable::load(dev, exe);
        (l, start.elapsed())
    })
    .expect("loading 10,000 memsets and 10,000 copies takes over a minute");
    let loaded = loaded.unwrap();
    assert!(took < Duration::from_secs(20), "load took {took:?}");
    let info = loaded.schedule_info();
    assert_eq!(info.nodes, 2 * n as usize, "{info:?}");
    assert!(info.edges <= 6 * n as usize, "{info:?}");
    // Still the program it was: y = 0, 1, …, n-1, with and without a deadline (one by one).
    let want: Vec<u8> = (0..n as u32).flat_map(|i| i.to_le_bytes()).collect();
    for deadline in [None, Some(Duration::from_secs(600))] {
        let opts = ExecuteOptions {
            deadline,
            ..Default::default()
        };
        let out = loaded.run_with_host_data(&[], &opts).unwrap();
        assert!(out[0] == want, "wrong output with deadline {deadline:?}");
    }
}

/// Load times of the dependency graph's worst shape at several sizes, and of the same
/// number of thunks in a plain shape (a measurement, not a check: `cargo test --release -p
/// xthunk-core --lib load_time_figures -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement; run it in a release build"]
fn load_time_figures() {
    for n in [2_500u64, 5_000, 10_000] {
        for whole in [true, false] {
            let exe = memsets_then_copies(n, whole).unwrap();
            let dev = device();
            let took = within(Duration::from_secs(300), move || {
                let start = Instant::now();
                let l = LoadedExecutable::load(dev, exe);
                (l.map(|l| l.schedule_info()), start.elapsed())
            });
            let shape = if whole { "worst" } else { "plain" };
            match took {
                Some((info, t)) => println!(
                    "load_time n={n} {shape}: {:.3} s ({info:?})",
                    t.as_secs_f64()
                ),
                None => println!("load_time n={n} {shape}: over 300 s"),
            }
        }
    }
}

/// A `while` with a trip count of `outer` around a `while` with a trip count of `inner`
/// around one memset; output `y` (16 i32).
fn nested_loops(outer: u64, inner: u64) -> Executable {
    let mut b = ExecutableBuilder::new("nested_loops");
    let y = b.output("y", DType::I32, &[16]);
    let pred = b.temp(DType::Pred, &[1]);
    let body = vec![Thunk::Memset(MemsetThunk {
        dst: y.slice(),
        pattern: MemsetPattern::U32(7),
    })];
    let inner = Thunk::While(WhileThunk {
        cond: vec![],
        pred: pred.slice(),
        body,
        trip_count: Some(inner),
    });
    b.push(Thunk::While(WhileThunk {
        cond: vec![],
        pred: pred.slice(),
        body: vec![inner],
        trip_count: Some(outer),
    }));
    b.build().unwrap()
}

#[test]
fn the_deadline_stops_loops_between_trips() {
    // 10^12 trips of 10^7: before the checks between trips, this ran until killed.
    let exe = nested_loops(1_000_000_000_000, 10_000_000);
    let l = LoadedExecutable::load(device(), exe).unwrap();
    let deadline = Duration::from_millis(300);
    let (r, took) = within(Duration::from_secs(30), move || {
        let start = Instant::now();
        let opts = ExecuteOptions {
            deadline: Some(deadline),
            ..Default::default()
        };
        let r = l.run_with_host_data(&[], &opts).map(|_| ());
        (r, start.elapsed())
    })
    .expect("a deadline of 300 ms did not stop the loop within 30 s");
    let e = r.expect_err("10^18 memsets within 300 ms");
    assert!(matches!(
        &e,
        Error::Thunk { source, .. } if matches!(**source, Error::DeadlineExceeded { .. })
    ));
    let text = e.to_string();
    // The thunk, and the trip of each loop (the inner one's 10^7 trips take longer than
    // the deadline).
    assert!(
        text.starts_with("thunk entry[0].body[0] (while): deadline of 300ms exceeded"),
        "{text}"
    );
    // The loop is the pending thunk of its stream (it never finished issuing).
    assert!(
        text.contains("first pending thunks: stream 0: entry[0] (while);"),
        "{text}"
    );
    assert!(
        issued(&text, "entry[0].body[0] (while)", " of 10000000").is_some(),
        "{text}"
    );
    assert_eq!(
        issued(&text, "entry[0] (while)", " of 1000000000000"),
        Some(0),
        "{text}"
    );
    // "Deadline + a little": generous for a debug build on a busy machine.
    assert!(took < Duration::from_secs(5), "{took:?}: {text}");
}

#[test]
fn the_deadline_stops_a_loop_without_trip_count() {
    // The predicate is set to 1 by the condition every trip: an endless loop.
    let mut b = ExecutableBuilder::new("endless");
    let y = b.output("y", DType::I32, &[16]);
    let pred = b.temp(DType::Pred, &[1]);
    b.push(Thunk::While(WhileThunk {
        cond: vec![Thunk::Memset(MemsetThunk {
            dst: pred.slice(),
            pattern: MemsetPattern::U8(1),
        })],
        pred: pred.slice(),
        body: vec![Thunk::Memset(MemsetThunk {
            dst: y.slice(),
            pattern: MemsetPattern::U32(7),
        })],
        trip_count: None,
    }));
    let l = LoadedExecutable::load(device(), b.build().unwrap()).unwrap();
    let opts = ExecuteOptions {
        deadline: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let r = within(Duration::from_secs(30), move || {
        l.run_with_host_data(&[], &opts).map(|_| ())
    })
    .expect("a deadline of 200 ms did not stop the loop within 30 s");
    let text = r.expect_err("an endless loop finished").to_string();
    assert!(
        text.starts_with("thunk entry[0] (while): deadline of 200ms exceeded"),
        "{text}"
    );
    // No trip count to give.
    assert!(issued(&text, "entry[0] (while)", "").is_some(), "{text}");
}

/// The number in `… {thunk} had issued {N}{of} trips` of a deadline error's text.
fn issued(text: &str, thunk: &str, of: &str) -> Option<u64> {
    let rest = text.split(&format!("{thunk} had issued ")).nth(1)?;
    let n = rest.split(&format!("{of} trips")).next()?;
    n.parse().ok()
}

#[test]
fn a_program_larger_than_memory_fails_at_load() {
    let dev = device();
    let Some(available) = dev.available_memory() else {
        panic!("the host backend says how much memory is available on Linux");
    };
    let mut b = ExecutableBuilder::new("too_large");
    let y = b.output("y", DType::I32, &[16]);
    // More than is available by a wide margin (other tests allocate meanwhile).
    let _t = b.temp(DType::U8, &[available.saturating_add(1 << 30)]);
    b.memset(y.slice(), MemsetPattern::U32(1));
    let e = LoadedExecutable::load(dev, b.build().unwrap()).unwrap_err();
    assert!(matches!(e, Error::ProgramMemory { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("out of memory: the program needs "),
        "{text}"
    );
    assert!(
        text.contains(" of temps, 64 of parameters and outputs"),
        "{text}"
    );
    assert!(text.contains(" available"), "{text}");
}

#[test]
fn untouched_temps_cost_neither_time_nor_memory() {
    // A 2 GiB temp nothing touches: before, every host temp was zeroed at allocation
    // (seconds, and all of it resident).
    let rss = || {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let l = s.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
        l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    let mut b = ExecutableBuilder::new("big_temp");
    let y = b.output("y", DType::I32, &[16]);
    let _t = b.temp(DType::U8, &[2 << 30]);
    b.memset(y.slice(), MemsetPattern::U32(7));
    let l = LoadedExecutable::load_with(device(), b.build().unwrap(), &ExecutorConfig::default())
        .unwrap();
    let before = rss();
    let start = Instant::now();
    let out = l
        .run_with_host_data(&[], &ExecuteOptions::default())
        .unwrap();
    let took = start.elapsed();
    let grew = rss().saturating_sub(before);
    assert_eq!(out[0], [7u8, 0, 0, 0].repeat(16));
    // Other tests run meanwhile: the margins are far below the temp's 2 GiB.
    assert!(grew < 512 << 20, "resident memory grew by {grew} bytes");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// Time and peak resident memory of one execution of a program with an untouched 6 GiB temp
/// (a measurement: `cargo test -p xthunk-core --lib big_temp_figures -- --ignored
/// --nocapture`; alone, so that the peak is this test's).
#[test]
#[ignore = "a measurement; it needs 6 GiB of memory available"]
fn big_temp_figures() {
    let field = |key: &str| {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let l = s.lines().find(|l| l.starts_with(key)).unwrap();
        l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    let mut b = ExecutableBuilder::new("big_temp");
    let y = b.output("y", DType::I32, &[16]);
    let _t = b.temp(DType::U8, &[6 << 30]);
    b.memset(y.slice(), MemsetPattern::U32(7));
    let start = Instant::now();
    let l = LoadedExecutable::load(device(), b.build().unwrap()).unwrap();
    l.run_with_host_data(&[], &ExecuteOptions::default())
        .unwrap();
    println!(
        "big_temp: load + first execution {:.3} s, peak resident {} MiB (VmHWM), anonymous \
         resident now {} MiB",
        start.elapsed().as_secs_f64(),
        field("VmHWM:") >> 20,
        field("RssAnon:") >> 20
    );
}
