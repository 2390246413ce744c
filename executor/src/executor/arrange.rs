//! The steps on streams before they are steps ([`Arrangement`]): what each schedulable
//! thunk uses ([`node_uses`]), their dependency graph, and each node's stream, event waits
//! and records. Shared by the schedule made at load and the device-free temp plan of
//! `plan_temps`, which must see the same order.

use super::config::ExecutorConfig;
use super::graph::{DependencyGraph, NodeUses};
use crate::ir::{AsyncKind, Thunk};

/// Resource id shared by every collective: they keep program order among themselves, which is
/// the order every rank issues them in.
const COLLECTIVE_RESOURCE: u64 = 0xC011_EC71;

/// What graph construction sees of one schedulable thunk.
pub(super) fn node_uses(t: &Thunk) -> NodeUses {
    NodeUses {
        buffers: t.all_buffer_uses(),
        resources: if t.is_collective() {
            vec![COLLECTIVE_RESOURCE]
        } else {
            super::custom_call::resources(t)
        },
    }
}

/// The nodes on streams: their dependency graph, each node's stream, waits and records, and
/// the order that gives them.
pub(super) struct Arrangement {
    pub(super) graph: DependencyGraph,
    /// One stream, program order (the other fields then describe that).
    pub(super) sequential: bool,
    pub(super) streams: usize,
    pub(super) stream_of: Vec<usize>,
    pub(super) waits: Vec<Vec<usize>>,
    pub(super) record: Vec<bool>,
    /// `clocks[v][t]`: the last node of stream `t` node `v` is ordered after (per-stream
    /// vector clocks; `v` itself on its own stream). Empty when sequential.
    pub(super) clocks: Vec<Vec<i64>>,
}

/// Assigns the nodes (their `uses`, their async `classes`) to streams as `config` says.
pub(super) fn arrange(
    uses: &[NodeUses],
    classes: &[Option<AsyncKind>],
    config: &ExecutorConfig,
) -> Arrangement {
    let graph = DependencyGraph::build(uses);
    let n = uses.len();
    let has_comm = classes.contains(&Some(AsyncKind::Communication));
    let sequential = config.force_sequential
        || config.streams <= 1 && !has_comm
        || n < config.sequential_below
        || graph.is_chain();
    if sequential {
        return Arrangement {
            graph,
            sequential: true,
            streams: 1,
            stream_of: vec![0; n],
            waits: vec![vec![]; n],
            record: vec![false; n],
            clocks: vec![],
        };
    }
    let compute = config.streams.max(1);
    let total = compute + usize::from(has_comm);
    let comm = compute; // index of the communication stream when present
    let mut stream_of = vec![0usize; n];
    let mut last_on: Vec<Option<usize>> = vec![None; total];
    let mut load = vec![0usize; total];
    let mut clock: Vec<Vec<i64>> = vec![vec![-1; total]; total];
    let mut snapshot: Vec<Vec<i64>> = Vec::with_capacity(n);
    let mut waits: Vec<Vec<usize>> = vec![vec![]; n];
    let mut record = vec![false; n];
    for v in 0..n {
        let s = if classes[v] == Some(AsyncKind::Communication) {
            comm
        } else {
            // Continue a chain: a predecessor that is the last node of its stream.
            let chain = graph.preds[v]
                .iter()
                .copied()
                .filter(|&u| stream_of[u] < compute && last_on[stream_of[u]] == Some(u))
                .max_by_key(|&u| graph.priority[u]);
            match chain {
                Some(u) => stream_of[u],
                None => (0..compute).min_by_key(|&s| (load[s], s)).unwrap_or(0),
            }
        };
        stream_of[v] = s;
        for &u in &graph.preds[v] {
            let t = stream_of[u];
            if t == s || clock[s][t] >= u as i64 {
                continue;
            }
            waits[v].push(u);
            record[u] = true;
            let snap = &snapshot[u];
            for (x, &y) in clock[s].iter_mut().zip(snap.iter()) {
                *x = (*x).max(y);
            }
        }
        clock[s][s] = v as i64;
        snapshot.push(clock[s].clone());
        last_on[s] = Some(v);
        load[s] += 1;
    }
    Arrangement {
        graph,
        sequential: false,
        streams: total,
        stream_of,
        waits,
        record,
        clocks: snapshot,
    }
}
