//! Stream-ordered memory pools through the CUDA and HIP C APIs: reuse without allocator
//! calls, the release threshold, frees that take effect in stream order (use after free,
//! double free, a free of a non-pool pointer), and devices without pools.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cuda, hok, ok, serial, set, take};
use std::ffi::c_void;
use xthunk_emulator::diag::Kind;
use xthunk_emulator::error::cu;
use xthunk_emulator::memory::{FREED, POISON, allocation_at, allocator_calls};
use xthunk_emulator::{cuda, hip, pool};

/// A pool of the current context's device (0) with `threshold` as its release threshold.
fn cuda_pool(threshold: u64) -> usize {
    // CUmemPoolProps: PINNED, no handle types, location DEVICE 0, the rest zero.
    let mut props = [0u8; 88];
    props[0] = 1;
    props[8] = 1;
    let mut p = 0usize;
    // SAFETY: a complete, zeroed CUmemPoolProps and a valid out-pointer.
    ok(
        unsafe { cuda::cuMemPoolCreate(&mut p, props.as_ptr().cast()) },
        "cuMemPoolCreate",
    );
    let mut t = threshold;
    // SAFETY: the release threshold is a u64.
    ok(
        unsafe { cuda::cuMemPoolSetAttribute(p, 4, (&mut t as *mut u64).cast()) },
        "set threshold",
    );
    p
}

fn alloc_async(pool: usize, n: usize, s: usize) -> u64 {
    let mut d = 0u64;
    // SAFETY: valid out-pointer.
    ok(
        unsafe { cuda::cuMemAllocFromPoolAsync(&mut d, n, pool, s) },
        "cuMemAllocFromPoolAsync",
    );
    d
}

fn reserved(pool: usize) -> u64 {
    let mut v = 0u64;
    // SAFETY: the attribute is a u64.
    ok(
        unsafe { cuda::cuMemPoolGetAttribute(pool, 5, (&mut v as *mut u64).cast()) },
        "get reserved",
    );
    v
}

#[test]
fn a_freed_block_is_reused_without_an_allocator_call() {
    let _g = serial();
    let c = Cuda::new();
    let mut v = 0i32;
    // SAFETY: valid out-pointer; 115 is CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED.
    ok(
        unsafe { cuda::cuDeviceGetAttribute(&mut v, 115, 0) },
        "attr",
    );
    assert_eq!(v, 1);
    let p = cuda_pool(u64::MAX);
    let s = c.stream(false);
    let before = allocator_calls();
    let a = alloc_async(p, 1000, s);
    assert_eq!(allocator_calls(), before + 1, "the pool grows by one block");
    ok(c.sync(s), "sync");
    assert!(c.read(a, 1000).iter().all(|&b| b == POISON));
    c.write_f32(a, &[1.0; 4]);
    // SAFETY: `a` is a live pool allocation.
    ok(unsafe { cuda::cuMemFreeAsync(a, s) }, "free");
    // Reused on the same stream before the free ran, and again after it ran.
    let b = alloc_async(p, 900, s);
    assert_eq!(b, a);
    // SAFETY: as above.
    ok(unsafe { cuda::cuMemFreeAsync(b, s) }, "free");
    ok(c.sync(s), "sync");
    let s2 = c.stream(false);
    let d = alloc_async(p, 1000, s2);
    assert_eq!(d, a, "a completed free is reusable by any stream");
    assert_eq!(
        allocator_calls(),
        before + 1,
        "no allocator call after the first"
    );
    assert!(reserved(p) >= 1000);
    // SAFETY: as above.
    ok(unsafe { cuda::cuMemFreeAsync(d, s2) }, "free");
    ok(c.sync(s2), "sync");
    assert!(reserved(p) >= 1000, "the threshold keeps the memory");
    // SAFETY: a pool of this test.
    ok(unsafe { cuda::cuMemPoolDestroy(p) }, "destroy");
    c.destroy_stream(s);
    c.destroy_stream(s2);
    assert!(take(Kind::Leak).is_empty());
}

#[test]
fn with_threshold_zero_a_completed_free_returns_the_memory() {
    let _g = serial();
    let c = Cuda::new();
    let p = cuda_pool(0);
    let s = c.stream(false);
    let a = alloc_async(p, 4096, s);
    assert!(reserved(p) >= 4096);
    // SAFETY: a live pool allocation.
    ok(unsafe { cuda::cuMemFreeAsync(a, s) }, "free");
    assert!(reserved(p) >= 4096, "the free has not run yet");
    ok(c.sync(s), "sync");
    assert_eq!(reserved(p), 0);
    let before = allocator_calls();
    let b = alloc_async(p, 4096, s);
    assert_eq!(allocator_calls(), before + 1, "the pool had to grow again");
    // SAFETY: as above.
    ok(unsafe { cuda::cuMemFreeAsync(b, s) }, "free");
    ok(c.sync(s), "sync");
    // SAFETY: a pool of this test.
    ok(unsafe { cuda::cuMemPoolDestroy(p) }, "destroy");
    c.destroy_stream(s);
}

