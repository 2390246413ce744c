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
