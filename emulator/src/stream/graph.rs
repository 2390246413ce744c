//! Executable graphs: instantiation (which freezes conditional nodes' bodies), replay on a
//! stream, and exec-update checks (conditional nodes must keep their shape). A graph itself
//! is a list of operations, [`super::op::GraphCore`].

use super::op::{Body, GraphCore, Node, Op, Work, frozen};
use super::queue::{StreamCore, submit};
use crate::error::EmuResult;
use crate::handles::{HandleKind, Table};
use parking_lot::Mutex;
use std::sync::Arc;

pub static EXECS: Table<ExecCore> = Table::new(HandleKind::GraphExec);

/// An instantiated graph (its nodes can be replaced by an update).
pub struct ExecCore {
    pub ctx_id: u64,
    pub nodes: Mutex<Arc<Vec<Op>>>,
}

/// `cuGraphInstantiate`.
pub fn instantiate(g: &GraphCore) -> usize {
    EXECS.insert(Arc::new(ExecCore {
        ctx_id: g.ctx_id,
        nodes: Mutex::new(Arc::new(freeze(&g.nodes.lock()))),
    }))
}

/// Why an executable graph cannot take another graph's parameters: `(CUgraphExecUpdateResult,
/// index of the node, message)`.
pub fn update_exec(exec: &ExecCore, g: &GraphCore) -> Result<(), (u32, Option<usize>, String)> {
    let mut cur = exec.nodes.lock();
    let new = freeze(&g.nodes.lock());
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
        if let (Work::Kernel(x), Work::Kernel(y)) = (&a.work, &b.work)
            && x.name() != y.name()
        {
            return Err((
                4,
                Some(i),
                format!("node {i} runs `{}` instead of `{}`", y.name(), x.name()),
            ));
        }
        if let (Work::Conditional(x), Work::Conditional(y)) = (&a.work, &b.work) {
            same_shape(x, y).map_err(|m| (3, Some(i), format!("node {i}: {m}")))?;
        }
    }
    *cur = Arc::new(new);
    Ok(())
}

/// A copy of `nodes` with every conditional node's bodies frozen as they are now.
pub fn freeze(nodes: &[Op]) -> Vec<Op> {
    nodes
        .iter()
        .map(|op| match &op.work {
            Work::Conditional(n) => Op {
                work: Work::Conditional(Arc::new(Node {
                    handle: n.handle,
                    kind: n.kind,
                    bodies: n
                        .bodies
                        .iter()
                        .map(|b| match b {
                            Body::Live(g) => Body::Frozen(Arc::new(freeze(&g.nodes.lock()))),
                            Body::Frozen(f) => Body::Frozen(f.clone()),
                        })
                        .collect(),
                    body_handles: Box::new([]),
                })),
                call: op.call.clone(),
            },
            _ => op.clone(),
        })
        .collect()
}

/// Whether two frozen conditional nodes have the same kind and body shapes (node counts,
/// node types, kernels), for an exec update.
pub fn same_shape(a: &Node, b: &Node) -> Result<(), String> {
    if a.kind != b.kind || a.bodies.len() != b.bodies.len() {
        return Err("the conditional node changed type or body count".into());
    }
    for (i, (x, y)) in a.bodies.iter().zip(&b.bodies).enumerate() {
        let (x, y) = (frozen(x), frozen(y));
        if x.len() != y.len() {
            return Err(format!(
                "body {i} has {} nodes instead of {}",
                y.len(),
                x.len()
            ));
        }
        for (j, (p, q)) in x.iter().zip(y).enumerate() {
            if p.work.node_type() != q.work.node_type() {
                return Err(format!("node {j} of body {i} changed type"));
            }
            match (&p.work, &q.work) {
                (Work::Kernel(k), Work::Kernel(l)) if k.name() != l.name() => {
                    return Err(format!("node {j} of body {i} runs another kernel"));
                }
                (Work::Conditional(m), Work::Conditional(n)) => same_shape(m, n)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// `cuGraphLaunch`.
pub fn launch_graph(exec: &ExecCore, s: &Arc<StreamCore>, call: &str) -> EmuResult<()> {
    let nodes = exec.nodes.lock().clone();
    submit(s, Op::new(Work::Graph(nodes), call))?;
    Ok(())
}
