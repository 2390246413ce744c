//! Conditional graph nodes (CUDA 12.4+): `while` and `conditional` recorded inside a command
//! buffer as WHILE and IF nodes, so that whole loops replay with no host involvement.
//!
//! This module holds the device's part: the driver check, the set-condition kernels and
//! their slot. What a capturing stream does with them is `crate::stream::conditional`'s.
//! While a stream captures (the set-condition module is built before the first capture of a
//! device begins, since modules are not loaded while capturing):
//!
//! - `create`: the capture's graph (`cuStreamGetCaptureInfo_v2`) gets a condition,
//!   `cuGraphConditionalHandleCreate` with default 0 assigned at every launch
//!   (`CU_GRAPH_COND_ASSIGN_DEFAULT`);
//! - `set`: a one-thread launch of a kernel of the set-condition module
//!   ([`SET_CONDITION_SOURCE`], compiled by NVRTC once per device) that reads the predicate,
//!   branch index or trip counter on the device and calls the device runtime's
//!   `cudaGraphSetConditional` (declared in the source: the driver resolves it when it loads
//!   the module, NVRTC leaves it undefined);
//! - `capture`: a conditional node added to the capture graph after the capture's current
//!   dependencies (`cuGraphAddNode`), the capture made to depend on it
//!   (`cuStreamUpdateCaptureDependencies`), and its body graph (`phGraph_out[0]`) recorded
//!   by capturing a fresh stream into it (`cuStreamBeginCaptureToGraph`), which nests.
//!
//! Where the driver is older than CUDA 12.4 or lacks one of [`CONDITIONAL_DRIVER_SYMBOLS`]
//! (called under `guarded`: cudarc panics on a missing symbol), or NVRTC cannot build the
//! set-condition module, `create` returns `Unsupported` with the reason, and the executor
//! runs the command buffer with host-driven control flow (logging it once). Re-recording
//! updates the executable graph in place like any other recording (see [`crate::graph`]);
//! when the driver refuses to update a graph with conditional nodes it is instantiated
//! afresh.

use crate::context::DeviceContext;
use crate::loader::{check_symbols, guarded};
use crate::module::{ModuleRaw, compile_and_load};
use crate::result::{BACKEND, cu};
use crate::sys::{self, CUresult};
use cudarc::driver::sys as drv;
use parking_lot::Mutex;
use std::ffi::CString;
use std::sync::{Arc, OnceLock};
use xthunk_core::{Error, Result};

/// The oldest driver with WHILE nodes: CUDA 12.4 (`cuDriverGetVersion` encoding).
pub const MIN_CONDITIONAL_DRIVER_VERSION: i32 = 12040;

/// The driver entry points conditional nodes need (newer than the probe requires; always
/// called under `guarded`, and checked present first).
pub const CONDITIONAL_DRIVER_SYMBOLS: [&str; 5] = [
    "cuStreamGetCaptureInfo_v2",
    "cuStreamUpdateCaptureDependencies",
    "cuStreamBeginCaptureToGraph",
    "cuGraphConditionalHandleCreate",
    "cuGraphAddNode",
];

/// The set-condition kernels (CUDA C in `set_condition.cu`, compiled by NVRTC). One thread
/// sets the condition; the rules are
/// [`SetCondition::value`](xthunk_core::backend::SetCondition::value)'s. The driver emulator
/// runs exactly these kernels (see `emulator/src/cuda/set_condition.rs`; its tests compile
/// this file), so names and parameters stay in step.
pub const SET_CONDITION_SOURCE: &str = include_str!("set_condition.cu");

const KERNELS: [&str; 4] = [
    "xthunk_set_condition_pred",
    "xthunk_set_condition_branch",
    "xthunk_set_condition_branch_pred",
    "xthunk_set_condition_trips",
];

/// The loaded set-condition module and its four functions.
pub(crate) struct SetKernels {
    _module: ModuleRaw,
    pub(crate) functions: [sys::CUfunction; 4],
}

// SAFETY: function handles are usable from any thread with the context current (done
// before every launch); immutable after loading, and the module outlives them here.
unsafe impl Send for SetKernels {}
// SAFETY: as above.
unsafe impl Sync for SetKernels {}

