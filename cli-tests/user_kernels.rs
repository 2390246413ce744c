//! Portable kernel source on emulated GPUs, through the conformance suite: the `kernels/user/`
//! area (the checked set `conformance/kernels/user/checked_set.cu`, compiled by the real NVRTC and
//! hipRTC, the image's carried source executed by the driver emulator) with warps of 32 lanes
//! on the CUDA backend and 64 on the ROCm backend; and deliberately broken copies of a
//! standard kernel's and of a user kernel's source failing their checks there, which shows
//! that emulated conformance runs the kernel source itself, not a host implementation of a
//! same-named kernel.
//!
//! Run it under the emulator: `ci/with-emulator.sh cargo test -p xthunk --test user_kernels`.
//! Without a device of that backend (a plain `cargo test`, which has no emulator in the vendor
//! library path) each test is reported SKIPPED with the reason; with
//! `XTHUNK_USER_KERNELS_REQUIRE_DEVICES=1` (CI's `emu-user-kernels` step, under the emulator) a
//! missing device fails it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk::Device;

#[path = "common/binary.rs"]
mod binary;
#[path = "common/emulator.rs"]
mod emulator;
use xthunk::core::kernels::portable;
use xthunk::ir::{Module, ModuleImage};
use xthunk_conformance::{Outcome, Report, Subject, checks, run_checks};

/// The backend whose warps have `lanes` lanes (cuda: 32, rocm: 64), as a conformance subject,
/// when it has an (emulated) device.
fn subject(lanes: u32) -> Option<Subject> {
    let name = match lanes {
        32 => "cuda",
        64 => "rocm",
        _ => return None,
    };
    let rt = xthunk::Runtime::new();
    let found = rt
        .registry()
        .get(name)
        .ok_or_else(|| format!("no backend `{name}` in this build"))
        .and_then(|b| b.device(0).map(|d| (b, d)).map_err(|e| e.to_string()));
    match found {
        Ok((backend, dev)) => {
            let dev: Arc<dyn Device> = dev;
            eprintln!("{name}: {}", dev.info().name);
            assert!(dev.info().emulated, "{name}: not the emulator's device");
            assert_eq!(dev.capabilities().warp_size, lanes, "{name}'s warp size");
            Some(Subject::new(backend.clone()))
        }
        Err(e) => {
            assert!(
                !std::env::var("XTHUNK_USER_KERNELS_REQUIRE_DEVICES").is_ok_and(|v| v == "1"),
                "{name}: {e}"
            );
            eprintln!("SKIPPED ({name}, {lanes} lanes): {e}");
            None
        }
    }
}

fn source_module(name: &str, code: String) -> Module {
    Module {
        name: name.into(),
        images: vec![ModuleImage::Source { code }],
        options: Default::default(),
    }
}

/// The outcome of check `name` in `report`.
fn outcome<'a>(report: &'a Report, name: &str) -> &'a Outcome {
    let table = report.table(true);
    &report
        .results
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no check {name}:\n{table}"))
        .outcome
}

#[test]
fn the_user_kernel_area_passes_with_32_and_64_lane_warps() {
    for lanes in [32, 64] {
        let Some(s) = subject(lanes) else { continue };
        let set = checks::user_kernel_checks(Arc::new(checks::user_kernels_module()));
        let n = set.len();
        let report = run_checks(&s, 0, &set);
        assert_eq!(
            report.counts()[0],
            n,
            "{lanes} lanes:\n{}",
            report.table(true)
        );
    }
}

/// The CUDA-style training kernels (`conformance/kernels/cuda/`, written with CUDA's own
/// spellings and headers) on emulated CUDA (32 lanes) and ROCm (64 lanes), against their f64
/// references and the CPU execution.
#[test]
fn the_cuda_style_kernels_pass_with_32_and_64_lane_warps() {
    for lanes in [32, 64] {
        let Some(s) = subject(lanes) else { continue };
        let set = checks::cuda_kernel_checks();
        let n = set.len();
        let report = run_checks(&s, 0, &set);
        assert_eq!(
            report.counts()[0],
            n,
            "{lanes} lanes:\n{}",
            report.table(true)
        );
    }
}

