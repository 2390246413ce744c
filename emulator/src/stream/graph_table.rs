//! The graph handle table, and destroying a graph with the conditional bodies nested in it
//! (and the conditions made for them): a destroyed graph, or what an abandoned capture
//! recorded.

use super::condition::CONDITIONS;
use super::op::{GraphCore, Op, Work};
use crate::handles::{HandleKind, Table};

pub static GRAPHS: Table<GraphCore> = Table::new(HandleKind::Graph);

/// Every graph of the tree rooted at `graph` (it and the bodies nested in it).
pub(super) fn tree(graph: usize) -> Vec<usize> {
    let mut out = vec![graph];
    let mut i = 0;
    while i < out.len() {
        if let Some(g) = GRAPHS.try_get(out[i]) {
            for op in g.nodes.lock().iter() {
                if let Work::Conditional(n) = &op.work {
                    out.extend(n.body_handles.iter().copied());
                }
            }
        }
        i += 1;
    }
    out
}

/// Destroys `graph`, the bodies nested in it and the conditions created for them.
pub fn destroy_graph_tree(graph: usize, call: &str) {
    let graphs = tree(graph);
    for h in &graphs {
        let _ = GRAPHS.remove(*h, call);
    }
    if let Some(m) = CONDITIONS.lock().as_mut() {
        m.retain(|_, c| !graphs.contains(&c.graph));
    }
}

/// Destroys what the nodes of an abandoned capture hold (their body graphs), and the
/// capture's own graph unless it recorded into an existing one (`own_graph`).
pub fn discard_capture(graph: usize, own_graph: bool, nodes: &[Op], call: &str) {
    for op in nodes {
        if let Work::Conditional(n) = &op.work {
            for b in n.body_handles.iter() {
                destroy_graph_tree(*b, call);
            }
        }
    }
    if own_graph {
        destroy_graph_tree(graph, call);
    }
}
