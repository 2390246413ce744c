//! The emulator's collective memory, strictly: `ncclMemAlloc` memory is 4096-aligned;
//! `ncclCommWindowRegister` refuses memory not from `ncclMemAlloc`, a misaligned window, and
//! windows at differing offsets across the clique's ranks (every rank fails); matching windows
//! register and deregister, counted; `ncclMemFree` refuses other memory; the `old` mode
//! refuses the calls.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ok, serial};
use std::ffi::c_void;
use xthunk_emulator::{cuda, nccl};

const SYMMETRIC: i32 = 1;

/// Rank `r` of 2: a communicator, an `ncclMemAlloc` buffer and a plain one; registers a window
/// at `offset` into the library's buffer (or on the plain one when `plain`), deregisters it
/// when that worked, frees; returns the window registration's result.
fn rank(r: usize, id: nccl::UniqueId, offset: usize, plain: bool) -> i32 {
    ok(cuda::cuInit(0), "cuInit");
    let mut ctx = 0usize;
    // SAFETY: valid out-pointers and live handles throughout.
    unsafe {
        ok(cuda::cuDevicePrimaryCtxRetain(&mut ctx, r as i32), "retain");
        ok(cuda::cuCtxSetCurrent(ctx), "current");
        let mut comm = 0usize;
        assert_eq!(nccl::ncclCommInitRank(&mut comm, 2, id, r as i32), 0);
        let mut lib: *mut c_void = std::ptr::null_mut();
        assert_eq!(nccl::ncclMemAlloc(&mut lib, 3 * 4096), 0);
        assert_eq!(lib as usize % 4096, 0, "ncclMemAlloc is 4096-aligned");
        let mut own = 0u64;
        ok(cuda::cuMemAlloc_v2(&mut own, 8192), "alloc");
        let buff = if plain {
            own as *mut c_void
        } else {
            lib.cast::<u8>().add(offset).cast()
        };
        let mut win: *mut c_void = std::ptr::null_mut();
        let rc = nccl::ncclCommWindowRegister(comm, buff, 4096, &mut win, SYMMETRIC);
        if rc == 0 {
            assert!(!win.is_null());
            assert_eq!(nccl::ncclCommWindowDeregister(comm, win), 0);
        }
        assert_ne!(
            nccl::ncclMemFree(own as *mut c_void),
            0,
            "not ncclMemAlloc memory"
        );
        assert_eq!(nccl::ncclMemFree(lib), 0);
        ok(cuda::cuMemFree_v2(own), "free");
        assert_eq!(nccl::ncclCommDestroy(comm), 0);
        ok(cuda::cuDevicePrimaryCtxRelease_v2(r as i32), "release");
        rc
    }
}

fn both(offsets: [usize; 2], plain: bool) -> Vec<i32> {
    let mut id = nccl::UniqueId { internal: [0; 128] };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nccl::ncclGetUniqueId(&mut id) }, 0);
    let hs: Vec<_> = (0..2)
        .map(|r| std::thread::spawn(move || rank(r, id, offsets[r], plain)))
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn windows_are_checked_as_nccl_checks_them() {
    let _g = serial();
    common::set("devices", "2");
    let before = nccl::counters();
    // Matching windows at the same offset: registered and deregistered on both ranks.
    assert_eq!(both([4096, 4096], false), [0, 0]);
    let after = nccl::counters();
    assert_eq!(after.windows_registered - before.windows_registered, 2);
    assert_eq!(after.windows_deregistered - before.windows_deregistered, 2);
    assert_eq!(after.mem_allocs - before.mem_allocs, 2);
    assert_eq!(after.mem_frees - before.mem_frees, 2);
    let _ = xthunk_emulator::diag::take();
    // Differing offsets: both ranks fail.
    assert!(both([0, 4096], false).iter().all(|rc| *rc != 0));
    let d = xthunk_emulator::diag::take();
    assert!(
        d.iter()
            .any(|x| x.to_string().contains("differ in size or offset")),
        "{d:?}"
    );
    // Misaligned (the same on both ranks, so only the alignment is wrong).
    assert!(both([256, 256], false).iter().all(|rc| *rc != 0));
    let d = xthunk_emulator::diag::take();
    assert!(
        d.iter()
            .any(|x| x.to_string().contains("not aligned to 4096")),
        "{d:?}"
    );
    // Plain device memory: refused.
    assert!(both([0, 0], true).iter().all(|rc| *rc != 0));
    let d = xthunk_emulator::diag::take();
    assert!(
        d.iter()
            .any(|x| x.to_string().contains("not memory from ncclMemAlloc")),
        "{d:?}"
    );
    // An NCCL 2.18 has none of it.
    common::set("nccl_mode", "old");
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_ne!(unsafe { nccl::ncclMemAlloc(&mut p, 4096) }, 0);
    let mut v = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nccl::ncclGetVersion(&mut v) }, 0);
    assert_eq!(v, nccl::OLD_VERSION);
    common::set("nccl_mode", "current");
    let _ = xthunk_emulator::diag::take();
    common::set("devices", "1");
}
