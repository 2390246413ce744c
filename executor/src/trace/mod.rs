//! Execution traces: a [`Tracer`] collects what executions did (one [`Execution`] each: every
//! top-level thunk's host issue span and, when asked for, its device time) and host spans
//! (module compile and load, program load), for every rank of a run on one clock, and writes
//! them as Chrome JSON trace events ([`chrome`]) that ui.perfetto.dev and chrome://tracing
//! open. The same records feed `xthunk profile`.
//!
//! A leaf module: it knows nothing of the executor; the executor fills in the records
//! (`executor/trace.rs`). Nothing here runs unless a caller asked for a trace
//! (`ExecuteOptions::trace` is an `Option`).

pub mod chrome;
pub mod clock;
pub mod marks;

pub use clock::{Clock, ClockSource, TickMap};
pub use marks::{Mark, Marks};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// At most this many thunk records are kept; later executions are counted as dropped
/// (a trace of a long run must not take all memory).
pub const MAX_THUNK_RECORDS: usize = 2_000_000;

/// What a trace records besides the host issue spans.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceConfig {
    /// Record a timing event before and after every top-level thunk and report when it ran
    /// on its stream (GPUs: device time from the events; host: the stream's worker time).
    /// Costs two events per thunk, and runs thunks one by one instead of as an implicit
    /// command buffer.
    pub device_times: bool,
}

/// A top-level thunk (schedule node) as the trace names it, fixed at load.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// `entry[3] kernel std.add_row_f32`.
    pub name: String,
    /// The thunk kind (`kernel`, `gemm`, `copy`, `all_reduce`, ...).
    pub kind: &'static str,
    /// The stream it is issued on.
    pub stream: u32,
    /// The nodes (on other streams) whose events it waits for.
    pub waits: Vec<u32>,
    /// Bytes it reads and writes (0: not meaningful).
    pub bytes: u64,
    /// Floating-point operations (gemms; 0 otherwise).
    pub flops: u64,
    /// A communication step (collective, permute, send, receive).
    pub communicates: bool,
    /// What the slice shows besides times: grid/block, dtype, m/n/k, bytes, peers.
    pub args: Map<String, Value>,
}

/// What a command-buffer node did in one execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommandBufferNote {
    #[default]
    None,
    /// Recorded (first execution of a pooled state, or an address changed), then launched.
    Recorded,
    /// Replayed a recording.
    Replayed,
    /// Recorded again because an address changed (updating the previous graph in place where
    /// the backend can), then launched.
    Updated,
    /// The backend cannot record: its body ran thunk by thunk.
    Direct,
}

impl CommandBufferNote {
    pub fn name(self) -> Option<&'static str> {
        match self {
            CommandBufferNote::None => None,
            CommandBufferNote::Recorded => Some("record+launch"),
            CommandBufferNote::Replayed => Some("replay"),
            CommandBufferNote::Updated => Some("re-record (update)+launch"),
            CommandBufferNote::Direct => Some("direct"),
        }
    }
}

/// One top-level thunk in one execution; times in nanoseconds since the tracer's origin.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThunkTimes {
    /// Index into [`Execution::nodes`].
    pub node: u32,
    /// Host issue span: from before its event waits to after its last call returned.
    pub issue: (u64, u64),
    /// When it ran on its stream (with [`TraceConfig::device_times`]).
    pub device: Option<(u64, u64)>,
    pub command_buffer: CommandBufferNote,
    /// Time spent acquiring communicators (the first time: the clique's rendezvous).
    pub clique_wait_ns: u64,
    /// How the collective's buffers are registered with its communicator, when they are
    /// (collective memory: a window or a user buffer).
    pub registered: Option<crate::collectives::RegistrationKind>,
}

