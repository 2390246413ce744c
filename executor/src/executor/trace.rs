//! Tracing one execution ([`Recorder`]): the host issue span of every top-level node, timing
//! events around it when device times are asked for, what a command buffer did and how long
//! communicators took to acquire; handed to the [`Tracer`] when the execution ends. Also what
//! the trace calls each node ([`node_infos`], computed once per loaded executable).
//!
//! Only executions given `ExecuteOptions::trace` build a recorder: without one, the run loop
//! has no trace hooks and allocates nothing. With one, a node costs one read of the tracer's
//! clock (the TSC where reliable) and one four-byte mark.

use super::plan::{Op, Step};
use super::schedule::{Node, Schedule};
use super::state::ExecState;
use crate::backend::{Device, Event, Stream};
use crate::error::{Error, Result};
use crate::ir::{ThunkKind, TraceCost};
use crate::trace::{Clock, CommandBufferNote, MarkNote, Marks, NodeInfo, Recording, Tracer};
use serde_json::{Map, Value, json};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

/// The trace's view of every node of `schedule`; the implicit command buffer, when there is
/// one, is the last.
pub(super) fn node_infos(schedule: &Schedule) -> Arc<[NodeInfo]> {
    let paths = |n: &Node| -> Vec<String> {
        n.waits
            .iter()
            .filter_map(|w| schedule.nodes.get(*w))
            .map(|w| w.step.path.to_string())
            .collect()
    };
    let mut v: Vec<NodeInfo> = schedule
        .nodes
        .iter()
        .map(|n| node_info(n, paths(n)))
        .collect();
    if let Some(f) = &schedule.fused {
        v.push(node_info(f, vec![]));
    }
    v.into()
}

fn node_info(node: &Node, waits_for: Vec<String>) -> NodeInfo {
    let step = &node.step;
    let path = step.path.to_string();
    let name = if step.label.starts_with(step.kind) {
        format!("{path} {}", step.label)
    } else {
        format!("{path} {} {}", step.kind, step.label)
    };
    let mut args = Map::new();
    args.insert("path".into(), json!(path));
    args.insert("stream".into(), json!(node.stream));
    let TraceCost {
        bytes,
        flops,
        communicates,
    } = describe(step, &mut args);
    if bytes > 0 {
        args.insert("bytes".into(), json!(bytes));
    }
    if flops > 0 {
        args.insert("flops".into(), json!(flops));
    }
    if !waits_for.is_empty() {
        args.insert("waits_for".into(), json!(waits_for));
    }
    NodeInfo {
        name,
        kind: step.kind,
        stream: u32::try_from(node.stream).unwrap_or(u32::MAX),
        waits: node
            .waits
            .iter()
            .map(|w| u32::try_from(*w).unwrap_or(u32::MAX))
            .collect(),
        bytes,
        flops,
        communicates,
        args,
    }
}

/// Adds a step's arguments; returns its bytes, flops and whether it communicates.
fn describe(step: &Step, args: &mut Map<String, Value>) -> TraceCost {
    match &step.op {
        Op::Kernel { kernel, .. } => kernel.trace(args),
        Op::Direct { thunk, .. } => thunk.as_kind().trace(args),
        Op::CommandBuffer { body, .. } => {
            args.insert("thunks".into(), json!(body.len()));
            TraceCost::default()
        }
        Op::While { trip_count, .. } => {
            if let Some(n) = trip_count {
                args.insert("trip_count".into(), json!(n));
            }
            TraceCost::default()
        }
        Op::Conditional { branches, .. } => {
            args.insert("branches".into(), json!(branches.len()));
            TraceCost::default()
        }
        Op::CustomCall(r) => {
            let cost = r.call.trace(args);
            args.insert("captured".into(), json!(r.capturable));
            cost
        }
    }
}

