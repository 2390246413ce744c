//! What the tests of the `xthunk` binary share: the binary run in the repository root, a
//! fresh scratch folder per test, and a run that must succeed.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (where the examples and fixtures are).
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh, empty directory for one test, `GROUP/NAME` under Cargo's test temp folder.
pub fn scratch_in(group: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary with `args` in the repository root, without `RUST_LOG`.
pub fn xthunk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xthunk"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .output()
        .expect("spawn xthunk")
}

/// Bytes of an output stream as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A run that must succeed without a panic; returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let o = xthunk(args);
    assert!(
        o.status.success(),
        "xthunk {args:?} failed ({}):\n{}\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(!text(&o.stderr).contains("panicked"), "{}", text(&o.stderr));
    text(&o.stdout)
}