/// The softmax written for 32-thread blocks (butterfly offsets from `warpSize / 2`): right on
/// emulated CUDA; on emulated ROCm (64 lanes) the emulator reports, at the launch, the shuffle
/// that reads a lane the block does not have, instead of a silently wrong result. (A fault is
/// sticky on a HIP device, so the 64-lane run is `xthunk run` in a process of its own.)
#[test]
fn a_32_lane_softmax_fails_at_the_shuffle_on_64_lanes() {
    let (rows, cols) = (4usize, 70usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| (i % 11) as f32 * 0.5 - 2.0)
        .collect();
    if let Some(s) = subject(32) {
        let dev: Arc<dyn Device> = s.backend.device(0).unwrap();
        let y = checks::cuda_kernels::softmax_block32(&dev, &x, rows, cols).unwrap();
        for r in 0..rows {
            let sum: f32 = y[r * cols..(r + 1) * cols].iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "row {r}: {sum}");
        }
    }
    if subject(64).is_none()
        || !emulator::have_emulator("a_32_lane_softmax_fails_at_the_shuffle_on_64_lanes")
    {
        return;
    }
    let dir = binary::scratch_in("user-kernels", "softmax-64-lanes");
    let code = checks::cuda_kernels::FILES
        .iter()
        .map(|(_, c)| *c)
        .collect::<Vec<_>>()
        .join("\n");
    let narrow = dir.join("narrow.txtpb");
    std::fs::write(&narrow, cuda_program(&code, "softmax_forward_block32", 32)).unwrap();
    let o = emulator::emulated_command(env!("CARGO_BIN_EXE_xthunk"))
        .args(["run", "--backend", "rocm", narrow.to_str().unwrap()])
        .output()
        .unwrap();
    let err = binary::text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("xthunk-emulator:") && l.contains("softmax_forward_block32"))
        .unwrap_or_else(|| panic!("no emulator report: {err}"));
    assert!(
        line.contains("__shfl_xor_sync in block (0,0,0), thread 0 (lane 0 of a 64-lane warp): it reads a lane outside the block"),
        "{line}"
    );
}

