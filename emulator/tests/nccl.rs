//! NCCL among emulated devices: ranks in threads rendezvous by unique id; collectives and
//! grouped send/receive on lazy streams.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ok, serial};
use std::ffi::c_void;
use xthunk_emulator::{cuda, nccl};

const F32: i32 = 7;
const SUM: i32 = 0;
const MAX: i32 = 2;

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One rank: its device's primary context, buffers, and every collective.
fn rank(r: usize, nranks: usize, id: nccl::UniqueId) -> Vec<String> {
    let mut failures = vec![];
    ok(cuda::cuInit(0), "cuInit");
    let mut ctx = 0usize;
    // SAFETY: valid out-pointers, live handles and buffers throughout.
    unsafe {
        ok(cuda::cuDevicePrimaryCtxRetain(&mut ctx, r as i32), "retain");
        ok(cuda::cuCtxSetCurrent(ctx), "current");
        let mut s = 0usize;
        ok(cuda::cuStreamCreate(&mut s, 1), "stream");
        let n = 8usize;
        let mut send = 0u64;
        let mut recv = 0u64;
        ok(cuda::cuMemAlloc_v2(&mut send, 4 * n * nranks), "alloc");
        ok(cuda::cuMemAlloc_v2(&mut recv, 4 * n * nranks), "alloc");
        let mine: Vec<f32> = (0..n * nranks).map(|i| (r * 100 + i) as f32).collect();
        let b = bytes(&mine);
        ok(
            cuda::cuMemcpyHtoD_v2(send, b.as_ptr().cast(), b.len()),
            "upload",
        );
        let mut comm = 0usize;
        assert_eq!(
            nccl::ncclCommInitRank(&mut comm, nranks as i32, id, r as i32),
            0
        );
        let (mut count, mut me, mut dev) = (0, 0, 0);
        assert_eq!(nccl::ncclCommCount(comm, &mut count), 0);
        assert_eq!(nccl::ncclCommUserRank(comm, &mut me), 0);
        assert_eq!(nccl::ncclCommCuDevice(comm, &mut dev), 0);
        assert_eq!((count as usize, me as usize, dev as usize), (nranks, r, r));
        let read = |p: u64, len: usize| {
            ok(cuda::cuStreamSynchronize(s), "sync");
            let mut out = vec![0u8; 4 * len];
            ok(
                cuda::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), p, out.len()),
                "download",
            );
            f32s(&out)
        };
        let (sp, rp) = (send as *const c_void, recv as *mut c_void);

        // All-reduce (sum) of the first n elements.
        assert_eq!(nccl::ncclAllReduce(sp, rp, n, F32, SUM, comm, s), 0);
        let want: Vec<f32> = (0..n)
            .map(|i| (0..nranks).map(|q| (q * 100 + i) as f32).sum())
            .collect();
        if read(recv, n) != want {
            failures.push(format!("rank {r}: all-reduce"));
        }
        // In place, max.
        assert_eq!(
            nccl::ncclAllReduce(sp, send as *mut c_void, n, F32, MAX, comm, s),
            0
        );
        let want: Vec<f32> = (0..n).map(|i| ((nranks - 1) * 100 + i) as f32).collect();
        if read(send, n) != want {
            failures.push(format!("rank {r}: in-place all-reduce"));
        }
        ok(
            cuda::cuMemcpyHtoD_v2(send, b.as_ptr().cast(), b.len()),
            "upload",
        );
        // All-gather of n elements from each rank.
        assert_eq!(nccl::ncclAllGather(sp, rp, n, F32, comm, s), 0);
        let want: Vec<f32> = (0..nranks)
            .flat_map(|q| (0..n).map(move |i| (q * 100 + i) as f32))
            .collect();
        if read(recv, n * nranks) != want {
            failures.push(format!("rank {r}: all-gather"));
        }
        // Reduce-scatter: rank r gets block r of the sum.
        assert_eq!(nccl::ncclReduceScatter(sp, rp, n, F32, SUM, comm, s), 0);
        let want: Vec<f32> = (0..n)
            .map(|i| (0..nranks).map(|q| (q * 100 + r * n + i) as f32).sum())
            .collect();
        if read(recv, n) != want {
            failures.push(format!("rank {r}: reduce-scatter"));
        }
        // Broadcast from the last rank.
        let root = nranks - 1;
        assert_eq!(nccl::ncclBroadcast(sp, rp, n, F32, root as i32, comm, s), 0);
        let want: Vec<f32> = (0..n).map(|i| (root * 100 + i) as f32).collect();
        if read(recv, n) != want {
            failures.push(format!("rank {r}: broadcast"));
        }
        // A ring exchange: send to the next rank, receive from the previous, grouped.
        let (next, prev) = ((r + 1) % nranks, (r + nranks - 1) % nranks);
        assert_eq!(nccl::ncclGroupStart(), 0);
        assert_eq!(nccl::ncclSend(sp, n, F32, next as i32, comm, s), 0);
        assert_eq!(nccl::ncclRecv(rp, n, F32, prev as i32, comm, s), 0);
        assert_eq!(nccl::ncclGroupEnd(), 0);
        let want: Vec<f32> = (0..n).map(|i| (prev * 100 + i) as f32).collect();
        if read(recv, n) != want {
            failures.push(format!("rank {r}: send/recv"));
        }
        // An all-to-all as grouped sends and receives, the rank itself included: block q of
        // this rank's input goes to rank q, block q of the output comes from rank q.
        assert_eq!(nccl::ncclGroupStart(), 0);
        for q in 0..nranks {
            let at = 4 * n * q;
            let sq = (send as usize + at) as *const c_void;
            let rq = (recv as usize + at) as *mut c_void;
            assert_eq!(nccl::ncclSend(sq, n, F32, q as i32, comm, s), 0);
            assert_eq!(nccl::ncclRecv(rq, n, F32, q as i32, comm, s), 0);
        }
        assert_eq!(nccl::ncclGroupEnd(), 0);
        let want: Vec<f32> = (0..nranks)
            .flat_map(|q| (0..n).map(move |i| (q * 100 + r * n + i) as f32))
            .collect();
        if read(recv, n * nranks) != want {
            failures.push(format!(
                "rank {r}: all-to-all through send/recv (self included)"
            ));
        }
        let mut async_err = -1;
        assert_eq!(nccl::ncclCommGetAsyncError(comm, &mut async_err), 0);
        assert_eq!(async_err, 0);
        assert_eq!(nccl::ncclCommFinalize(comm), 0);
        assert_eq!(nccl::ncclCommDestroy(comm), 0);
        ok(cuda::cuMemFree_v2(send), "free");
        ok(cuda::cuMemFree_v2(recv), "free");
        ok(cuda::cuStreamDestroy_v2(s), "stream destroy");
        ok(cuda::cuDevicePrimaryCtxRelease_v2(r as i32), "release");
    }
    failures
}

