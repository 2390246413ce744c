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
