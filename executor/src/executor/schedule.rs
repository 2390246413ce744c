//! The static schedule: the planned steps as nodes on streams, with the event records and
//! waits that order them across streams, or one stream in program order (optionally fused
//! into one implicit command buffer).

use super::config::{AUTO_COMMAND_BUFFER_MIN, ExecutorConfig};
use super::graph::{DependencyGraph, NodeUses};
use super::plan::{Op, Planner, Step};
use super::temps::TempPlan;
use crate::collectives::StreamKind;
use crate::error::Result;
use crate::ir::{AsyncKind, Executable, Thunk, ThunkPath};
use std::collections::BTreeSet;

/// Resource id shared by every collective: they keep program order among themselves, which is
/// the order every rank issues them in.
const COLLECTIVE_RESOURCE: u64 = 0xC011_EC71;

/// A top-level node of the schedule.
pub(super) struct Node {
    pub(super) step: Step,
    pub(super) stream: usize,
    /// Nodes (on other streams) whose events this node waits for.
    pub(super) waits: Vec<usize>,
    /// Record this node's event after it (someone on another stream waits for it).
    pub(super) record: bool,
}

/// The static schedule.
pub(super) struct Schedule {
    pub(super) nodes: Vec<Node>,
    /// The whole program as one implicit command buffer (see
    /// [`ExecutorConfig::auto_command_buffer`]), used by executions without a deadline.
    pub(super) fused: Option<Node>,
    pub(super) streams: usize,
    pub(super) sequential: bool,
    pub(super) graph_edges: usize,
    /// Allocations the dependency graph tracked as one range (over its budget).
    pub(super) coarse_allocations: usize,
    /// Nodes the graph's reduction left unreduced (over its budget).
    pub(super) unreduced_nodes: usize,
    /// Where each temp lives.
    pub(super) temps: TempPlan,
}

/// What an execution did, for tests and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleInfo {
    pub nodes: usize,
    pub edges: usize,
    pub streams: usize,
    pub sequential: bool,
    pub cross_stream_waits: usize,
    /// The program runs as one implicit command buffer (executions without a deadline).
    pub implicit_command_buffer: bool,
}

impl Schedule {
    /// The schedule's shape.
    pub(super) fn info(&self) -> ScheduleInfo {
        ScheduleInfo {
            nodes: self.nodes.len(),
            edges: self.graph_edges,
            streams: self.streams,
            sequential: self.sequential,
            cross_stream_waits: self.nodes.iter().map(|n| n.waits.len()).sum(),
            implicit_command_buffer: self.fused.is_some(),
        }
    }
}

/// Plans every thunk of `exe`'s entry and schedules the steps as `config` says.
pub(super) fn schedule(
    exe: &Executable,
    planner: &mut Planner<'_>,
    config: &ExecutorConfig,
) -> Result<Schedule> {
    let mut steps = vec![];
    let mut uses = vec![];
    let mut classes = vec![];
    for (i, t) in exe.entry.iter().enumerate() {
        let mut seen = vec![];
        planner.flatten(t, &ThunkPath::entry(i), &mut steps, &mut |t, c| {
            seen.push((node_uses(t), c));
        })?;
        for (u, c) in seen {
            uses.push(u);
            classes.push(c);
        }
    }
    let arranged = arrange(&uses, &classes, config);
    let temps = super::temps::plan_arranged(exe, &uses, &arranged, config)?;
    let Arrangement {
        graph,
        sequential,
        streams,
        stream_of,
        mut waits,
        record,
        ..
    } = arranged;
    let n = steps.len();
    if sequential {
        let plain = steps.iter().all(recordable);
        let fused =
            (config.auto_command_buffer && plain && n >= AUTO_COMMAND_BUFFER_MIN).then(|| {
                let bindings: BTreeSet<u32> = uses
                    .iter()
                    .flat_map(|u| u.buffers.iter().map(|b| b.slice.allocation))
                    .collect();
                let id = planner.command_buffer_id();
                Node {
                    step: Step {
                        path: ThunkPath::default(),
                        kind: "command_buffer",
                        label: format!("implicit command buffer of {n} thunks"),
                        op: Op::CommandBuffer {
                            id,
                            body: steps.clone(),
                            bindings: bindings.into_iter().collect(),
                        },
                        stream_kind: StreamKind::Compute,
                    },
                    stream: 0,
                    waits: vec![],
                    record: false,
                }
            });
        return Ok(Schedule {
            nodes: steps
                .into_iter()
                .map(|step| Node {
                    step,
                    stream: 0,
                    waits: vec![],
                    record: false,
                })
                .collect(),
            fused,
            streams: 1,
            sequential: true,
            graph_edges: graph.edge_count(),
            coarse_allocations: graph.coarse.len(),
            unreduced_nodes: graph.unreduced,
            temps,
        });
    }
    let nodes = steps
        .into_iter()
        .enumerate()
        .map(|(i, step)| Node {
            step,
            stream: stream_of[i],
            waits: std::mem::take(&mut waits[i]),
            record: record[i],
        })
        .collect();
    Ok(Schedule {
        nodes,
        fused: None,
        streams,
        sequential: false,
        graph_edges: graph.edge_count(),
        coarse_allocations: graph.coarse.len(),
        unreduced_nodes: graph.unreduced,
        temps,
    })
}

/// Whether a command buffer may hold `s`: plain operations (copies, memsets, kernels,
/// gemms), and loops and branches of them (conditional graph nodes, or host-driven where the
/// backend has none).
fn recordable(s: &Step) -> bool {
    match &s.op {
        Op::Kernel { .. } => true,
        Op::Direct(t) => super::dispatch::recordable_as_written(t),
        Op::While { cond, body, .. } => cond.iter().chain(body).all(recordable),
        Op::Conditional { branches, .. } => branches.iter().flatten().all(recordable),
        Op::CustomCall(r) => r.capturable,
        Op::CommandBuffer { .. } => false,
    }
}

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
