//! Conditional graph nodes (CUDA 12.4+): `while` and `conditional` recorded inside a command
//! buffer as WHILE and IF nodes, so that whole loops replay with no host involvement.
//!
//! While a stream captures (the set-condition module is built before the first capture of a
//! device begins, since modules are not loaded while capturing):
//!
//! - [`create`]: the capture's graph (`cuStreamGetCaptureInfo_v2`) gets a condition,
//!   `cuGraphConditionalHandleCreate` with default 0 assigned at every launch
//!   (`CU_GRAPH_COND_ASSIGN_DEFAULT`);
//! - [`set`]: a one-thread launch of a kernel of the set-condition module
//!   ([`SET_CONDITION_SOURCE`], compiled by NVRTC once per device) that reads the predicate,
//!   branch index or trip counter on the device and calls the device runtime's
//!   `cudaGraphSetConditional` (declared in the source: the driver resolves it when it loads
//!   the module, NVRTC leaves it undefined);
//! - [`capture`]: a conditional node added to the capture graph after the capture's current
//!   dependencies (`cuGraphAddNode`), the capture made to depend on it
//!   (`cuStreamUpdateCaptureDependencies`), and its body graph (`phGraph_out[0]`) recorded
//!   by capturing a fresh stream into it (`cuStreamBeginCaptureToGraph`), which nests.
//!
//! Where the driver is older than CUDA 12.4 or lacks one of [`CONDITIONAL_DRIVER_SYMBOLS`]
//! (called under `guarded`: cudarc panics on a missing symbol), or NVRTC cannot build the
//! set-condition module, [`create`] returns `Unsupported` with the reason, and the executor
//! runs the command buffer with host-driven control flow (logging it once). Re-recording
//! updates the executable graph in place like any other recording (see [`crate::graph`]);
//! when the driver refuses to update a graph with conditional nodes it is instantiated
//! afresh.

