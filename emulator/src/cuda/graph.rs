//! Graphs: creation, instantiation, launch, nodes, destruction, exec update.

use super::{CUresult, Cuda, Handle, api, ctx_of_stream, stream_of};
use crate::context;
use crate::diag::Kind;
use crate::driver;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream::{self, EXECS, GRAPHS};
use std::ffi::{c_uint, c_ulonglong};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuGraphCreate";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_graph::<Cuda>(ph, flags, "phGraph", C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut Handle,
    graph: Handle,
    _flags: c_ulonglong,
) -> CUresult {
    const C: &str = "cuGraphInstantiateWithFlags";
    api(C, || {
        context::cuda_initialized(C)?;
        let g = GRAPHS.get(graph, C)?;
        if exec.is_null() {
            return Err(invalid(C, "`phGraphExec` is a null pointer"));
        }
        stream::conditional::check_instantiable(graph, C)?;
        let h = stream::instantiate(&g);
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(exec, h, "phGraphExec", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphLaunch(exec: Handle, s: Handle) -> CUresult {
    const C: &str = "cuGraphLaunch";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != e.ctx_id {
            let _ = ctx_of_stream(&st, C)?;
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                "the graph belongs to another context than the stream",
            ));
        }
        stream::launch_graph(&e, &st, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetNodes(
    graph: Handle,
    nodes: *mut Handle,
    num: *mut usize,
) -> CUresult {
    const C: &str = "cuGraphGetNodes";
    // CUDA sets the entries past the graph's nodes to NULL.
    // SAFETY: the caller's out-pointers (`nodes` holds `*num` entries).
    api(C, || unsafe {
        driver::graph_nodes(graph, nodes, num, true, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: Handle) -> CUresult {
    const C: &str = "cuGraphExecDestroy";
    api(C, || EXECS.remove(exec, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroy(graph: Handle) -> CUresult {
    const C: &str = "cuGraphDestroy";
    api(C, || stream::conditional::destroy_graph(graph, C))
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
pub struct UpdateResultInfo {
    pub result: c_uint,
    pub error_node: Handle,
    pub error_from_node: Handle,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(
    exec: Handle,
    graph: Handle,
    info: *mut UpdateResultInfo,
) -> CUresult {
    const C: &str = "cuGraphExecUpdate_v2";
    api(C, || {
        let u = driver::update_exec(exec, graph, C)?;
        if !info.is_null() {
            let info_value = UpdateResultInfo {
                result: u.result,
                error_node: u.node,
                error_from_node: u.node,
            };
            // SAFETY: the caller's (optional) out-pointer.
            unsafe { put(info, info_value, "resultInfo", C)? };
        }
        u.finish(C)
    })
}

/// `cuGraphExecUpdate`: the CUDA 11 form (CUDA 12 headers map the name to `_v2`, but drivers
/// still export it with this signature). Same semantics as [`cuGraphExecUpdate_v2`]; the
/// failing node and the `CUgraphExecUpdateResult` go to two separate optional out-pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate(
    exec: Handle,
    graph: Handle,
    error_node: *mut Handle,
    result_out: *mut c_uint,
) -> CUresult {
    const C: &str = "cuGraphExecUpdate";
    api(C, || {
        let u = driver::update_exec(exec, graph, C)?;
        if !error_node.is_null() {
            // SAFETY: the caller's (optional) out-pointer, checked non-null.
            unsafe { put(error_node, u.node, "hErrorNode_out", C)? };
        }
        if !result_out.is_null() {
            // SAFETY: the caller's (optional) out-pointer, checked non-null.
            unsafe { put(result_out, u.result, "updateResult_out", C)? };
        }
        u.finish(C)
    })
}
