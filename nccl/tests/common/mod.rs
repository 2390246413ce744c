//! Helpers shared by the integration tests: where the `nvidia-nccl-cu12` wheel is, skipping
//! visibly when it is not there, and scratch folders.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// The install command for the wheel. `pip install --target` skips a top-level folder that
/// already exists (`nvidia/`, when NVRTC's wheel is there) unless `--upgrade` replaces it, so
/// the wheels that share `nvidia/` are installed together.
pub const INSTALL: &str = "python3 -m pip install --upgrade --target \"$HOME/.cache/xthunk/pip\" nvidia-cuda-nvrtc-cu12 nvidia-nccl-cu12";

/// The wheel's root (`…/nvidia/nccl`) under `XTHUNK_PIP_PREFIX` (`:`-separated) or the
/// default `$HOME/.cache/xthunk/pip`, when its library is there.
pub fn wheel_root() -> Option<PathBuf> {
    let prefixes: Vec<PathBuf> = match std::env::var("XTHUNK_PIP_PREFIX") {
        Ok(v) if !v.is_empty() => v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => std::env::var_os("HOME")
            .map(|h| vec![PathBuf::from(h).join(".cache/xthunk/pip")])
            .unwrap_or_default(),
    };
    prefixes
        .into_iter()
        .map(|p| p.join("nvidia/nccl"))
        .find(|r| r.join("lib/libnccl.so.2").is_file())
}

/// The wheel's library folder, or `None` after printing `SKIPPED` (a failure when
/// `XTHUNK_REQUIRE_NCCL=1`).
pub fn wheel_lib_dir(test: &str) -> Option<PathBuf> {
    match wheel_root() {
        Some(r) => Some(r.join("lib")),
        None => {
            skip(
                test,
                &format!(
                    "the nvidia-nccl-cu12 wheel is not installed (install it with: {INSTALL})"
                ),
            );
            None
        }
    }
}

/// The wheel's `nccl.h`, or `None` after printing `SKIPPED` (a failure when
/// `XTHUNK_REQUIRE_NCCL=1`).
pub fn wheel_header(test: &str) -> Option<PathBuf> {
    let h = wheel_root()
        .map(|r| r.join("include/nccl.h"))
        .filter(|h| h.is_file());
    if h.is_none() {
        skip(
            test,
            &format!(
                "nccl.h of the nvidia-nccl-cu12 wheel is not installed (install it with: {INSTALL})"
            ),
        );
    }
    h
}

/// Prints why a test is skipped; panics instead when `XTHUNK_REQUIRE_NCCL=1`.
pub fn skip(test: &str, why: &str) {
    if std::env::var("XTHUNK_REQUIRE_NCCL").is_ok_and(|v| v == "1") {
        panic!("{test}: XTHUNK_REQUIRE_NCCL=1 but {why}");
    }
    say_skipped(test, why);
}

/// Prints why a test is skipped for want of a C compiler; panics instead when
/// `XTHUNK_REQUIRE_CXX=1` (as CI sets it).
pub fn skip_no_cc(test: &str, why: &str) {
    if std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1") {
        panic!("{test}: XTHUNK_REQUIRE_CXX=1 but {why}");
    }
    say_skipped(test, why);
}

/// `SKIPPED test: why`, written to the process's stderr directly: the test harness captures
/// `eprintln!` of passing tests, and a skip must be visible, never read as a pass.
pub fn say_skipped(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}

/// A fresh, empty scratch folder for one test, under Cargo's scratch folder for integration
/// tests (`target/tmp`), so runs leave nothing in the system's temporary folder.
pub fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("xthunk-nccl-{test}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `NCCL_VERSION_CODE` from a header.
pub fn header_version_code(header: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(header).ok()?;
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("#define NCCL_VERSION_CODE")?;
        rest.trim().parse().ok()
    })
}
