//! Faults a real GPU has, as errors of the launch with their diagnostics (issue 18, item 6):
//! misaligned kernel buffers, device memory of another device or context, launches on a
//! stream of another context, launch shapes beyond the device's limits (every product
//! checked) or the function's own (its launch bounds, read from the image), and parameter
//! sizes (the image's against the standard signature, `extra`'s buffer size).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use xthunk_core::kernels::portable::with_prelude;

use common::{ADD_F32, ADD_F32_PTX, Cuda, hok, ok, serial, take};
use std::ffi::{c_int, c_void};
use xthunk_core::kernels::{ParamKind, standard_library};
use xthunk_emulator::diag::Kind;
use xthunk_emulator::error::{cu, hip as hcode};
use xthunk_emulator::{cuda, hip};

/// The parameter sizes of standard kernel `name` as a launch passes them.
fn sizes_of(name: &str) -> Vec<usize> {
    let k = standard_library().get(name).unwrap();
    k.signature
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Buffer { .. } => 8,
            ParamKind::Scalar(dt) => dt.size(),
        })
        .collect()
}

/// A PTX text declaring entry `name` with parameters of `sizes` bytes, and `directives`
/// (`.maxntid …`) before its body.
fn ptx(name: &str, sizes: &[usize], directives: &str) -> Vec<u8> {
    let ty = |s: usize| match s {
        1 => ".u8",
        2 => ".u16",
        4 => ".u32",
        _ => ".u64",
    };
    let params: Vec<String> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| format!("\t.param {} {name}_param_{i}", ty(s)))
        .collect();
    // Carrying the standard library's source, as an NVRTC image of it would.
    common::ptx_with_source(
        &format!(
            ".version 8.5\n.target sm_90\n.address_size 64\n\n.visible .entry {name}(\n{}\n)\n{directives}\n{{\n\tret;\n}}\n",
            params.join(",\n")
        ),
        xthunk_core::kernels::portable::standard_unit(),
    )
    .into_bytes()
}

#[test]
fn misaligned_kernel_buffers_fault() {
    let _g = serial();
    let c = Cuda::new();
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let (a, b, out) = (c.alloc(400), c.alloc(400), c.alloc(400));
    assert_eq!(c.launch(f, &[a + 2, b, out, 10], 0), cu::MISALIGNED_ADDRESS);
    let d = take(Kind::Misaligned);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].call, "cuLaunchKernel(add_f32)");
    assert!(
        d[0].message.contains("kernel buffer `a` (10 x f32)")
            && d[0].message.contains("4-byte element type (offset 2"),
        "{}",
        d[0].message
    );
    // A misaligned output too; an aligned offset is fine, and so is a launch with no
    // elements (nothing is accessed).
    assert_eq!(c.launch(f, &[a, b, out + 6, 10], 0), cu::MISALIGNED_ADDRESS);
    assert_eq!(take(Kind::Misaligned).len(), 1);
    ok(
        c.launch(f, &[a + 4, b + 8, out + 12, 10], 0),
        "aligned offsets",
    );
    ok(c.launch(f, &[a + 2, b + 1, out + 3, 0], 0), "no elements");
    c.unload(m);
    // 2-byte elements at a 2-byte offset are aligned; at an odd one they are not.
    let m = c
        .load(&ptx("scale_f16", &sizes_of("scale_f16"), ""))
        .unwrap();
    let f = c.function(m, "scale_f16").unwrap();
    ok(c.launch(f, &[a + 2, 0x3c00, 8], 0), "f16 at offset 2");
    assert_eq!(c.launch(f, &[a + 3, 0x3c00, 8], 0), cu::MISALIGNED_ADDRESS);
    let d = take(Kind::Misaligned);
    assert!(d[0].message.contains("2-byte element type"), "{d:?}");
    for p in [a, b, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
}

/// Retains device `dev`'s primary context, makes it current, runs `f`, and restores the
/// previous current context (the primary context stays retained: the caller releases it).
fn in_primary<T>(dev: c_int, f: impl FnOnce() -> T) -> T {
    let mut ctx = 0usize;
    // SAFETY: valid out-pointer; the context is pushed and popped around `f`.
    unsafe {
        ok(cuda::cuDevicePrimaryCtxRetain(&mut ctx, dev), "retain");
        ok(cuda::cuCtxPushCurrent_v2(ctx), "push");
    }
    let r = f();
    // SAFETY: pops what was pushed; releases the reference taken above.
    unsafe {
        ok(cuda::cuCtxPopCurrent_v2(std::ptr::null_mut()), "pop");
        ok(cuda::cuDevicePrimaryCtxRelease_v2(dev), "release");
    }
    r
}