#[test]
fn collectives_among_ranks_in_threads() {
    let _g = serial();
    common::set("devices", "3");
    let mut v = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nccl::ncclGetVersion(&mut v) }, 0);
    assert_eq!(v, nccl::VERSION);
    let mut id = nccl::UniqueId { internal: [0; 128] };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nccl::ncclGetUniqueId(&mut id) }, 0);
    let nranks = 3;
    let handles: Vec<_> = (0..nranks)
        .map(|r| std::thread::spawn(move || rank(r, nranks, id)))
        .collect();
    let failures: Vec<String> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(xthunk_emulator::diag::take().is_empty());
    common::set("devices", "1");
}

#[test]
fn init_all_from_one_thread() {
    let _g = serial();
    common::set("devices", "2");
    let mut comms = [0usize; 2];
    // SAFETY: `comms` holds 2 entries; a null device list means devices 0 and 1.
    let r = unsafe { nccl::ncclCommInitAll(comms.as_mut_ptr(), 2, std::ptr::null()) };
    assert_eq!(r, 0);
    let n = 4usize;
    let mut bufs = vec![];
    for (r, _) in comms.iter().enumerate() {
        hip_device(r as i32);
        let d = common::hip_alloc(4 * n);
        let v = bytes(&vec![r as f32 + 1.0; n]);
        common::hok(
            common::hip_copy(d, v.as_ptr() as usize, v.len(), 1),
            "upload",
        );
        bufs.push(d);
    }
    // Both ranks' all-reduces are issued from this thread, on each device's null stream.
    assert_eq!(nccl::ncclGroupStart(), 0);
    for (r, c) in comms.iter().enumerate() {
        let p = bufs[r] as *mut c_void;
        assert_eq!(nccl::ncclAllReduce(p, p, n, F32, SUM, *c, 0), 0);
    }
    // SAFETY: no deferred initialization in this group.
    assert_eq!(unsafe { nccl::ncclGroupEnd() }, 0);
    for (r, _) in comms.iter().enumerate() {
        hip_device(r as i32);
        let mut out = vec![0u8; 4 * n];
        common::hok(
            common::hip_copy(out.as_mut_ptr() as usize, bufs[r], out.len(), 2),
            "download",
        );
        assert_eq!(f32s(&out), vec![3.0; n], "rank {r}");
        common::hok(common::hip_free(bufs[r]), "free");
    }
    for c in comms {
        assert_eq!(nccl::ncclCommDestroy(c), 0);
    }
    hip_device(0);
    common::set("devices", "1");
}

