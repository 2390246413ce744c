//! Conditional graph nodes through the CUDA driver API (CUDA 12.4+), EMULATED: the calls the
//! CUDA backend makes to record `while` and `conditional` as graph nodes. The kernels of
//! xthunk's set-condition module are in `set_condition`.
//!
//! Calls: `cuStreamGetCaptureInfo_v2` (the capture's graph and dependencies),
//! `cuStreamUpdateCaptureDependencies`, `cuStreamBeginCaptureToGraph` (into an empty graph,
//! no dependencies: a node's body), `cuGraphConditionalHandleCreate`, and `cuGraphAddNode`
//! for `CU_GRAPH_NODE_TYPE_CONDITIONAL` only (any other node type is refused as
//! unsupported). Semantics and strictness: [`crate::stream::conditional`].

use super::{CUresult, Handle, api, stream_of};
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream::{self, conditional as cond};
use std::ffi::{c_int, c_uint, c_ulonglong};

/// `CUDA_CONDITIONAL_NODE_PARAMS`.
#[repr(C)]
pub struct ConditionalNodeParams {
    pub handle: c_ulonglong,
    pub ty: c_uint,
    pub size: c_uint,
    pub ph_graph_out: *mut Handle,
    pub ctx: Handle,
}

/// The start of `CUgraphNodeParams` (the conditional member of its union; the emulator reads
/// nothing further).
#[repr(C)]
pub struct NodeParamsHead {
    pub ty: c_int,
    pub reserved0: [c_int; 3],
    pub conditional: ConditionalNodeParams,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    s: Handle,
    status_out: *mut c_uint,
    id_out: *mut c_ulonglong,
    graph_out: *mut Handle,
    deps_out: *mut *const Handle,
    num_deps_out: *mut usize,
) -> CUresult {
    const C: &str = "cuStreamGetCaptureInfo_v2";
    api(C, || {
        let st = stream_of(s, C)?;
        let (status, id) = stream::capture_status(&st);
        if !status_out.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe { put(status_out, status, "captureStatus_out", C)? };
        }
        let Some(c) = stream::capture_of(&st).filter(|_| status == 1) else {
            return Ok(());
        };
        if !id_out.is_null() {
            // SAFETY: the caller's optional out-pointer, checked non-null.
            unsafe { put(id_out, id, "id_out", C)? };
        }
        if !graph_out.is_null() {
            // SAFETY: as above.
            unsafe { put(graph_out, c.graph, "graph_out", C)? };
        }
        let (deps, n) = c.dependencies();
        if !deps_out.is_null() {
            // SAFETY: as above.
            unsafe { put(deps_out, deps, "dependencies_out", C)? };
        }
        if !num_deps_out.is_null() {
            // SAFETY: as above.
            unsafe { put(num_deps_out, n, "numDependencies_out", C)? };
        }
        Ok(())
    })
}

/// The `n` handles at `p` (null when `n` is 0).
///
/// # Safety
/// `p` holds `n` handles when `n > 0`.
unsafe fn handles<'a>(
    p: *const Handle,
    n: usize,
    what: &str,
    call: &str,
) -> Result<&'a [Handle], EmuError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() || n > 1 << 20 {
        return Err(invalid(
            call,
            format!("`{what}`: {n} entries at a null pointer or too many"),
        ));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamUpdateCaptureDependencies(
    s: Handle,
    deps: *mut Handle,
    n: usize,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuStreamUpdateCaptureDependencies";
    api(C, || {
        let st = stream_of(s, C)?;
        if flags > 1 {
            return Err(invalid(C, format!("flags {flags} (ADD 0 or SET 1)")));
        }
        let Some(c) = stream::capture_of(&st).filter(|c| !c.is_invalid()) else {
            return Err(EmuError::new(
                Code::IllegalState,
                crate::diag::Kind::InvalidState,
                C,
                format!("{} is not capturing", st.label()),
            ));
        };
        // SAFETY: `deps` holds `n` handles (the API contract).
        let d = unsafe { handles(deps, n, "dependencies", C) }?;
        c.update_dependencies(d, flags == 1, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBeginCaptureToGraph(
    s: Handle,
    graph: Handle,
    deps: *const Handle,
    dep_data: *const std::ffi::c_void,
    n: usize,
    mode: c_uint,
) -> CUresult {
    const C: &str = "cuStreamBeginCaptureToGraph";
    api(C, || {
        if n != 0 || !deps.is_null() || !dep_data.is_null() {
            return Err(crate::error::unsupported(
                C,
                "capturing into a graph after dependencies (the emulator captures into empty \
                 graphs only)",
            ));
        }
        stream::begin_capture_into(&stream_of(s, C)?, mode, Some(graph), C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphConditionalHandleCreate(
    out: *mut c_ulonglong,
    graph: Handle,
    ctx: Handle,
    default: c_uint,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuGraphConditionalHandleCreate";
    api(C, || {
        crate::context::cuda_initialized(C)?;
        if out.is_null() {
            return Err(invalid(C, "`pHandle_out` is a null pointer"));
        }
        let h = cond::create_condition(graph, ctx, default, flags, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(out, h, "pHandle_out", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddNode(
    node_out: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *mut NodeParamsHead,
) -> CUresult {
    const C: &str = "cuGraphAddNode";
    api(C, || {
        crate::context::cuda_initialized(C)?;
        if node_out.is_null() || params.is_null() {
            return Err(invalid(
                C,
                "`phGraphNode` or `nodeParams` is a null pointer",
            ));
        }
        // SAFETY: `params` points to a `CUgraphNodeParams` (the API contract), whose head
        // this reads and whose `phGraph_out` member the driver writes.
        let p = unsafe { &mut *params };
        if p.ty as u32 != cond::NODE_TYPE {
            return Err(crate::error::unsupported(
                C,
                format!(
                    "node type {} (the emulator adds only conditional nodes with cuGraphAddNode)",
                    p.ty
                ),
            ));
        }
        // SAFETY: `deps` holds `n` handles (the API contract).
        let d = unsafe { handles(deps, n, "dependencies", C) }?;
        let c = &mut p.conditional;
        let node = cond::add_node(
            graph,
            d,
            c.handle,
            c.ty,
            c.size,
            c.ctx,
            &mut c.ph_graph_out,
            C,
        )?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(node_out, node, "phGraphNode", C) }
    })
}