#[test]
fn device_memory_of_another_context_is_not_reachable() {
    let _g = serial();
    common::set("devices", "2");
    let c = Cuda::new();
    // Device 1's primary context stays alive while this test holds a reference.
    let mut ctx1 = 0usize;
    // SAFETY: valid out-pointer.
    ok(
        unsafe { cuda::cuDevicePrimaryCtxRetain(&mut ctx1, 1) },
        "retain 1",
    );
    let (far, pinned) = in_primary(1, || (c.alloc(400), c.alloc_host(400)));
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let (a, out) = (c.alloc(400), c.alloc(400));
    assert_eq!(c.launch(f, &[a, far, out, 10], 0), cu::ILLEGAL_ADDRESS);
    let d = take(Kind::ForeignMemory);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].message.contains("kernel buffer `b`")
            && d[0].message.contains("of device 1, not to context #")
            && d[0].message.contains("of device 0, where the kernel runs"),
        "{}",
        d[0].message
    );
    // Page-locked host memory is reachable from every context.
    ok(
        c.launch(f, &[a, pinned as u64, out, 10], 0),
        "pinned memory of device 1's context",
    );
    // Another context of the same device does not share its memory either.
    let mut ctx2 = 0usize;
    // SAFETY: valid out-pointer; cuCtxCreate makes the new context current (popped below).
    ok(unsafe { cuda::cuCtxCreate_v2(&mut ctx2, 0, 0) }, "create");
    let other = c.alloc(400);
    // SAFETY: pops the context pushed by cuCtxCreate.
    ok(
        unsafe { cuda::cuCtxPopCurrent_v2(std::ptr::null_mut()) },
        "pop",
    );
    assert_eq!(c.launch(f, &[other, a, out, 10], 0), cu::ILLEGAL_ADDRESS);
    assert_eq!(take(Kind::ForeignMemory).len(), 1);
    // SAFETY: the context made above, current while its memory is freed, then destroyed.
    unsafe {
        ok(cuda::cuCtxPushCurrent_v2(ctx2), "push");
        ok(c.free(other), "free");
        ok(cuda::cuCtxDestroy_v2(ctx2), "destroy");
    }
    in_primary(1, || {
        ok(c.free(far), "free");
        ok(c.free_host(pinned), "free host");
    });
    // SAFETY: releases the reference taken above.
    ok(
        unsafe { cuda::cuDevicePrimaryCtxRelease_v2(1) },
        "release 1",
    );
    for p in [a, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
    drop(c);
    common::set("devices", "1");
}

#[test]
fn launches_go_to_a_stream_of_the_current_context() {
    let _g = serial();
    common::set("devices", "2");
    let c = Cuda::new();
    let mut ctx1 = 0usize;
    // SAFETY: valid out-pointer.
    ok(
        unsafe { cuda::cuDevicePrimaryCtxRetain(&mut ctx1, 1) },
        "retain 1",
    );
    // A module and a stream of device 1's context, used while device 0's is current.
    let (m, f, s) = in_primary(1, || {
        let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
        (m, c.function(m, "add_f32").unwrap(), c.stream(false))
    });
    assert_eq!(c.launch(f, &[0, 0, 0, 0], s), cu::INVALID_HANDLE);
    let d = take(Kind::InvalidHandle);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].message.contains("current"), "{}", d[0].message);
    // From its own context, the same launch is fine.
    in_primary(1, || {
        ok(
            c.launch(f, &[0, 0, 0, 0], s),
            "launch in device 1's context",
        );
        ok(c.sync(s), "sync");
        c.destroy_stream(s);
        c.unload(m);
    });
    // SAFETY: releases the reference taken above.
    ok(
        unsafe { cuda::cuDevicePrimaryCtxRelease_v2(1) },
        "release 1",
    );
    drop(c);
    common::set("devices", "1");
}

