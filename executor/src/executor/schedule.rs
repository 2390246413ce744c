//! The static schedule: the planned steps as nodes on streams, with the event records and
//! waits that order them across streams, or one stream in program order (optionally fused
//! into one implicit command buffer).

use super::arrange::{Arrangement, arrange, node_uses};
use super::config::{AUTO_COMMAND_BUFFER_MIN, ExecutorConfig};
use super::plan::{Op, Planner, Step};
use super::temps::TempPlan;
use crate::collectives::StreamKind;
use crate::error::Result;
use crate::ir::{Executable, ThunkPath};
use std::collections::BTreeSet;

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
    /// The program's input–output aliases.
    pub(super) aliases: Vec<super::alias::AliasPlan>,
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
    super::alias::add_resources(exe, &mut uses);
    let aliases = super::alias::plan(exe, &uses);
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
            aliases,
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
        aliases,
    })
}

/// Whether a command buffer may hold `s`: plain operations (copies, memsets, kernels,
/// gemms), and loops and branches of them (conditional graph nodes, or host-driven where the
/// backend has none).
fn recordable(s: &Step) -> bool {
    match &s.op {
        Op::Kernel { .. } => true,
        Op::Direct { recordable, .. } => *recordable,
        Op::While { cond, body, .. } => cond.iter().chain(body).all(recordable),
        Op::Conditional { branches, .. } => branches.iter().flatten().all(recordable),
        Op::CustomCall(r) => r.capturable,
        Op::CommandBuffer { .. } => false,
    }
}
