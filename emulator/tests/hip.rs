//! The HIP runtime: devices and properties (both struct layouts), streams, and a kernel from a
//! real hipRTC code object (when Debian's libamdhip64 is installed).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ADD_F32, hok, serial};
use std::ffi::{CStr, c_char, c_void};
use xthunk_emulator::error::hip as code;
use xthunk_emulator::hip;
use xthunk_emulator::memory::POISON;

#[test]
fn devices_and_properties() {
    let _g = serial();
    hok(hip::hipInit(0), "hipInit");
    let mut n = 0;
    // SAFETY: valid out-pointers and buffers throughout.
    unsafe {
        hok(hip::hipGetDeviceCount(&mut n), "count");
        assert_eq!(n, 1);
        let mut name = [0 as c_char; 256];
        hok(hip::hipDeviceGetName(name.as_mut_ptr(), 256, 0), "name");
        let name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
        assert_eq!(name, "xthunk emulated AMD device");
        let mut warp = 0;
        hok(hip::hipDeviceGetAttribute(&mut warp, 87, 0), "warp size");
        assert_eq!(warp, 64);
        let mut props = vec![0u8; 4096];
        hok(
            hip::hipGetDevicePropertiesR0600(props.as_mut_ptr().cast(), 0),
            "props 6",
        );
        let arch = CStr::from_ptr(props.as_ptr().add(1160).cast())
            .to_string_lossy()
            .into_owned();
        assert_eq!(arch, "gfx90a");
        assert!(
            props[1472..].iter().all(|&b| b == 0),
            "wrote past the R0600 struct"
        );
        let warp6 = i32::from_le_bytes(props[308..312].try_into().unwrap());
        assert_eq!(warp6, 64);
        let mut props = vec![0u8; 4096];
        hok(
            hip::hipGetDeviceProperties(props.as_mut_ptr().cast(), 0),
            "props 5",
        );
        let arch = CStr::from_ptr(props.as_ptr().add(396).cast())
            .to_string_lossy()
            .into_owned();
        assert_eq!(arch, "gfx90a");
        assert!(
            props[792..].iter().all(|&b| b == 0),
            "wrote past the R0000 struct"
        );
        assert_eq!(hip::hipSetDevice(1), code::INVALID_DEVICE);
        assert_eq!(hip::hipGetLastError(), code::INVALID_DEVICE);
        assert_eq!(hip::hipGetLastError(), code::SUCCESS);
        let e = CStr::from_ptr(hip::hipGetErrorName(code::NOT_READY));
        assert_eq!(e.to_str().unwrap(), "hipErrorNotReady");
    }
    let _ = xthunk_emulator::diag::take();
}

#[test]
fn blocking_streams_order_with_the_null_stream() {
    let _g = serial();
    let d = common::hip_alloc(64);
    let (mut blocking, mut nonblocking) = (0usize, 0usize);
    let mut out = [0u8; 64];
    // SAFETY: valid out-pointers; live handles and buffers.
    unsafe {
        hok(hip::hipStreamCreateWithFlags(&mut blocking, 0), "create");
        hok(hip::hipStreamCreateWithFlags(&mut nonblocking, 1), "create");
        hok(
            hip::hipMemsetD8Async(d as *mut c_void, 0x21, 64, nonblocking),
            "memset",
        );
        hok(
            common::hip_copy(out.as_mut_ptr() as usize, d, 64, 2),
            "copy",
        );
        assert_eq!(out, [POISON; 64], "a non-blocking stream is not waited for");
        hok(hip::hipStreamSynchronize(nonblocking), "sync");
        hok(
            hip::hipMemsetD8Async(d as *mut c_void, 0x22, 64, blocking),
            "memset",
        );
        hok(
            common::hip_copy(out.as_mut_ptr() as usize, d, 64, 2),
            "copy",
        );
        assert_eq!(out, [0x22; 64], "hipMemcpy waits for blocking streams");
        hok(hip::hipStreamDestroy(blocking), "destroy");
        hok(hip::hipStreamDestroy(nonblocking), "destroy");
    }
    hok(common::hip_free(d), "free");
}

#[test]
fn hiprtc_code_object_add_f32() {
    let _g = serial();
    let Some(code) = common::hiprtc_compile(
        &xthunk_core::kernels::portable::with_prelude(ADD_F32),
        "gfx90a",
    ) else {
        eprintln!("SKIPPED: no hipRTC (apt-get install libamdhip64-5)");
        return;
    };
    let n = 256usize;
    let (a, b, out) = (
        common::hip_alloc(4 * n),
        common::hip_alloc(4 * n),
        common::hip_alloc(4 * n),
    );
    let av: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let bv: Vec<u8> = (0..n)
        .flat_map(|i| (2.0 * i as f32).to_le_bytes())
        .collect();
    hok(common::hip_copy(a, av.as_ptr() as usize, av.len(), 1), "a");
    hok(common::hip_copy(b, bv.as_ptr() as usize, bv.len(), 1), "b");
    let (mut m, mut f) = (0usize, 0usize);
    let mut slots = [a as u64, b as u64, out as u64, n as u64];
    let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
    // SAFETY: a complete code object; valid out-pointers; one slot per kernel parameter.
    unsafe {
        hok(hip::hipModuleLoadData(&mut m, code.as_ptr().cast()), "load");
        hok(
            hip::hipModuleGetFunction(&mut f, m, c"add_f32".as_ptr()),
            "function",
        );
        hok(
            hip::hipModuleLaunchKernel(
                f,
                2,
                1,
                1,
                128,
                1,
                1,
                0,
                0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
            "launch",
        );
    }
    let mut res = vec![0u8; 4 * n];
    hok(
        common::hip_copy(res.as_mut_ptr() as usize, out, res.len(), 2),
        "out",
    );
    for i in 0..n {
        let v = f32::from_le_bytes(res[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(v, 3.0 * i as f32);
    }
    // A code object for another target is refused.
    if let Some(other) = common::hiprtc_compile(
        &xthunk_core::kernels::portable::with_prelude(ADD_F32),
        "gfx908",
    ) {
        let mut m2 = 0usize;
        // SAFETY: a complete code object; valid out-pointer.
        let r = unsafe { hip::hipModuleLoadData(&mut m2, other.as_ptr().cast()) };
        assert_eq!(r, code::NO_BINARY_FOR_GPU);
    }
    // SAFETY: a loaded module, unloaded once.
    hok(unsafe { hip::hipModuleUnload(m) }, "unload");
    for p in [a, b, out] {
        hok(common::hip_free(p), "free");
    }
    let _ = xthunk_emulator::diag::take();
}