/// What a node's steps noted in one execution (rare: kept apart from the marks).
#[derive(Clone, Copy, Debug)]
pub struct MarkNote {
    /// The mark's index in [`Recording::marks`].
    pub mark: u32,
    pub command_buffer: CommandBufferNote,
    pub clique_wait_ns: u64,
    pub registered: Option<crate::collectives::RegistrationKind>,
}

/// One execution of one rank as recorded: packed marks in raw clock ticks (a node's issue
/// starts at its mark and ends at the next one's), turned into an [`Execution`] (nanoseconds,
/// one [`ThunkTimes`] per node) only when the trace is read.
#[derive(Clone, Debug)]
pub struct Recording {
    pub rank: u32,
    pub program: String,
    pub index: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ok: bool,
    /// As [`Execution::clock`].
    pub clock: &'static str,
    pub nodes: Arc<[NodeInfo]>,
    /// In issue order.
    pub marks: Marks,
    /// The tick the last node's issue ended at.
    pub end_mark: u64,
    /// This execution's ticks to the tracer's nanoseconds.
    pub map: TickMap,
    /// By mark, ascending; at most one per mark.
    pub notes: Vec<MarkNote>,
    /// Empty (no device times), else each mark's stream span (nanoseconds).
    pub device: Vec<Option<(u64, u64)>>,
}

impl Recording {
    /// The execution in nanoseconds, one record per mark.
    pub fn expand(&self) -> Execution {
        let mut notes = self.notes.iter().peekable();
        let marks: Vec<Mark> = self.marks.iter().collect();
        let thunks = marks
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let end = marks.get(i + 1).map_or(self.end_mark, |n| n.at);
                let mut t = ThunkTimes {
                    node: m.node,
                    issue: (self.map.ns(m.at), self.map.ns(end)),
                    device: self.device.get(i).copied().flatten(),
                    ..Default::default()
                };
                while let Some(n) = notes.next_if(|n| n.mark as usize <= i) {
                    if n.mark as usize == i {
                        t.command_buffer = n.command_buffer;
                        t.clique_wait_ns = n.clique_wait_ns;
                        t.registered = n.registered;
                    }
                }
                t
            })
            .collect();
        Execution {
            rank: self.rank,
            program: self.program.clone(),
            index: self.index,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            ok: self.ok,
            clock: self.clock,
            nodes: self.nodes.clone(),
            thunks,
        }
    }

    /// The streams its records are on.
    fn streams(&self) -> impl Iterator<Item = u32> + '_ {
        self.marks
            .iter()
            .filter_map(|m| self.nodes.get(m.node as usize).map(|n| n.stream))
    }
}

/// One execution of one rank.
#[derive(Clone, Debug)]
pub struct Execution {
    pub rank: u32,
    pub program: String,
    /// The how-manyth traced execution of this rank (from 0).
    pub index: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ok: bool,
    /// How its device times are placed on the host clock: `host` (none), `device, anchored
    /// exactly` (the backend took the reference event's completion instant) or `device,
    /// anchored at the reference's record` (early by the device's delay in reaching it).
    pub clock: &'static str,
    /// The program's nodes (shared by its executions).
    pub nodes: Arc<[NodeInfo]>,
    /// In issue order.
    pub thunks: Vec<ThunkTimes>,
}

/// A host span outside executions (program load, module compile and load).
#[derive(Clone, Debug)]
pub struct Span {
    pub rank: u32,
    pub name: String,
    /// `load`, `compile`, ...
    pub category: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub args: Map<String, Value>,
}

#[derive(Default)]
struct Records {
    executions: Vec<Recording>,
    spans: Vec<Span>,
    /// Per rank: its label (device) and how many executions it traced.
    ranks: BTreeMap<u32, (String, u64)>,
    thunk_records: usize,
    dropped_executions: u64,
}

