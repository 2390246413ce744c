//! The CUDA and ROCm backends end to end through the driver emulator (emulator/): the MLP
//! example's outputs on emulated devices equal the host backend's within tolerance, and the
//! emulated devices are labelled as such. Needs the emulator library, which
//! `cargo test --workspace` builds; without it the test is skipped with the reason, unless
//! `XTHUNK_REQUIRE_EMULATOR=1` (ci/test.sh sets it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

#[path = "common/emulator.rs"]
mod emulator;
use emulator::{emulated_command, emulator_lib};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read_f32_npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<f32>()
        .unwrap()
}

/// Runs `xthunk ARGS` (through ci/with-emulator.sh when `emulated`) and returns stdout.
fn xthunk(emulated: bool, args: &[&str]) -> String {
    let bin = env!("CARGO_BIN_EXE_xthunk");
    let mut cmd = if emulated {
        emulated_command(bin)
    } else {
        Command::new(bin)
    };
    let o = cmd.args(args).current_dir(root()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "xthunk {args:?} failed:\n{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    out
}

#[test]
fn mlp_on_emulated_cuda_and_rocm_matches_host() {
    if emulator_lib().is_none() {
        let why = "the emulator library is not built (run `cargo test --workspace`)";
        if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
            panic!("{why}");
        }
        eprintln!("SKIPPED mlp_on_emulated_cuda_and_rocm_matches_host: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("xthunk-emulated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |backend: &str, emulated: bool| -> Vec<f32> {
        let out = dir.join(backend);
        let stdout = xthunk(
            emulated,
            &[
                "run",
                "examples/mlp.txtpb",
                "--backend",
                backend,
                "--seed",
                "7",
                "--output-dir",
                out.to_str().unwrap(),
            ],
        );
        if emulated {
            assert!(stdout.contains("xthunk emulated"), "{stdout}");
        }
        read_f32_npy(&out.join("probs.npy"))
    };
    let host = run("host", false);
    for backend in ["cuda", "rocm"] {
        let got = run(backend, true);
        assert_eq!(got.len(), host.len());
        // The random inputs make logits of magnitude ~100: f32 gemms that sum in another order
        // (the emulator's BLAS vs the host's blocked gemm) differ by ~1e-5 relative in the
        // logits, which softmax turns into up to ~1e-4 absolute in a probability. A wrong
        // kernel or a missed synchronization differs by far more.
        let mut total = 0.0f64;
        for (i, (g, h)) in got.iter().zip(&host).enumerate() {
            let d = (g - h).abs();
            total += d as f64;
            assert!(d <= 2e-3, "{backend}: probs[{i}] = {g}, host {h}");
        }
        let mean = total / host.len() as f64;
        assert!(mean <= 1e-4, "{backend}: mean |difference| {mean}");
        eprintln!("{backend}: mean |difference| from host {mean:.2e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Failures injected into the emulated driver (the Nth allocation out of memory, the Nth launch
/// failing) surface as one clear `xthunk` error line, with a non-zero exit, no panic, and no
/// leak or other memory error reported by the emulator afterwards (ci/with-emulator.sh would
/// exit 3 then, instead of xthunk's 1).
#[test]
fn injected_failures_are_clear_errors_and_leak_nothing() {
    let Some(lib) = emulator_lib() else {
        let why = "the emulator library is not built (run `cargo test --workspace`)";
        if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
            panic!("{why}");
        }
        eprintln!("SKIPPED injected_failures_are_clear_errors_and_leak_nothing: {why}");
        return;
    };
    let bin = env!("CARGO_BIN_EXE_xthunk");
    for backend in ["cuda", "rocm"] {
        for (var, value, needle) in [
            ("XTHUNK_EMU_FAIL_ALLOC", "4", "out of memory"),
            ("XTHUNK_EMU_FAIL_LAUNCH", "2", "kernel"),
        ] {
            let o = emulated_command(bin)
                .args(["run", "examples/mlp.txtpb", "--backend", backend])
                .env("XTHUNK_EMU_LIB", &lib)
                .env(var, value)
                .current_dir(root())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert_eq!(
                o.status.code(),
                Some(1),
                "{backend} with {var}={value}: expected xthunk's error exit 1 (3 would be an emulator-detected leak):\n{err}"
            );
            assert!(!err.contains("panicked"), "{err}");
            let line = err
                .lines()
                .find(|l| l.starts_with("error: "))
                .unwrap_or_else(|| panic!("no error line:\n{err}"));
            assert!(line.contains(needle), "{backend} {var}: {line}");
            assert!(
                !err.contains("xthunk-emulator: leak") && !err.contains("use-after-free"),
                "{err}"
            );
        }
    }
}
