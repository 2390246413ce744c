//! Read-only views of a loaded executable's private schedule, for the white-box tests that
//! need a real device: they live in `xthunk-core`, the one crate with both the executor and
//! the host backend (this crate has no backend). Not API: hidden from the docs.

use super::LoadedExecutable;
use super::graph::NodeUses;
use crate::error::Result;
use crate::ir::{AsyncKind, Thunk, ThunkPath};

/// A schedule's shape: its nodes' streams and event waits.
pub struct ScheduleView {
    pub nodes: Vec<NodeView>,
    pub streams: usize,
    pub sequential: bool,
}

/// One top-level node of a schedule.
pub struct NodeView {
    pub stream: usize,
    /// Nodes (on other streams) whose events this node waits for.
    pub waits: Vec<usize>,
    /// This node records an event (someone on another stream waits for it).
    pub record: bool,
}

/// The schedule `l` was loaded with.
pub fn schedule(l: &LoadedExecutable) -> ScheduleView {
    let s = &l.schedule;
    ScheduleView {
        nodes: s
            .nodes
            .iter()
            .map(|n| NodeView {
                stream: n.stream,
                waits: n.waits.clone(),
                record: n.record,
            })
            .collect(),
        streams: s.streams,
        sequential: s.sequential,
    }
}

/// What [`for_each_step`] calls with each schedulable thunk, its path and its async class.
pub type StepVisitor<'a> = dyn FnMut(&Thunk, &ThunkPath, Option<AsyncKind>) -> Result<()> + 'a;

/// Calls `f` with every schedulable thunk of `t` in program order, as the schedule does.
pub fn for_each_step(
    t: &Thunk,
    path: &ThunkPath,
    class: Option<AsyncKind>,
    f: &mut StepVisitor<'_>,
) -> Result<()> {
    super::plan::for_each_step(t, path, class, f)
}

/// The buffers and resources a schedulable thunk uses.
pub fn node_uses(t: &Thunk) -> NodeUses {
    super::arrange::node_uses(t)
}
