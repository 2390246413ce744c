//! Graphs: creation, instantiation, launch, nodes, destruction, exec update.

use super::{Handle, HipError, api, ctx, stream_of};
use crate::diag::Kind;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream::{self, EXECS, GRAPHS};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::sync::Arc;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphCreate(g: *mut Handle, flags: c_uint) -> HipError {
    const C: &str = "hipGraphCreate";
    api(C, || {
        let c = ctx(C)?;
        if flags != 0 {
            return Err(invalid(C, "flags must be 0"));
        }
        let h = GRAPHS.insert(Arc::new(stream::GraphCore {
            ctx_id: c.id,
            nodes: vec![],
        }));
        // SAFETY: the caller's out-pointer.
        unsafe { put(g, h, "pGraph", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiate(
    exec: *mut Handle,
    graph: Handle,
    error_node: *mut Handle,
    log: *mut c_char,
    log_size: usize,
) -> HipError {
    const C: &str = "hipGraphInstantiate";
    api(C, || {
        let g = GRAPHS.get(graph, C)?;
        if exec.is_null() {
            return Err(invalid(C, "`pGraphExec` is a null pointer"));
        }
        let h = stream::instantiate(&g);
        if !error_node.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe { put(error_node, 0, "pErrorNode", C)? };
        }
        if !log.is_null() && log_size > 0 {
            // SAFETY: `log` holds `log_size` bytes (the caller's contract).
            unsafe { *log = 0 };
        }
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(exec, h, "pGraphExec", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiateWithFlags(
    exec: *mut Handle,
    graph: Handle,
    _flags: c_ulonglong,
) -> HipError {
    // SAFETY: same contract, no error node or log.
    unsafe { hipGraphInstantiate(exec, graph, std::ptr::null_mut(), std::ptr::null_mut(), 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphLaunch(exec: Handle, s: Handle) -> HipError {
    const C: &str = "hipGraphLaunch";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != e.ctx_id {
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                "the graph belongs to another device than the stream",
            ));
        }
        stream::launch_graph(&e, &st, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphGetNodes(
    graph: Handle,
    nodes: *mut Handle,
    num: *mut usize,
) -> HipError {
    const C: &str = "hipGraphGetNodes";
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
            *num = cap.min(g.nodes.len());
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphDestroy(graph: Handle) -> HipError {
    const C: &str = "hipGraphDestroy";
    api(C, || GRAPHS.remove(graph, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecDestroy(exec: Handle) -> HipError {
    const C: &str = "hipGraphExecDestroy";
    api(C, || EXECS.remove(exec, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecUpdate(
    exec: Handle,
    graph: Handle,
    error_node: *mut Handle,
    result: *mut c_int,
) -> HipError {
    const C: &str = "hipGraphExecUpdate";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let g = GRAPHS.get(graph, C)?;
        let r = stream::update_exec(&e, &g);
        let (code, node, err) = match r {
            Ok(()) => (0, 0, None),
            Err((code, idx, msg)) => (
                code,
                idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
                Some(msg),
            ),
        };
        // SAFETY: the caller's (optional) out-pointers.
        unsafe {
            if !error_node.is_null() {
                put(error_node, node, "hErrorNode_out", C)?;
            }
            if !result.is_null() {
                put(result, code as c_int, "updateResult_out", C)?;
            }
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