/// One execution's trace in progress. Per node it reads the tracer's clock once and appends
/// one four-byte mark ([`Marks`]) to a buffer allocated for every node at the start: no
/// formatting, no allocation, no lock (names and arguments are the [`NodeInfo`]s, made once
/// per loaded executable; ticks become nanoseconds when the trace is read).
pub(super) struct Recorder<'a> {
    tracer: &'a Tracer,
    clock: Clock,
    nodes: Arc<[NodeInfo]>,
    rank: u32,
    program: &'a str,
    start: Instant,
    /// The clock's ticks at an instant before the first mark.
    anchor: (u64, Instant),
    marks: Marks,
    /// Where the last node's issue ended (set once: issuing is over).
    end_mark: Option<u64>,
    notes: Vec<MarkNote>,
    /// With device times: the reference event (recorded on stream 0 at the start) and the
    /// host time it was seen complete at.
    reference: Option<(Arc<dyn Event>, Instant)>,
    /// The anchor is the reference's completion as the backend took it.
    exact_anchor: bool,
    /// Set by the command-buffer step of the node being issued.
    command_buffer: Cell<CommandBufferNote>,
    /// Added to by communicator acquisitions of the node being issued.
    clique_wait_ns: Cell<u64>,
    /// Set by a collective of the node being issued whose buffers are registered.
    registered: Cell<Option<crate::collectives::RegistrationKind>>,
    /// One of the two above was set since the last mark's notes were taken.
    noted: Cell<bool>,
}

impl<'a> Recorder<'a> {
    pub(super) fn new(
        tracer: &'a Tracer,
        nodes: Arc<[NodeInfo]>,
        rank: u32,
        program: &'a str,
        start: Instant,
        capacity: usize,
    ) -> Self {
        let clock = *tracer.clock();
        let anchor = clock.anchor();
        Recorder {
            tracer,
            clock,
            nodes,
            rank,
            program,
            start,
            anchor,
            marks: Marks::with_capacity(capacity, anchor.0),
            end_mark: None,
            notes: vec![],
            reference: None,
            exact_anchor: false,
            command_buffer: Cell::new(CommandBufferNote::None),
            clique_wait_ns: Cell::new(0),
            registered: Cell::new(None),
            noted: Cell::new(false),
        }
    }

    pub(super) fn device_times(&self) -> bool {
        self.tracer.config().device_times
    }

    /// Whether this execution records timing events around its nodes (device times were
    /// asked for and the backend has timing events; known after [`Self::begin`]).
    pub(super) fn timed(&self) -> bool {
        self.reference.is_some()
    }

    /// What the command-buffer step of the node being issued did.
    pub(super) fn note_command_buffer(&self, note: CommandBufferNote) {
        self.command_buffer.set(note);
        self.noted.set(true);
    }

    /// Time the node being issued spent acquiring communicators.
    pub(super) fn add_clique_wait(&self, ns: u64) {
        self.clique_wait_ns
            .set(self.clique_wait_ns.get().saturating_add(ns));
        self.noted.set(true);
    }

    /// The node being issued runs a collective on registered buffers (`kind`).
    pub(super) fn note_registered(&self, kind: crate::collectives::RegistrationKind) {
        self.registered.set(Some(kind));
        self.noted.set(true);
    }

