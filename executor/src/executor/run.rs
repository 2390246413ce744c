//! One execution in progress ([`Run`]): issues the schedule's nodes on their streams (with
//! the cross-stream event waits and records), runs `While` and `Conditional` by reading
//! predicates back, waits for the streams with the deadline and the collective watchdog,
//! and names the pending thunks when it gives up. The deadline and the cancel token
//! ([`CancelToken`]) are checked before every top-level node and before every trip of every
//! host-driven loop; the deadline also while waiting for a stream (a cancel does not stop
//! work already issued, so a cancelled run waits for it: a plain synchronize); a stream with
//! a full queue lets its issuer go at the deadline. A command buffer (an implicit one
//! included) runs to its end once issued: a cancel is seen before it.
//!
//! A run knows no thunk kind: each step is issued by the executor's dispatch table
//! ([`IssueStep`], `dispatch::step`, handed in by the loader), which calls the kinds' issue
//! functions (`collective`, `command_buffer`, `device_control`, `custom_call`) with the run.

use super::cancel::CancelToken;
use super::config::CollectiveContext;
use super::plan::Step;
use super::progress::Progress;
use super::schedule::Schedule;
use super::state::ExecState;
use crate::backend::{Device, DevicePtr, DeviceRange, Stream};
use crate::collectives::Communicator;
use crate::error::{Error, Result};
use crate::ir::{DType, Slice, select_branch};
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a run issues one step on a stream: the executor's dispatch table (`dispatch::step`).
pub(super) type IssueStep = fn(&Run<'_>, &Step, &dyn Stream, &mut ExecState) -> Result<()>;

/// One execution in progress.
pub(super) struct Run<'a> {
    /// The device the executable is loaded on.
    pub(super) device: &'a dyn Device,
    /// The executable's static schedule.
    pub(super) schedule: &'a Schedule,
    /// Issues each step (the dispatch table).
    issue: IssueStep,
    /// The device address of every allocation (by index) for this execution.
    pub(super) table: &'a [DevicePtr],
    /// The deadline's length and the instant it expires.
    pub(super) deadline: Option<(Duration, Instant)>,
    /// The caller's cancel token, and when its probe (if any) is called next.
    cancel: Option<(&'a CancelToken, Cell<Instant>)>,
    pub(super) collectives: Option<&'a CollectiveContext>,
    /// Communicators this execution used: aborted if it fails, so peers fail fast instead of
    /// waiting for this rank until their terminate timeout.
    pub(super) used: RefCell<Vec<Arc<dyn Communicator>>>,
    /// The SPMD run's progress record, with this rank's number in it.
    pub(super) progress: Option<(&'a Progress, u32)>,
    /// False inside a command buffer: its steps are recorded once and replayed, so they are
    /// not numbered in the progress record.
    pub(super) numbering: Cell<bool>,
    /// True while a command buffer is being recorded: `While` and `Conditional` are recorded
    /// as conditional graph nodes (see `device_control`).
    pub(super) capturing: Cell<bool>,
    /// Memory the recording in progress refers to (trip counters), handed to its recording.
    pub(super) kept: RefCell<Vec<crate::backend::Buffer>>,
    /// Trip counters allocated before a recording starts (no allocation while capturing).
    pub(super) spare: RefCell<Vec<crate::backend::Buffer>>,
    /// Conditional nodes the recording in progress holds.
    pub(super) conditional_nodes: Cell<u64>,
    /// How many top-level nodes are issued completely (their tracking event recorded): a
    /// node from here on is pending even though its tracking event has not been recorded.
    issued_nodes: Cell<usize>,
    /// This execution's trace, when one was asked for.
    pub(super) trace: Option<super::trace::Recorder<'a>>,
    /// The executable's collective memory, registered with the cliques that use it.
    pub(super) collective_memory: Option<&'a super::collective_memory::CollectiveMemory>,
    /// What `execution_seed` thunks write: a function of how many executions of the loaded
    /// program started before this one.
    pub(super) seed: u64,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        device: &'a dyn Device,
        schedule: &'a Schedule,
        issue: IssueStep,
        table: &'a [DevicePtr],
        deadline: Option<(Duration, Instant)>,
        collectives: Option<&'a CollectiveContext>,
        progress: Option<&'a Progress>,
    ) -> Self {
        Run {
            device,
            schedule,
            issue,
            table,
            deadline,
            cancel: None,
            collectives,
            used: RefCell::new(vec![]),
            progress: progress.zip(collectives.map(|c| c.rank)),
            numbering: Cell::new(true),
            capturing: Cell::new(false),
            kept: RefCell::new(vec![]),
            spare: RefCell::new(vec![]),
            conditional_nodes: Cell::new(0),
            issued_nodes: Cell::new(0),
            trace: None,
            collective_memory: None,
            seed: 0,
        }
    }
}

impl<'a> Run<'a> {
    /// Makes `token` stop this run at its check points (its probe first called after its
    /// interval from now).
    pub(super) fn set_cancel(&mut self, token: &'a CancelToken) {
        let first = Instant::now() + token.probe_interval().unwrap_or_default();
        self.cancel = Some((token, Cell::new(first)));
    }

    /// At a failure: keeps where every rank of the SPMD run is now, before this failure's
    /// aborts move them (see [`Progress::freeze`]).
    pub(super) fn freeze_progress(&self) {
        if let Some((p, _)) = self.progress {
            p.freeze();
        }
    }

    pub(super) fn ptr(&self, s: &Slice) -> DevicePtr {
        self.table[s.allocation as usize].offset(s.offset)
    }

    pub(super) fn range(&self, s: &Slice) -> DeviceRange {
        DeviceRange {
            ptr: self.ptr(s),
            len: s.size,
        }
    }

    pub(super) fn issue_all(&mut self, state: &mut ExecState) -> Result<()> {
        let nodes = &self.schedule.nodes;
        let tracking = self.deadline.is_some();
        if tracking {
            while state.tracking.len() < nodes.len() {
                state.tracking.push(self.device.create_event()?);
            }
        }
        // A sequential schedule without a deadline may run in the issuing thread (a hint the
        // host backend uses; with a deadline the caller must stay free to give up).
        let immediate = self.schedule.sequential && self.deadline.is_none();
        for s in &state.streams {
            s.set_immediate(immediate);
            // A full stream queue must not keep the issuer past the deadline.
            s.set_issue_deadline(self.deadline.map(|(_, at)| at));
        }
        // Device times need the thunks one by one.
        let per_thunk = self.trace.as_ref().is_some_and(|t| t.device_times());
        if let Some(t) = &mut self.trace {
            let first = state.streams[0].clone();
            t.begin(self.device, first.as_ref(), state)?;
        }
        if let (Some(fused), None, false) = (&self.schedule.fused, self.deadline, per_thunk) {
            self.check_stop(state)?;
            let stream = state.streams[0].clone();
            if let Some(t) = &mut self.trace {
                t.start_node(nodes.len());
            }
            self.step(&fused.step, stream.as_ref(), state)
                .map_err(|e| e.at_thunk(&fused.step.path, fused.step.kind))?;
            if let Some(t) = &mut self.trace {
                t.close();
            }
            return Ok(());
        }
        // Without a trace, a loop with no trace hooks at all.
        if self.trace.is_some() {
            self.issue_nodes::<true>(state)
        } else {
            self.issue_nodes::<false>(state)
        }
    }

    /// The trace's recorder in a loop compiled with (`TRACED`) or without trace hooks.
    #[inline(always)]
    fn recorder<const TRACED: bool>(&mut self) -> Option<&mut super::trace::Recorder<'a>> {
        if TRACED { self.trace.as_mut() } else { None }
    }

    /// Issues every node in order (not as the implicit command buffer).
    fn issue_nodes<const TRACED: bool>(&mut self, state: &mut ExecState) -> Result<()> {
        let nodes = &self.schedule.nodes;
        let tracking = self.deadline.is_some();
        let stoppable = tracking || self.cancel.is_some();
        // Timing events around every node (device times).
        let timed = TRACED && self.trace.as_ref().is_some_and(|t| t.timed());
        for (i, node) in nodes.iter().enumerate() {
            if stoppable {
                self.check_stop(state)?;
            }
            if let Some(t) = self.recorder::<TRACED>() {
                t.start_node(i);
            }
            let _thunk =
                tracing::trace_span!("thunk", path = %node.step.path, label = %node.step.label)
                    .entered();
            let stream = state.streams[node.stream].clone();
            for w in &node.waits {
                if let Some(e) = state.events.get(w) {
                    stream.wait(e.as_ref())?;
                }
            }
            if let (true, Some(t)) = (timed, &self.trace) {
                t.before(i, stream.as_ref(), state)?;
            }
            self.step(&node.step, stream.as_ref(), state)
                .map_err(|e| e.at_thunk(&node.step.path, node.step.kind))?;
            if let (true, Some(t)) = (timed, &self.trace) {
                t.after(i, stream.as_ref(), state)?;
            }
            if node.record
                && let Some(e) = state.events.get(&i)
            {
                stream.record(e.as_ref())?;
            }
            if tracking {
                stream.record(state.tracking[i].as_ref())?;
            }
            if stoppable {
                self.issued_nodes.set(i + 1);
            }
        }
        if let Some(t) = self.recorder::<TRACED>() {
            t.close();
        }
        Ok(())
    }

    /// Fails with `DeadlineExceeded` past the deadline, or `Cancelled` once the cancel token
    /// is (its probe called when due).
    pub(super) fn check_stop(&self, state: &ExecState) -> Result<()> {
        if let Some((d, at)) = self.deadline
            && Instant::now() >= at
        {
            return Err(Error::DeadlineExceeded {
                deadline: d,
                pending: self.pending(state),
            });
        }
        if let Some((token, next_probe)) = &self.cancel {
            let mut cancelled = token.is_cancelled();
            if let (false, Some(every)) = (cancelled, token.probe_interval()) {
                let now = Instant::now();
                if now >= next_probe.get() {
                    next_probe.set(now + every);
                    cancelled = token.probe();
                }
            }
            if cancelled {
                return Err(Error::Cancelled {
                    at: self.stopped_at(state),
                });
            }
        }
        Ok(())
    }

    /// Where a cancelled run stopped: the pending thunks (with tracking events), else the
    /// first node not issued completely.
    fn stopped_at(&self, state: &ExecState) -> String {
        if !state.tracking.is_empty() {
            return self.pending(state);
        }
        match self.schedule.nodes.get(self.issued_nodes.get()) {
            Some(n) => format!("{} ({})", n.step.path, n.step.label),
            None => "every thunk issued, waiting for them".into(),
        }
    }

    /// The first unfinished node of every stream (needs tracking events).
    fn pending(&self, state: &ExecState) -> String {
        let nodes = &self.schedule.nodes;
        let mut out = vec![];
        for s in 0..state.streams.len() {
            let issued = self.issued_nodes.get();
            let first = nodes.iter().enumerate().find(|(i, n)| {
                n.stream == s
                    && (*i >= issued
                        || state
                            .tracking
                            .get(*i)
                            .is_none_or(|e| !e.query().unwrap_or(false)))
            });
            if let Some((_, n)) = first {
                out.push(format!("stream {s}: {} ({})", n.step.path, n.step.label));
            }
        }
        if out.is_empty() {
            "none (finishing)".into()
        } else {
            out.join("; ")
        }
    }

    pub(super) fn wait_all(&self, state: &ExecState) -> Result<()> {
        // With communicators in use, poll: a communicator's asynchronous error (a peer died, a
        // timeout in the library) aborts every communicator of this execution instead of
        // leaving the streams blocked forever (the hang watchdog).
        let watch = !self.used.borrow().is_empty();
        // A cancel alone does not poll: the work is issued, and a cancelled run waits for
        // it anyway before it returns.
        if self.deadline.is_none() && !watch {
            let mut first = Ok(());
            for s in &state.streams {
                let r = s.synchronize();
                if first.is_ok() {
                    first = r;
                }
            }
            return first;
        }
        let mut sleep = Duration::from_micros(20);
        loop {
            let mut done = true;
            for s in &state.streams {
                if !s.query()? {
                    done = false;
                }
            }
            if done {
                return Ok(());
            }
            self.check_stop(state)?;
            if let Some(stall) = self.stalled() {
                let (rank, _) = self.rank_world();
                let why = format!(
                    "rank {rank}: a communication step did not complete: {stall} after its \
                     stream reached it (a peer is missing, stuck, failed or issued another \
                     operation)"
                );
                self.freeze_progress();
                self.abort_communicators(&why);
                // The pending thunks are known only with tracking events (a deadline).
                let message = if state.tracking.is_empty() {
                    why
                } else {
                    format!("{why}; first pending thunks: {}", self.pending(state))
                };
                return Err(Error::backend("executor", "collective timeout", message));
            }
            if watch {
                let failed = self
                    .used
                    .borrow()
                    .iter()
                    .find_map(|c| c.async_error().err());
                if let Some(e) = failed {
                    let (rank, _) = self.rank_world();
                    self.abort_communicators(&format!("rank {rank}: {e}"));
                    return Err(Error::backend(
                        "executor",
                        "collective watchdog",
                        format!(
                            "rank {rank}: a communicator failed asynchronously ({e}); first pending thunks: {}",
                            self.pending(state)
                        ),
                    ));
                }
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_millis(2));
        }
    }

    /// This rank's communication step that has waited longer than its provider's
    /// [`completion_timeout`](crate::collectives::CliqueProvider::completion_timeout), if
    /// there is one (needs the progress record).
    pub(super) fn stalled(&self) -> Option<String> {
        let ctx = self.collectives?;
        let limit = ctx.cliques.completion_timeout()?;
        let (progress, rank) = self.progress?;
        if self.used.borrow().is_empty() {
            return None;
        }
        progress.stalled(rank, limit)
    }

    /// Reads `size` bytes at `slice` on the host after the stream's work so far.
    fn read_back(&self, slice: &Slice, stream: &dyn Stream, state: &ExecState) -> Result<[u8; 8]> {
        stream.copy(self.ptr(slice), state.scratch.ptr(), slice.size)?;
        if self.deadline.is_some() {
            let mut sleep = Duration::from_micros(10);
            while !stream.query()? {
                self.check_stop(state)?;
                std::thread::sleep(sleep);
                sleep = (sleep * 2).min(Duration::from_millis(2));
            }
        } else {
            stream.synchronize()?;
        }
        let mut buf = [0u8; 8];
        let n = slice.size.min(8) as usize;
        self.device
            .copy_to_host(state.scratch.ptr(), &mut buf[..n])?;
        Ok(buf)
    }

    pub(super) fn steps(
        &self,
        steps: &[Step],
        stream: &dyn Stream,
        state: &mut ExecState,
    ) -> Result<()> {
        for s in steps {
            self.step(s, stream, state)
                .map_err(|e| e.at_thunk(&s.path, s.kind))?;
        }
        Ok(())
    }

    /// Issues one step through the dispatch table.
    pub(super) fn step(
        &self,
        step: &Step,
        stream: &dyn Stream,
        state: &mut ExecState,
    ) -> Result<()> {
        (self.issue)(self, step, stream, state)
    }

    /// Runs a `While` from the host: `body` for `trip_count` trips, or while `cond` leaves
    /// `pred` true (read back after each run of `cond`). The deadline is checked before every
    /// trip; a deadline error says how many trips were issued (of how many), for this loop and
    /// every loop around it.
    pub(super) fn host_while(
        &self,
        step: &Step,
        (cond, pred, body, trip_count): (&[Step], &Slice, &[Step], Option<u64>),
        stream: &dyn Stream,
        state: &mut ExecState,
    ) -> Result<()> {
        let issued = |trips: u64| {
            move |e: Error| {
                note_deadline(e, || {
                    let of = trip_count.map(|n| format!(" of {n}")).unwrap_or_default();
                    format!(
                        "{} ({}) had issued {trips}{of} trips",
                        step.path, step.label
                    )
                })
            }
        };
        if let Some(n) = trip_count {
            for trip in 0..n {
                self.check_stop(state).map_err(issued(trip))?;
                self.steps(body, stream, state).map_err(issued(trip))?;
            }
            return Ok(());
        }
        let mut trip = 0u64;
        loop {
            self.check_stop(state).map_err(issued(trip))?;
            self.steps(cond, stream, state).map_err(issued(trip))?;
            let b = self.read_back(pred, stream, state).map_err(issued(trip))?;
            if b[0] == 0 {
                return Ok(());
            }
            self.steps(body, stream, state).map_err(issued(trip))?;
            trip = trip.saturating_add(1);
        }
    }

    /// Runs a `Conditional` from the host: the branch the index (read back) selects.
    pub(super) fn host_conditional(
        &self,
        index: &Slice,
        index_type: DType,
        branches: &[Vec<Step>],
        stream: &dyn Stream,
        state: &mut ExecState,
    ) -> Result<()> {
        let b = self.read_back(index, stream, state)?;
        let which = select_branch(index_type, branches.len().saturating_sub(1), b);
        match branches.get(which) {
            Some(br) => self.steps(br, stream, state),
            None => Ok(()),
        }
    }

    /// This rank and the world's size (rank 0 of 1 outside an SPMD run).
    pub(super) fn rank_world(&self) -> (u32, u32) {
        self.collectives
            .map(|c| (c.rank, c.world))
            .unwrap_or((0, 1))
    }

    /// Aborts every communicator this execution used (after a failure).
    pub(super) fn abort_communicators(&self, reason: &str) {
        for c in self.used.borrow().iter() {
            c.abort(reason);
        }
    }

    /// Keeps `b` alive with the recording in progress.
    pub(super) fn keep(&self, b: crate::backend::Buffer) {
        self.kept.borrow_mut().push(b);
    }
}

/// Adds `note` to the pending-thunk text of a deadline or cancel error, also when thunk paths
/// wrap it; other errors pass unchanged.
fn note_deadline(e: Error, note: impl FnOnce() -> String) -> Error {
    match e {
        Error::DeadlineExceeded { deadline, pending } => Error::DeadlineExceeded {
            deadline,
            pending: format!("{pending}; {}", note()),
        },
        Error::Cancelled { at } => Error::Cancelled {
            at: format!("{at}; {}", note()),
        },
        Error::Thunk { path, kind, source } => Error::Thunk {
            path,
            kind,
            source: Box::new(note_deadline(*source, note)),
        },
        e => e,
    }
}
