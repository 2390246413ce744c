//! The memory checker through the CUDA and HIP C APIs: poisoning, out-of-bounds, use after
//! free, double free, leaks at context destruction, injected out-of-memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cuda, ok, serial, take};
use xthunk_emulator::diag::Kind;
use xthunk_emulator::error::cu;
use xthunk_emulator::memory::POISON;

#[test]
fn fresh_allocations_are_poisoned() {
    let _g = serial();
    let c = Cuda::new();
    let d = c.alloc(64);
    assert!(c.read(d, 64).iter().all(|&b| b == POISON));
    let h = c.alloc_host(64);
    // SAFETY: `h` is a live 64-byte pinned allocation.
    let host = unsafe { std::slice::from_raw_parts(h, 64) };
    assert!(host.iter().all(|&b| b == POISON));
    ok(c.free(d), "free");
    ok(c.free_host(h), "free host");
}

#[test]
fn out_of_bounds_copy_is_caught_and_reported() {
    let _g = serial();
    let c = Cuda::new();
    let d = c.alloc(16);
    let data = [1u8; 17];
    assert_eq!(c.htod(d, &data), cu::INVALID_VALUE);
    let found = take(Kind::OutOfBounds);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].call, "cuMemcpyHtoD_v2");
    assert!(found[0].message.contains("overrun"), "{}", found[0].message);
    assert!(
        found[0].message.contains("16 bytes of device memory"),
        "{}",
        found[0].message
    );
    // Reading one byte past the end, and a range starting past the end.
    let mut out = [0u8; 4];
    assert_eq!(c.dtoh(&mut out, d + 14), cu::INVALID_VALUE);
    assert_eq!(c.dtoh(&mut out[..1], d + 16), cu::INVALID_VALUE);
    assert_eq!(take(Kind::OutOfBounds).len(), 2);
    // A device-to-device copy and a memset overrunning the destination.
    let s = c.stream(false);
    let e = c.alloc(8);
    assert_eq!(c.copy(e, d, 16, s), cu::INVALID_VALUE);
    assert_eq!(c.memset32(d, 0, 5, s), cu::INVALID_VALUE);
    assert_eq!(take(Kind::OutOfBounds).len(), 2);
    ok(c.sync(s), "sync");
    c.destroy_stream(s);
    ok(c.free(d), "free");
    ok(c.free(e), "free");
}

#[test]
fn use_after_free_is_caught() {
    let _g = serial();
    let c = Cuda::new();
    let d = c.alloc(32);
    ok(c.free(d), "free");
    let mut out = [0u8; 8];
    assert_eq!(c.dtoh(&mut out, d), cu::INVALID_VALUE);
    let found = take(Kind::UseAfterFree);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].call, "cuMemcpyDtoH_v2");
    assert!(
        found[0].message.contains("freed by cuMemFree_v2"),
        "{}",
        found[0].message
    );
    // Queued before the free, run after it: caught when the operation runs.
    let d = c.alloc(32);
    let s = c.stream(false);
    ok(c.memset8(d, 7, 32, s), "memset");
    // cuMemFree waits for the device first (as the driver does), so the memset is harmless.
    ok(c.free(d), "free");
    assert!(take(Kind::UseAfterFree).is_empty());
    assert_eq!(c.memset8(d, 7, 32, s), cu::INVALID_VALUE);
    assert_eq!(take(Kind::UseAfterFree).len(), 1);
    c.destroy_stream(s);
}

#[test]
fn double_and_invalid_frees_are_caught() {
    let _g = serial();
    let c = Cuda::new();
    let d = c.alloc(32);
    ok(c.free(d), "free");
    assert_eq!(c.free(d), cu::INVALID_VALUE);
    let found = take(Kind::DoubleFree);
    assert_eq!(found.len(), 1);
    assert!(found[0].message.contains("already freed by cuMemFree_v2"));
    let d = c.alloc(32);
    assert_eq!(c.free(d + 4), cu::INVALID_VALUE);
    assert!(take(Kind::InvalidFree)[0].message.contains("not its start"));
    let h = c.alloc_host(32);
    assert_eq!(c.free(h as u64), cu::INVALID_VALUE);
    assert!(
        take(Kind::InvalidFree)[0]
            .message
            .contains("cannot free pinned host memory")
    );
    ok(c.free_host(h), "free host");
    ok(c.free(d), "free");
}

