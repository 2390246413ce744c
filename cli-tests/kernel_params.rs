//! Launches of a user kernel whose arguments do not match its parameters, on the emulated CUDA
//! device: `xthunk run` of a program launching `k(const double*, float*, int, float)` (a
//! `source` module, compiled by the real NVRTC, its carried source run by the driver emulator)
//! with 3 arguments, with 5, with an i64 immediate for the first pointer, an f64 for the
//! float and an i64 for the int. Each must fail with one clear error line naming the
//! argument (the CUDA backend checks the driver's parameter layout, `cuFuncGetParamInfo`; an
//! 8-byte immediate for a pointer has the pointer's size: the emulator refuses it as an
//! illegal address, naming the parameter in its diagnostic, a null one included, and the
//! backend's error names the 8-byte immediates), never a crash or a silent wrong result; the
//! correct launch still runs and computes the right values.
//!
//! Needs the emulator library (`cargo test --workspace` builds it) and NVRTC (the pip wheel);
//! without them each test is SKIPPED with the reason, unless `XTHUNK_REQUIRE_EMULATOR=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/emulator.rs"]
mod emulator;

use emulator::{emulated_command, emulator_lib, repo_root};
use std::path::{Path, PathBuf};
use std::process::Output;
use xthunk::builder::ExecutableBuilder;
use xthunk::ir::{Access, DType, Executable, KernelArg, Module, ModuleImage, Scalar};

const N: u64 = 1000;
const SCALE: f32 = 1.5;

const SOURCE: &str = "extern \"C\" __global__ void k(const double* x, float* y, int n, float s) {\n  XT_FOR(i, n) y[i] = (float)(x[i] * (double)s);\n}\n";

