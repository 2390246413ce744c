//! Modules and launches: kernel names read from real NVRTC cubins and PTX (when the pip wheel
//! is installed; a hand-written PTX text carrying the standard library's source otherwise),
//! the carried portable source executed on the CPU, parameters decoded by the standard
//! library's signatures, buffers checked, unknown kernels and binary-only images refused, a
//! broken portable kernel caught, launch failures injected.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ADD_F32, ADD_F32_PTX, Cuda, ok, serial, take};
use half::{bf16, f16};
use xthunk_core::ir::{Access, DType, Scalar};
use xthunk_core::kernels::{Extent, HostArg, ParamKind, portable, standard_library};
use xthunk_emulator::diag::Kind;
use xthunk_emulator::error::cu;

fn add_f32_roundtrip(c: &Cuda, image: &[u8]) {
    let m = c.load(image).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let n = 1000usize;
    let (a, b, out) = (c.alloc(4 * n), c.alloc(4 * n), c.alloc(4 * n));
    let av: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let bv: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    c.write_f32(a, &av);
    c.write_f32(b, &bv);
    ok(c.launch(f, &[a, b, out, n as u64], 0), "cuLaunchKernel");
    let got = c.read_f32(out, n);
    for i in 0..n {
        assert_eq!(got[i], av[i] + bv[i], "element {i}");
    }
    for p in [a, b, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
}

#[test]
fn ptx_text_add_f32() {
    let _g = serial();
    let c = Cuda::new();
    add_f32_roundtrip(&c, ADD_F32_PTX.as_bytes());
}

#[test]
fn a_binary_only_image_runs_nothing() {
    let _g = serial();
    let c = Cuda::new();
    // add_f32 is a standard kernel's name, but the image carries no source: its code is
    // unknown, so it must not run (least of all as the standard kernel).
    let bare = ".version 8.5\n.target sm_90\n.visible .entry add_f32(\n\t.param .u64 p0,\n\t.param .u64 p1,\n\t.param .u64 p2,\n\t.param .u64 p3\n)\n{\n\tret;\n}\n\0";
    let m = c.load(bare.as_bytes()).unwrap();
    assert_eq!(c.function(m, "add_f32"), Err(cu::NOT_FOUND));
    let d = take(Kind::Unsupported);
    assert!(
        d[0].message.contains("carries no portable source"),
        "{}",
        d[0].message
    );
    c.unload(m);
}

#[test]
fn a_user_kernel_named_like_a_standard_one_runs_its_own_code() {
    let _g = serial();
    let c = Cuda::new();
    // `add_f32` that multiplies: the emulator must run this code, not the standard add.
    let unit = portable::unit_with_prelude(
        "extern \"C\" __global__ void add_f32(const float* a, const float* b, float* out, long long n) {\n  XT_FOR(i, n) out[i] = a[i] * b[i];\n}\n",
    );
    let ptx = common::ptx_with_source(
        ".version 8.5\n.target sm_90\n.visible .entry add_f32(\n\t.param .u64 p0,\n\t.param .u64 p1,\n\t.param .u64 p2,\n\t.param .u64 p3\n)\n{\n\tret;\n}\n",
        &unit,
    );
    let m = c.load(ptx.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let n = 257usize;
    let (a, b, out) = (c.alloc(4 * n), c.alloc(4 * n), c.alloc(4 * n));
    let av: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 7.0).collect();
    let bv: Vec<f32> = (0..n).map(|i| 3.0 - i as f32 * 0.5).collect();
    c.write_f32(a, &av);
    c.write_f32(b, &bv);
    c.write_f32(out, &vec![f32::NAN; n]);
    ok(c.launch(f, &[a, b, out, n as u64], 0), "cuLaunchKernel");
    let got = c.read_f32(out, n);
    for i in 0..n {
        let want = (av[i] as f64 * bv[i] as f64) as f32;
        assert_eq!(got[i], want, "element {i}");
    }
    for p in [a, b, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
}

#[test]
fn a_broken_portable_kernel_fails_the_comparison() {
    let _g = serial();
    let c = Cuda::new();
    // The standard library's source with `add_f32` broken (an off-by-one: the last element is
    // skipped): the emulator runs this source, so comparing with the host implementation
    // must catch it — emulated conformance now tests the portable source itself.
    let good = portable::kernel_definition("add_f32").unwrap();
    let broken = good.replacen("XT_FOR(i, n)", "XT_FOR(i, n - 1)", 1);
    assert_ne!(good, broken, "the loop bound was not found: {good}");
    let unit = portable::unit_with_prelude(&broken);
    let ptx = common::ptx_with_source(
        ".version 8.5\n.target sm_90\n.visible .entry add_f32(\n\t.param .u64 p0,\n\t.param .u64 p1,\n\t.param .u64 p2,\n\t.param .u64 p3\n)\n{\n\tret;\n}\n",
        &unit,
    );
    let m = c.load(ptx.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let n = 100usize;
    let (a, b, out) = (c.alloc(4 * n), c.alloc(4 * n), c.alloc(4 * n));
    c.write_f32(a, &vec![1.0; n]);
    c.write_f32(b, &vec![2.0; n]);
    c.write_f32(out, &vec![-1.0; n]);
    ok(c.launch(f, &[a, b, out, n as u64], 0), "cuLaunchKernel");
    let got = c.read_f32(out, n);
    assert_eq!(&got[..n - 1], &vec![3.0; n - 1][..]);
    assert_eq!(got[n - 1], -1.0, "the broken kernel's skipped element");
    for p in [a, b, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
}

#[test]
fn nvrtc_cubin_and_ptx_add_f32() {
    let _g = serial();
    let Some(nvrtc) = common::nvrtc() else {
        eprintln!(
            "SKIPPED: NVRTC not installed (pip install --target ~/.cache/xthunk/pip nvidia-cuda-nvrtc-cu12)"
        );
        return;
    };
    let c = Cuda::new();
    let cubin = common::nvrtc_compile(&nvrtc, &portable::with_prelude(ADD_F32), "sm_90").unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF");
    add_f32_roundtrip(&c, &cubin);
    let mut ptx =
        common::nvrtc_compile(&nvrtc, &portable::with_prelude(ADD_F32), "compute_90").unwrap();
    if ptx.last() != Some(&0) {
        ptx.push(0);
    }
    add_f32_roundtrip(&c, &ptx);
    // An sm_80 cubin does not run on the sm_90 device (no binary compatibility across majors).
    let old = common::nvrtc_compile(&nvrtc, ADD_F32, "sm_80").unwrap();
    assert_eq!(c.load(&old), Err(cu::NO_BINARY_FOR_GPU));
    assert_eq!(take(Kind::InvalidValue).len(), 1);
}

/// Example immediates for a parameter.
fn scalar_for(name: &str, dt: DType) -> Scalar {
    match (name, dt) {
        ("n", _) => Scalar::I64(37),
        ("rows", _) => Scalar::I64(5),
        ("cols", _) => Scalar::I64(7),
        (_, DType::F16) => Scalar::F16(f16::from_f32(0.75).to_bits()),
        (_, DType::BF16) => Scalar::BF16(bf16::from_f32(-1.25).to_bits()),
        (_, DType::F32) => Scalar::F32(0.5),
        (_, DType::F64) => Scalar::F64(-0.375),
        (_, DType::I8) => Scalar::I8(-3),
        (_, DType::U8) => Scalar::U8(200),
        (_, DType::I32) => Scalar::I32(-70000),
        (_, DType::I64) => Scalar::I64(-5_000_000_000),
        (_, DType::Pred) => Scalar::Pred(true),
        (_, DType::I16) => Scalar::I16(-300),
        (_, DType::U16) => Scalar::U16(60000),
        (_, DType::U32) => Scalar::U32(4_000_000_000),
        (_, DType::U64) => Scalar::U64(10_000_000_000_000_000_000),
        (_, other) => panic!("no standard kernel takes {other}"),
    }
}

/// Input bytes for a buffer: element `i` holds a small, type-appropriate value.
fn input(dt: DType, count: usize) -> Vec<u8> {
    (0..count)
        .flat_map(|i| {
            let x = (i as f64 * 0.37).sin() * 3.0;
            let s = match dt {
                DType::F16 => Scalar::F16(f16::from_f64(x).to_bits()),
                DType::BF16 => Scalar::BF16(bf16::from_f64(x).to_bits()),
                DType::F32 => Scalar::F32(x as f32),
                DType::F64 => Scalar::F64(x),
                DType::I8 => Scalar::I8(i as i8),
                DType::U8 => Scalar::U8(i as u8),
                DType::I32 => Scalar::I32(i as i32 * 1000 - 7),
                DType::I64 => Scalar::I64(i as i64 * 100_000 - 7),
                DType::Pred => Scalar::Pred(i % 2 == 0),
                DType::I16 => Scalar::I16(i as i16 * 10 - 7),
                DType::U16 => Scalar::U16(i as u16 * 10),
                DType::U32 => Scalar::U32(i as u32 * 1000),
                DType::U64 => Scalar::U64(i as u64 * 100_000),
                other => panic!("no standard kernel takes {other}"),
            };
            s.to_le_bytes()
        })
        .collect()
}

/// Runs standard kernel `name` through the emulator (module `m`) and directly on the host,
/// and compares every output byte: the emulator must decode the raw parameters exactly.
fn compare(c: &Cuda, m: usize, name: &str) {
    let k = standard_library().get(name).unwrap();
    let sig = &k.signature;
    let scalars: Vec<Option<Scalar>> = sig
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Scalar(dt) => Some(scalar_for(p.name, dt)),
            _ => None,
        })
        .collect();
    let mut host: Vec<Vec<u8>> = vec![];
    let mut dev: Vec<(u64, usize)> = vec![];
    let mut slots = vec![];
    for (i, p) in sig.params.iter().enumerate() {
        match &p.kind {
            ParamKind::Scalar(_) => {
                let b = scalars[i].unwrap().to_le_bytes();
                let mut s = [0u8; 8];
                s[..b.len()].copy_from_slice(&b);
                slots.push(u64::from_le_bytes(s));
                host.push(vec![]);
                dev.push((0, 0));
            }
            ParamKind::Buffer {
                dtype,
                access,
                elems,
            } => {
                let Extent::Product(idx) = elems else {
                    panic!("fixed extent")
                };
                let count: usize = idx
                    .iter()
                    .map(|&j| scalars[j].unwrap().as_i64().unwrap() as usize)
                    .product();
                let data = if *access == Access::Write {
                    vec![0u8; count * dtype.size()]
                } else {
                    input(*dtype, count)
                };
                let d = c.alloc(data.len().max(1));
                if *access != Access::Write {
                    ok(c.htod(d, &data), "upload");
                }
                slots.push(d);
                dev.push((d, data.len()));
                host.push(data);
            }
        }
    }
    let f = c.function(m, name).unwrap();
    ok(c.launch(f, &slots, 0), name);
    let args: Vec<HostArg> = sig
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| match p.kind {
            ParamKind::Scalar(_) => HostArg::Scalar(scalars[i].unwrap()),
            ParamKind::Buffer { .. } => HostArg::Buffer {
                ptr: host[i].as_mut_ptr(),
                len: host[i].len(),
            },
        })
        .collect();
    // SAFETY: every buffer is a live Vec of exactly `len` bytes, used only by this call.
    unsafe { (k.func)(&args) }.unwrap();
    for (i, p) in sig.params.iter().enumerate() {
        if let ParamKind::Buffer { access, .. } = p.kind {
            let (d, len) = dev[i];
            if access.writes() {
                let got = c.read(d, len);
                if let (true, ParamKind::Buffer { dtype, .. }) = (inexact(name), &p.kind) {
                    close(name, p.name, *dtype, &got, &host[i]);
                } else {
                    assert_eq!(got, host[i], "{name}: `{}` differs", p.name);
                }
            }
            ok(c.free(d), "free");
        }
    }
}

/// Kernels whose portable source differs from the host implementation by rounding (their
/// transcendental functions and reduction order).
fn inexact(name: &str) -> bool {
    [
        "softmax_",
        "layer_norm_",
        "exp_",
        "log_",
        "tanh_",
        "gelu_",
        "sigmoid_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Elementwise closeness: a few units in the last place of `dt`.
fn close(name: &str, param: &str, dt: DType, got: &[u8], want: &[u8]) {
    let es = dt.size();
    let rel = match dt {
        DType::F32 => 2e-5,
        DType::BF16 => 2.0 * 2f64.powi(-7),
        DType::F16 => 2.0 * 2f64.powi(-10),
        _ => 1e-12,
    };
    let val = |b: &[u8]| match dt {
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
        DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        _ => panic!("{name}: not a float output"),
    };
    for (j, (g, w)) in got.chunks(es).zip(want.chunks(es)).enumerate() {
        let (g, w) = (val(g), val(w));
        let same = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= rel * (1.0 + w.abs());
        assert!(same, "{name}: `{param}`[{j}] = {g:e}, the host gives {w:e}");
    }
}

const SAMPLE: [&str; 16] = [
    "add_f32",
    "fill_f16",
    "fill_i64",
    "iota_bf16",
    "iota_i8",
    "axpy_f64",
    "scale_f16",
    "convert_f32_bf16",
    "convert_i32_f64",
    "reduce_sum_i32",
    "reduce_max_u8",
    "softmax_f32",
    "layer_norm_bf16",
    "transpose_u8",
    "sub_row_i32",
    "relu_i64",
];

#[test]
fn standard_kernels_decode_their_parameters() {
    let _g = serial();
    let c = Cuda::new();
    let image = match common::nvrtc() {
        Some(nvrtc) => {
            let defs: String = SAMPLE
                .iter()
                .map(|n| portable::kernel_definition(n).unwrap())
                .collect();
            common::nvrtc_compile(&nvrtc, &portable::with_prelude(&defs), "sm_90").unwrap()
        }
        None => {
            eprintln!("NVRTC not installed: using a PTX text that only declares the kernels");
            let mut ptx = String::from(".version 8.5\n.target sm_90\n.address_size 64\n");
            for n in SAMPLE {
                // Parameters of the signature's sizes (pointers are .u64).
                let params: Vec<String> = standard_library()
                    .get(n)
                    .unwrap()
                    .signature
                    .params
                    .iter()
                    .map(|p| match p.kind {
                        ParamKind::Buffer { .. } => ".param .u64 p".to_string(),
                        ParamKind::Scalar(dt) => format!(".param .b{} p", 8 * dt.size()),
                    })
                    .collect();
                ptx.push_str(&format!(
                    ".visible .entry {n}(\n{}\n)\n{{\n}}\n",
                    params.join(",\n")
                ));
            }
            ptx.push('\0');
            ptx.into_bytes()
        }
    };
    let m = c.load(&image).unwrap();
    for name in SAMPLE {
        compare(&c, m, name);
    }
    c.unload(m);
    assert!(xthunk_emulator::diag::take().is_empty());
}

#[test]
fn unknown_kernels_are_not_found() {
    let _g = serial();
    let c = Cuda::new();
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    assert_eq!(c.function(m, "mul_f32"), Err(cu::NOT_FOUND));
    assert!(
        take(Kind::InvalidValue)[0]
            .message
            .contains("it has add_f32")
    );
    c.unload(m);
    // In the image but not in the source it carries.
    let custom = common::ptx_with_source(
        ".version 8.5\n.target sm_90\n.visible .entry my_kernel(\n)\n{\n}\n",
        portable::standard_unit(),
    );
    let m = c.load(custom.as_bytes()).unwrap();
    assert_eq!(c.function(m, "my_kernel"), Err(cu::NOT_FOUND));
    let d = take(Kind::InvalidValue);
    assert!(
        d[0].message.contains("defines no kernel of that name"),
        "{}",
        d[0].message
    );
    c.unload(m);
    // A function of an unloaded module is a destroyed handle.
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    c.unload(m);
    assert_eq!(c.launch(f, &[0, 0, 0, 0], 0), cu::INVALID_HANDLE);
    // Garbage is not an image.
    assert_eq!(c.load(b"hello\0"), Err(cu::INVALID_IMAGE));
}

#[test]
fn kernel_buffers_are_checked() {
    let _g = serial();
    let c = Cuda::new();
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let (a, b, out) = (c.alloc(400), c.alloc(400), c.alloc(396));
    // n = 100 floats, but `out` holds 99.
    assert_eq!(c.launch(f, &[a, b, out, 100], 0), cu::ILLEGAL_ADDRESS);
    let d = take(Kind::OutOfBounds);
    assert_eq!(d[0].call, "cuLaunchKernel(add_f32)");
    assert!(
        d[0].message.contains("kernel buffer `out` (100 x f32)"),
        "{}",
        d[0].message
    );
    // A freed input.
    ok(c.free(b), "free");
    assert_eq!(c.launch(f, &[a, b, out, 10], 0), cu::ILLEGAL_ADDRESS);
    assert_eq!(take(Kind::UseAfterFree).len(), 1);
    // Zero elements touch nothing.
    ok(c.launch(f, &[0, 0, 0, 0], 0), "empty launch");
    // Through `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER / SIZE / END).
    let b = c.alloc(400);
    c.write_f32(a, &[1.0; 100]);
    c.write_f32(b, &[2.0; 100]);
    let mut packed = [a, b, out, 99u64];
    let mut size = std::mem::size_of_val(&packed);
    let mut extra: [*mut std::ffi::c_void; 5] = [
        std::ptr::without_provenance_mut(1), // CU_LAUNCH_PARAM_BUFFER_POINTER
        packed.as_mut_ptr().cast(),
        std::ptr::without_provenance_mut(2), // CU_LAUNCH_PARAM_BUFFER_SIZE
        (&mut size as *mut usize).cast(),
        std::ptr::null_mut(),
    ];
    // SAFETY: `extra` is a terminated tag list pointing at live locals.
    let r = unsafe {
        xthunk_emulator::cuda::cuLaunchKernel(
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
    ok(r, "launch with extra");
    assert_eq!(c.read_f32(out, 99), vec![3.0; 99]);
    for p in [a, b, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
}

#[test]
fn injected_launch_failure() {
    let _g = serial();
    let c = Cuda::new();
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    common::set("fail_launch", "2");
    ok(c.launch(f, &[0, 0, 0, 0], 0), "first launch");
    assert_eq!(c.launch(f, &[0, 0, 0, 0], 0), cu::LAUNCH_OUT_OF_RESOURCES);
    assert_eq!(take(Kind::Injected).len(), 1);
    ok(c.launch(f, &[0, 0, 0, 0], 0), "third launch");
    common::set("fail_launch", "0");
    c.unload(m);
}