/// `cuDeviceGetAttribute(attr)` of device 0.
fn device_attr(attr: c_int) -> c_int {
    let mut v = 0;
    // SAFETY: valid out-pointer.
    ok(
        unsafe { cuda::cuDeviceGetAttribute(&mut v, attr, 0) },
        "attribute",
    );
    v
}

/// `cuFuncGetAttribute(attr)` of `f`.
fn func_attr(f: usize, attr: c_int) -> c_int {
    let mut v = 0;
    // SAFETY: valid out-pointer, a live function handle.
    ok(
        unsafe { cuda::cuFuncGetAttribute(&mut v, attr, f) },
        "function attribute",
    );
    v
}

#[test]
fn launch_shapes_are_checked_against_the_device_limits() {
    let _g = serial();
    let c = Cuda::new();
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let args = [0, 0, 0, 0];
    // What is enforced is what the device reports.
    let (threads, bz, gy, shared) = (
        device_attr(1) as u32,
        device_attr(4) as u32,
        device_attr(6) as u32,
        device_attr(8) as u32,
    );
    assert_eq!((threads, bz, gy, shared), (1024, 64, 65535, 48 * 1024));
    ok(
        c.launch_with(f, ([1, gy, 1], [1, 1, bz], shared), &args, 0),
        "at the limits",
    );
    for dims in [
        ([1, gy + 1, 1], [1, 1, 1], 0),
        ([65536, 65536, 65536], [1, 1, 1], 0),
        ([1, 1, 1], [1, 1, bz + 1], 0),
        ([1, 1, 1], [64, 32, 1], 0),
        ([1, 1, 1], [1, 1, 1], shared + 1),
        // 2^64 threads: 0 in 64-bit arithmetic (a panic in debug builds before).
        ([1, 1, 1], [1 << 22, 1 << 22, 1 << 20], 0),
    ] {
        assert_eq!(
            c.launch_with(f, dims, &args, 0),
            cu::INVALID_VALUE,
            "{dims:?}"
        );
        // One diagnostic, of the shape (no internal error).
        let d = xthunk_emulator::diag::take();
        assert_eq!(d.len(), 1, "{dims:?}: {d:?}");
        assert_eq!(d[0].kind, Kind::InvalidValue);
        assert!(d[0].message.contains("limit") || d[0].message.contains("at most"));
    }
    c.unload(m);
}

#[test]
fn launch_bounds_of_the_image_limit_the_block() {
    let _g = serial();
    let c = Cuda::new();
    let m = c
        .load(&ptx("add_f32", &sizes_of("add_f32"), ".maxntid 128, 1, 1"))
        .unwrap();
    let f = c.function(m, "add_f32").unwrap();
    assert_eq!(
        func_attr(f, 0),
        128,
        "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"
    );
    let args = [0, 0, 0, 0];
    ok(
        c.launch_with(f, ([1, 1, 1], [128, 1, 1], 0), &args, 0),
        "128",
    );
    assert_eq!(
        c.launch_with(f, ([1, 1, 1], [16, 16, 1], 0), &args, 0),
        cu::LAUNCH_OUT_OF_RESOURCES
    );
    let d = take(Kind::InvalidValue);
    assert!(d[0].message.contains("at most 128"), "{d:?}");
    c.unload(m);

    // A real cubin: its launch bounds and static shared memory.
    let Some(nvrtc) = common::nvrtc() else {
        eprintln!("SKIPPED (cubin part): NVRTC not installed");
        return;
    };
    let src = ADD_F32.replace("__global__ void", "__global__ void __launch_bounds__(128)")
        .replace(
            "long long n) {",
            "long long n) {\n    __shared__ float sh[1024];\n    sh[threadIdx.x] = n > 0 ? a[0] : 0.0f;\n    __syncthreads();\n    if (n < 0) out[0] = sh[(threadIdx.x + 1) % 1024];",
        );
    let cubin = common::nvrtc_compile(&nvrtc, &with_prelude(&src), "sm_90").unwrap();
    let m = c.load(&cubin).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    // A user kernel's pointer parameters must be live (the emulator refuses null ones).
    let live = [c.alloc(4), c.alloc(4), c.alloc(4)];
    let args = [live[0], live[1], live[2], 0];
    assert_eq!(func_attr(f, 0), 128);
    let static_shared = func_attr(f, 1);
    assert!(static_shared >= 4096, "{static_shared}");
    assert_eq!(func_attr(f, 8), 48 * 1024 - static_shared);
    assert_eq!(
        c.launch_with(f, ([1, 1, 1], [256, 1, 1], 0), &args, 0),
        cu::LAUNCH_OUT_OF_RESOURCES
    );
    let dynamic = (48 * 1024 - static_shared) as u32;
    ok(
        c.launch_with(f, ([1, 1, 1], [128, 1, 1], dynamic), &args, 0),
        "fits",
    );
    assert_eq!(
        c.launch_with(f, ([1, 1, 1], [128, 1, 1], dynamic + 1), &args, 0),
        cu::INVALID_VALUE
    );
    let _ = take(Kind::InvalidValue);
    c.unload(m);
    // The cubin's parameter sizes (EIATTR_KPARAM_INFO) are read and agree with its source:
    // an `add_f32` with a 4-byte count is a user kernel of its own, not the standard one.
    let int_n = ADD_F32.replace("long long n", "int n");
    let m = c
        .load(&common::nvrtc_compile(&nvrtc, &with_prelude(&int_n), "sm_90").unwrap())
        .unwrap();
    let f = c.function(m, "add_f32").unwrap();
    ok(
        c.launch_with(f, ([1, 1, 1], [32, 1, 1], 0), &args, 0),
        "int n",
    );
    c.unload(m);
    for p in live {
        ok(c.free(p), "free");
    }
}

