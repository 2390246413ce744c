//! HIP graphs (command buffers), recorded by stream capture (`hipStreamBeginCapture` in
//! thread-local mode … `hipStreamEndCapture`, `hipGraphInstantiate`, `hipGraphLaunch`).
//!
//! What cannot be captured falls back to plain stream work *inside* the graph: a recorded
//! graph is a list of segments, each either an instantiated HIP graph or a list of operations
//! re-issued on the stream when the graph is launched, in order. A gemm always becomes such a
//! plain operation (rocBLAS may allocate its workspace during the call, which capture
//! forbids); an operation HIP refuses to capture (`hipErrorStreamCaptureUnsupported`, an
//! invalidated capture) turns the segment being captured into plain operations; a segment
//! whose graph does not instantiate does too. A runtime without the graph entry points makes
//! `begin_capture` return `Unsupported` (the executor then runs command buffers directly).
//! The stream ([`crate::stream`]) decides what each operation becomes; this module holds the
//! recording and the HIP graph calls.

use crate::context::DeviceContext;
use crate::result::{self, hip_describe, unsupported};
use crate::sys;
use std::any::Any;
use std::ffi::c_int;
use std::sync::Arc;
use xthunk_core::Result;
use xthunk_core::backend::{DevicePtr, GemmLaunch, Graph, KernelHandle, LaunchArg, LaunchDims};
use xthunk_core::ir::MemsetPattern;

/// One operation, as recorded for plain replay.
#[derive(Clone)]
pub(crate) enum Op {
    Copy {
        src: DevicePtr,
        dst: DevicePtr,
        size: u64,
    },
    Memset {
        dst: DevicePtr,
        size: u64,
        pattern: MemsetPattern,
    },
    Launch {
        kernel: Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: Vec<LaunchArg>,
    },
    Gemm(GemmLaunch),
}

/// A capture in progress.
#[derive(Default)]
pub(crate) struct Capture {
    pub(crate) segments: Vec<Segment>,
    /// Operations of the current segment (captured natively when `native`).
    pub(crate) pending: Vec<Op>,
    /// A HIP capture is open on the stream.
    pub(crate) native: bool,
}

/// A part of a recorded graph.
pub(crate) enum Segment {
    Native(NativeGraph),
    Plain(Vec<Op>),
}

/// An instantiated HIP graph and its graph, destroyed on drop.
pub(crate) struct NativeGraph {
    ctx: Arc<DeviceContext>,
    graph: sys::hipGraph_t,
    exec: sys::hipGraphExec_t,
    nodes: usize,
}

// SAFETY: HIP graph handles may be used from any thread; they are destroyed once, in `drop`,
// and launching an executable graph does not mutate it.
unsafe impl Send for NativeGraph {}
// SAFETY: as above.
unsafe impl Sync for NativeGraph {}

impl NativeGraph {
    /// `hipGraphLaunch` on `stream` (a live stream of the same device).
    pub(crate) fn launch(&self, stream: sys::hipStream_t) -> Result<()> {
        let Some(launch) = self.ctx.hip.api.hipGraphLaunch else {
            return Err(unsupported("hipGraphLaunch"));
        };
        self.ctx.bind()?;
        // SAFETY: `self.exec` is a live executable graph of this device; the stream is live.
        let rc = unsafe { launch(self.exec, stream) };
        result::hip("hipGraphLaunch", rc)
    }
}

impl Drop for NativeGraph {
    fn drop(&mut self) {
        let api = &self.ctx.hip.api;
        if let (Some(destroy_exec), Some(destroy)) = (api.hipGraphExecDestroy, api.hipGraphDestroy)
        {
            // SAFETY: `exec` and `graph` are live handles owned by this struct, destroyed once.
            unsafe {
                destroy_exec(self.exec);
                destroy(self.graph);
            }
        }
    }
}

/// A recorded graph: native HIP graphs and plain operations, in order.
pub struct RocmGraph {
    /// The device it was recorded on.
    pub(crate) ordinal: c_int,
    pub(crate) segments: Vec<Segment>,
}

impl RocmGraph {
    pub(crate) fn new(ordinal: c_int, segments: Vec<Segment>) -> Self {
        RocmGraph { ordinal, segments }
    }

    /// Nodes in native HIP graphs.
    pub fn native_nodes(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Native(g) => g.nodes,
                Segment::Plain(_) => 0,
            })
            .sum()
    }

    /// Operations replayed as plain stream work.
    pub fn plain_ops(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Native(_) => 0,
                Segment::Plain(ops) => ops.len(),
            })
            .sum()
    }
}