fn hip_device(d: i32) {
    common::hok(xthunk_emulator::hip::hipSetDevice(d), "hipSetDevice");
}

// ---- initialization modes, failures and their diagnostics ------------------------------------

/// `ncclConfig_t` as NCCL 2.14 laid it out.
#[repr(C)]
struct Config {
    size: usize,
    magic: u32,
    version: u32,
    blocking: i32,
}

fn config(blocking: i32) -> Config {
    Config {
        size: std::mem::size_of::<Config>(),
        magic: 0xcafe_beef,
        version: 21400,
        blocking,
    }
}

/// Device `dev`'s primary context, current on this thread; two buffers of `n` floats.
struct Dev {
    dev: i32,
    ctx: usize,
    send: u64,
    recv: u64,
}

impl Dev {
    fn new(dev: i32, n: usize) -> Dev {
        ok(cuda::cuInit(0), "cuInit");
        let mut d = Dev {
            dev,
            ctx: 0,
            send: 0,
            recv: 0,
        };
        // SAFETY: valid out-pointers.
        unsafe {
            ok(cuda::cuDevicePrimaryCtxRetain(&mut d.ctx, dev), "retain");
            d.current();
            ok(cuda::cuMemAlloc_v2(&mut d.send, 4 * n), "alloc");
            ok(cuda::cuMemAlloc_v2(&mut d.recv, 4 * n), "alloc");
        }
        d
    }

    fn current(&self) {
        // SAFETY: a retained context.
        ok(unsafe { cuda::cuCtxSetCurrent(self.ctx) }, "current");
    }

    fn put(&self, v: &[f32]) {
        self.current();
        let b = bytes(v);
        // SAFETY: `b` is live; `send` holds at least its length.
        ok(
            unsafe { cuda::cuMemcpyHtoD_v2(self.send, b.as_ptr().cast(), b.len()) },
            "upload",
        );
    }

    /// The receive buffer's first `n` floats (waits for the queued collectives), or the error.
    fn get(&self, n: usize) -> Result<Vec<f32>, u32> {
        self.current();
        let mut out = vec![0u8; 4 * n];
        // SAFETY: `out` holds `4 n` bytes.
        match unsafe { cuda::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.recv, out.len()) } {
            0 => Ok(f32s(&out)),
            e => Err(e),
        }
    }

    fn free(self) {
        self.current();
        // SAFETY: our buffers and retained context.
        unsafe {
            let _ = cuda::cuMemFree_v2(self.send);
            let _ = cuda::cuMemFree_v2(self.recv);
            let _ = cuda::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

fn unique_id() -> nccl::UniqueId {
    let mut id = nccl::UniqueId { internal: [0; 128] };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nccl::ncclGetUniqueId(&mut id) }, 0);
    id
}

fn init_config(
    d: &Dev,
    id: nccl::UniqueId,
    nranks: i32,
    rank: i32,
    cfg: &mut Config,
) -> (i32, usize) {
    d.current();
    let mut comm = 0usize;
    // SAFETY: valid out-pointer and config.
    let rc = unsafe {
        nccl::ncclCommInitRankConfig(&mut comm, nranks, id, rank, (cfg as *mut Config).cast())
    };
    (rc, comm)
}

