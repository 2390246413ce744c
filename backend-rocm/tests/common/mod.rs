//! Helpers of the ROCm integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xthunk_rocm::{Compiler, KernelCache, SearchConfig};

/// How to get the runtime these tests use.
pub const INSTALL: &str =
    "apt-get install -y libamdhip64-5 (Debian bookworm; brings comgr), or set XTHUNK_ROCM_PATH";

/// Says, visibly (straight to the terminal, past the test harness' capture), that a test is
/// skipped and why. With `XTHUNK_REQUIRE_ROCM=1` (CI) a skip is a failure instead.
pub fn skip(test: &str, why: &str) {
    if std::env::var("XTHUNK_REQUIRE_ROCM").is_ok_and(|v| v == "1") {
        panic!("{test}: XTHUNK_REQUIRE_ROCM=1 but {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why}. Install the runtime with: {INSTALL}"
    );
}

/// Writes a note to the terminal (past the harness' capture).
pub fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// A compiler on the environment's ROCm with a fresh disk cache in `dir`, or `None` (skipped).
pub fn compiler_or_skip(test: &str, dir: &Path) -> Option<Arc<Compiler>> {
    match Compiler::new(&SearchConfig::from_env(), Some(KernelCache::new(dir))) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            skip(test, &format!("hipRTC is not installed ({e})"));
            None
        }
    }
}

/// A fresh empty folder, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "xthunk-rocm-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