impl Graph for RocmGraph {
    fn node_count(&self) -> usize {
        self.native_nodes() + self.plain_ops()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Capture {
    /// Begins a HIP capture for the next segment.
    pub(crate) fn open_native(&mut self, ctx: &Arc<DeviceContext>, stream: sys::hipStream_t) {
        self.native = false;
        let Some(begin) = ctx.hip.api.hipStreamBeginCapture else {
            return;
        };
        if ctx.bind().is_err() {
            return;
        }
        // SAFETY: the stream is live and not capturing (the previous capture was ended).
        let rc = unsafe { begin(stream, sys::hipStreamCaptureModeThreadLocal) };
        if rc == sys::hipSuccess {
            self.native = true;
        } else {
            tracing::debug!(
                "hipStreamBeginCapture: {}; recording plain operations",
                hip_describe(rc)
            );
        }
    }

    /// Ends the HIP capture, discarding what it recorded.
    pub(crate) fn abort_native(&mut self, ctx: &Arc<DeviceContext>, stream: sys::hipStream_t) {
        if !self.native {
            return;
        }
        self.native = false;
        let api = &ctx.hip.api;
        let (Some(end), Some(destroy)) = (api.hipStreamEndCapture, api.hipGraphDestroy) else {
            return;
        };
        let mut g: sys::hipGraph_t = std::ptr::null_mut();
        // SAFETY: the stream is capturing; `g` receives the graph (null when invalidated).
        unsafe { end(stream, &mut g) };
        if !g.is_null() {
            // SAFETY: `g` is a graph this call owns, destroyed once.
            unsafe { destroy(g) };
        }
    }

    /// Ends the HIP capture into a native segment (or, if it cannot be ended or instantiated,
    /// a plain one); the pending operations are accounted for either way.
    pub(crate) fn close_native(&mut self, ctx: &Arc<DeviceContext>, stream: sys::hipStream_t) {
        let ops = std::mem::take(&mut self.pending);
        if !self.native {
            if !ops.is_empty() {
                self.segments.push(Segment::Plain(ops));
            }
            return;
        }
        self.native = false;
        match end_native(ctx, stream) {
            Ok(Some(g)) => self.segments.push(Segment::Native(g)),
            Ok(None) => {
                if !ops.is_empty() {
                    self.segments.push(Segment::Plain(ops));
                }
            }
            Err(why) => {
                tracing::debug!("graph segment falls back to plain stream work: {why}");
                if !ops.is_empty() {
                    self.segments.push(Segment::Plain(ops));
                }
            }
        }
    }
}

/// `hipStreamEndCapture` + `hipGraphInstantiate`; `None` for an empty graph.
fn end_native(
    ctx: &Arc<DeviceContext>,
    stream: sys::hipStream_t,
) -> std::result::Result<Option<NativeGraph>, String> {
    let api = &ctx.hip.api;
    let (Some(end), Some(inst), Some(nodes_f), Some(destroy)) = (
        api.hipStreamEndCapture,
        api.hipGraphInstantiate,
        api.hipGraphGetNodes,
        api.hipGraphDestroy,
    ) else {
        return Err("the runtime lacks the graph entry points".into());
    };
    let mut graph: sys::hipGraph_t = std::ptr::null_mut();
    // SAFETY: the stream is capturing; `graph` receives the recorded graph.
    let rc = unsafe { end(stream, &mut graph) };
    if rc != sys::hipSuccess || graph.is_null() {
        if !graph.is_null() {
            // SAFETY: destroys the graph this call returned, once.
            unsafe { destroy(graph) };
        }
        return Err(format!("hipStreamEndCapture: {}", hip_describe(rc)));
    }
    let mut nodes = 0usize;
    // SAFETY: `graph` is live; a null node array asks for the count only.
    let rc = unsafe { nodes_f(graph, std::ptr::null_mut(), &mut nodes) };
    if rc != sys::hipSuccess || nodes == 0 {
        // SAFETY: destroys the graph this call owns, once.
        unsafe { destroy(graph) };
        return if rc == sys::hipSuccess {
            Ok(None)
        } else {
            Err(format!("hipGraphGetNodes: {}", hip_describe(rc)))
        };
    }
    let mut exec: sys::hipGraphExec_t = std::ptr::null_mut();
    let mut log = [0u8; 512];
    // SAFETY: `graph` is live; `exec` receives the executable graph; the log buffer has
    // the length passed.
    let rc = unsafe {
        inst(
            &mut exec,
            graph,
            std::ptr::null_mut(),
            log.as_mut_ptr().cast(),
            log.len(),
        )
    };
    if rc != sys::hipSuccess || exec.is_null() {
        // SAFETY: destroys the graph this call owns, once.
        unsafe { destroy(graph) };
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        return Err(format!(
            "hipGraphInstantiate: {} {}",
            hip_describe(rc),
            String::from_utf8_lossy(&log[..end])
        ));
    }
    Ok(Some(NativeGraph {
        ctx: ctx.clone(),
        graph,
        exec,
        nodes,
    }))
}