fn async_state(comm: usize) -> i32 {
    let mut s = -1;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nccl::ncclCommGetAsyncError(comm, &mut s) }, 0);
    s
}

#[test]
fn nonblocking_init_reports_progress_until_ready() {
    let _g = serial();
    common::set("devices", "2");
    let n = 4;
    let devs = [Dev::new(0, n), Dev::new(1, n)];
    let id = unique_id();
    // Rank 0 alone: the call returns at once, in progress, with a handle.
    let (rc, c0) = init_config(&devs[0], id, 2, 0, &mut config(0));
    assert_eq!(rc, nccl::IN_PROGRESS);
    assert_ne!(c0, 0);
    assert_eq!(async_state(c0), nccl::IN_PROGRESS);
    // Using it before it is ready is an invalid argument, with a diagnostic.
    let mut count = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { nccl::ncclCommCount(c0, &mut count) };
    assert_eq!(rc, nccl::INVALID_ARGUMENT);
    let p = devs[0].send as *mut c_void;
    assert_eq!(
        nccl::ncclAllReduce(p, p, n, F32, SUM, c0, 0),
        nccl::INVALID_ARGUMENT
    );
    let ds = common::take(xthunk_emulator::diag::Kind::InvalidState);
    assert!(
        ds.iter().any(|d| d
            .message
            .contains("before its initialization returned ncclSuccess")),
        "{ds:?}"
    );
    // Nothing on disk for a clique of one process.
    assert!(!nccl::rendezvous_dir(&id.internal).exists());
    // Rank 1 completes the clique: its call succeeds, and rank 0 becomes ready.
    let (rc, c1) = init_config(&devs[1], id, 2, 1, &mut config(0));
    assert!(rc == 0 || rc == nccl::IN_PROGRESS, "{rc}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while async_state(c0) != 0 || async_state(c1) != 0 {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::yield_now();
    }
    assert!(!nccl::rendezvous_dir(&id.internal).exists());
    // Both ranks' all-reduces from this thread, in a group.
    for (r, d) in devs.iter().enumerate() {
        d.put(&vec![r as f32 + 1.0; n]);
    }
    assert_eq!(nccl::ncclGroupStart(), 0);
    for (d, c) in devs.iter().zip([c0, c1]) {
        let (s, r) = (d.send as *const c_void, d.recv as *mut c_void);
        assert_eq!(nccl::ncclAllReduce(s, r, n, F32, SUM, c, 0), 0);
    }
    // SAFETY: ends the group begun above.
    assert_eq!(unsafe { nccl::ncclGroupEnd() }, 0);
    for d in &devs {
        assert_eq!(d.get(n), Ok(vec![3.0; n]));
    }
    // A non-blocking finalize flushes in the background: in progress, then ready.
    let p = devs[0].send as *mut c_void;
    assert_eq!(nccl::ncclBroadcast(p, p, n, F32, 0, c0, 0), 0);
    assert_eq!(nccl::ncclCommFinalize(c0), nccl::IN_PROGRESS);
    assert_eq!(async_state(c0), nccl::IN_PROGRESS);
    assert_eq!(nccl::ncclBroadcast(p, p, n, F32, 0, c1, 0), 0);
    devs[1].current();
    // SAFETY: no arguments.
    assert_eq!(unsafe { cuda::cuCtxSynchronize() }, 0);
    while async_state(c0) != 0 {
        std::thread::yield_now();
    }
    assert_eq!(nccl::ncclCommDestroy(c0), 0);
    assert_eq!(nccl::ncclCommDestroy(c1), 0);
    for d in devs {
        d.free();
    }
    assert!(xthunk_emulator::diag::take().is_empty());
    common::set("devices", "1");
}

