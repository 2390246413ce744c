//! Conditional graph nodes (CUDA 12.4+): condition handles, IF / WHILE / SWITCH nodes with
//! their body graphs, and what they do when an executable graph runs. EMULATED: the emulator
//! keeps a condition's value per graph launch on the worker running the launch.
//!
//! - A **condition** (`cuGraphConditionalHandleCreate`) belongs to the graph it was created
//!   for, in that graph's context; with `CU_GRAPH_COND_ASSIGN_DEFAULT` it takes its default
//!   value at the start of every launch, otherwise it is *unset* until a kernel sets it, and
//!   a node reading an unset condition fails the launch. It may be used by one conditional
//!   node only, in its graph or a graph nested in it; a condition no node uses makes
//!   instantiation fail.
//! - A **node** (`cuGraphAddNode` with `CU_GRAPH_NODE_TYPE_CONDITIONAL`) owns its body graphs
//!   (`phGraph_out`): they cannot be destroyed on their own and go with the graph holding the
//!   node. IF runs body 0 when the condition is nonzero (body 1, if there is one, when it is
//!   zero); WHILE runs body 0 while it is nonzero, tested before every trip; SWITCH runs body
//!   `value` when `value` < the body count. Bodies nest.
//! - **Setting** a condition (`cudaGraphSetConditional` in a kernel, see
//!   `crate::cuda::set_condition`) is only possible from a kernel of the graph launch the
//!   condition's node runs in; anywhere else it fails the kernel.
//! - Instantiation freezes the bodies as they are (later changes to a body graph do not reach
//!   an executable graph, as with CUDA's instantiation copy); an exec update accepts a graph
//!   whose conditional nodes have the same kinds and body shapes.
//!
//! A WHILE loop stops the launch with an error after [`MAX_TRIPS`] trips (a hang in CI is
//! worse than a diagnosed runaway loop).
//!
//! This file makes conditions and conditional nodes, freezes and compares them. The nodes
//! themselves and what they do when a graph runs are operations (`op`), the condition table
//! is `condition`, destroying a graph with its nested bodies is `graph_table`.

pub use super::condition::Condition;
pub use super::graph::{freeze, same_shape};
pub use super::graph_table::{destroy_graph_tree, discard_capture};
pub use super::op::{
    Body, COND_IF, COND_SWITCH, COND_WHILE, MAX_TRIPS, NODE_TYPE, Node, run_graph, set,
};

use super::condition::{CONDITIONS, condition};
use super::graph_table::{GRAPHS, tree};
use super::op::{GraphCore, Op, Work, node_handle};
use super::record::capture_into;
use crate::error::{EmuResult, invalid, unsupported};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `CU_GRAPH_COND_ASSIGN_DEFAULT`.
pub const ASSIGN_DEFAULT: u32 = 1;
/// The most bodies of one SWITCH node.
pub const MAX_BODIES: u32 = 1024;

static NEXT_CONDITION: AtomicU64 = AtomicU64::new(1);

/// Checks that the context handle `ctx` (a `CUcontext`, not null) is the graph's.
fn check_ctx(ctx: usize, g: &GraphCore, call: &str) -> EmuResult<()> {
    if ctx == 0 {
        return Err(invalid(call, "`ctx` is a null context"));
    }
    let c = crate::context::CONTEXTS.get(ctx, call)?;
    if c.id != g.ctx_id {
        return Err(invalid(
            call,
            "`ctx` is not the context the graph belongs to",
        ));
    }
    Ok(())
}

/// `cuGraphConditionalHandleCreate`.
pub fn create_condition(
    graph: usize,
    ctx: usize,
    default: u32,
    flags: u32,
    call: &str,
) -> EmuResult<u64> {
    let g = GRAPHS.get(graph, call)?;
    check_ctx(ctx, &g, call)?;
    if flags & !ASSIGN_DEFAULT != 0 {
        return Err(invalid(
            call,
            format!("flags {flags:#x} (only CU_GRAPH_COND_ASSIGN_DEFAULT is defined)"),
        ));
    }
    let h = 0xc0d0_0000_0000_0000 | NEXT_CONDITION.fetch_add(1, Ordering::SeqCst);
    CONDITIONS.lock().get_or_insert_with(HashMap::new).insert(
        h,
        Arc::new(Condition {
            ctx_id: g.ctx_id,
            graph,
            default,
            assign_default: flags & ASSIGN_DEFAULT != 0,
            used_by: Mutex::new(None),
        }),
    );
    Ok(h)
}

