//! The ABI's contract from Rust: NULL arguments, wrong counts and sizes give error objects of
//! the right code and message (never a crash); loading from bytes in both encodings; buffers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::CStr;
use std::ptr;
use xthunk_capi::*;

/// The error's code and message, freeing it; `None` for success.
fn take(e: *mut XthunkError) -> Option<(XthunkStatus, String)> {
    if e.is_null() {
        return None;
    }
    // SAFETY: a live error from the library, freed here once.
    unsafe {
        let code = xthunk_error_code(e);
        let msg = CStr::from_ptr(xthunk_error_message(e))
            .to_string_lossy()
            .into_owned();
        xthunk_error_free(e);
        Some((code, msg))
    }
}

#[test]
fn device_count_and_names() {
    let mut rt = ptr::null_mut();
    // SAFETY: valid out-pointers, live handles.
    unsafe {
        assert!(take(xthunk_runtime_new(3, &mut rt)).is_none());
        let mut n = 0usize;
        assert!(take(xthunk_runtime_device_count(rt, c"host".as_ptr(), &mut n)).is_none());
        assert_eq!(n, 3);
        let mut dev = ptr::null_mut();
        assert!(take(xthunk_runtime_device(rt, c"host".as_ptr(), 2, &mut dev)).is_none());
        assert_eq!(
            CStr::from_ptr(xthunk_device_backend(dev)).to_str().unwrap(),
            "host"
        );
        assert!(!xthunk_device_emulated(dev));
        xthunk_device_free(dev);
        let (code, msg) =
            take(xthunk_runtime_device_count(rt, c"nosuch".as_ptr(), &mut n)).unwrap();
        assert_ne!(code, XthunkStatus::Ok);
        assert!(msg.contains("nosuch"), "{msg}");
        xthunk_runtime_free(rt);
    }
}

fn host_device() -> (*mut XthunkRuntime, *mut XthunkDevice) {
    let mut rt = ptr::null_mut();
    let mut dev = ptr::null_mut();
    // SAFETY: valid out-pointers; the runtime is live for the device call.
    unsafe {
        assert!(take(xthunk_runtime_new(1, &mut rt)).is_none());
        assert!(take(xthunk_runtime_device(rt, c"host".as_ptr(), 0, &mut dev)).is_none());
    }
    (rt, dev)
}