#[test]
fn nonblocking_init_in_a_group_and_bad_configs() {
    let _g = serial();
    common::set("devices", "2");
    let devs = [Dev::new(0, 4), Dev::new(1, 4)];
    let id = unique_id();
    assert_eq!(nccl::ncclGroupStart(), 0);
    let (rc0, c0) = init_config(&devs[0], id, 2, 0, &mut config(0));
    let (rc1, c1) = init_config(&devs[1], id, 2, 1, &mut config(0));
    // Non-blocking handles exist at once, inside the group.
    assert_eq!((rc0, rc1), (0, 0));
    assert!(c0 != 0 && c1 != 0);
    // SAFETY: ends the group begun above.
    let end = unsafe { nccl::ncclGroupEnd() };
    assert!(end == 0 || end == nccl::IN_PROGRESS, "{end}");
    while async_state(c0) != 0 || async_state(c1) != 0 {
        std::thread::yield_now();
    }
    assert_eq!(nccl::ncclCommDestroy(c0), 0);
    assert_eq!(nccl::ncclCommDestroy(c1), 0);
    // A config without NCCL_API_MAGIC, and a blocking value that is neither 0 nor 1.
    let mut bad = config(0);
    bad.magic = 0;
    assert_eq!(
        init_config(&devs[0], id, 2, 0, &mut bad).0,
        nccl::INVALID_ARGUMENT
    );
    assert_eq!(
        init_config(&devs[0], id, 2, 0, &mut config(5)).0,
        nccl::INVALID_ARGUMENT
    );
    let ds = common::take(xthunk_emulator::diag::Kind::InvalidValue);
    assert!(
        ds.iter().any(|d| d.message.contains("NCCL_API_MAGIC")),
        "{ds:?}"
    );
    assert!(
        ds.iter()
            .any(|d| d.message.contains("blocking attribute value 5")),
        "{ds:?}"
    );
    for d in devs {
        d.free();
    }
    common::set("devices", "1");
}