/// A device's set-condition module, built on first use (or why it could not be).
#[derive(Default)]
pub(crate) struct ConditionalSlot(Mutex<Option<std::result::Result<Arc<SetKernels>, String>>>);

impl ConditionalSlot {
    pub(crate) fn kernels(&self, ctx: &Arc<DeviceContext>) -> Result<Arc<SetKernels>> {
        let mut slot = self.0.lock();
        if slot.is_none() {
            *slot = Some(load(ctx).map(Arc::new).map_err(|e| e.to_string()));
        }
        match slot.as_ref() {
            Some(Ok(k)) => Ok(k.clone()),
            Some(Err(e)) => Err(unsupported(format!(
                "the set-condition kernels could not be built: {e}"
            ))),
            None => Err(unsupported("the set-condition kernels are missing".into())),
        }
    }
}

fn load(ctx: &Arc<DeviceContext>) -> Result<SetKernels> {
    let (module, _) = compile_and_load(ctx, SET_CONDITION_SOURCE)?;
    let mut functions = [std::ptr::null_mut(); 4];
    for (f, name) in functions.iter_mut().zip(KERNELS) {
        let c = CString::new(name).map_err(|_| Error::InvalidArgument(name.into()))?;
        ctx.bind()?;
        // SAFETY: the module is live; writes one function handle.
        cu("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(f, module.raw(), c.as_ptr())
        })?;
    }
    Ok(SetKernels {
        _module: module,
        functions,
    })
}

pub(crate) fn unsupported(reason: String) -> Error {
    Error::Unsupported {
        backend: BACKEND.into(),
        feature: format!("conditional graph nodes ({reason})"),
    }
}

/// Whether a driver of `version` (`cuDriverGetVersion` encoding) has WHILE nodes.
fn check_version(version: i32) -> Result<()> {
    if version < MIN_CONDITIONAL_DRIVER_VERSION {
        return Err(unsupported(format!(
            "the driver supports CUDA {}.{}; WHILE nodes need 12.4",
            version / 1000,
            (version % 1000) / 10
        )));
    }
    Ok(())
}

/// Whether the driver of `ctx` has conditional nodes; `Unsupported` says why not.
pub(crate) fn check_driver(ctx: &DeviceContext) -> Result<()> {
    check_version(ctx.driver_version)?;
    static SYMBOLS: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    SYMBOLS
        .get_or_init(|| {
            // SAFETY: the driver library is already loaded (the probe opened it).
            guarded("the driver library", || unsafe { drv::culib() })
                .and_then(|lib| check_symbols(lib, &CONDITIONAL_DRIVER_SYMBOLS))
        })
        .clone()
        .map_err(|e| unsupported(format!("the driver library: {e}")))
}

/// Runs a driver call that may be missing (cudarc panics then) and checks its result.
pub(crate) fn call(what: &str, f: impl FnOnce() -> CUresult) -> Result<()> {
    let r = guarded(what, f).map_err(unsupported)?;
    cu(what, r)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn drivers_before_12_4_are_unsupported_with_the_reason() {
        let e = check_version(12030).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(
            e.to_string().contains("CUDA 12.3; WHILE nodes need 12.4"),
            "{e}"
        );
        assert!(check_version(12040).is_ok());
        assert!(check_version(13000).is_ok());
    }

    /// The set-condition module compiles with NVRTC (when installed) into a cubin holding the
    /// four kernels and importing `cudaGraphSetConditional`, which the driver resolves.
    #[test]
    fn set_condition_module_compiles_with_its_kernels() {
        let cubin = match crate::compile::compile_for_target(SET_CONDITION_SOURCE, "sm_90") {
            Ok(c) => c,
            Err(e) => {
                if std::env::var("XTHUNK_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                    panic!("XTHUNK_REQUIRE_NVRTC=1 but {e}");
                }
                eprintln!("SKIPPED: NVRTC is not installed ({e})");
                return;
            }
        };
        let info = crate::image::inspect(&cubin).unwrap();
        assert_eq!(info.sm, 90);
        for k in KERNELS.iter().chain(&["cudaGraphSetConditional"]) {
            assert!(
                info.functions.iter().any(|f| f == k),
                "{k} in {:?}",
                info.functions
            );
        }
        assert_eq!(
            info.functions.len(),
            KERNELS.len() + 1,
            "{:?}",
            info.functions
        );
    }
}
