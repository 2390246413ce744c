//! CUDA streams over `CUstream`: [`CudaStream`] is the shared layer's stream
//! ([`xthunk_gpu::gpu_stream::GpuStream`]: the range checks, copies, memsets, launches, events
//! and stream-ordered allocation, written once) over the driver's stream calls
//! ([`StreamVendor`] for [`Cuda`]) and what differs here ([`CudaParts`]).
//!
//! Streams are created non-blocking (they do not synchronize with the legacy default
//! stream). Kernel arguments are marshalled by [`crate::module`]. Recording a
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
use crate::vendor::{self, Cuda, MemPool, MemoryRegistry, Region};
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::{
    ConditionHandle, ConditionalKind, DevicePtr, GemmLaunch, Graph, LaunchArg, LaunchDims,
    SetCondition, Stream,
};
use xthunk_core::ir::MemsetPattern;
use xthunk_core::{Error, Result};
use xthunk_gpu::gpu_stream::{GpuStream, StreamParts};
use xthunk_gpu::stream_base::StreamVendor;

/// Makes `device` (a device of this backend) current on the calling thread: its primary
/// context becomes the thread's current context (`cuCtxSetCurrent`), which is what libraries
/// built on the CUDA runtime take as the current device — NCCL's `ncclCommInitRank` and
/// `ncclCommSplit` bind the new communicator to it. The hook `xthunk_nccl`'s clique provider
/// calls on each rank's thread. (`Device` has no downcast, so the context is reached through
/// a short-lived stream of the device.)
pub fn bind_current(device: &dyn xthunk_core::backend::Device) -> Result<()> {
    xthunk_gpu::stream::bind_current::<Cuda, CudaStream>(device, |s| s.ctx())
}

/// A CUDA stream: the shared stream ([`GpuStream`]: context, stream, memory registry, pool,
/// the plain operations) with cuBLAS, capture and conditional nodes ([`CudaParts`]).
pub type CudaStream = GpuStream<CudaParts>;

/// What a CUDA stream has beyond the shared stream: the device's cuBLAS and its
/// set-condition kernels.
pub struct CudaParts {
    pub(crate) blas: Arc<BlasSlot>,
    pub(crate) conditional: Arc<ConditionalSlot>,
}

/// A new stream of the device of `ctx` (non-blocking: no implicit order with the legacy
/// default stream).
pub(crate) fn create(
    ctx: Arc<DeviceContext>,
    memory: Arc<MemoryRegistry>,
    blas: Arc<BlasSlot>,
    conditional: Arc<ConditionalSlot>,
    pool: Option<Arc<MemPool>>,
) -> Result<CudaStream> {
    GpuStream::new(ctx, memory, pool, CudaParts { blas, conditional })
}

/// The driver's stream calls behind the shared stream operations.
impl StreamVendor for Cuda {
    type Kernel = CudaKernel;
    type LaunchArgs = module::LaunchArgs;

    fn native_handle(raw: sys::CUstream) -> usize {
        raw.expose_provenance()
    }

    fn create_stream(_ctx: &DeviceContext) -> Result<sys::CUstream> {
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the context is current.
        cu("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(raw)
    }

    unsafe fn copy_async(
        _ctx: &DeviceContext,
        src: &Region,
        dst: &Region,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller's contract; unified addressing lets the driver infer the
        // direction.
        cu("cuMemcpyAsync", unsafe {
            sys::cuMemcpyAsync(dst.addr(), src.addr(), bytes, stream)
        })
    }

    unsafe fn memset_async(
        _ctx: &DeviceContext,
        addr: u64,
        pattern: MemsetPattern,
        count: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // The caller's contract: `count` elements of the pattern width at `addr` lie inside a
        // live allocation, aligned to the width; the stream is live.
        let (call, r) = match pattern {
            // SAFETY: see above.
            MemsetPattern::U8(v) => ("cuMemsetD8Async", unsafe {
                sys::cuMemsetD8Async(addr, v, count, stream)
            }),
            // SAFETY: see above.
            MemsetPattern::U16(v) => ("cuMemsetD16Async", unsafe {
                sys::cuMemsetD16Async(addr, v, count, stream)
            }),
            // SAFETY: see above.
            MemsetPattern::U32(v) => ("cuMemsetD32Async", unsafe {
                sys::cuMemsetD32Async(addr, v, count, stream)
            }),
        };
        cu(call, r)
    }

    unsafe fn record_event(
        _ctx: &DeviceContext,
        event: sys::CUevent,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: both handles are live and of this context (the caller's contract).
        cu("cuEventRecord", unsafe {
            sys::cuEventRecord(event, stream)
        })
    }

    unsafe fn wait_event(
        _ctx: &DeviceContext,
        stream: sys::CUstream,
        event: sys::CUevent,
    ) -> Result<()> {
        // SAFETY: both handles are live (the caller's contract).
        cu("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(stream, event, 0)
        })
    }

    unsafe fn synchronize_stream(_ctx: &DeviceContext, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the stream is live (the caller's contract).
        cu("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream)
        })
    }

    unsafe fn query_stream(_ctx: &DeviceContext, stream: sys::CUstream) -> Result<bool> {
        // SAFETY: the stream is live (the caller's contract).
        vendor::ready("cuStreamQuery", unsafe { sys::cuStreamQuery(stream) })
    }

    fn check_launch(
        _ctx: &DeviceContext,
        _kernel: &CudaKernel,
        name: &str,
        dims: &LaunchDims,
    ) -> Result<()> {
        if dims.grid.count() == 0 || dims.block.count() == 0 {
            return Err(Error::InvalidArgument(format!(
                "kernel `{name}`: empty launch (grid {}, block {})",
                dims.grid, dims.block
            )));
        }
        Ok(())
    }

    fn marshal(
        kernel: &CudaKernel,
        args: &[LaunchArg],
        memory: &MemoryRegistry,
    ) -> Result<module::LaunchArgs> {
        module::marshal(kernel, args, memory)
    }

    unsafe fn launch(
        ctx: &DeviceContext,
        kernel: &CudaKernel,
        dims: &LaunchDims,
        args: &mut module::LaunchArgs,
        stream: sys::CUstream,
    ) -> Result<()> {
        module::launch(ctx, kernel, dims, args, stream)
    }
}

/// What differs on a CUDA stream: cuBLAS, capture into CUDA graphs, conditional nodes.
impl StreamParts for CudaParts {
    type Vendor = Cuda;

