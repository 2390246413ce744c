//! Graphs: creation, instantiation, launch, nodes, destruction, exec update.

use super::{Handle, Hip, HipError, api, stream_of};
use crate::diag::Kind;
use crate::driver;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream::{self, EXECS, GRAPHS};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphCreate(g: *mut Handle, flags: c_uint) -> HipError {
    const C: &str = "hipGraphCreate";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_graph::<Hip>(g, flags, "pGraph", C)
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
    // SAFETY: the caller's out-pointers (`nodes` holds `*num` entries).
    api(C, || unsafe {
        driver::graph_nodes(graph, nodes, num, false, C)
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
        let u = driver::update_exec(exec, graph, C)?;
        // SAFETY: the caller's (optional) out-pointers.
        unsafe {
            if !error_node.is_null() {
                put(error_node, u.node, "hErrorNode_out", C)?;
            }
            if !result.is_null() {
                put(result, u.result as c_int, "updateResult_out", C)?;
            }
        }
        u.finish(C)
    })
}