#[test]
fn leaks_are_reported_when_the_context_is_destroyed() {
    let _g = serial();
    {
        let c = Cuda::new();
        let _leaked = c.alloc(1000);
        let _stream = c.stream(false);
    }
    let leaks = take(Kind::Leak);
    assert!(
        leaks
            .iter()
            .any(|d| d.call == "cuDevicePrimaryCtxRelease_v2" && d.message.contains("1000 bytes")),
        "{leaks:?}"
    );
    assert!(
        leaks.iter().any(|d| d.message.contains("1 stream(s)")),
        "{leaks:?}"
    );
    assert_eq!(xthunk_emulator::memory::live(None).len(), 0);
}

#[test]
fn injected_out_of_memory() {
    let _g = serial();
    let c = Cuda::new();
    common::set("fail_alloc", "2");
    let a = c.alloc(8);
    assert_eq!(c.try_alloc(8), Err(cu::OUT_OF_MEMORY));
    assert_eq!(take(Kind::Injected).len(), 1);
    let b = c.alloc(8);
    common::set("fail_alloc", "0");
    ok(c.free(a), "free");
    ok(c.free(b), "free");
    // A real out-of-memory: more than the device has.
    common::set("memory", "1M");
    assert_eq!(c.try_alloc(2 << 20), Err(cu::OUT_OF_MEMORY));
    common::set("memory", "16G");
}

#[test]
fn not_device_memory_and_wrong_direction() {
    let _g = serial();
    let c = Cuda::new();
    let host = [0u8; 64];
    let mut out = [0u8; 8];
    assert_eq!(c.dtoh(&mut out, host.as_ptr() as u64), cu::INVALID_VALUE);
    assert_eq!(take(Kind::NotDeviceMemory).len(), 1);
    // Host-to-device with a device pointer as the host side.
    let d = c.alloc(8);
    let e = c.alloc(8);
    // SAFETY: the emulator checks the "host" pointer and refuses device memory.
    let r = unsafe { xthunk_emulator::cuda::cuMemcpyHtoD_v2(d, e as *const _, 8) };
    assert_eq!(r, cu::INVALID_VALUE);
    assert!(
        take(Kind::InvalidValue)[0]
            .message
            .contains("is device memory")
    );
    ok(c.free(d), "free");
    ok(c.free(e), "free");
}

#[test]
fn hip_memory_is_checked_too() {
    let _g = serial();
    let d = common::hip_alloc(16);
    let src = [3u8; 16];
    common::hok(
        common::hip_copy(d, src.as_ptr() as usize, 16, 1),
        "hipMemcpy",
    );
    let mut out = [0u8; 16];
    common::hok(
        common::hip_copy(out.as_mut_ptr() as usize, d, 16, 2),
        "hipMemcpy",
    );
    assert_eq!(out, src);
    assert_eq!(common::hip_copy(d, src.as_ptr() as usize, 17, 1), 1);
    assert_eq!(take(Kind::OutOfBounds)[0].call, "hipMemcpy");
    common::hok(common::hip_free(d), "hipFree");
    assert_eq!(common::hip_free(d), 1);
    assert_eq!(take(Kind::DoubleFree)[0].call, "hipFree");
    // hipDeviceReset reports what the device still owns.
    let _leak = common::hip_alloc(48);
    common::hok(xthunk_emulator::hip::hipDeviceReset(), "hipDeviceReset");
    assert!(take(Kind::Leak)[0].message.contains("48 bytes"));
}
