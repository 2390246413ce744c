//! Probing without a driver: with `XTHUNK_CUDA_PATH` pointing at an empty folder and no
//! `libcuda` on the machine, the probe is `Unavailable` and its reason names every place
//! tried, with no panic and no panic text. The probe runs in a child process (this test
//! binary again) so that its whole output can be checked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use xthunk_core::Error;
use xthunk_core::backend::Backend;
use xthunk_cuda::{CudaBackend, SearchConfig};

const CHILD: &str = "XTHUNK_TEST_PROBE_CHILD";

/// In the child: probe with the environment's search and print the outcome.
fn child() {
    let b = CudaBackend::new();
    match b.probe() {
        Ok(info) => println!("PROBE-OK {}", info.version),
        Err(e) => println!("PROBE-ERR {e}"),
    }
    match b.device(0) {
        Ok(_) => println!("DEVICE-OK"),
        Err(e) => println!("DEVICE-ERR {e}"),
    }
}

#[test]
fn probe_without_driver_is_unavailable_and_quiet() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "probe_without_driver_is_unavailable_and_quiet",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("XTHUNK_CUDA_PATH", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    for text in [&stdout, &stderr] {
        assert!(!text.contains("panicked"), "panic text printed:\n{text}");
    }
    if stdout.contains("PROBE-OK") {
        eprintln!(
            "SKIPPED probe_without_driver_is_unavailable_and_quiet: this machine has a CUDA driver ({})",
            stdout
                .lines()
                .find(|l| l.starts_with("PROBE-OK"))
                .unwrap_or("")
        );
        return;
    }
    let line = stdout
        .lines()
        .find_map(|l| l.find("PROBE-ERR ").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no probe outcome:\n{stdout}"));
    assert!(line.contains("backend `cuda` is unavailable"), "{line}");
    assert!(line.contains("libcuda"), "{line}");
    let tried = dir.path().join("libcuda.so.1").display().to_string();
    assert!(
        line.contains(&tried),
        "the override path is not named: {line}"
    );
    assert!(
        line.contains("libcuda.so.1 ("),
        "the names tried are not listed: {line}"
    );
    assert!(
        stdout.contains("DEVICE-ERR backend `cuda` is unavailable"),
        "{stdout}"
    );
    eprintln!("probe reason: {line}");
}

#[test]
fn explicit_search_without_driver() {
    let dir = tempfile::tempdir().unwrap();
    let b = CudaBackend::with_config(SearchConfig::only(vec![dir.path().to_path_buf()]));
    assert_eq!(b.name(), "cuda");
    let e = b.probe().unwrap_err();
    let Error::Unavailable { backend, reason } = &e else {
        panic!("expected Unavailable, got {e}");
    };
    assert_eq!(backend, "cuda");
    assert!(
        reason.contains(&dir.path().join("libcuda.so.1").display().to_string()),
        "{reason}"
    );
    assert!(reason.contains("libcuda.so (not found)"), "{reason}");
    // Probing again gives the same answer (cached), and so does asking for a device.
    assert_eq!(b.probe().unwrap_err().to_string(), e.to_string());
    assert!(matches!(b.device(0), Err(Error::Unavailable { .. })));
}
