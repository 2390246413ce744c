//! The driver emulator for tests that run the `xthunk` binary on emulated GPUs: where its
//! library is, whether the test can run (skipped with the reason when it is not built, a
//! failure under `XTHUNK_REQUIRE_EMULATOR`), and the command that runs `xthunk` through
//! `ci/with-emulator.sh` with it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (the root package's folder).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The emulator library: `cargo build` puts it beside the binary, `cargo test --workspace`
/// only in `deps/`; where both exist, the newer (the other may be left from an older build).
pub fn emulator_lib() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_BIN_EXE_xthunk")).parent()?;
    [
        dir.join("libxthunk_emulator.so"),
        dir.join("deps/libxthunk_emulator.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(t, _)| *t)
    .map(|(_, p)| p)
}

/// Whether `test` can use the emulator: false (printed as SKIPPED with why) when its library
/// is not built; a panic then if `XTHUNK_REQUIRE_EMULATOR` is set (ci/test.sh sets it).
pub fn have_emulator(test: &str) -> bool {
    if emulator_lib().is_some() {
        return true;
    }
    let why = "the emulator library is not built (run `cargo test --workspace`)";
    if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
        panic!("{test}: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// `bin` run through `ci/with-emulator.sh` with the built emulator library (check
/// [`have_emulator`] first), in the repository root.
pub fn emulated_command(bin: impl AsRef<Path>) -> Command {
    let mut c = Command::new("bash");
    c.arg(repo_root().join("ci/with-emulator.sh"))
        .arg(bin.as_ref())
        .env("XTHUNK_EMU_NO_BUILD", "1")
        .current_dir(repo_root());
    if let Some(lib) = emulator_lib() {
        c.env("XTHUNK_EMU_LIB", lib);
    }
    c
}