/// Whether the test can run: the emulator is built and NVRTC is found (printed as SKIPPED
/// with why when not; a failure under `XTHUNK_REQUIRE_EMULATOR`).
fn can_run(test: &str) -> bool {
    let why = if emulator_lib().is_none() {
        Some("the emulator library is not built (run `cargo test --workspace`)".to_string())
    } else {
        xthunk_cuda::compile::Nvrtc::load(&xthunk_cuda::loader::SearchConfig::from_env())
            .err()
            .map(|e| format!("NVRTC is needed to compile the kernel: {e}"))
    };
    let Some(why) = why else {
        return true;
    };
    if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
        panic!("{test}: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kernel-params-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `x` (f64) in, `y` (f32) out, one launch of `k` with `args(x, y)`.
fn program(args: impl FnOnce(KernelArg, KernelArg) -> Vec<KernelArg>) -> Executable {
    let mut b = ExecutableBuilder::new("kernel_params");
    let x = b.parameter("x", DType::F64, &[N]);
    let y = b.output("y", DType::F32, &[N]);
    let m = b.module(Module {
        name: "user".into(),
        images: vec![ModuleImage::Source {
            code: SOURCE.into(),
        }],
        options: Default::default(),
    });
    let args = args(
        KernelArg::Buffer {
            slice: x.slice(),
            access: Access::Read,
        },
        KernelArg::Buffer {
            slice: y.slice(),
            access: Access::Write,
        },
    );
    b.kernel(&m, "k", N, args);
    b.build().unwrap()
}

fn write_npy_f64(path: &Path, v: &[f64]) {
    let mut header = format!(
        "{{'descr': '<f8', 'fortran_order': False, 'shape': ({},), }}",
        v.len()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    std::fs::write(path, bytes).unwrap();
}

fn input() -> Vec<f64> {
    (0..N).map(|i| i as f64 * 0.125 - 31.0).collect()
}

/// `xthunk run` of `exe` on the emulated CUDA device, with `x = input()`.
fn run(name: &str, exe: &Executable) -> (Output, PathBuf) {
    let dir = scratch(name);
    let prog = dir.join("prog.txtpb");
    xthunk::proto::save_file(&prog, exe).unwrap();
    let x = dir.join("x.npy");
    write_npy_f64(&x, &input());
    let out = dir.join("out");
    let o = emulated_command(env!("CARGO_BIN_EXE_xthunk"))
        .args([
            "run",
            prog.to_str().unwrap(),
            "--backend",
            "cuda",
            "--input",
        ])
        .arg(format!("x={}", x.display()))
        .arg("--output-dir")
        .arg(&out)
        .current_dir(repo_root())
        .output()
        .unwrap();
    (o, out)
}

#[test]
fn a_correct_launch_of_a_user_kernel_runs_and_is_right() {
    if !can_run("a_correct_launch_of_a_user_kernel_runs_and_is_right") {
        return;
    }
    let exe = program(|x, y| {
        vec![
            x,
            y,
            KernelArg::Scalar(Scalar::I32(N as i32)),
            KernelArg::Scalar(Scalar::F32(SCALE)),
        ]
    });
    let (o, out) = run("correct", &exe);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "xthunk run failed: {:?}\n{err}",
        o.status
    );
    let bytes = std::fs::read(out.join("y.npy")).unwrap();
    let y: Vec<f32> = npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap();
    assert_eq!(y.len(), N as usize);
    for (i, (g, x)) in y.iter().zip(input()).enumerate() {
        let want = (x * f64::from(SCALE)) as f32;
        assert_eq!(*g, want, "y[{i}]");
    }
}

#[test]
fn mismatching_launches_are_one_clear_error_naming_the_argument() {
    if !can_run("mismatching_launches_are_one_clear_error_naming_the_argument") {
        return;
    }
    let n = KernelArg::Scalar(Scalar::I32(N as i32));
    let s = KernelArg::Scalar(Scalar::F32(SCALE));
    type Case = (
        &'static str,
        Box<dyn Fn(KernelArg, KernelArg) -> Vec<KernelArg>>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "three_args",
            Box::new(move |x, y| vec![x, y, n]),
            "kernel `k` failed: the driver declares 4 parameters, the launch passes 3",
        ),
        (
            "five_args",
            Box::new(move |x, y| vec![x, y, n, s, n]),
            "kernel `k` failed: the driver declares 4 parameters, the launch passes 5",
        ),
        (
            "i64_for_a_pointer",
            Box::new(move |_, y| vec![KernelArg::Scalar(Scalar::I64(0x1000)), y, n, s]),
            "kernel `k` failed: cuda: cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700) (argument 0 (i64:4096) is an 8-byte immediate: if the kernel takes a pointer there, pass a buffer)",
        ),
        (
            "null_i64_for_a_pointer",
            Box::new(move |_, y| vec![KernelArg::Scalar(Scalar::I64(0)), y, n, s]),
            "kernel `k` failed: cuda: cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700) (argument 0 (i64:0) is an 8-byte immediate: if the kernel takes a pointer there, pass a buffer)",
        ),
        (
            "f64_for_a_float",
            Box::new(move |x, y| vec![x, y, n, KernelArg::Scalar(Scalar::F64(1.5))]),
            "kernel `k` failed: argument 3: f64:1.5 (8 bytes) was passed, the driver declares a 4-byte parameter",
        ),
        (
            "i64_for_an_int",
            Box::new(move |x, y| vec![x, y, KernelArg::Scalar(Scalar::I64(N as i64)), s]),
            "kernel `k` failed: argument 2: i64:1000 (8 bytes) was passed, the driver declares a 4-byte parameter",
        ),
    ];
    for (name, args, want) in cases {
        let (o, out) = run(name, &program(args));
        let err = String::from_utf8_lossy(&o.stderr);
        let code = o.status.code();
        // Refused: an error exit (a crash has no exit code), nothing written.
        assert!(
            matches!(code, Some(c) if c != 0),
            "{name}: xthunk run exited with {:?}, not an error:\n{err}",
            o.status
        );
        assert!(!out.join("y.npy").exists(), "{name}: an output was written");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(
            errors.len() == 1 && errors[0].contains(want),
            "{name}: want one error line with `{want}`, got {errors:?}:\n{err}"
        );
        // The count and size mismatches are refused by the backend before the driver sees
        // them; an 8-byte immediate for a pointer has the pointer's size and is refused by
        // the (emulated) driver, whose diagnostic names the parameter.
        let emulator: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("xthunk-emulator:"))
            .collect();
        if name.ends_with("for_a_pointer") {
            assert!(
                emulator.len() == 1
                    && emulator[0].contains("in cuLaunchKernel(k): pointer parameter 0 of `k`"),
                "{name}: {emulator:?}"
            );
        } else {
            assert!(
                emulator.is_empty(),
                "{name}: the driver saw the launch: {emulator:?}"
            );
        }
    }
}
