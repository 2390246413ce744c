//! Streams, events and graphs over `CUstream`, `CUevent` and `CUgraphExec`.
//!
//! Streams are created non-blocking (they do not synchronize with the legacy default
//! stream). Every pointer range is checked against the device's live allocations before it
//! reaches the driver. Kernel arguments are marshalled by [`crate::module`].
//!
//! Graphs: [`Stream::begin_capture`] starts `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL` capture,
//! [`Stream::end_capture`] ends it and instantiates the graph once; launching it is
//! `cuGraphLaunch`. Graphs refer to device addresses: the executor re-records when buffers
//! change, and [`Stream::end_capture_reusing`] then updates the previous executable graph
//! from the new recording (`cuGraphExecUpdate_v2`) instead of instantiating another, falling
//! back to a fresh instantiation when the driver refuses (changed topology, missing symbol).
//! The executable graph is a shared handle (`ExecHandle`): after an update the previous
//! [`CudaGraph`] and the new one both hold it, and it is destroyed with the last of them.

use crate::blas::BlasSlot;
use crate::context::DeviceContext;
use crate::loader::guarded;
use crate::memory::MemoryRegistry;
use crate::module::{self, CudaKernel};
use crate::result::{cu, cu_error};
use crate::sys::{self, CUresult, CUstreamCaptureMode};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use xthunk_core::backend::{
    DevicePtr, Event, GemmLaunch, Graph, KernelHandle, LaunchArg, LaunchDims, Stream,
};
use xthunk_core::ir::MemsetPattern;
use xthunk_core::{Error, Result};

/// Makes `device` (a device of this backend) current on the calling thread: its primary
/// context becomes the thread's current context (`cuCtxSetCurrent`), which is what libraries
/// built on the CUDA runtime take as the current device — NCCL's `ncclCommInitRank` and
/// `ncclCommSplit` bind the new communicator to it. The hook `xthunk_nccl`'s clique provider
/// calls on each rank's thread. (`Device` has no downcast, so the context is reached through
/// a short-lived stream of the device.)
pub fn bind_current(device: &dyn xthunk_core::backend::Device) -> Result<()> {
    let stream = device.create_stream()?;
    let Some(s) = stream.as_any().downcast_ref::<CudaStream>() else {
        return Err(Error::InvalidArgument(format!(
            "{} is not a CUDA device (backend `{}`)",
            device.info().name,
            device.backend_name()
        )));
    };
    s.ctx.bind()
}

/// A CUDA stream.
pub struct CudaStream {
    ctx: Arc<DeviceContext>,
    pub(crate) raw: sys::CUstream,
    memory: Arc<MemoryRegistry>,
    blas: Arc<BlasSlot>,
}

// SAFETY: a CUstream may be used from any thread once its context is made current, which
// every method does first; the handle is immutable after creation.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the driver serializes concurrent submissions to one stream.
unsafe impl Sync for CudaStream {}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        // Work already queued still completes after cuStreamDestroy.
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: `raw` was created by cuStreamCreate and is destroyed once, here.
            cu("cuStreamDestroy_v2", unsafe {
                sys::cuStreamDestroy_v2(self.raw)
            })
        });
        if let Err(e) = r {
            tracing::error!("{e}");
        }
    }
}

fn cuda_event(event: &dyn Event) -> Result<&CudaEvent> {
    event
        .as_any()
        .downcast_ref::<CudaEvent>()
        .ok_or_else(|| Error::InvalidArgument("event does not belong to the CUDA backend".into()))
}

impl CudaStream {
    pub(crate) fn new(
        ctx: Arc<DeviceContext>,
        memory: Arc<MemoryRegistry>,
        blas: Arc<BlasSlot>,
    ) -> Result<Self> {
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the context is current.
        cu("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(CudaStream {
            ctx,
            raw,
            memory,
            blas,
        })
    }

    /// `true` when done, `false` when work is pending, for `cuStreamQuery`/`cuEventQuery`.
    fn ready(call: &str, r: CUresult) -> Result<bool> {
        match r {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(cu_error(call, other)),
        }
    }
}