/// Two ranks on threads: `f(rank, dev, comm)` each, after a blocking init.
fn two_ranks<T: Send + 'static>(f: fn(usize, &Dev, usize) -> T) -> Vec<T> {
    let id = unique_id();
    let hs: Vec<_> = (0..2)
        .map(|r| {
            std::thread::spawn(move || {
                let d = Dev::new(r as i32, 8);
                let mut comm = 0usize;
                // SAFETY: valid out-pointer.
                let rc = unsafe { nccl::ncclCommInitRank(&mut comm, 2, id, r as i32) };
                assert_eq!(rc, 0);
                let out = f(r, &d, comm);
                d.free();
                out
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn a_mismatch_fails_every_rank_with_a_diagnostic() {
    let _g = serial();
    common::set("devices", "2");
    let got = two_ranks(|r, d, comm| {
        let (s, p) = (d.send as *const c_void, d.recv as *mut c_void);
        assert_eq!(nccl::ncclAllReduce(s, p, 4 + r, F32, SUM, comm, 0), 0);
        let res = d.get(1).is_err();
        let st = async_state(comm);
        assert_eq!(nccl::ncclCommAbort(comm), 0);
        (res, st)
    });
    assert_eq!(got, vec![(true, 2), (true, 2)]);
    let ds = common::take(xthunk_emulator::diag::Kind::InvalidValue);
    assert!(
        ds.iter().any(|d| d.call == "ncclAllReduce"
            && d.message.contains("ncclAllReduce #1 of clique")
            && d.message
                .contains("rank 1 passed 5 × float32 (20 bytes), sum, rank 0 passed 4")),
        "{ds:?}"
    );
    common::set("devices", "1");
}

#[test]
fn abort_wakes_a_waiting_rank_and_timeouts_name_the_missing() {
    let _g = serial();
    common::set("devices", "2");
    // Rank 1 never issues the all-reduce: rank 0 waits until rank 1 aborts.
    let got = two_ranks(|r, d, comm| {
        if r == 1 {
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert_eq!(nccl::ncclCommAbort(comm), 0);
            return std::time::Duration::ZERO;
        }
        let (s, p) = (d.send as *const c_void, d.recv as *mut c_void);
        assert_eq!(nccl::ncclAllReduce(s, p, 4, F32, SUM, comm, 0), 0);
        let t = std::time::Instant::now();
        assert!(d.get(1).is_err());
        let took = t.elapsed();
        assert_eq!(nccl::ncclCommAbort(comm), 0);
        took
    });
    assert!(got[0] < std::time::Duration::from_secs(5), "{:?}", got[0]);
    let ds = common::take(xthunk_emulator::diag::Kind::InvalidState);
    assert!(
        ds.iter()
            .any(|d| d.message.contains("rank 0: ncclAllReduce #1 of clique")
                && d.message.contains("the communicator was aborted")),
        "{ds:?}"
    );
    // With a 1 s timeout: rank 0 fails alone, naming rank 1.
    common::set("nccl_timeout", "1");
    let got = two_ranks(|r, d, comm| {
        if r == 0 {
            let (s, p) = (d.send as *const c_void, d.recv as *mut c_void);
            assert_eq!(nccl::ncclAllReduce(s, p, 4, F32, SUM, comm, 0), 0);
            assert!(d.get(1).is_err());
        } else {
            // Waits for rank 0's abort.
            let t = std::time::Instant::now();
            while async_state(comm) == 0 && t.elapsed() < std::time::Duration::from_secs(20) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        let st = async_state(comm);
        assert_eq!(nccl::ncclCommAbort(comm), 0);
        st
    });
    common::set("nccl_timeout", "60");
    // Rank 1 sees rank 0's abort (after its timeout) as a remote error.
    assert_eq!(got, vec![nccl::SYSTEM_ERROR, nccl::REMOTE_ERROR]);
    let ds = common::take(xthunk_emulator::diag::Kind::InvalidState);
    assert!(
        ds.iter().any(|d| d.message.contains("timed out")
            && d.message.contains("waiting for rank 1 (never issued)")),
        "{ds:?}"
    );
    common::set("devices", "1");
}

#[test]
fn an_init_that_times_out_names_the_missing_ranks_and_leaves_nothing() {
    let _g = serial();
    common::set("nccl_timeout", "1");
    let d = Dev::new(0, 1);
    let id = unique_id();
    let mut comm = 0usize;
    let t = std::time::Instant::now();
    // SAFETY: valid out-pointer.
    let rc = unsafe { nccl::ncclCommInitRank(&mut comm, 3, id, 0) };
    let took = t.elapsed();
    common::set("nccl_timeout", "60");
    assert_eq!(rc, 2);
    assert_eq!(comm, 0);
    assert!(took >= std::time::Duration::from_millis(900), "{took:?}");
    let ds = common::take(xthunk_emulator::diag::Kind::InvalidState);
    assert!(
        ds.iter()
            .any(|d| d.message.contains("waiting for ranks [1, 2] to join")),
        "{ds:?}"
    );
    assert!(!nccl::rendezvous_dir(&id.internal).exists());
    d.free();
}

#[test]
fn split_in_one_process() {
    let _g = serial();
    common::set("devices", "4");
    let id = unique_id();
    let hs: Vec<_> = (0..4)
        .map(|r| {
            std::thread::spawn(move || {
                let d = Dev::new(r, 4);
                let mut comm = 0usize;
                // SAFETY: valid out-pointers; no config.
                unsafe {
                    assert_eq!(nccl::ncclCommInitRank(&mut comm, 4, id, r), 0);
                    let mut sub = 0usize;
                    // Rank 3 joins no new communicator.
                    let color = if r == 3 { -1 } else { r % 2 };
                    let rc = nccl::ncclCommSplit(comm, color, -r, &mut sub, std::ptr::null_mut());
                    assert_eq!(rc, 0);
                    if r == 3 {
                        assert_eq!(sub, 0);
                    } else {
                        let (mut n, mut me) = (0, 0);
                        assert_eq!(nccl::ncclCommCount(sub, &mut n), 0);
                        assert_eq!(nccl::ncclCommUserRank(sub, &mut me), 0);
                        // Ordered by key (-rank): rank 2 is rank 0 of color 0.
                        let want = if r == 1 { (1, 0) } else { (2, 1 - r / 2) };
                        assert_eq!((n, me), want, "rank {r}");
                        d.put(&[r as f32; 4]);
                        let (s, p) = (d.send as *const c_void, d.recv as *mut c_void);
                        assert_eq!(nccl::ncclAllReduce(s, p, 4, F32, SUM, sub, 0), 0);
                        let sum = if r == 1 { 1.0 } else { 2.0 };
                        assert_eq!(d.get(4), Ok(vec![sum; 4]), "rank {r}");
                        assert_eq!(nccl::ncclCommDestroy(sub), 0);
                    }
                    assert_eq!(nccl::ncclCommDestroy(comm), 0);
                }
                d.free();
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(xthunk_emulator::diag::take().is_empty());
    common::set("devices", "1");
}