#[test]
fn parameter_sizes_must_match() {
    let _g = serial();
    let c = Cuda::new();
    // The image's `add_f32` takes a 4-byte count: not the standard kernel.
    let m = c.load(&ptx("add_f32", &[8, 8, 8, 4], "")).unwrap();
    assert_eq!(c.function(m, "add_f32"), Err(cu::NOT_FOUND));
    let d = take(Kind::Unsupported);
    assert!(
        d[0].message.contains("[8, 8, 8, 4]") && d[0].message.contains("[8, 8, 8, 8]"),
        "{d:?}"
    );
    c.unload(m);
    // `extra`: the buffer's size must be the kernel's parameter buffer size (32 bytes).
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let mut packed = [0u64; 5];
    for (size, want) in [
        (32usize, cu::SUCCESS),
        (40, cu::INVALID_VALUE),
        (28, cu::INVALID_VALUE),
    ] {
        let mut size = size;
        let mut extra: [*mut c_void; 5] = [
            std::ptr::without_provenance_mut(1), // CU_LAUNCH_PARAM_BUFFER_POINTER
            packed.as_mut_ptr().cast(),
            std::ptr::without_provenance_mut(2), // CU_LAUNCH_PARAM_BUFFER_SIZE
            (&mut size as *mut usize).cast(),
            std::ptr::null_mut(),
        ];
        // SAFETY: `extra` is a terminated tag list pointing at live locals of at least the
        // declared size (`packed` holds 40 bytes).
        let r = unsafe {
            cuda::cuLaunchKernel(
                f,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                0,
                std::ptr::null_mut(),
                extra.as_mut_ptr(),
            )
        };
        assert_eq!(r, want, "extra of {size} bytes");
    }
    let d = take(Kind::InvalidValue);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d[0].message.contains("40 bytes") && d[0].message.contains("take 32"));
    c.unload(m);
}

// ---- HIP (with a real hipRTC code object) ----------------------------------------------------

/// `add_f32` from a hipRTC code object of `src`, loaded on the current device.
fn hip_function(src: &str) -> Option<(usize, usize)> {
    let code = common::hiprtc_compile(&with_prelude(src), "gfx90a")?;
    let (mut m, mut f) = (0usize, 0usize);
    // SAFETY: a complete code object; valid out-pointers.
    unsafe {
        hok(hip::hipModuleLoadData(&mut m, code.as_ptr().cast()), "load");
        hok(
            hip::hipModuleGetFunction(&mut f, m, c"add_f32".as_ptr()),
            "function",
        );
    }
    Some((m, f))
}

