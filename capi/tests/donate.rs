//! Input–output aliases through the C ABI (issue 28, item 2): the case
//! (`o1 = copy(a)`, `o2 = b + b`, `o1` in `b`'s buffer) computes right when the program
//! declares the alias, by donation or by passing the buffer; wrong donations are refused with
//! messages naming the parameter and the output.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::CStr;
use std::ptr;
use xthunk_capi::*;

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

/// `(a, b) -> (a, b + b)`, with `b` donated to result 0 as JAX prints it.
const PROGRAM: &str = "module {\n  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> (tensor<4xf32>, tensor<4xf32>) {\n    %0 = stablehlo.add %b, %b : tensor<4xf32>\n    return %a, %0 : tensor<4xf32>, tensor<4xf32>\n  }\n}\n";

/// # Safety
/// `b` is a live buffer of 16 bytes.
unsafe fn write(b: *mut XthunkBuffer, v: [f32; 4]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    // SAFETY: the caller's live buffer; 16 bytes.
    assert!(take(unsafe { xthunk_buffer_write(b, bytes.as_ptr(), 16) }).is_none());
}

/// # Safety
/// `b` is a live buffer of 16 bytes.
unsafe fn read(b: *const XthunkBuffer) -> [f32; 4] {
    let mut bytes = [0u8; 16];
    // SAFETY: the caller's live buffer; 16 bytes.
    assert!(take(unsafe { xthunk_buffer_read(b, bytes.as_mut_ptr(), 16) }).is_none());
    let f = |i: usize| f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    [f(0), f(1), f(2), f(3)]
}

#[test]
fn a_declared_alias_runs_donated_or_with_the_buffer_passed() {
    // SAFETY: live handles, valid out-pointers, arrays of the counts passed.
    unsafe {
        let (mut rt, mut dev, mut exe) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        assert!(take(xthunk_runtime_new(1, &mut rt)).is_none());
        assert!(take(xthunk_runtime_device(rt, c"host".as_ptr(), 0, &mut dev)).is_none());
        let load = xthunk_executable_load_bytes(dev, PROGRAM.as_ptr(), PROGRAM.len(), &mut exe);
        assert!(take(load).is_none());
        assert_eq!(xthunk_executable_output_alias(exe, 0), 1);
        assert_eq!(xthunk_executable_output_alias(exe, 1), -1);
        assert_eq!(xthunk_executable_output_alias(exe, 7), -1);
        assert_eq!(xthunk_executable_output_alias(ptr::null(), 0), -1);
        let mut bufs = [ptr::null_mut(); 3];
        for b in &mut bufs {
            assert!(take(xthunk_buffer_new(dev, 16, b)).is_none());
        }
        let [a, b, o2] = bufs;
        let (ca, cb, co2) = (a as *const _, b as *const _, o2 as *const _);
        let params = [ca, cb];
        write(a, [1.0; 4]);

        // Donated: output 0 is NULL and lands in b's buffer; o2 reads b as it was.
        write(b, [10.0, 20.0, 30.0, 40.0]);
        let donate = [false, true];
        let run = xthunk_executable_run_donated(
            exe,
            params.as_ptr(),
            2,
            donate.as_ptr(),
            [ptr::null(), co2].as_ptr(),
            2,
        );
        assert!(take(run).is_none());
        assert_eq!(read(co2), [20.0, 40.0, 60.0, 80.0]);
        assert_eq!(read(cb), [1.0; 4]);

        // The call itself: b's buffer passed as output 0, now declared.
        write(b, [10.0, 20.0, 30.0, 40.0]);
        let run = xthunk_executable_run(exe, params.as_ptr(), 2, [cb, co2].as_ptr(), 2);
        assert!(take(run).is_none());
        assert_eq!(read(co2), [20.0, 40.0, 60.0, 80.0]);
        assert_eq!(read(cb), [1.0; 4]);

        // Refusals: a donated parameter with no alias, a NULL output nobody fills, an output
        // given its own buffer while its parameter is donated, an undeclared overlap.
        let (code, msg) = take(xthunk_executable_run_donated(
            exe,
            params.as_ptr(),
            2,
            [true, false].as_ptr(),
            [co2, ca].as_ptr(),
            2,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert!(msg.contains("parameter 0 `arg0` is donated"), "{msg}");
        assert!(msg.contains("aliases no output to it"), "{msg}");
        let (_, msg) = take(xthunk_executable_run_donated(
            exe,
            params.as_ptr(),
            2,
            ptr::null(),
            [ptr::null(), co2].as_ptr(),
            2,
        ))
        .unwrap();
        assert!(msg.contains("outputs[0] (`out0`) is NULL"), "{msg}");
        let (_, msg) = take(xthunk_executable_run_donated(
            exe,
            params.as_ptr(),
            2,
            donate.as_ptr(),
            [ca, co2].as_ptr(),
            2,
        ))
        .unwrap();
        assert!(
            msg.contains("output 0 `out0` is written into donated parameter 1"),
            "{msg}"
        );
        let (code, msg) = take(xthunk_executable_run(
            exe,
            params.as_ptr(),
            2,
            [co2, ca].as_ptr(),
            2,
        ))
        .unwrap();
        assert_eq!(code, XthunkStatus::InvalidArgument);
        assert!(
            msg.contains("parameter 0 and output 1") && msg.contains("overlap"),
            "{msg}"
        );

        for b in bufs {
            xthunk_buffer_free(b);
        }
        xthunk_executable_free(exe);
        xthunk_device_free(dev);
        xthunk_runtime_free(rt);
    }
}