use crate::context::DeviceContext;
use crate::loader::{check_symbols, guarded};
use crate::module::{ModuleRaw, compile_and_load};
use crate::result::{BACKEND, cu};
use crate::stream::CudaStream;
use crate::sys::{self, CUresult, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::sys as drv;
use parking_lot::Mutex;
use std::ffi::{CString, c_void};
use std::sync::{Arc, OnceLock};
use xthunk_core::backend::{ConditionHandle, ConditionalKind, DevicePtr, SetCondition, Stream};
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
/// sets the condition; the rules are [`SetCondition::value`]'s. The driver emulator runs
/// exactly these kernels (see `emulator/src/cuda/conditional.rs`; its tests compile
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
    functions: [sys::CUfunction; 4],
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
    fn kernels(&self, ctx: &Arc<DeviceContext>) -> Result<Arc<SetKernels>> {
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

fn unsupported(reason: String) -> Error {
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
fn check_driver(ctx: &DeviceContext) -> Result<()> {
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
fn call(what: &str, f: impl FnOnce() -> CUresult) -> Result<()> {
    let r = guarded(what, f).map_err(unsupported)?;
    cu(what, r)
}

/// The graph `s` is capturing into and the capture's current dependencies.
fn capture_graph(s: &CudaStream) -> Result<(sys::CUgraph, Vec<sys::CUgraphNode>)> {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut n = 0usize;
    s.ctx.bind()?;
    let raw = s.raw;
    // SAFETY: the stream is live; every out-pointer is a local of the right type.
    call("cuStreamGetCaptureInfo_v2", || unsafe {
        sys::cuStreamGetCaptureInfo_v2(raw, &mut status, &mut id, &mut graph, &mut deps, &mut n)
    })?;
    if status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE || graph.is_null() {
        return Err(Error::InvalidArgument(format!(
            "conditional graph nodes outside an active capture ({status:?})"
        )));
    }
    let deps = if n == 0 || deps.is_null() {
        vec![]
    } else {
        if n > 1 << 16 {
            return Err(Error::InvalidArgument(format!("{n} capture dependencies")));
        }
        // SAFETY: the driver returned `n` node handles at `deps`, valid until the next call
        // on the stream; copied now.
        unsafe { std::slice::from_raw_parts(deps, n) }.to_vec()
    };
    Ok((graph, deps))
}

/// Builds the set-condition module of `s`'s device if the driver has conditional nodes
/// (once per device; called before a capture begins). A failure is kept and reported by
/// [`create`].
pub(crate) fn prepare(s: &CudaStream) {
    if check_driver(&s.ctx).is_ok() {
        let _ = s.conditional.kernels(&s.ctx);
    }
}

/// [`Stream::create_condition`] on a CUDA stream.
pub(crate) fn create(s: &CudaStream) -> Result<ConditionHandle> {
    check_driver(&s.ctx)?;
    s.conditional.kernels(&s.ctx)?;
    let (graph, _) = capture_graph(s)?;
    let mut h: sys::CUgraphConditionalHandle = 0;
    let ctx = s.ctx.raw();
    // SAFETY: the graph is the live capture graph of this context; writes one handle.
    call("cuGraphConditionalHandleCreate", || unsafe {
        sys::cuGraphConditionalHandleCreate(
            &mut h,
            graph,
            ctx,
            0,
            sys::CU_GRAPH_COND_ASSIGN_DEFAULT,
        )
    })?;
    Ok(ConditionHandle(h))
}

/// [`Stream::set_condition`] on a CUDA stream: launches the set-condition kernel.
pub(crate) fn set(s: &CudaStream, h: ConditionHandle, how: SetCondition) -> Result<()> {
    let k = s.conditional.kernels(&s.ctx)?;
    let int = |v: u32| -> Result<u64> {
        i32::try_from(v)
            .map(|v| u64::from(v as u32))
            .map_err(|_| Error::InvalidArgument(format!("branch {v}")))
    };
    let addr = |p: DevicePtr, len: u64| -> Result<u64> { Ok(s.memory.region(p, len)?.addr()) };
    let (f, mut slots) = match how {
        SetCondition::Pred { pred } => (k.functions[0], vec![h.0, addr(pred, 1)?]),
        SetCondition::Branch {
            index,
            pred: false,
            branch,
            branches,
        } => (
            k.functions[1],
            vec![
                h.0,
                addr(index, 4)?,
                int(branch)?,
                int(branches.saturating_sub(1))?,
            ],
        ),
        SetCondition::Branch {
            index,
            pred: true,
            branch,
            ..
        } => (k.functions[2], vec![h.0, addr(index, 1)?, int(branch)?]),
        SetCondition::TripsBelow { counter, n } => {
            (k.functions[3], vec![h.0, addr(counter, 8)?, n])
        }
    };
    let mut params: Vec<*mut c_void> = slots
        .iter_mut()
        .map(|v| (v as *mut u64).cast::<c_void>())
        .collect();
    s.ctx.bind()?;
    // SAFETY: `f` is a live function of the loaded set-condition module; `params` holds one
    // pointer per kernel parameter, each to an 8-byte slot holding the parameter's value in
    // its C type's little-endian bytes (the int parameters in the low 4 bytes); the buffers
    // were checked against the device's live allocations; the driver copies the values.
    let r = unsafe {
        sys::cuLaunchKernel(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s.raw,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    cu("cuLaunchKernel", r)
}

/// [`Stream::capture_conditional`] on a CUDA stream.
pub(crate) fn capture(
    s: &CudaStream,
    kind: ConditionalKind,
    h: ConditionHandle,
    body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
) -> Result<()> {
    check_driver(&s.ctx)?;
    let (graph, deps) = capture_graph(s)?;
    // SAFETY: a plain C struct and union of integers and pointers: all-zero is valid.
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle: h.0,
        type_: match kind {
            ConditionalKind::If => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
            ConditionalKind::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
        },
        size: 1,
        phGraph_out: std::ptr::null_mut(),
        ctx: s.ctx.raw(),
    };
    let mut node: sys::CUgraphNode = std::ptr::null_mut();
    s.ctx.bind()?;
    // SAFETY: the capture graph and its dependency nodes are live; `params` is a complete
    // node description the driver reads and completes (`phGraph_out`); writes one node.
    call("cuGraphAddNode", || unsafe {
        sys::cuGraphAddNode(&mut node, graph, deps.as_ptr(), deps.len(), &mut params)
    })?;
    let raw = s.raw;
    // SAFETY: the stream is capturing; `node` is a live node of its capture graph.
    call("cuStreamUpdateCaptureDependencies", || unsafe {
        sys::cuStreamUpdateCaptureDependencies(
            raw,
            &mut node,
            1,
            sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32,
        )
    })?;
    // SAFETY: reading the union member just written (and completed by the driver).
    let out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
    if out.is_null() {
        return Err(Error::backend(
            BACKEND,
            "cuGraphAddNode",
            "the driver returned no body graph for the conditional node",
        ));
    }
    // SAFETY: the driver's array of `size` = 1 body graph, valid while the node lives.
    let body_graph = unsafe { *out };
    // A capturing body stream: never allocates in stream order (no pool).
    let child = CudaStream::new(
        s.ctx.clone(),
        s.memory.clone(),
        s.blas.clone(),
        s.conditional.clone(),
        None,
    )?;
    let craw = child.raw;
    // SAFETY: the new stream is live and idle; the body graph is live and empty.
    call("cuStreamBeginCaptureToGraph", || unsafe {
        sys::cuStreamBeginCaptureToGraph(
            craw,
            body_graph,
            std::ptr::null(),
            std::ptr::null(),
            0,
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    })?;
    let recorded = body(&child);
    let mut ended: sys::CUgraph = std::ptr::null_mut();
    child.ctx.bind()?;
    // SAFETY: the stream is capturing into the body graph; writes one graph handle (the body
    // graph itself, owned by the node: not destroyed here).
    let r = cu("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(craw, &mut ended)
    });
    recorded?;
    r?;
    if ended != body_graph {
        return Err(Error::backend(
            BACKEND,
            "cuStreamEndCapture",
            "the body capture ended in another graph than the conditional node's body",
        ));
    }
    Ok(())
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
