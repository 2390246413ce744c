//! Loading and probing against the real HIP runtime (Debian's `libamdhip64-5`, ROCm 5.2) on
//! a machine without an AMD GPU, and the search with the library absent.
//!
//! Without the runtime the tests that need it print why they are skipped; with
//! `XTHUNK_REQUIRE_ROCM=1` (CI) they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TempDir, note, skip};
use std::path::PathBuf;
use xthunk_core::Error;
use xthunk_core::backend::Backend;
use xthunk_rocm::{RocmBackend, SearchConfig};

#[test]
fn loads_the_runtime_and_reports_its_version() {
    let b = RocmBackend::new();
    let lib = match b.runtime_library() {
        Ok(l) => l,
        Err(e) => return skip("loads_the_runtime_and_reports_its_version", &e.to_string()),
    };
    note(&format!(
        "loads_the_runtime: HIP runtime {} ({}) from {}",
        lib.version_string,
        lib.version,
        lib.path.display()
    ));
    assert!(lib.version > 0, "{lib:?}");
    assert!(lib.path.is_absolute() && lib.path.exists(), "{lib:?}");
    assert!(
        lib.path
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with("libamdhip64.so")),
        "{lib:?}"
    );
    let major = lib.version / 10_000_000;
    assert!((5..=7).contains(&major), "{lib:?}");
}

#[test]
fn without_an_amd_gpu_probe_says_so_and_names_the_runtime() {
    let b = RocmBackend::new();
    let lib = match b.runtime_library() {
        Ok(l) => l,
        Err(e) => {
            return skip(
                "without_an_amd_gpu_probe_says_so_and_names_the_runtime",
                &e.to_string(),
            );
        }
    };
    assert_eq!(b.name(), "rocm");
    match b.probe() {
        Ok(info) => {
            // A machine with an AMD GPU: the probe must have found it.
            note(&format!("this machine has an AMD GPU: {info:?}"));
            assert!(!info.devices.is_empty());
            for d in &info.devices {
                assert!(d.arch.starts_with("gfx"), "{d:?}");
                assert!(d.total_memory > 0 && d.compute_units > 0, "{d:?}");
            }
        }
        Err(Error::Unavailable { backend, reason }) => {
            note(&format!("probe: Unavailable: {reason}"));
            assert_eq!(backend, "rocm");
            assert!(reason.contains("no AMD GPU"), "{reason}");
            assert!(
                reason.contains("hipErrorNoDevice (100)")
                    || reason.contains("hipErrorInvalidDevice (101)"),
                "{reason}"
            );
            assert!(
                reason.contains(&format!("HIP runtime {}", lib.version_string)),
                "{reason}"
            );
            assert!(reason.contains(&lib.path.display().to_string()), "{reason}");
            // Asking for a device gives the same reason; nothing panics.
            let e = b.device(0).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("no AMD GPU"), "{e}");
            // The probe is cached, and stays the same.
            let again = b.probe().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(again.contains("no AMD GPU"), "{again}");
        }
        Err(other) => panic!("unexpected probe error: {other}"),
    }
}

fn unavailable_reason(b: &RocmBackend) -> String {
    match b.probe() {
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, "rocm");
            reason
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn an_empty_override_folder_lists_every_path_tried() {
    let dir = TempDir::new("empty");
    let b = RocmBackend::with_config(SearchConfig::only([dir.path().to_path_buf()]));
    let reason = unavailable_reason(&b);
    note(&format!("empty override folder: {reason}"));
    assert!(reason.contains("no usable libamdhip64 found"), "{reason}");
    // Every path, each with its outcome (core's loader groups consecutive places that failed
    // alike: `a, b, c (no such file)`).
    let tried: Vec<String> = [
        "libamdhip64.so",
        "libamdhip64.so.7",
        "libamdhip64.so.6",
        "libamdhip64.so.5",
    ]
    .iter()
    .map(|name| dir.path().join(name).display().to_string())
    .collect();
    assert!(
        reason.contains(&format!("{} (no such file)", tried.join(", "))),
        "{reason}"
    );
    // No default search: no /opt/rocm, no bare name.
    assert!(!reason.contains("/opt/rocm"), "{reason}");
    assert!(b.device(0).is_err());
    assert!(b.runtime_library().is_err());
}

#[test]
fn a_library_that_is_not_hip_is_refused_with_the_missing_symbols() {
    // Any real shared library stands in for a wrong file called libamdhip64.so.
    let Some(other) = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
        "/usr/lib/libm.so.6",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists()) else {
        return skip(
            "a_library_that_is_not_hip_is_refused_with_the_missing_symbols",
            "no libm.so.6 at the usual places",
        );
    };
    let dir = TempDir::new("wronglib");
    std::os::unix::fs::symlink(&other, dir.path().join("libamdhip64.so")).unwrap();
    std::fs::write(dir.path().join("libamdhip64.so.6"), b"not an ELF file").unwrap();
    let b = RocmBackend::with_config(SearchConfig::only([dir.path().to_path_buf()]));
    let reason = unavailable_reason(&b);
    note(&format!("wrong libraries: {reason}"));
    assert!(
        reason.contains("libamdhip64.so (lacks required symbols hipInit,"),
        "{reason}"
    );
    assert!(reason.contains("hipModuleLaunchKernel"), "{reason}");
    // The file that is not a library: dlopen's own message.
    let bad = dir.path().join("libamdhip64.so.6").display().to_string();
    assert!(
        reason.contains(&format!("{bad} (dlopen failed: ")),
        "{reason}"
    );
    assert!(
        !reason.contains(&format!("{bad} (no such file)")),
        "{reason}"
    );
}

/// The environment variables themselves, in a child process (setting them here would race
/// with the other tests' threads).
#[test]
fn the_environment_controls_the_search() {
    if std::env::var_os("XTHUNK_ROCM_TEST_CHILD").is_some() {
        // In the child: only the empty folder is searched.
        let dir = std::env::var("XTHUNK_ROCM_PATH").unwrap();
        let b = RocmBackend::new();
        assert_eq!(b.config().override_dirs, vec![PathBuf::from(&dir)]);
        assert!(!b.config().default_search);
        let reason = unavailable_reason(&b);
        assert!(
            reason.contains(&format!("{dir}/libamdhip64.so.5 (no such file)")),
            "{reason}"
        );
        assert!(!reason.contains("/opt/rocm"), "{reason}");
        return;
    }
    let dir = TempDir::new("envchild");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_environment_controls_the_search",
            "--nocapture",
        ])
        .env("XTHUNK_ROCM_TEST_CHILD", "1")
        .env("XTHUNK_ROCM_PATH", dir.path())
        .env("XTHUNK_ROCM_NO_DEFAULT_SEARCH", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "{text}");
}