#[test]
fn frees_take_effect_in_stream_order_and_bad_frees_are_errors() {
    let _g = serial();
    let c = Cuda::new();
    let p = cuda_pool(u64::MAX);
    let (s, s2) = (c.stream(false), c.stream(false));
    let out = c.alloc(64);
    // cuMemFreeAsync of a plain allocation, cuMemFree of pool memory.
    // SAFETY: any value; the emulator checks it.
    assert_eq!(unsafe { cuda::cuMemFreeAsync(out, s2) }, cu::INVALID_VALUE);
    let bad = take(Kind::InvalidFree);
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0].message.contains("not a stream-ordered allocation"),
        "{}",
        bad[0].message
    );
    let b = alloc_async(p, 64, s2);
    assert_eq!(c.free(b), cu::INVALID_VALUE);
    assert_eq!(take(Kind::InvalidFree).len(), 1);
    // SAFETY: a live pool allocation.
    ok(unsafe { cuda::cuMemFreeAsync(b, s2) }, "free");
    ok(c.sync(s2), "sync");
    // SAFETY: the pool keeps the block (threshold: all); 64 bytes of it.
    let freed = unsafe { std::slice::from_raw_parts(b as usize as *const u8, 64) };
    assert!(freed.iter().all(|&x| x == FREED));
    // Work queued before a free still runs on the memory; work queued after it passes the
    // checks made when it is queued, and fails when it runs (a use after free).
    let a = alloc_async(p, 64, s);
    ok(c.memset8(a, 7, 64, s), "memset before the free");
    ok(c.copy(out, a, 64, s), "copy before the free");
    // Allocated before the free (after it, the same stream would reuse `a`'s block).
    let late = alloc_async(p, 128, s);
    // SAFETY: a live pool allocation.
    ok(unsafe { cuda::cuMemFreeAsync(a, s) }, "free");
    // SAFETY: freed once already.
    assert_eq!(unsafe { cuda::cuMemFreeAsync(a, s) }, cu::INVALID_VALUE);
    assert_eq!(take(Kind::DoubleFree).len(), 1);
    let other = alloc_async(p, 64, s2);
    assert_ne!(
        other, a,
        "a free not yet run on another stream is not reused"
    );
    ok(c.memset8(a, 9, 64, s), "queued after the free");
    // A free queued after the failure still takes effect.
    // SAFETY: a live pool allocation.
    ok(
        unsafe { cuda::cuMemFreeAsync(late, s) },
        "free after the failure",
    );
    assert_ne!(c.sync(s), 0, "the memset after the free fails when it runs");
    assert_eq!(take(Kind::UseAfterFree).len(), 1);
    assert!(
        allocation_at(late as usize).is_none(),
        "the later free took effect"
    );
    // SAFETY: `out` is a live 64-byte allocation, its copy complete.
    let copied = unsafe { std::slice::from_raw_parts(out as usize as *const u8, 64) };
    assert!(copied.iter().all(|&x| x == 7));
    // SAFETY: a live pool allocation.
    let _ = unsafe { cuda::cuMemFreeAsync(other, s2) };
    let _ = c.sync(s2);
    let _ = c.free(out);
    // SAFETY: a pool of this test.
    let _ = unsafe { cuda::cuMemPoolDestroy(p) };
    c.destroy_stream(s);
    c.destroy_stream(s2);
    let _ = xthunk_emulator::diag::take();
}

#[test]
fn hip_pools_and_devices_without_pools() {
    let _g = serial();
    let mut v = 0i32;
    // SAFETY: valid out-pointer; 88 is hipDeviceAttributeMemoryPoolsSupported.
    hok(unsafe { hip::hipDeviceGetAttribute(&mut v, 88, 0) }, "attr");
    assert_eq!(v, 1);
    let mut pool = 0usize;
    // SAFETY: valid out-pointer.
    hok(
        unsafe { hip::hipDeviceGetDefaultMemPool(&mut pool, 0) },
        "default pool",
    );
    let mut keep = u64::MAX;
    // SAFETY: the release threshold (4) is a u64.
    hok(
        unsafe { hip::hipMemPoolSetAttribute(pool, 4, (&mut keep as *mut u64).cast()) },
        "threshold",
    );
    let mut s = 0usize;
    // SAFETY: valid out-pointer.
    hok(
        unsafe { hip::hipStreamCreateWithFlags(&mut s, 1) },
        "stream",
    );
    let before = allocator_calls();
    for _ in 0..3 {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        hok(
            unsafe { hip::hipMallocAsync(&mut p, 512, s) },
            "hipMallocAsync",
        );
        // SAFETY: a live pool allocation.
        hok(unsafe { hip::hipFreeAsync(p, s) }, "hipFreeAsync");
    }
    assert_eq!(allocator_calls(), before + 1);
    // SAFETY: the stream of this test.
    hok(unsafe { hip::hipStreamSynchronize(s) }, "sync");
    let (held, used) = pool::held_bytes();
    assert!(held >= 512 && used == 0, "{held} {used}");
    set("MEMORY_POOLS", "0");
    // SAFETY: valid out-pointer.
    hok(unsafe { hip::hipDeviceGetAttribute(&mut v, 88, 0) }, "attr");
    assert_eq!(v, 0);
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_ne!(unsafe { hip::hipMallocAsync(&mut p, 512, s) }, 0);
    assert_eq!(take(Kind::Unsupported).len(), 1);
    set("MEMORY_POOLS", "1");
    // SAFETY: the stream of this test.
    hok(unsafe { hip::hipStreamDestroy(s) }, "destroy");
}
