//! The communicator's logic (argument mapping, waiting on `ncclInProgress`, aborts from other
//! threads, groups, freeing exactly once) against `tests/stub/stub_nccl.c`: a stand-in for
//! `libnccl.so.2` with the header's ABI that counts every call. Built here with the C
//! compiler (`cc`, or `$CC`); without one the tests print SKIPPED (a failure when
//! `XTHUNK_REQUIRE_CXX=1`, as CI sets it). No GPU, no NCCL needed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::any::Any;
use std::ffi::{CStr, c_char, c_int};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{
    DevicePtr, Event, GemmLaunch, KernelHandle, LaunchArg, LaunchDims, Stream,
};
use xthunk_core::collectives::{Communicator, ReduceOp};
use xthunk_core::ir::{DType, MemsetPattern};
use xthunk_core::{Error, Result};
use xthunk_nccl::{CommOptions, Flavor, Nccl, NcclCommunicator, SearchConfig, sys};

/// The stub, built into its own folder as `libnccl.so.2` (each test has its own copy, so
/// its counters are its own), and its control functions.
struct Stub {
    dir: PathBuf,
    lib: libloading::Library,
}

fn build(test: &str, version: u32) -> Option<Stub> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/stub/stub_nccl.c");
    let dir = common::scratch(&format!("stub-{test}"));
    let out = dir.join("libnccl.so.2");
    let status = std::process::Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
        .arg(format!("-DSTUB_VERSION={version}"))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{test}: {cc} failed on {}: {s}", src.display()),
        Err(e) => {
            common::skip_no_cc(
                &format!("stub test `{test}`"),
                &format!("no C compiler ({cc}: {e})"),
            );
            return None;
        }
    }
    // SAFETY: the stub has no initializers; the same object `Nccl::load_with` opens (dlopen
    // counts references), used only for its stub_* control functions.
    let lib = unsafe { libloading::Library::new(&out) }.unwrap();
    Some(Stub { dir, lib })
}

impl Stub {
    fn load(&self) -> Arc<Nccl> {
        Nccl::load_with(Flavor::Nccl, &SearchConfig::only([self.dir.clone()])).unwrap()
    }

    fn counter(&self, name: &str) -> i64 {
        let name = std::ffi::CString::new(name).unwrap();
        // SAFETY: the stub's `long long stub_counter(const char*)`.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char) -> i64>(b"stub_counter\0")
                .unwrap();
            f(name.as_ptr())
        }
    }

    fn last(&self, i: c_int) -> i64 {
        // SAFETY: the stub's `long long stub_last(int)`.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(c_int) -> i64>(b"stub_last\0")
                .unwrap();
            f(i)
        }
    }

    fn cfg(&self, i: c_int) -> i64 {
        // SAFETY: the stub's `long long stub_cfg(int)`.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(c_int) -> i64>(b"stub_cfg\0")
                .unwrap();
            f(i)
        }
    }

    fn seq(&self) -> String {
        // SAFETY: the stub's `const char *stub_seq(void)`: a static NUL-terminated buffer.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn() -> *const c_char>(b"stub_seq\0")
                .unwrap();
            CStr::from_ptr(f()).to_string_lossy().into_owned()
        }
    }

    /// What `ncclCommGetAsyncError` reports once ready, what every operation returns, and how
    /// many polls a non-blocking call stays in progress.
    fn set(&self, async_state: c_int, op_result: c_int, pending_polls: c_int) {
        // SAFETY: the stub's `void stub_set(int, int, int)`.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(c_int, c_int, c_int)>(b"stub_set\0")
                .unwrap();
            f(async_state, op_result, pending_polls)
        }
    }

    fn set_group_end(&self, r: c_int) {
        // SAFETY: the stub's `void stub_set_group_end(int)`.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(c_int)>(b"stub_set_group_end\0")
                .unwrap();
            f(r)
        }
    }

    /// No communicator is alive and none was ever used after being freed.
    fn assert_clean(&self) {
        assert_eq!(self.counter("live"), 0, "communicators left alive");
        assert_eq!(
            self.counter("bad_comm"),
            0,
            "a freed or bogus communicator was used"
        );
    }
}

/// A stream with a given native handle (`None`: like the host backend's).
struct FakeStream(Option<usize>);

fn no(what: &str) -> Error {
    Error::Unsupported {
        backend: "fake".into(),
        feature: what.into(),
    }
}