/// Whether `graph` is `ancestor` or nested in it (through conditional bodies).
fn within(mut graph: usize, ancestor: usize) -> bool {
    for _ in 0..4096 {
        if graph == ancestor {
            return true;
        }
        match GRAPHS.try_get(graph).and_then(|g| g.parent) {
            Some(p) => graph = p,
            None => return false,
        }
    }
    false
}

/// `cuGraphAddNode` of a conditional node into `graph` after `deps`: creates the body
/// graphs, writes their array's address to `*ph_graph_out`, returns the node handle. (The
/// arguments are the C call's.)
#[allow(clippy::too_many_arguments)]
pub fn add_node(
    graph: usize,
    deps: &[usize],
    handle: u64,
    kind: u32,
    size: u32,
    ctx: usize,
    ph_graph_out: &mut *mut usize,
    call: &str,
) -> EmuResult<usize> {
    let g = GRAPHS.get(graph, call)?;
    check_ctx(ctx, &g, call)?;
    let cond = condition(handle, call)?;
    if !within(graph, cond.graph) {
        return Err(invalid(
            call,
            format!(
                "conditional handle {handle:#x} belongs to graph {:#x}: a node using it must be \
                 in that graph or a graph nested in it, not in {graph:#x}",
                cond.graph
            ),
        ));
    }
    if let Some(n) = *cond.used_by.lock() {
        return Err(invalid(
            call,
            format!("conditional handle {handle:#x} is already used by node {n:#x}"),
        ));
    }
    let ok = match kind {
        COND_IF => size == 1 || size == 2,
        COND_WHILE => size == 1,
        COND_SWITCH => (1..=MAX_BODIES).contains(&size),
        _ => {
            return Err(invalid(call, format!("conditional node type {kind}")));
        }
    };
    if !ok {
        return Err(invalid(
            call,
            format!("{size} body graphs for a conditional node of type {kind}"),
        ));
    }
    let mut bodies = vec![];
    let mut handles = vec![];
    for _ in 0..size {
        let b = Arc::new(GraphCore::new(g.ctx_id, Some(graph)));
        handles.push(GRAPHS.insert(b.clone()));
        bodies.push(Body::Live(b));
    }
    let made = handles.clone();
    let mut body_handles = handles.into_boxed_slice();
    let array = body_handles.as_mut_ptr();
    let op = Op::new(
        Work::Conditional(Arc::new(Node {
            handle,
            kind,
            bodies,
            body_handles,
        })),
        call,
    );
    let added = match capture_into(graph) {
        Some(c) => c.add_node(op, deps, call),
        None => {
            let mut nodes = g.nodes.lock();
            let last = nodes.len().checked_sub(1).map(|i| node_handle(graph, i));
            if deps != last.as_slice() {
                Err(unsupported(
                    call,
                    format!(
                        "the emulator's graphs are linear: a node must depend on exactly the \
                         graph's last node ({last:x?}), not {deps:x?}"
                    ),
                ))
            } else {
                nodes.push(op);
                Ok(node_handle(graph, nodes.len() - 1))
            }
        }
    };
    let node = match added {
        Ok(n) => n,
        Err(e) => {
            // The body graphs just made go again (nothing refers to them).
            for h in made {
                let _ = GRAPHS.remove(h, call);
            }
            return Err(e);
        }
    };
    *cond.used_by.lock() = Some(node);
    *ph_graph_out = array;
    Ok(node)
}

/// Checks before instantiating `graph`: every condition created for a graph of its tree is
/// used by a node.
pub fn check_instantiable(graph: usize, call: &str) -> EmuResult<()> {
    let graphs = tree(graph);
    let unused: Vec<u64> = CONDITIONS
        .lock()
        .as_ref()
        .map(|m| {
            m.iter()
                .filter(|(_, c)| graphs.contains(&c.graph) && c.used_by.lock().is_none())
                .map(|(h, _)| *h)
                .collect()
        })
        .unwrap_or_default();
    if let Some(h) = unused.first() {
        return Err(invalid(
            call,
            format!("conditional handle {h:#x} of the graph is used by no conditional node"),
        ));
    }
    Ok(())
}

/// `cuGraphDestroy`: a body graph cannot be destroyed on its own.
pub fn destroy_graph(graph: usize, call: &str) -> EmuResult<()> {
    let g = GRAPHS.get(graph, call)?;
    if let Some(p) = g.parent {
        return Err(invalid(
            call,
            format!(
                "graph {graph:#x} is a body of a conditional node of graph {p:#x}: it goes with \
                 that graph"
            ),
        ));
    }
    destroy_graph_tree(graph, call);
    Ok(())
}