/// Collects a run's trace; shared (`Arc`) by every rank of it, so that all share one clock.
pub struct Tracer {
    config: TraceConfig,
    origin: Instant,
    /// What per-thunk marks are read from (ticks since `origin` or the TSC).
    clock: Clock,
    /// The wall-clock time of `origin`, so that traces of several processes can be aligned.
    origin_unix_ns: u64,
    records: Mutex<Records>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    pub fn new(config: TraceConfig) -> Self {
        Self::with_clock(config, ClockSource::Tsc)
    }

    /// [`Tracer::new`] with marks from `source` (the TSC only where it is reliable).
    pub fn with_clock(config: TraceConfig, source: ClockSource) -> Self {
        let origin_unix_ns = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let origin = Instant::now();
        Tracer {
            config,
            origin,
            clock: Clock::of(source, origin),
            origin_unix_ns,
            records: Mutex::new(Records::default()),
        }
    }

    pub fn config(&self) -> TraceConfig {
        self.config
    }

    /// What per-thunk marks are read from.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The map of ticks read between the anchors `from` and `to` (each a [`Clock::anchor`])
    /// to nanoseconds from the origin.
    pub fn tick_map(&self, from: (u64, Instant), to: (u64, Instant)) -> TickMap {
        match self.clock.source() {
            ClockSource::Instant => TickMap::IDENTITY,
            ClockSource::Tsc => TickMap {
                ticks: (from.0, to.0),
                ns: (self.ns(from.1), self.ns(to.1)),
            },
        }
    }

    /// Nanoseconds from the origin to `t` (0 before it).
    pub fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn origin_unix_ns(&self) -> u64 {
        self.origin_unix_ns
    }

    /// Names rank `rank`'s track group (e.g. its device).
    pub fn name_rank(&self, rank: u32, label: impl Into<String>) {
        self.records.lock().ranks.entry(rank).or_default().0 = label.into();
    }

    /// The number the next execution of `rank` gets.
    pub fn next_index(&self, rank: u32) -> u64 {
        let mut r = self.records.lock();
        let e = &mut r.ranks.entry(rank).or_default().1;
        let i = *e;
        *e += 1;
        i
    }

    /// Adds one execution (dropped, and counted, past [`MAX_THUNK_RECORDS`]).
    pub fn push_recording(&self, e: Recording) {
        let mut r = self.records.lock();
        if r.thunk_records.saturating_add(e.marks.len()) > MAX_THUNK_RECORDS {
            r.dropped_executions += 1;
            return;
        }
        r.thunk_records += e.marks.len();
        r.executions.push(e);
    }

    /// Adds a host span of `rank` from `start` to `end`.
    pub fn span(
        &self,
        rank: u32,
        category: &'static str,
        name: impl Into<String>,
        start: Instant,
        end: Instant,
        args: Map<String, Value>,
    ) {
        let span = Span {
            rank,
            name: name.into(),
            category,
            start_ns: self.ns(start),
            end_ns: self.ns(end),
            args,
        };
        self.records.lock().spans.push(span);
    }

    /// Runs `f` on every execution recorded so far (in the order they ended), under the
    /// tracer's lock.
    fn with_recordings<R>(&self, f: impl FnOnce(&[Recording]) -> R) -> R {
        f(&self.records.lock().executions)
    }

    /// Every execution recorded so far (by rank, then start), in nanoseconds.
    pub fn executions(&self) -> Vec<Execution> {
        let mut v: Vec<Execution> =
            self.with_recordings(|r| r.iter().map(Recording::expand).collect());
        v.sort_by_key(|e| (e.rank, e.start_ns));
        v
    }

    pub fn spans(&self) -> Vec<Span> {
        self.records.lock().spans.clone()
    }

    /// Executions dropped past [`MAX_THUNK_RECORDS`].
    pub fn dropped_executions(&self) -> u64 {
        self.records.lock().dropped_executions
    }

    fn rank_labels(&self) -> BTreeMap<u32, String> {
        self.records
            .lock()
            .ranks
            .iter()
            .map(|(r, (l, _))| (*r, l.clone()))
            .collect()
    }
}
