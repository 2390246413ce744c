//! cargo-fuzz target `npy`: a selector byte (the parameter's dtype and shape) and a `.npy` file
//! through the CLI's reader, `src/cli/npy.rs`, compiled here as `src/main.rs` compiles it; what
//! it accepts must have the parameter's size (`fuzz/harness/targets.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

// `npy.rs` names its error type `super::error`.
#[path = "../../src/cli/error.rs"]
#[allow(dead_code)]
mod error;
#[path = "../../src/cli/npy.rs"]
#[allow(dead_code)]
mod npy;

use std::path::PathBuf;
use std::sync::OnceLock;

/// The file each input is written to (the reader reads a path), one per process.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("xthunk-fuzz-npy-{}.npy", std::process::id()))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(property) = harness::targets::npy(data, scratch(), &npy::read_input) {
        harness::known::fail(&property);
    }
});