impl Stream for CudaStream {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        let s = self.memory.region(src, size)?;
        let d = self.memory.region(dst, size)?;
        if s.overlaps(&d) {
            return Err(Error::InvalidArgument(format!(
                "copy of {size} bytes from {src} to {dst}: the ranges overlap"
            )));
        }
        if size == 0 {
            return Ok(());
        }
        let n = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("copy of {size} bytes")))?;
        self.ctx.bind()?;
        // SAFETY: both ranges lie inside live allocations of this context (unified addressing
        // lets the driver infer the direction); the stream is live.
        cu("cuMemcpyAsync", unsafe {
            sys::cuMemcpyAsync(d.addr(), s.addr(), n, self.raw)
        })
    }

    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        let w = pattern.width();
        if size % w != 0 {
            return Err(Error::InvalidArgument(format!(
                "memset of {size} bytes is not a multiple of the {w}-byte pattern"
            )));
        }
        let d = self.memory.region(dst, size)?;
        if size == 0 {
            return Ok(());
        }
        if d.addr() % w != 0 {
            return Err(Error::InvalidArgument(format!(
                "a {w}-byte memset needs a {w}-byte aligned address, got {dst}"
            )));
        }
        let count = usize::try_from(size / w)
            .map_err(|_| Error::InvalidArgument(format!("memset of {size} bytes")))?;
        self.ctx.bind()?;
        let (addr, raw) = (d.addr(), self.raw);
        // `count` elements of the pattern width at `addr` lie inside a live allocation
        // (checked above), aligned to the width; the stream is live.
        let r = match pattern {
            // SAFETY: see above.
            MemsetPattern::U8(v) => unsafe { sys::cuMemsetD8Async(addr, v, count, raw) },
            // SAFETY: see above.
            MemsetPattern::U16(v) => unsafe { sys::cuMemsetD16Async(addr, v, count, raw) },
            // SAFETY: see above.
            MemsetPattern::U32(v) => unsafe { sys::cuMemsetD32Async(addr, v, count, raw) },
        };
        let call = match pattern {
            MemsetPattern::U8(_) => "cuMemsetD8Async",
            MemsetPattern::U16(_) => "cuMemsetD16Async",
            MemsetPattern::U32(_) => "cuMemsetD32Async",
        };
        cu(call, r)
    }

    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        let Some(k) = kernel.as_any().downcast_ref::<CudaKernel>() else {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` was not loaded by the CUDA backend",
                kernel.name()
            )));
        };
        if dims.grid.count() == 0 || dims.block.count() == 0 {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}`: empty launch (grid {}, block {})",
                k.name(),
                dims.grid,
                dims.block
            )));
        }
        let mut marshalled = module::marshal(k, args, &self.memory)?;
        module::launch(&self.ctx, k, dims, &mut marshalled, self.raw)
    }

    fn gemm(&self, g: &GemmLaunch) -> Result<()> {
        self.blas.gemm(self.raw, &self.memory, g)
    }

    fn record(&self, event: &dyn Event) -> Result<()> {
        let e = cuda_event(event)?;
        self.ctx.bind()?;
        // SAFETY: both handles are live and of this context.
        cu("cuEventRecord", unsafe {
            sys::cuEventRecord(e.raw, self.raw)
        })
    }

    fn wait(&self, event: &dyn Event) -> Result<()> {
        let e = cuda_event(event)?;
        self.ctx.bind()?;
        // SAFETY: both handles are live.
        cu("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, e.raw, 0)
        })
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the stream is live.
        cu("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    fn query(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: the stream is live.
        Self::ready("cuStreamQuery", unsafe { sys::cuStreamQuery(self.raw) })
    }

    fn begin_capture(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the stream is live.
        cu("cuStreamBeginCapture_v2", unsafe {
            sys::cuStreamBeginCapture_v2(
                self.raw,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })
    }

    fn end_capture(&self) -> Result<Arc<dyn Graph>> {
        self.end_capture_reusing(None)
    }

    fn end_capture_reusing(&self, previous: Option<&Arc<dyn Graph>>) -> Result<Arc<dyn Graph>> {
        self.ctx.bind()?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is live; writes one graph handle.
        cu("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(self.raw, &mut graph)
        })?;
        let previous = previous
            .and_then(|p| p.as_any().downcast_ref::<CudaGraph>())
            .filter(|p| Arc::ptr_eq(&p.ctx, &self.ctx));
        if let Some(prev) = previous {
            return Ok(Arc::new(CudaGraph::update(prev, graph)?));
        }
        Ok(Arc::new(CudaGraph::instantiate(self.ctx.clone(), graph)?))
    }

    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        let Some(g) = graph.as_any().downcast_ref::<CudaGraph>() else {
            return Err(Error::InvalidArgument(
                "graph does not belong to the CUDA backend".into(),
            ));
        };
        self.ctx.bind()?;
        // SAFETY: the executable graph and the stream are live, of this context.
        cu("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(g.exec.raw, self.raw)
        })
    }

    /// The `CUstream` (for NCCL/RCCL and other vendor libraries that take one).
    fn native_handle(&self) -> Option<usize> {
        Some(self.raw.expose_provenance())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An executable graph (`CUgraphExec`), destroyed when the last [`CudaGraph`] sharing it
/// goes (an in-place update hands it from the previous graph to the new one, and both keep
/// it alive).
pub(crate) struct ExecHandle {
    ctx: Arc<DeviceContext>,
    raw: sys::CUgraphExec,
}

// SAFETY: the handle is usable from any thread with the context current (done before every
// call); it is only destroyed in `drop`, once.
unsafe impl Send for ExecHandle {}
// SAFETY: as above; concurrent launches of one executable graph are serialized by the driver.
unsafe impl Sync for ExecHandle {}

impl Drop for ExecHandle {
    fn drop(&mut self) {
        if self.raw.is_null() || self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: created by cuGraphInstantiateWithFlags; this is its only owner (every
        // `CudaGraph` reaches it through an `Arc`), so it is destroyed once, here.
        let r = unsafe { sys::cuGraphExecDestroy(self.raw) };
        if let Err(e) = cu("cuGraphExecDestroy", r) {
            tracing::error!("{e}");
        }
    }
}

/// `false` once `cuGraphExecUpdate_v2` turned out to be missing from the driver (cudarc
/// panics on a missing symbol, and the probe does not require it), so that later re-records
/// go straight to a fresh instantiation.
static EXEC_UPDATE_AVAILABLE: AtomicBool = AtomicBool::new(true);

/// A recorded and instantiated CUDA graph.
pub struct CudaGraph {
    ctx: Arc<DeviceContext>,
    graph: sys::CUgraph,
    exec: Arc<ExecHandle>,
    nodes: usize,
}

// SAFETY: graph handles are usable from any thread with the context current (done before
// every call); they are immutable after instantiation (the shared executable graph is only
// updated while the executor re-records the command buffer that owns it).
unsafe impl Send for CudaGraph {}
// SAFETY: as above; cuGraphLaunch of one executable graph from several threads is
// serialized by the driver.
unsafe impl Sync for CudaGraph {}

impl CudaGraph {
    /// The node count of `graph` (live).
    fn count_nodes(graph: sys::CUgraph) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: the graph is live; with a null array the call only writes the count.
        cu("cuGraphGetNodes", unsafe {
            sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n)
        })?;
        Ok(n)
    }

    /// Takes ownership of `graph` and instantiates it (the graph is destroyed on failure).
    fn instantiate(ctx: Arc<DeviceContext>, graph: sys::CUgraph) -> Result<Self> {
        let mut g = CudaGraph {
            exec: Arc::new(ExecHandle {
                ctx: ctx.clone(),
                raw: std::ptr::null_mut(),
            }),
            ctx,
            graph,
            nodes: 0,
        };
        g.nodes = Self::count_nodes(g.graph)?;
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph is live; writes one executable-graph handle.
        cu("cuGraphInstantiateWithFlags", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, g.graph, 0)
        })?;
        g.exec = Arc::new(ExecHandle {
            ctx: g.ctx.clone(),
            raw: exec,
        });
        Ok(g)
    }

    /// Takes ownership of `graph` (a new recording of the work `previous` recorded) and
    /// updates `previous`'s executable graph from it in place; the result shares that
    /// executable graph with `previous`. When the driver refuses the update (or lacks the
    /// call), instantiates `graph` afresh instead. The context is current.
    fn update(previous: &CudaGraph, graph: sys::CUgraph) -> Result<Self> {
        if previous.exec.raw.is_null() || !EXEC_UPDATE_AVAILABLE.load(Ordering::Relaxed) {
            return Self::instantiate(previous.ctx.clone(), graph);
        }
        // Owns `graph` from here on (destroyed on any early return).
        let mut g = CudaGraph {
            ctx: previous.ctx.clone(),
            graph,
            exec: previous.exec.clone(),
            nodes: 0,
        };
        g.nodes = Self::count_nodes(g.graph)?;
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        let (exec, new_graph) = (g.exec.raw, g.graph);
        // SAFETY: the executable graph (kept alive by `g.exec`) and the new graph are live, of
        // the current context; writes one result record. Under `guarded` because the symbol
        // is not among those the probe requires.
        let r = guarded("cuGraphExecUpdate_v2", || unsafe {
            sys::cuGraphExecUpdate_v2(exec, new_graph, &mut info)
        });
        match r {
            Ok(CUresult::CUDA_SUCCESS)
                if info.result == sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS =>
            {
                tracing::debug!(nodes = g.nodes, "updated graph in place");
                Ok(g)
            }
            Ok(code) => {
                tracing::debug!(
                    "graph update refused ({code:?}, {:?}), instantiating afresh",
                    info.result
                );
                Self::reinstantiate(g)
            }
            Err(e) => {
                EXEC_UPDATE_AVAILABLE.store(false, Ordering::Relaxed);
                tracing::debug!("{e}; instantiating graphs afresh from now on");
                Self::reinstantiate(g)
            }
        }
    }

    /// Instantiates `g`'s graph into a new executable graph of its own (dropping its share
    /// of the previous one).
    fn reinstantiate(mut g: CudaGraph) -> Result<Self> {
        let graph = std::mem::replace(&mut g.graph, std::ptr::null_mut());
        let ctx = g.ctx.clone();
        drop(g);
        Self::instantiate(ctx, graph)
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        if self.graph.is_null() || self.ctx.bind().is_err() {
            return;
        }
        // SAFETY: returned by cuStreamEndCapture, owned here, destroyed once.
        let r = unsafe { sys::cuGraphDestroy(self.graph) };
        if let Err(e) = cu("cuGraphDestroy", r) {
            tracing::error!("{e}");
        }
    }
}

impl Graph for CudaGraph {
    fn node_count(&self) -> usize {
        self.nodes
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A CUDA event (timing disabled).
pub struct CudaEvent {
    ctx: Arc<DeviceContext>,
    raw: sys::CUevent,
}

// SAFETY: an event handle is usable from any thread with its context current (done before
// every call); it is immutable after creation.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    pub(crate) fn new(ctx: Arc<DeviceContext>) -> Result<Self> {
        ctx.bind()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one event handle; the context is current.
        cu("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, sys::CU_EVENT_DISABLE_TIMING)
        })?;
        Ok(CudaEvent { ctx, raw })
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: created by cuEventCreate, destroyed once.
            cu("cuEventDestroy_v2", unsafe {
                sys::cuEventDestroy_v2(self.raw)
            })
        });
        if let Err(e) = r {
            tracing::error!("{e}");
        }
    }
}

impl Event for CudaEvent {
    fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the event is live.
        cu("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.raw)
        })
    }

    fn query(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: the event is live.
        CudaStream::ready("cuEventQuery", unsafe { sys::cuEventQuery(self.raw) })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
