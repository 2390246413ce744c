//! `cuFuncGetParamInfo`: the offset and size of each parameter of a function, as the CUDA
//! backend reads them to check launches of user kernels (C ABI offsets: each parameter
//! aligned to its size), `CUDA_ERROR_INVALID_VALUE` past the last one with no diagnostic;
//! and a launch with neither `kernelParams` nor `extra` refused for a kernel with parameters.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ADD_F32_PTX, Cuda, ok, serial, take};
use xthunk_core::kernels::portable;
use xthunk_emulator::cuda;
use xthunk_emulator::diag::{self, Kind};
use xthunk_emulator::error::cu;

/// `(offset, size)` of every parameter of `f`, asked index by index until the emulator says
/// there is no such parameter (as the CUDA backend asks), and that answer.
fn layout(f: usize) -> (Vec<(usize, usize)>, u32) {
    let mut out = vec![];
    loop {
        let (mut offset, mut size) = (usize::MAX, usize::MAX);
        // SAFETY: a live function handle and two valid out-pointers.
        let r = unsafe { cuda::cuFuncGetParamInfo(f, out.len(), &mut offset, &mut size) };
        if r != cu::SUCCESS {
            return (out, r);
        }
        out.push((offset, size));
        assert!(out.len() < 64, "no end to the parameters: {out:?}");
    }
}

/// A PTX image declaring entry `name` with parameters of PTX types `types`, carrying `code`
/// (a portable unit) as its source.
fn image(name: &str, types: &[&str], code: &str) -> String {
    let params: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, t)| format!("\t.param {t} {name}_param_{i}"))
        .collect();
    common::ptx_with_source(
        &format!(
            ".version 8.5\n.target sm_90\n.address_size 64\n\n.visible .entry {name}(\n{}\n)\n{{\n\tret;\n}}\n",
            params.join(",\n")
        ),
        &portable::unit_with_prelude(code),
    )
}

#[test]
fn a_user_kernels_parameters_are_reported_with_c_offsets() {
    let _g = serial();
    let c = Cuda::new();
    let code = "extern \"C\" __global__ void k(const double* x, float* y, int n, float s) {\n  XT_FOR(i, n) y[i] = (float)x[i] * s;\n}\n";
    let m = c
        .load(image("k", &[".u64", ".u64", ".u32", ".f32"], code).as_bytes())
        .unwrap();
    let f = c.function(m, "k").unwrap();
    let (params, end) = layout(f);
    assert_eq!(params, [(0, 8), (8, 8), (16, 4), (20, 4)]);
    assert_eq!(end, cu::INVALID_VALUE);
    // Finding the count is no error worth a diagnostic.
    assert!(diag::take().is_empty());
    // `paramSize` is optional; `paramOffset` is not.
    let mut offset = 0usize;
    // SAFETY: a live function handle, a valid out-pointer and a null one.
    let r = unsafe { cuda::cuFuncGetParamInfo(f, 3, &mut offset, std::ptr::null_mut()) };
    ok(r, "cuFuncGetParamInfo without paramSize");
    assert_eq!(offset, 20);
    let mut size = 0usize;
    // SAFETY: as above, the other way round.
    let r = unsafe { cuda::cuFuncGetParamInfo(f, 0, std::ptr::null_mut(), &mut size) };
    assert_eq!(r, cu::INVALID_VALUE);
    let d = take(Kind::InvalidValue);
    assert!(
        d.len() == 1 && d[0].message.contains("paramOffset"),
        "{d:?}"
    );
    // A destroyed handle is no function.
    c.unload(m);
    // SAFETY: valid out-pointers; `f` is stale.
    let r = unsafe { cuda::cuFuncGetParamInfo(f, 0, &mut offset, &mut size) };
    assert_eq!(r, cu::INVALID_HANDLE);
    assert_eq!(take(Kind::InvalidHandle).len(), 1);
}

#[test]
fn parameters_are_aligned_to_their_size() {
    let _g = serial();
    let c = Cuda::new();
    // 1, 8, 2, 8, 4 and 2 bytes: padding before the double, the pointer and the last short.
    let code = "extern \"C\" __global__ void mixed(char a, double b, short c, int* out, float d, short e) {\n  if (xt_global_id() == 0) *out = (int)a + (int)b + c + (int)d + e;\n}\n";
    let m = c
        .load(
            image(
                "mixed",
                &[".u8", ".f64", ".u16", ".u64", ".f32", ".u16"],
                code,
            )
            .as_bytes(),
        )
        .unwrap();
    let f = c.function(m, "mixed").unwrap();
    let (params, end) = layout(f);
    assert_eq!(params, [(0, 1), (8, 8), (16, 2), (24, 8), (32, 4), (36, 2)]);
    assert_eq!(end, cu::INVALID_VALUE);
    c.unload(m);
    // A standard kernel: four 8-byte parameters.
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    assert_eq!(
        layout(f),
        (vec![(0, 8), (8, 8), (16, 8), (24, 8)], cu::INVALID_VALUE)
    );
    assert!(diag::take().is_empty());
    c.unload(m);
}

#[test]
fn a_launch_without_parameters_is_refused_when_the_kernel_has_some() {
    let _g = serial();
    let c = Cuda::new();
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    // SAFETY: a live function; null `kernelParams` and `extra` (what is tested).
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
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, cu::INVALID_VALUE);
    let d = take(Kind::InvalidValue);
    assert!(
        d.len() == 1
            && d[0]
                .message
                .contains("both kernelParams and extra are null, but `add_f32` has 4 parameters"),
        "{d:?}"
    );
    c.unload(m);
}

#[test]
fn a_null_pointer_parameter_of_a_user_kernel_is_refused() {
    let _g = serial();
    let c = Cuda::new();
    let code = "extern \"C\" __global__ void k(const double* x, float* y, int n, float s) {\n  XT_FOR(i, n) y[i] = (float)x[i] * s;\n}\n";
    let m = c
        .load(image("k", &[".u64", ".u64", ".u32", ".f32"], code).as_bytes())
        .unwrap();
    let f = c.function(m, "k").unwrap();
    let (x, y) = (c.alloc(8 * 4), c.alloc(4 * 4));
    let (n, s) = (4u64, u64::from(2.0f32.to_bits()));
    // The CPU execution would crash on it (a GPU faults): refused, naming the parameter.
    assert_eq!(c.launch(f, &[0, y, n, s], 0), cu::ILLEGAL_ADDRESS);
    let d = take(Kind::InvalidValue);
    assert!(
        d.len() == 1 && d[0].message.contains("pointer parameter 0 of `k` is null"),
        "{d:?}"
    );
    assert_eq!(c.launch(f, &[x, 0x1000, n, s], 0), cu::ILLEGAL_ADDRESS);
    let d = take(Kind::InvalidValue);
    assert!(
        d.len() == 1
            && d[0]
                .message
                .contains("pointer parameter 1 of `k` (0x1000) points into no live allocation"),
        "{d:?}"
    );
    // With both pointers live, it runs.
    let xs: Vec<u8> = [1.0f64, -2.0, 0.5, 8.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    ok(c.htod(x, &xs), "htod");
    ok(c.launch(f, &[x, y, n, s], 0), "launch");
    ok(c.sync(0), "sync");
    assert_eq!(c.read_f32(y, 4), [2.0, -4.0, 1.0, 16.0]);
    for p in [x, y] {
        ok(c.free(p), "free");
    }
    c.unload(m);
}
