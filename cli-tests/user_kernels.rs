//! The checked portable kernel set (`tests/kernels/user/checked_set.cu`, the same tests as the
//! host backend's `core/tests/cpu_kernels.rs`) on emulated GPUs: warps of 32 lanes on the CUDA
//! backend, 64 on the ROCm backend, the source compiled by the real NVRTC and hipRTC and the
//! image's carried source executed by the driver emulator. Run it under the emulator:
//! `ci/with-emulator.sh cargo test -p xthunk --test user_kernels`. Without a device of that
//! backend (a plain `cargo test`, which has no emulator in the vendor library path) each test is
//! reported SKIPPED with the reason; with `XTHUNK_USER_KERNELS_REQUIRE_DEVICES=1` (CI's
//! `emu-user-kernels` step, under the emulator) a missing device fails it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../core/tests/user_kernels/checks.rs"]
mod checks;

use std::sync::Arc;
use xthunk::Device;

/// Device 0 of the backend whose warps have `lanes` lanes (cuda: 32, rocm: 64).
fn device(lanes: u32) -> Option<Arc<dyn Device>> {
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
        .and_then(|b| b.device(0).map_err(|e| e.to_string()));
    match found {
        Ok(dev) => {
            eprintln!("{name}: {}", dev.info().name);
            Some(dev)
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