#[test]
fn null_arguments_are_errors() {
    // SAFETY: NULL everywhere is what is tested; the library must refuse it.
    unsafe {
        let (code, msg) = take(xthunk_runtime_new(1, ptr::null_mut())).unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert_eq!(msg, "out is NULL");
        let mut rt = ptr::null_mut();
        let (code, msg) = take(xthunk_runtime_new(1 << 40, &mut rt)).unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert!(msg.contains("at most 1024"), "{msg}");
        assert!(rt.is_null());
        let mut exe = ptr::null_mut();
        let (code, msg) = take(xthunk_executable_load_file(
            ptr::null(),
            c"x.txtpb".as_ptr(),
            &mut exe,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert!(msg.contains("device is NULL"), "{msg}");
        assert!(exe.is_null());
        assert_eq!(xthunk_executable_parameter_count(ptr::null()), 0);
        assert_eq!(xthunk_error_cause_count(ptr::null()), 0);
        xthunk_executable_free(ptr::null_mut());
        assert_eq!(xthunk_abi_version(), XTHUNK_ABI_VERSION);
    }
}

#[test]
fn loading_and_running_with_bad_inputs() {
    let (rt, dev) = host_device();
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/mlp.txtpb"
    ))
    .unwrap();
    // SAFETY: live handles, buffers of the sizes passed.
    unsafe {
        let mut exe = ptr::null_mut();
        assert!(
            take(xthunk_executable_load_bytes(
                dev,
                text.as_ptr(),
                text.len(),
                &mut exe
            ))
            .is_none()
        );
        assert_eq!(xthunk_executable_parameter_count(exe), 5);
        assert_eq!(xthunk_executable_output_count(exe), 1);
        let mut info = std::mem::zeroed::<XthunkTensorInfo>();
        assert!(take(xthunk_executable_parameter(exe, 1, &mut info)).is_none());
        assert_eq!(CStr::from_ptr(info.name).to_str().unwrap(), "w1");
        assert_eq!(info.dtype, XthunkDtype::F32);
        assert_eq!(
            std::slice::from_raw_parts(info.dims, info.rank),
            &[512, 1024]
        );
        assert_eq!(info.byte_size, 512 * 1024 * 4);
        let (code, _) = take(xthunk_executable_parameter(exe, 5, &mut info)).unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);

        // Wrong counts, then a wrong size.
        let (code, msg) = take(xthunk_executable_run_host(
            exe,
            ptr::null(),
            0,
            ptr::null(),
            0,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert!(
            msg.contains("takes 5 parameters and 1 outputs, got 0 and 0"),
            "{msg}"
        );
        let small = [0u8; 4];
        let ins = [XthunkHostArray {
            data: small.as_ptr(),
            size: 4,
        }; 5];
        let mut out = vec![0u8; 64 * 10 * 4];
        let outs = [XthunkHostArrayMut {
            data: out.as_mut_ptr(),
            size: out.len(),
        }];
        let (code, msg) = take(xthunk_executable_run_host(
            exe,
            ins.as_ptr(),
            5,
            outs.as_ptr(),
            1,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert!(
            msg.contains("parameter `x` needs 131072 bytes, got 4"),
            "{msg}"
        );
        xthunk_executable_free(exe);

        // A corrupt program: InvalidProgram, with the decoder's cause.
        let junk = b"\x0a\xff\xff\xff junk";
        let (code, _) = take(xthunk_executable_load_bytes(
            dev,
            junk.as_ptr(),
            junk.len(),
            &mut exe,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidProgram);
        let mut exe2 = ptr::null_mut();
        let e = xthunk_executable_load_file(dev, c"/nonexistent/p.txtpb".as_ptr(), &mut exe2);
        assert_eq!(xthunk_error_code(e), XthunkStatus::Io);
        assert!(xthunk_error_cause_count(e) >= 1, "the OS error is a cause");
        assert!(!xthunk_error_cause(e, 0).is_null());
        assert!(xthunk_error_cause(e, 99).is_null());
        xthunk_error_free(e);

        // Buffers: a round trip, and a size mismatch.
        let mut buf = ptr::null_mut();
        assert!(take(xthunk_buffer_new(dev, 16, &mut buf)).is_none());
        assert_eq!(xthunk_buffer_size(buf), 16);
        let data: Vec<u8> = (0..16).collect();
        assert!(take(xthunk_buffer_write(buf, data.as_ptr(), 16)).is_none());
        let mut back = [0xffu8; 16];
        assert!(take(xthunk_buffer_read(buf, back.as_mut_ptr(), 16)).is_none());
        assert_eq!(back.as_slice(), data.as_slice());
        let (code, _) = take(xthunk_buffer_read(buf, back.as_mut_ptr(), 8)).unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        xthunk_buffer_free(buf);
        xthunk_device_free(dev);
        xthunk_runtime_free(rt);
    }
}

#[test]
fn stablehlo_loads_from_a_file_and_from_bytes() {
    let (rt, dev) = host_device();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../stablehlo/tests/fixtures/mlp.mlir"
    );
    let text = std::fs::read(path).unwrap();
    let cpath = std::ffi::CString::new(path).unwrap();
    // SAFETY: live handles, valid strings and out-pointers, `text` of the size passed.
    unsafe {
        let mut exe = ptr::null_mut();
        assert!(take(xthunk_executable_load_file(dev, cpath.as_ptr(), &mut exe)).is_none());
        assert_eq!(xthunk_executable_parameter_count(exe), 5);
        assert_eq!(xthunk_executable_output_count(exe), 4);
        let mut info = std::mem::zeroed::<XthunkTensorInfo>();
        assert!(take(xthunk_executable_parameter(exe, 1, &mut info)).is_none());
        assert_eq!(CStr::from_ptr(info.name).to_str().unwrap(), "arg1");
        assert_eq!(std::slice::from_raw_parts(info.dims, info.rank), &[4, 16]);
        xthunk_executable_free(exe);
        let mut exe = ptr::null_mut();
        assert!(
            take(xthunk_executable_load_bytes(
                dev,
                text.as_ptr(),
                text.len(),
                &mut exe
            ))
            .is_none()
        );
        assert_eq!(xthunk_executable_output_count(exe), 4);
        xthunk_executable_free(exe);
        // Cut short: one message with the position.
        let mut exe = ptr::null_mut();
        let (code, msg) = take(xthunk_executable_load_bytes(
            dev,
            text.as_ptr(),
            600,
            &mut exe,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidProgram);
        assert!(msg.starts_with("StableHLO program: 3:"), "{msg}");
        assert!(exe.is_null());
        xthunk_device_free(dev);
        xthunk_runtime_free(rt);
    }
}

#[test]
fn plugins_load_from_c_and_missing_handlers_are_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("libbogus.so");
    std::fs::write(&bogus, b"not an ELF file").unwrap();
    let cbogus = std::ffi::CString::new(bogus.to_str().unwrap()).unwrap();
    let (rt, dev) = host_device();
    // A call to a target nobody registered, as JAX prints a `jax.ffi.ffi_call`.
    let text = "module {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n    %0 = stablehlo.custom_call @test.nobody(%arg0) {backend_config = \"\", mhlo.backend_config = {k = 3 : i64}} : (tensor<4xf32>) -> tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n";
    // SAFETY: valid strings, live handles, `text` of the size passed.
    unsafe {
        let (code, msg) = take(xthunk_load_plugin(cbogus.as_ptr())).unwrap();
        assert_eq!(code, XthunkStatus::Unavailable, "{msg}");
        assert!(
            msg.contains("libbogus.so: cannot be loaded: dlopen failed: "),
            "the loader's reason: {msg}"
        );
        let (code, _) = take(xthunk_load_plugin(ptr::null())).unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        let mut exe = ptr::null_mut();
        let (code, msg) = take(xthunk_executable_load_bytes(
            dev,
            text.as_ptr(),
            text.len(),
            &mut exe,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::Unsupported, "{msg}");
        assert!(
            msg.contains("custom call `test.nobody` has no handler on backend `host`"),
            "{msg}"
        );
        assert!(exe.is_null());
        xthunk_device_free(dev);
        xthunk_runtime_free(rt);
    }
}

#[test]
fn an_output_buffer_that_is_an_input_buffer_is_refused() {
    let (rt, dev) = host_device();
    let text = "module {\n  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {\n    %0 = stablehlo.add %b, %b : tensor<4xf32>\n    return %a, %0 : tensor<4xf32>, tensor<4xf32>\n  }\n}\n";
    // SAFETY: live handles, valid out-pointers, arrays of the counts passed.
    unsafe {
        let mut exe = ptr::null_mut();
        assert!(
            take(xthunk_executable_load_bytes(
                dev,
                text.as_ptr(),
                text.len(),
                &mut exe
            ))
            .is_none()
        );
        let mut bufs = [ptr::null_mut(); 4];
        for b in &mut bufs {
            assert!(take(xthunk_buffer_new(dev, 16, b)).is_none());
        }
        let [a, b, o1, o2] = bufs.map(|b| b as *const XthunkBuffer);
        // The case: o1 = copy(a) written into b's buffer while o2 = b + b reads it.
        let (code, msg) = take(xthunk_executable_run(
            exe,
            [a, b].as_ptr(),
            2,
            [b, o2].as_ptr(),
            2,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument, "{msg}");
        assert!(
            msg.contains("parameter 1 and output 0") && msg.contains("overlap"),
            "{msg}"
        );
        // Two outputs on one buffer, too.
        let (code, msg) = take(xthunk_executable_run(
            exe,
            [a, b].as_ptr(),
            2,
            [o1, o1].as_ptr(),
            2,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument, "{msg}");
        // Distinct buffers run; one buffer for both parameters is fine (both only read).
        assert!(
            take(xthunk_executable_run(
                exe,
                [a, b].as_ptr(),
                2,
                [o1, o2].as_ptr(),
                2
            ))
            .is_none()
        );
        assert!(
            take(xthunk_executable_run(
                exe,
                [a, a].as_ptr(),
                2,
                [o1, o2].as_ptr(),
                2
            ))
            .is_none()
        );
        for b in bufs {
            xthunk_buffer_free(b);
        }
        xthunk_executable_free(exe);
        xthunk_device_free(dev);
        xthunk_runtime_free(rt);
    }
}
