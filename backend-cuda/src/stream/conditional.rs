//! Conditional graph nodes in a capturing CUDA stream ([`Stream::create_condition`],
//! [`Stream::set_condition`], [`Stream::capture_conditional`]): the condition handle of the
//! capture's graph, the set-condition launches, and the IF/WHILE nodes whose bodies are
//! captured on child streams. The driver check and the set-condition kernels are
//! [`crate::conditional`]'s.

use super::CudaStream;
use crate::conditional::{call, check_driver};
use crate::result::{BACKEND, cu};
use crate::sys::{self, CUstreamCaptureMode, CUstreamCaptureStatus};
use std::ffi::c_void;
use xthunk_core::backend::{ConditionHandle, ConditionalKind, DevicePtr, SetCondition, Stream};
use xthunk_core::{Error, Result};

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