/// Text-format escaping of a string's contents.
fn escaped(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A program of one module `cuda` (the CUDA-style set with its carried header, or `code` in
/// its place) launching `kernel` with blocks of `block` threads.
fn cuda_program(code: &str, kernel: &str, block: u32) -> String {
    let header = checks::cuda_kernels::COMMON_H;
    format!(
        "abi_version: 1\nname: \"cuda\"\n\
         allocations: [{{ size: 4096 alignment: 64 parameter: 0 }}]\n\
         modules: [{{ name: \"cuda\" images: [{{ source {{ code: \"{}\" }} }}] \
         options {{ headers: [{{ name: \"common.h\" code: \"{}\" }}] }} }}]\n\
         entry: [{{ kernel {{ module: \"cuda\" name: \"{kernel}\" grid {{ x: 4 y: 1 z: 1 }} \
         block {{ x: {block} y: 1 z: 1 }} args: [\
         {{ buffer {{ slice {{ allocation: 0 size: 2048 }} access: ACCESS_READ_WRITE }} }}, \
         {{ buffer {{ slice {{ allocation: 0 offset: 2048 size: 2048 }} access: ACCESS_READ }} }}, \
         {{ scalar {{ i32: 4 }} }}, {{ scalar {{ i32: 128 }} }}] }} }}]\n\
         signature {{ parameters: [{{ name: \"x\" dtype: DTYPE_F32 dims: [1024] }}] }}\n",
        escaped(code),
        escaped(header)
    )
}

/// `compile --check` on CUDA-style source: the set passes as written; the 32-lane softmax
/// launched with 32-thread blocks is warned about (its kernel and its literal mask); an
/// unmappable cooperative group is refused with the replacement; a module that does not parse
/// says so with its line.
#[test]
fn compile_check_of_cuda_style_source() {
    let dir = binary::scratch_in("user-kernels", "compile-check-cuda");
    let code = checks::cuda_kernels::FILES
        .iter()
        .map(|(_, c)| *c)
        .collect::<Vec<_>>()
        .join("\n");
    let fine = dir.join("fine.txtpb");
    std::fs::write(&fine, cuda_program(&code, "softmax_forward", 128)).unwrap();
    let out = binary::ok(&["compile", fine.to_str().unwrap(), "--check"]);
    assert!(out.contains("every source module is portable"), "{out}");
    assert!(!out.contains("kernel `softmax_forward` shuffles"), "{out}");
    let narrow = dir.join("narrow.txtpb");
    std::fs::write(&narrow, cuda_program(&code, "softmax_forward_block32", 32)).unwrap();
    let out = binary::ok(&["compile", narrow.to_str().unwrap(), "--check"]);
    assert!(
        out.contains("warning: module `cuda`: kernel `softmax_forward_block32` shuffles across the warp and is launched with blocks of 32 threads"),
        "{out}"
    );
    assert!(
        out.contains("`0xffffffff` in `softmax_forward_block32` is a 32-lane mask"),
        "{out}"
    );
    assert!(out.contains("every source module is portable"), "{out}");
    let check_fails = |name: &str, code: &str, needle: &str| {
        let p = dir.join(name);
        std::fs::write(&p, cuda_program(code, "k", 64)).unwrap();
        let o = binary::xthunk(&["compile", p.to_str().unwrap(), "--check"]);
        let err = binary::text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(needle), "`{needle}` not in {err}");
        err
    };
    let grid = "#include \"common.h\"\n__global__ void k(float* y, const float* x, int n, int c) {\n  cg::grid_group g = cg::this_grid();\n  g.sync();\n}\n";
    let err = check_fails(
        "grid.txtpb",
        grid,
        "module `cuda`, line 3: `grid_group` is not in the portable subset (grid-wide groups need a cooperative launch",
    );
    assert!(err.contains("line 3: `this_grid`"), "{err}");
    let open = "#include \"common.h\"\n__global__ void k(float* y, const float* x, int n, int c) {\n  if (n) {\n    y[0] = x[0];\n}\n";
    let err = check_fails(
        "open.txtpb",
        open,
        "module `cuda`, line 2: the module does not parse: `{`",
    );
    assert!(!err.contains("does not define"), "{err}");
    let comment = "#include \"common.h\"\n__global__ void k(float* y, const float* x, int n, int c) {}\n/* unfinished\n";
    check_fails(
        "comment.txtpb",
        comment,
        "module `cuda`, line 3: the module does not parse: `/*`: this comment is never closed",
    );
}

#[test]
fn a_broken_user_kernel_fails_the_emulated_suite() {
    // The softmax's row maximum by `shfl_down` instead of `shfl_xor`: only lane 0 of each warp
    // ends with the maximum.
    let good = checks::user_kernels_module();
    let Some(ModuleImage::Source { code }) = good.images.first() else {
        panic!("the set is not a source module");
    };
    let broken = code.replacen(
        "m = fmaxf(m, xt_shfl_xor(m, o))",
        "m = fmaxf(m, xt_shfl_down(m, (unsigned)o))",
        1,
    );
    assert_ne!(&broken, code, "the shuffle to break was not found");
    for lanes in [32, 64] {
        let Some(s) = subject(lanes) else { continue };
        let set: Vec<_> =
            checks::user_kernel_checks(Arc::new(source_module("broken", broken.clone())))
                .into_iter()
                .filter(|c| c.name.ends_with("/softmax_warp") || c.name.ends_with("/residual"))
                .collect();
        let report = run_checks(&s, 0, &set);
        match outcome(&report, "kernels/user/softmax_warp") {
            Outcome::Failed(m) => assert!(m.contains("softmax_warp"), "{m}"),
            other => panic!("{lanes} lanes: the broken softmax gave {other:?}"),
        }
        assert_eq!(
            outcome(&report, "kernels/user/residual"),
            &Outcome::Passed,
            "{lanes} lanes"
        );
    }
}

#[test]
fn a_broken_standard_kernel_fails_the_emulated_suite() {
    // The standard library's definitions of `add_f32` and `sub_f32` as user source, `add_f32`
    // off by one (its last element skipped): the suite's `kernels/add_f32` check must fail on
    // it, `kernels/sub_f32` still pass, and both pass on the standard library itself.
    let mut broken = String::new();
    for name in ["add_f32", "sub_f32"] {
        let mut def = portable::kernel_definition(name).unwrap();
        if name == "add_f32" {
            let bad = def.replacen("XT_FOR(i, n)", "XT_FOR(i, n - 1)", 1);
            assert_ne!(def, bad, "the loop bound was not found: {def}");
            def = bad;
        }
        broken.push_str(&def);
        broken.push('\n');
    }
    let picked = |m: Option<Module>| -> Vec<_> {
        let all = match m {
            Some(m) => checks::standard_kernel_checks(m),
            None => xthunk_conformance::all_checks(),
        };
        all.into_iter()
            .filter(|c| c.name == "kernels/add_f32" || c.name == "kernels/sub_f32")
            .collect()
    };
    for lanes in [32, 64] {
        let Some(s) = subject(lanes) else { continue };
        let report = run_checks(&s, 0, &picked(None));
        assert_eq!(report.counts()[0], 2, "{}", report.table(true));
        let report = run_checks(&s, 0, &picked(Some(source_module("std", broken.clone()))));
        match outcome(&report, "kernels/add_f32") {
            // n = 1 is the first size: its one element stays poisoned.
            Outcome::Failed(m) => assert!(
                m.contains("add_f32 n=1") && m.contains("1 of 1 elements differ"),
                "{m}"
            ),
            other => panic!("{lanes} lanes: the broken add_f32 gave {other:?}"),
        }
        assert_eq!(
            outcome(&report, "kernels/sub_f32"),
            &Outcome::Passed,
            "{lanes} lanes"
        );
    }
}