    /// With device times: makes sure `state` has timing events for `nodes` nodes, and records
    /// and waits for the reference event on `stream` (the host time it is seen complete at
    /// anchors every device time of the execution).
    pub(super) fn begin(
        &mut self,
        device: &dyn Device,
        stream: &dyn Stream,
        state: &mut ExecState,
    ) -> Result<()> {
        if !self.device_times() {
            return Ok(());
        }
        let n = self.nodes.len();
        while state.timing.len() < n {
            let pair = device
                .create_timing_event()
                .and_then(|b| Ok([b, device.create_timing_event()?]));
            match pair {
                Ok(p) => state.timing.push(p),
                // No timing events on this backend: host issue spans only.
                Err(Error::Unsupported { backend, feature }) => {
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| {
                        tracing::warn!(
                            "trace: no device times: `{backend}` does not support {feature}"
                        );
                    });
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let reference = match &state.timing_reference {
            Some(e) => e.clone(),
            None => {
                let e = device.create_timing_event()?;
                state.timing_reference = Some(e.clone());
                e
            }
        };
        // The anchor: the instant the reference completed where the backend knows it,
        // else the instant before its record (the stream is idle: it completes at once on a
        // GPU; the instant after the synchronize would add the host's wake-up latency). Device
        // times are then early by the device's delay in reaching the record, never late.
        let before = Instant::now();
        stream.record(reference.as_ref())?;
        reference.synchronize()?;
        let exact = reference.completed_at();
        self.exact_anchor = exact.is_some();
        self.reference = Some((reference, exact.unwrap_or(before)));
        Ok(())
    }

    /// Before node `node`'s work on `stream` (after its waits).
    #[inline]
    pub(super) fn before(&self, node: usize, stream: &dyn Stream, state: &ExecState) -> Result<()> {
        if self.reference.is_none() {
            return Ok(());
        }
        match state.timing.get(node) {
            Some([b, _]) => stream.record(b.as_ref()),
            None => Ok(()),
        }
    }

    /// Node `node`'s issue starts now (before its event waits); the previous node's ends.
    /// One clock read per node: a node's issue span runs to the start of the next one's (all
    /// that lies between is the node's own event records).
    #[inline(always)]
    pub(super) fn start_node(&mut self, node: usize) {
        let at = self.clock.ticks();
        debug_assert!(
            self.end_mark.is_none(),
            "a node started after issuing ended"
        );
        self.take_notes();
        self.marks.push(node, at);
    }

    /// What the steps of the node being issued noted goes with its mark (rarely anything).
    #[inline(always)]
    fn take_notes(&mut self) {
        if self.noted.get() {
            self.note_last();
        }
    }

    #[cold]
    fn note_last(&mut self) {
        let Some(last) = self.marks.len().checked_sub(1) else {
            // No node is being issued: the notes go with the first.
            return;
        };
        self.noted.set(false);
        self.notes.push(MarkNote {
            mark: u32::try_from(last).unwrap_or(u32::MAX),
            command_buffer: self.command_buffer.take(),
            clique_wait_ns: self.clique_wait_ns.take(),
            registered: self.registered.take(),
        });
    }

    /// The last node's issue ends now (once: later calls change nothing).
    pub(super) fn close(&mut self) {
        if self.end_mark.is_some() || self.marks.is_empty() {
            return;
        }
        self.end_mark = Some(self.clock.ticks().max(self.marks.last()));
        self.take_notes();
    }

    /// After node `node`'s work on `stream`: with device times, its end event.
    #[inline]
    pub(super) fn after(&self, node: usize, stream: &dyn Stream, state: &ExecState) -> Result<()> {
        if self.reference.is_none() {
            return Ok(());
        }
        match state.timing.get(node) {
            Some([_, e]) => stream.record(e.as_ref()),
            None => Ok(()),
        }
    }

    /// Hands the execution to the tracer: with device times (and `ok`: every stream
    /// finished), each node's stream span from its timing events.
    pub(super) fn finish(mut self, state: &ExecState, ok: bool) {
        // Issuing failed part-way: the failed node's issue ended now.
        self.close();
        let mut device = vec![];
        if let (true, Some((reference, at))) = (ok, &self.reference) {
            let base = self.tracer.ns(*at);
            device.reserve_exact(self.marks.len());
            for m in self.marks.iter() {
                let Some([b, e]) = state.timing.get(m.node as usize) else {
                    device.push(None);
                    continue;
                };
                let since = |x: &Arc<dyn Event>| {
                    x.elapsed_since(reference.as_ref())
                        .map(|d| base.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(0)))
                };
                match (since(b), since(e)) {
                    (Ok(s), Ok(f)) => device.push(Some((s, f.max(s)))),
                    (Err(err), _) | (_, Err(err)) => {
                        tracing::warn!("trace: no device time for a thunk: {err}");
                        break;
                    }
                }
            }
        }
        let index = self.tracer.next_index(self.rank);
        let end = self.clock.anchor();
        let end_mark = self.end_mark.unwrap_or(end.0);
        self.tracer.push_recording(Recording {
            rank: self.rank,
            program: self.program.to_string(),
            index,
            start_ns: self.tracer.ns(self.start),
            end_ns: self.tracer.ns(end.1),
            ok,
            clock: match (&self.reference, self.exact_anchor) {
                (None, _) => "host",
                (Some(_), true) => "device, anchored exactly",
                (Some(_), false) => "device, anchored at the reference's record",
            },
            map: self.tracer.tick_map(self.anchor, end),
            nodes: self.nodes,
            marks: self.marks,
            end_mark,
            notes: self.notes,
            device,
        });
    }
}