fn hip_launch(f: usize, (grid, block, shared): ([u32; 3], [u32; 3], u32), args: &[u64]) -> c_int {
    let mut slots = args.to_vec();
    let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
    // SAFETY: one pointer per kernel parameter, each to an 8-byte slot that outlives the call.
    unsafe {
        hip::hipModuleLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared,
            0,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

fn hip_attr(attr: c_int) -> c_int {
    let mut v = 0;
    // SAFETY: valid out-pointer.
    hok(
        unsafe { hip::hipDeviceGetAttribute(&mut v, attr, 0) },
        "attribute",
    );
    v
}

#[test]
fn hip_faults_and_limits() {
    let _g = serial();
    common::set("devices", "2");
    hok(hip::hipSetDevice(1), "device 1");
    let far = common::hip_alloc(400);
    hok(hip::hipSetDevice(0), "device 0");
    let Some((m, f)) = hip_function(ADD_F32) else {
        eprintln!("SKIPPED: no hipRTC (apt-get install libamdhip64-5)");
        hok(hip::hipSetDevice(1), "device 1");
        hok(common::hip_free(far), "free");
        hok(hip::hipSetDevice(0), "device 0");
        common::set("devices", "1");
        return;
    };
    let (a, out) = (common::hip_alloc(400) as u64, common::hip_alloc(400) as u64);
    let one = [1, 1, 1];
    // Another device's memory; a misaligned buffer (HIP reports an illegal address).
    assert_eq!(
        hip_launch(f, (one, [64, 1, 1], 0), &[a, far as u64, out, 10]),
        hcode::ILLEGAL_ADDRESS
    );
    assert_eq!(take(Kind::ForeignMemory).len(), 1);
    assert_eq!(
        hip_launch(f, (one, [64, 1, 1], 0), &[a, a + 1, out, 10]),
        hcode::ILLEGAL_ADDRESS
    );
    assert_eq!(take(Kind::Misaligned).len(), 1);
    // AMD's limits, as the device reports them: blocks up to 1024 along z, 64 KiB of shared
    // memory, at most 2^32 - 1 work-items along a dimension.
    assert_eq!(
        (hip_attr(28), hip_attr(56), hip_attr(74)),
        (1024, 1024, 64 * 1024)
    );
    // No work (n = 0), but live pointers (the emulator refuses null ones of a user kernel).
    let none = [a, a, out, 0];
    hok(
        hip_launch(f, (one, [1, 1, 1024], 64 * 1024), &none),
        "AMD-sized block",
    );
    assert_eq!(
        hip_launch(f, ([1 << 22, 1, 1], [1024, 1, 1], 0), &none),
        hcode::INVALID_CONFIGURATION
    );
    assert_eq!(
        hip_launch(f, (one, [1, 1, 1], 64 * 1024 + 1), &none),
        hcode::INVALID_CONFIGURATION
    );
    assert_eq!(take(Kind::InvalidValue).len(), 2);
    // SAFETY: a loaded module, unloaded once.
    hok(unsafe { hip::hipModuleUnload(m) }, "unload");
    // The code object's launch bound (`.max_flat_workgroup_size`).
    let src = ADD_F32.replace("__global__ void", "__global__ void __launch_bounds__(128)");
    let (m, f) = hip_function(&src).unwrap();
    hok(hip_launch(f, (one, [128, 1, 1], 0), &none), "128");
    assert_eq!(
        hip_launch(f, (one, [256, 1, 1], 0), &none),
        hcode::LAUNCH_OUT_OF_RESOURCES
    );
    assert_eq!(take(Kind::InvalidValue).len(), 1);
    // SAFETY: a loaded module, unloaded once.
    hok(unsafe { hip::hipModuleUnload(m) }, "unload");
    // The code object's parameter sizes (`.args`) agree with its source: an `add_f32` with a
    // 4-byte count is a user kernel of its own.
    let code = common::hiprtc_compile(
        &with_prelude(&ADD_F32.replace("long long n", "int n")),
        "gfx90a",
    )
    .unwrap();
    let (mut m, mut f) = (0usize, 0usize);
    // SAFETY: a complete code object; valid out-pointers; the module is unloaded once.
    unsafe {
        hok(hip::hipModuleLoadData(&mut m, code.as_ptr().cast()), "load");
        hok(
            hip::hipModuleGetFunction(&mut f, m, c"add_f32".as_ptr()),
            "int n",
        );
        hok(hip::hipModuleUnload(m), "unload");
    }
    for p in [a, out] {
        hok(common::hip_free(p as usize), "free");
    }
    hok(hip::hipSetDevice(1), "device 1");
    hok(common::hip_free(far), "free");
    hok(hip::hipSetDevice(0), "device 0");
    common::set("devices", "1");
}
