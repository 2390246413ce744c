//! Graphs: creation, instantiation, launch, nodes, destruction, exec update.

use super::{CUresult, Handle, api, ctx_of_stream, stream_of};
use crate::context;
use crate::diag::Kind;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream::{self, EXECS, GRAPHS};
use std::ffi::{c_uint, c_ulonglong};
use std::sync::Arc;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuGraphCreate";
    api(C, || {
        let c = context::current(C)?;
        if flags != 0 {
            return Err(invalid(C, "flags must be 0"));
        }
        let h = GRAPHS.insert(Arc::new(stream::GraphCore {
            ctx_id: c.id,
            nodes: vec![],
        }));
        // SAFETY: the caller's out-pointer.
        unsafe { put(ph, h, "phGraph", C) }
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
    api(C, || {
        let g = GRAPHS.get(graph, C)?;
        if num.is_null() {
            return Err(invalid(C, "`numNodes` is a null pointer"));
        }
        if nodes.is_null() {
            // SAFETY: the caller's out-pointer (checked non-null).
            return unsafe { put(num, g.nodes.len(), "numNodes", C) };
        }
        // SAFETY: `num` is valid (checked non-null); `nodes` holds `*num` entries.
        unsafe {
            let cap = *num;
            for i in 0..cap.min(g.nodes.len()) {
                *nodes.add(i) = stream::node_handle(graph, i);
            }
            for i in g.nodes.len()..cap {
                *nodes.add(i) = 0;
            }
            *num = cap.min(g.nodes.len());
        }
        Ok(())
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
    api(C, || GRAPHS.remove(graph, C).map(|_| ()))
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
        let e = EXECS.get(exec, C)?;
        let g = GRAPHS.get(graph, C)?;
        let r = stream::update_exec(&e, &g);
        let (result, node, err) = match r {
            Ok(()) => (0, 0, None),
            Err((code, idx, msg)) => (
                code,
                idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
                Some(msg),
            ),
        };
        if !info.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe {
                put(
                    info,
                    UpdateResultInfo {
                        result,
                        error_node: node,
                        error_from_node: node,
                    },
                    "resultInfo",
                    C,
                )?
            };
        }
        match err {
            None => Ok(()),
            Some(msg) => Err(EmuError::new(
                Code::GraphExecUpdateFailure,
                Kind::InvalidValue,
                C,
                msg,
            )),
        }
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
        let e = EXECS.get(exec, C)?;
        let g = GRAPHS.get(graph, C)?;
        let (result, node, err) = match stream::update_exec(&e, &g) {
            Ok(()) => (0, 0, None),
            Err((code, idx, msg)) => (
                code,
                idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
                Some(msg),
            ),
        };
        if !error_node.is_null() {
            // SAFETY: the caller's (optional) out-pointer, checked non-null.
            unsafe { put(error_node, node, "hErrorNode_out", C)? };
        }
        if !result_out.is_null() {
            // SAFETY: the caller's (optional) out-pointer, checked non-null.
            unsafe { put(result_out, result, "updateResult_out", C)? };
        }
        match err {
            None => Ok(()),
            Some(msg) => Err(EmuError::new(
                Code::GraphExecUpdateFailure,
                Kind::InvalidValue,
                C,
                msg,
            )),
        }
    })
}