    fn gemm(s: &CudaStream, g: &GemmLaunch) -> Result<()> {
        s.parts().blas.gemm(s.raw(), s.base().memory(), g)
    }

    fn begin_capture(s: &CudaStream) -> Result<()> {
        // The set-condition module is built now, not during the capture (no module loading
        // while capturing); where it cannot be, conditional nodes are reported unsupported.
        prepare_conditional(s);
        s.ctx().bind()?;
        // SAFETY: the stream is live.
        cu("cuStreamBeginCapture_v2", unsafe {
            sys::cuStreamBeginCapture_v2(
                s.raw(),
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })
    }

    fn end_capture(s: &CudaStream, previous: Option<&Arc<dyn Graph>>) -> Result<Arc<dyn Graph>> {
        s.ctx().bind()?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is live; writes one graph handle.
        cu("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(s.raw(), &mut graph)
        })?;
        let previous = previous
            .and_then(|p| p.as_any().downcast_ref::<CudaGraph>())
            .filter(|p| Arc::ptr_eq(p.context(), s.ctx()));
        if let Some(prev) = previous {
            return Ok(Arc::new(CudaGraph::update(prev, graph)?));
        }
        Ok(Arc::new(CudaGraph::instantiate(s.ctx().clone(), graph)?))
    }

    fn launch_graph(s: &CudaStream, graph: &Arc<dyn Graph>) -> Result<()> {
        let Some(g) = graph.as_any().downcast_ref::<CudaGraph>() else {
            return Err(Error::InvalidArgument(
                "graph does not belong to the CUDA backend".into(),
            ));
        };
        g.launch(s.raw())
    }

    /// Conditional graph nodes (CUDA 12.4+; see [`crate::conditional`] and the end of this file).
    fn create_condition(s: &CudaStream) -> Result<ConditionHandle> {
        create_condition(s)
    }

    fn set_condition(s: &CudaStream, condition: ConditionHandle, how: SetCondition) -> Result<()> {
        set_condition(s, condition, how)
    }

    fn capture_conditional(
        s: &CudaStream,
        kind: ConditionalKind,
        condition: ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        capture_conditional(s, kind, condition, body)
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
    s.ctx().bind()?;
    let raw = s.raw();
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
    if check_driver(s.ctx()).is_ok() {
        let _ = s.parts().conditional.kernels(s.ctx());
    }
}

/// [`Stream::create_condition`] on a CUDA stream.
fn create_condition(s: &CudaStream) -> Result<ConditionHandle> {
    check_driver(s.ctx())?;
    s.parts().conditional.kernels(s.ctx())?;
    let (graph, _) = capture_graph(s)?;
    let mut h: sys::CUgraphConditionalHandle = 0;
    let ctx = s.ctx().raw();
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
    let k = s.parts().conditional.kernels(s.ctx())?;
    let int = |v: u32| -> Result<u64> {
        i32::try_from(v)
            .map(|v| u64::from(v as u32))
            .map_err(|_| Error::InvalidArgument(format!("branch {v}")))
    };
    let addr =
        |p: DevicePtr, len: u64| -> Result<u64> { Ok(s.base().memory().region(p, len)?.addr()) };
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
    s.ctx().bind()?;
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
            s.raw(),
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
    check_driver(s.ctx())?;
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
        ctx: s.ctx().raw(),
    };
    let mut node: sys::CUgraphNode = std::ptr::null_mut();
    s.ctx().bind()?;
    // SAFETY: the capture graph and its dependency nodes are live; `params` is a complete
    // node description the driver reads and completes (`phGraph_out`); writes one node.
    call("cuGraphAddNode", || unsafe {
        sys::cuGraphAddNode(&mut node, graph, deps.as_ptr(), deps.len(), &mut params)
    })?;
    let raw = s.raw();
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
    let child = create(
        s.ctx().clone(),
        s.base().memory().clone(),
        s.parts().blas.clone(),
        s.parts().conditional.clone(),
        None,
    )?;
    let craw = child.raw();
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
    child.ctx().bind()?;
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