impl Stream for FakeStream {
    fn copy(&self, _: DevicePtr, _: DevicePtr, _: u64) -> Result<()> {
        Err(no("copy"))
    }
    fn memset(&self, _: DevicePtr, _: u64, _: MemsetPattern) -> Result<()> {
        Err(no("memset"))
    }
    fn launch(&self, _: &Arc<dyn KernelHandle>, _: LaunchDims, _: &[LaunchArg]) -> Result<()> {
        Err(no("launch"))
    }
    fn gemm(&self, _: &GemmLaunch) -> Result<()> {
        Err(no("gemm"))
    }
    fn record(&self, _: &dyn Event) -> Result<()> {
        Err(no("record"))
    }
    fn wait(&self, _: &dyn Event) -> Result<()> {
        Err(no("wait"))
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn query(&self) -> Result<bool> {
        Ok(true)
    }
    fn native_handle(&self) -> Option<usize> {
        self.0
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

const STREAM: FakeStream = FakeStream(Some(0x5717));

fn init(nccl: &Arc<Nccl>, n: usize, rank: usize) -> NcclCommunicator {
    let id = nccl.unique_id().unwrap();
    nccl.init_rank(n, &id, rank).unwrap()
}

#[test]
fn versions_below_the_minimum_are_refused() {
    for (code, shown) in [(2804, "2.8.4"), (21105, "2.11.5")] {
        let Some(stub) = build(&format!("old-{code}"), code) else {
            return;
        };
        let e = Nccl::load_with(Flavor::Nccl, &SearchConfig::only([stub.dir.clone()])).unwrap_err();
        let msg = e.to_string();
        println!("{msg}");
        assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
        assert!(
            msg.contains(&format!("NCCL {shown} is older than the minimum 2.12.0")),
            "{msg}"
        );
    }
}

#[test]
fn a_blocking_communicator_issues_on_the_stream_and_is_destroyed_once() {
    let Some(stub) = build("blocking", 23203) else {
        return;
    };
    let nccl = stub.load();
    let c = init(&nccl, 4, 2);
    assert_eq!((c.rank(), c.size()), (2, 4));
    assert_eq!(c.describe(), "rank 2 of a clique of 4 (NCCL 2.32.3)");
    assert_eq!(stub.counter("init"), 1);
    assert_eq!(
        stub.counter("initcfg"),
        0,
        "blocking uses plain ncclCommInitRank"
    );
    c.all_reduce(
        &STREAM,
        DevicePtr(0x1000),
        DevicePtr(0x2000),
        10,
        DType::F32,
        ReduceOp::Max,
    )
    .unwrap();
    assert_eq!(stub.counter("allreduce"), 1);
    assert_eq!(
        (0..8).map(|i| stub.last(i)).collect::<Vec<_>>()[..6],
        [
            0x1000,
            0x2000,
            10,
            i64::from(sys::ncclFloat32),
            i64::from(sys::ncclMax),
            0
        ]
    );
    assert_eq!(stub.last(7), 0x5717, "the stream's native handle");
    c.reduce_scatter(
        &STREAM,
        DevicePtr(0x10),
        DevicePtr(0x20),
        3,
        DType::BF16,
        ReduceOp::Sum,
    )
    .unwrap();
    assert_eq!(
        (stub.last(3), stub.last(4)),
        (i64::from(sys::ncclBfloat16), i64::from(sys::ncclSum))
    );
    c.all_gather(&STREAM, DevicePtr(0x10), DevicePtr(0x20), 5, DType::I64)
        .unwrap();
    assert_eq!((stub.last(2), stub.last(3)), (5, i64::from(sys::ncclInt64)));
    c.broadcast(&STREAM, DevicePtr(0x10), DevicePtr(0x20), 6, DType::F16, 3)
        .unwrap();
    assert_eq!(
        (stub.last(3), stub.last(5)),
        (i64::from(sys::ncclFloat16), 3)
    );
    c.async_error().unwrap();
    drop(c);
    assert_eq!((stub.counter("destroy"), stub.counter("abort")), (1, 0));
    stub.assert_clean();
}

#[test]
fn bad_arguments_fail_before_the_library() {
    let Some(stub) = build("bad-args", 23203) else {
        return;
    };
    let nccl = stub.load();
    let c = init(&nccl, 2, 0);
    let host = FakeStream(None);
    let e = c
        .all_reduce(
            &host,
            DevicePtr(1),
            DevicePtr(2),
            1,
            DType::F32,
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(e.to_string().contains("no native handle"), "{e}");
    let e = c.send(&STREAM, DevicePtr(1), 1, DType::F32, 2).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = c
        .broadcast(&STREAM, DevicePtr(1), DevicePtr(2), 1, DType::F32, 7)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = c
        .all_reduce(
            &STREAM,
            DevicePtr(1),
            DevicePtr(2),
            1,
            DType::Pred,
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert_eq!(
        stub.counter("allreduce") + stub.counter("send") + stub.counter("broadcast"),
        0
    );
    drop(c);
    stub.assert_clean();
}

#[test]
fn all_to_all_is_one_group_of_a_send_and_a_receive_per_rank() {
    let Some(stub) = build("all-to-all", 23203) else {
        return;
    };
    let nccl = stub.load();
    let c = init(&nccl, 3, 1);
    c.all_to_all(&STREAM, DevicePtr(0x1000), DevicePtr(0x2000), 4, DType::F32)
        .unwrap();
    assert_eq!(
        stub.seq(),
        "s0@1000 r0@2000 s1@1010 r1@2010 s2@1020 r2@2020",
        "16-byte chunks, peer by peer"
    );
    assert_eq!(
        (stub.counter("group_start"), stub.counter("group_end")),
        (1, 1)
    );
    // A permute step: the caller's own group.
    c.group_start().unwrap();
    c.send(&STREAM, DevicePtr(0x3000), 2, DType::I32, 2)
        .unwrap();
    c.recv(&STREAM, DevicePtr(0x4000), 2, DType::I32, 0)
        .unwrap();
    c.group_end().unwrap();
    assert!(stub.seq().ends_with("s2@3000 r0@4000"), "{}", stub.seq());
    assert_eq!(
        (stub.counter("group_start"), stub.counter("group_end")),
        (2, 2)
    );
    // A failure inside the group still closes it.
    stub.set(0, sys::ncclInvalidArgument, 0);
    let e = c.all_to_all(&STREAM, DevicePtr(0x1000), DevicePtr(0x2000), 4, DType::F32);
    assert!(e.is_err());
    assert_eq!(
        (stub.counter("group_start"), stub.counter("group_end")),
        (3, 3)
    );
    stub.set(0, 0, 0);
    drop(c);
    stub.assert_clean();
}

#[test]
fn a_failed_call_is_named_and_the_communicator_is_aborted_on_drop() {
    let Some(stub) = build("failed", 23203) else {
        return;
    };
    let nccl = stub.load();
    let c = init(&nccl, 2, 0);
    stub.set(0, sys::ncclSystemError, 0);
    let e = c
        .all_reduce(
            &STREAM,
            DevicePtr(1),
            DevicePtr(2),
            1,
            DType::F32,
            ReduceOp::Sum,
        )
        .unwrap_err();
    let msg = e.to_string();
    println!("{msg}");
    assert!(
        msg.starts_with("nccl: ncclAllReduce failed: ncclSystemError (2): "),
        "{msg}"
    );
    assert!(
        msg.contains("[stub error]") && msg.contains("last error: stub last error"),
        "{msg}"
    );
    drop(c);
    assert_eq!((stub.counter("abort"), stub.counter("destroy")), (1, 0));
    stub.assert_clean();
}

#[test]
fn an_async_error_is_reported_and_abort_frees_once() {
    let Some(stub) = build("async", 23203) else {
        return;
    };
    let nccl = stub.load();
    let c = init(&nccl, 2, 1);
    stub.set(sys::ncclRemoteError, 0, 0);
    let e = c.async_error().unwrap_err();
    assert!(e.to_string().contains("ncclRemoteError (6)"), "{e}");
    c.abort("rank 0 missed the deadline");
    assert!(c.is_aborted());
    assert_eq!(stub.counter("abort"), 1);
    c.abort("again");
    let e = c
        .all_reduce(
            &STREAM,
            DevicePtr(1),
            DevicePtr(2),
            1,
            DType::F32,
            ReduceOp::Sum,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("aborted: rank 0 missed the deadline"),
        "{e}"
    );
    assert!(c.async_error().is_err());
    assert!(c.group_start().is_err());
    drop(c);
    assert_eq!((stub.counter("abort"), stub.counter("destroy")), (1, 0));
    stub.assert_clean();
}

#[test]
fn a_nonblocking_communicator_waits_out_in_progress() {
    let Some(stub) = build("nonblocking", 23203) else {
        return;
    };
    let nccl = stub.load();
    let id = nccl.unique_id().unwrap();
    stub.set(0, 0, 5);
    let c = nccl
        .init_rank_with(
            2,
            &id,
            1,
            &CommOptions::nonblocking(Some(Duration::from_secs(30))),
        )
        .unwrap();
    assert!(c.is_nonblocking());
    // The smallest ncclConfig_t: 24 bytes, the API magic, version 2.14, blocking = 0.
    assert_eq!(
        (0..4).map(|i| stub.cfg(i)).collect::<Vec<_>>(),
        [24, 0xcafe_beef, 21400, 0]
    );
    assert_eq!(stub.counter("initcfg"), 1);
    assert!(
        stub.counter("poll") >= 6,
        "waited through 5 in-progress polls"
    );
    let polls = stub.counter("poll");
    c.all_reduce(
        &STREAM,
        DevicePtr(1),
        DevicePtr(2),
        1,
        DType::F32,
        ReduceOp::Sum,
    )
    .unwrap();
    assert!(
        stub.counter("poll") >= polls + 6,
        "the operation was waited on"
    );
    stub.set_group_end(sys::ncclInProgress);
    c.group_start().unwrap();
    c.group_end().unwrap();
    stub.set_group_end(0);
    c.finalize().unwrap();
    assert_eq!(stub.counter("finalize"), 1);
    drop(c);
    assert_eq!((stub.counter("destroy"), stub.counter("abort")), (1, 0));
    stub.assert_clean();
}

#[test]
fn a_nonblocking_init_past_its_timeout_is_aborted() {
    let Some(stub) = build("timeout", 23203) else {
        return;
    };
    let nccl = stub.load();
    let id = nccl.unique_id().unwrap();
    stub.set(0, 0, c_int::MAX);
    let start = Instant::now();
    let e = nccl
        .init_rank_with(
            2,
            &id,
            0,
            &CommOptions::nonblocking(Some(Duration::from_millis(50))),
        )
        .unwrap_err();
    println!("{e}");
    assert!(matches!(e, Error::DeadlineExceeded { .. }), "{e:?}");
    assert!(e.to_string().contains("ncclCommInitRankConfig"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(stub.counter("abort"), 1);
    stub.assert_clean();
}

/// The watchdog's case: one thread waits on a call that never completes, another aborts.
#[test]
fn abort_from_another_thread_ends_a_wait_and_frees_once() {
    let Some(stub) = build("abort-thread", 23203) else {
        return;
    };
    let nccl = stub.load();
    let id = nccl.unique_id().unwrap();
    let c = Arc::new(
        nccl.init_rank_with(2, &id, 0, &CommOptions::nonblocking(None))
            .unwrap(),
    );
    stub.set(0, 0, c_int::MAX);
    let waiter = {
        let c = c.clone();
        std::thread::spawn(move || {
            c.all_reduce(
                &STREAM,
                DevicePtr(1),
                DevicePtr(2),
                1,
                DType::F32,
                ReduceOp::Sum,
            )
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    c.abort("watchdog: deadline exceeded");
    let r = waiter.join().unwrap();
    let e = r.unwrap_err();
    assert!(
        e.to_string()
            .contains("aborted: watchdog: deadline exceeded"),
        "{e}"
    );
    assert_eq!(stub.counter("abort"), 1);
    drop(c);
    assert_eq!((stub.counter("abort"), stub.counter("destroy")), (1, 0));
    stub.assert_clean();
}

#[test]
fn split_makes_a_child_or_none_and_is_version_gated() {
    let Some(stub) = build("split", 23203) else {
        return;
    };
    let nccl = stub.load();
    let c = init(&nccl, 4, 3);
    let child = c.split(Some(0x1234), 1).unwrap().unwrap();
    assert_eq!((child.rank(), child.size()), (1, 4));
    assert!(c.split(None, 0).unwrap().is_none());
    let e = c.split(Some(1 << 31), 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(stub.counter("split"), 2);
    drop(child);
    drop(c);
    assert_eq!(stub.counter("destroy"), 2);
    stub.assert_clean();

    let Some(old) = build("split-old", 21400) else {
        return;
    };
    let nccl = old.load();
    assert!(!nccl.supports_split() && nccl.supports_config());
    let c = init(&nccl, 2, 0);
    let e = c.split(Some(1), 0).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert_eq!(
        old.counter("split"),
        0,
        "not called below 2.18 even though the stub has it"
    );
    drop(c);
    old.assert_clean();
}

#[test]
fn features_are_gated_on_the_version_not_just_the_symbols() {
    let Some(stub) = build("gates", 21205) else {
        return;
    };
    let nccl = stub.load();
    assert_eq!(nccl.version().to_string(), "2.12.5");
    assert!(!nccl.supports_config() && !nccl.supports_finalize() && !nccl.supports_split());
    assert!(nccl.supports_bf16());
    let id = nccl.unique_id().unwrap();
    let e = nccl
        .init_rank_with(2, &id, 0, &CommOptions::nonblocking(None))
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let c = nccl.init_rank(2, &id, 0).unwrap();
    c.finalize().unwrap();
    assert_eq!(
        stub.counter("finalize"),
        0,
        "finalize is a no-op below 2.14"
    );
    drop(c);
    stub.assert_clean();
}
