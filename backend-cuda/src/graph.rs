//! CUDA graphs: a stream capture instantiated once into a `CUgraphExec` and launched on a
//! stream with `cuGraphLaunch`.
//!
//! Graphs refer to device addresses: the executor re-records when buffers change, and
//! [`Stream::end_capture_reusing`](xthunk_core::backend::Stream::end_capture_reusing) then
//! updates the previous executable graph from the new recording (`cuGraphExecUpdate_v2`)
//! instead of instantiating another, falling back to a fresh instantiation when the driver
//! refuses (changed topology, missing symbol). The executable graph is a shared handle
//! (`ExecHandle`): after an update the previous [`CudaGraph`] and the new one both hold it,
//! and it is destroyed with the last of them.

use crate::context::DeviceContext;
use crate::loader::guarded;
use crate::result::cu;
use crate::sys::{self, CUresult};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use xthunk_core::Result;
use xthunk_core::backend::Graph;

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
    /// The context the graph was recorded in.
    pub(crate) fn context(&self) -> &Arc<DeviceContext> {
        &self.ctx
    }

    /// Launches the executable graph on `stream` (a live stream of the same context).
    pub(crate) fn launch(&self, stream: sys::CUstream) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the executable graph and the stream are live, of this context.
        cu("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(self.exec.raw, stream)
        })
    }

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
    pub(crate) fn instantiate(ctx: Arc<DeviceContext>, graph: sys::CUgraph) -> Result<Self> {
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
    pub(crate) fn update(previous: &CudaGraph, graph: sys::CUgraph) -> Result<Self> {
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
