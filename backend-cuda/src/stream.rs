//! Streams and events over `CUstream` and `CUevent`.
//!
//! Streams are created non-blocking (they do not synchronize with the legacy default
//! stream). Every pointer range is checked against the device's live allocations before it
//! reaches the driver. Kernel arguments are marshalled by [`crate::module`]. Recording a
//! graph is stream capture: [`Stream::begin_capture`] starts
//! `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL` capture, [`Stream::end_capture`] ends it and hands
//! the recording to [`crate::graph`]. Conditional graph nodes in a capturing stream
//! ([`Stream::create_condition`], [`Stream::set_condition`], [`Stream::capture_conditional`]:
//! the capture's condition handles, the set-condition launches, IF/WHILE nodes whose bodies
//! are captured on child streams) are at the end of this file; the driver check and the
//! set-condition kernels are [`crate::conditional`]'s.

use crate::blas::BlasSlot;
use crate::conditional::{ConditionalSlot, call, check_driver};
use crate::context::DeviceContext;
use crate::graph::CudaGraph;
use crate::module::{self, CudaKernel};
use crate::result::{BACKEND, cu};
use crate::sys::{self, CUstreamCaptureMode, CUstreamCaptureStatus};
use crate::vendor::{self, Cuda, CudaEvent, MemPool, MemoryRegistry, RawStream};
use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::{
    Buffer, ConditionHandle, ConditionalKind, DevicePtr, Event, GemmLaunch, Graph, KernelHandle,
    LaunchArg, LaunchDims, SetCondition, Stream,
};
use xthunk_core::ir::MemsetPattern;
use xthunk_core::{Error, Result};
use xthunk_gpu::args::vendor_kernel;

/// Makes `device` (a device of this backend) current on the calling thread: its primary
/// context becomes the thread's current context (`cuCtxSetCurrent`), which is what libraries
/// built on the CUDA runtime take as the current device — NCCL's `ncclCommInitRank` and
/// `ncclCommSplit` bind the new communicator to it. The hook `xthunk_nccl`'s clique provider
/// calls on each rank's thread. (`Device` has no downcast, so the context is reached through
/// a short-lived stream of the device.)
pub fn bind_current(device: &dyn xthunk_core::backend::Device) -> Result<()> {
    xthunk_gpu::stream::bind_current::<Cuda, CudaStream>(device, |s| &s.ctx)
}

/// A CUDA stream.
pub struct CudaStream {
    pub(crate) ctx: Arc<DeviceContext>,
    /// `owner.raw`.
    pub(crate) raw: sys::CUstream,
    owner: Arc<RawStream>,
    pub(crate) memory: Arc<MemoryRegistry>,
    pub(crate) blas: Arc<BlasSlot>,
    pub(crate) conditional: Arc<ConditionalSlot>,
    /// The device's memory pool, where it has one (stream-ordered allocation).
    pool: Option<Arc<MemPool>>,
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

impl CudaStream {
    pub(crate) fn new(
        ctx: Arc<DeviceContext>,
        memory: Arc<MemoryRegistry>,
        blas: Arc<BlasSlot>,
        conditional: Arc<ConditionalSlot>,
        pool: Option<Arc<MemPool>>,
    ) -> Result<Self> {
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the context is current.
        cu("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CU_STREAM_NON_BLOCKING)
        })?;
        // SAFETY: `raw` was just created for this context and is owned by `owner` alone.
        let owner = Arc::new(unsafe { RawStream::new(ctx.clone(), raw) });
        Ok(CudaStream {
            ctx,
            raw,
            owner,
            memory,
            blas,
            conditional,
            pool,
        })
    }
}

impl Stream for CudaStream {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        let (s, d) = self.memory.copy_regions(src, dst, size)?;
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
        let k = vendor_kernel::<Cuda, CudaKernel>(kernel)?;
        if dims.grid.count() == 0 || dims.block.count() == 0 {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}`: empty launch (grid {}, block {})",
                k.name(),
                dims.grid,
                dims.block
            )));
        }
        let mut marshalled = module::marshal(k, args, &self.memory)?;
        module::launch(&self.ctx, k, &dims, &mut marshalled, self.raw)
    }

    fn gemm(&self, g: &GemmLaunch) -> Result<()> {
        self.blas.gemm(self.raw, &self.memory, g)
    }

    fn record(&self, event: &dyn Event) -> Result<()> {
        let e = CudaEvent::downcast(event)?;
        self.ctx.bind()?;
        // SAFETY: both handles are live and of this context.
        cu("cuEventRecord", unsafe {
            sys::cuEventRecord(e.raw(), self.raw)
        })
    }

    fn wait(&self, event: &dyn Event) -> Result<()> {
        let e = CudaEvent::downcast(event)?;
        self.ctx.bind()?;
        // SAFETY: both handles are live.
        cu("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, e.raw(), 0)
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
        vendor::ready("cuStreamQuery", unsafe { sys::cuStreamQuery(self.raw) })
    }

    fn begin_capture(&self) -> Result<()> {
        // The set-condition module is built now, not during the capture (no module loading
        // while capturing); where it cannot be, conditional nodes are reported unsupported.
        prepare_conditional(self);
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
            .filter(|p| Arc::ptr_eq(p.context(), &self.ctx));
        if let Some(prev) = previous {
            return Ok(Arc::new(CudaGraph::update(prev, graph)?));
        }
        Ok(Arc::new(CudaGraph::instantiate(self.ctx.clone(), graph)?))
    }

    fn allocate_ordered(&self, size: u64, alignment: u64) -> Result<Buffer> {
        let Some(pool) = &self.pool else {
            return Err(Error::Unsupported {
                backend: crate::result::BACKEND.into(),
                feature: format!("stream-ordered allocation on {}", self.ctx.name),
            });
        };
        let buffer = self
            .memory
            .allocate_pooled(&self.ctx, size, alignment, pool, &self.owner)?;
        Ok(Box::new(buffer))
    }

    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        let Some(g) = graph.as_any().downcast_ref::<CudaGraph>() else {
            return Err(Error::InvalidArgument(
                "graph does not belong to the CUDA backend".into(),
            ));
        };
        g.launch(self.raw)
    }

    /// Conditional graph nodes (CUDA 12.4+; see [`crate::conditional`] and the end of this file).
    fn create_condition(&self) -> Result<ConditionHandle> {
        create_condition(self)
    }

    fn set_condition(&self, condition: ConditionHandle, how: SetCondition) -> Result<()> {
        set_condition(self, condition, how)
    }

    fn capture_conditional(
        &self,
        kind: ConditionalKind,
        condition: ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        capture_conditional(self, kind, condition, body)
    }

    /// The `CUstream` (for NCCL/RCCL and other vendor libraries that take one).
    fn native_handle(&self) -> Option<usize> {
        Some(self.raw.expose_provenance())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---- Conditional graph nodes in a capturing stream ----

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
fn prepare_conditional(s: &CudaStream) {
    if check_driver(&s.ctx).is_ok() {
        let _ = s.conditional.kernels(&s.ctx);
    }
}

/// [`Stream::create_condition`] on a CUDA stream.
fn create_condition(s: &CudaStream) -> Result<ConditionHandle> {
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
fn set_condition(s: &CudaStream, h: ConditionHandle, how: SetCondition) -> Result<()> {
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
fn capture_conditional(
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
