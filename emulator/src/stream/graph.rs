//! Graphs and executable graphs: instantiation, replay on a stream, and exec-update checks.

use super::{EXECS, Op, StreamCore, Work, submit};
use crate::error::EmuResult;
use crate::handles::HandleKind;
use parking_lot::Mutex;
use std::sync::Arc;

/// A captured (or empty) graph. Its nodes grow while a capture records into it, or when a
/// conditional node is added to it (see [`super::conditional`]).
pub struct GraphCore {
    pub ctx_id: u64,
    pub nodes: Mutex<Vec<Op>>,
    /// For the body graph of a conditional node: the graph holding that node (body graphs
    /// belong to their node: they cannot be destroyed or instantiated on their own).
    pub parent: Option<usize>,
}

impl GraphCore {
    /// An empty graph of context `ctx_id`.
    pub fn new(ctx_id: u64, parent: Option<usize>) -> GraphCore {
        GraphCore {
            ctx_id,
            nodes: Mutex::new(Vec::new()),
            parent,
        }
    }
}

/// An instantiated graph (its nodes can be replaced by an update).
pub struct ExecCore {
    pub ctx_id: u64,
    pub nodes: Mutex<Arc<Vec<Op>>>,
}

/// The handle of node `i` of the graph `graph`.
pub fn node_handle(graph: usize, i: usize) -> usize {
    ((HandleKind::GraphNode as usize) << 48) | (((graph >> 4) & 0xff_ffff) << 24) | ((i + 1) << 4)
}

/// `cuGraphInstantiate`.
pub fn instantiate(g: &GraphCore) -> usize {
    EXECS.insert(Arc::new(ExecCore {
        ctx_id: g.ctx_id,
        nodes: Mutex::new(Arc::new(super::conditional::freeze(&g.nodes.lock()))),
    }))
}

/// Why an executable graph cannot take another graph's parameters: `(CUgraphExecUpdateResult,
/// index of the node, message)`.
pub fn update_exec(exec: &ExecCore, g: &GraphCore) -> Result<(), (u32, Option<usize>, String)> {
    let mut cur = exec.nodes.lock();
    let new = super::conditional::freeze(&g.nodes.lock());
    if cur.len() != new.len() {
        return Err((
            2,
            None,
            format!(
                "topology changed: {} nodes instead of {}",
                new.len(),
                cur.len()
            ),
        ));
    }
    for (i, (a, b)) in cur.iter().zip(new.iter()).enumerate() {
        if a.work.node_type() != b.work.node_type() {
            return Err((3, Some(i), format!("node {i} changed type")));
        }
        if let (Work::Kernel(x), Work::Kernel(y)) = (&a.work, &b.work) {
            if x.name() != y.name() {
                return Err((
                    4,
                    Some(i),
                    format!("node {i} runs `{}` instead of `{}`", y.name(), x.name()),
                ));
            }
        }
        if let (Work::Conditional(x), Work::Conditional(y)) = (&a.work, &b.work) {
            super::conditional::same_shape(x, y)
                .map_err(|m| (3, Some(i), format!("node {i}: {m}")))?;
        }
    }
    *cur = Arc::new(new);
    Ok(())
}

/// `cuGraphLaunch`.
pub fn launch_graph(exec: &ExecCore, s: &Arc<StreamCore>, call: &str) -> EmuResult<()> {
    let nodes = exec.nodes.lock().clone();
    submit(s, Op::new(Work::Graph(nodes), call))?;
    Ok(())
}
