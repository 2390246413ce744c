//! How a program is scheduled ([`ExecutorConfig`]) and how one execution runs
//! ([`ExecuteOptions`], with the [`CollectiveContext`] of an SPMD rank).

use super::cancel::CancelToken;
use super::progress::Progress;
use crate::collectives::CliqueProvider;
use std::sync::Arc;
use std::time::Duration;

/// How a program is scheduled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Compute streams to spread independent work over (at least 1). Async communication
    /// bodies get one more stream of their own.
    pub streams: usize,
    /// Graphs with fewer nodes than this run sequentially on one stream.
    pub sequential_below: usize,
    /// Always run in program order on one stream (the in-order executor).
    pub force_sequential: bool,
    /// Run a sequential program of at least [`AUTO_COMMAND_BUFFER_MIN`] plain operations
    /// (copies, memsets, kernels, gemms, and `while` / `conditional` of them) as one implicit
    /// command buffer: recorded on the first
    /// execution of a pooled state, replayed after, re-recorded when an address changes (as
    /// XLA converts thunk sequences to command buffers). Executions with a deadline run the
    /// thunks one by one, so that the progress tracker can name the pending one.
    pub auto_command_buffer: bool,
    /// Share memory between temps whose live ranges cannot overlap (see
    /// [`TempPlan`](super::TempPlan)); off, every temp has a buffer of its own.
    pub plan_temps: bool,
    /// Take each execution's device temp arenas from the device's memory pool in stream
    /// order (allocated when the execution starts, freed when it ends) where the device has
    /// one ([`Capabilities::stream_ordered_alloc`](crate::backend::Capabilities)); off, or
    /// without one, the arenas are allocated once per pooled execution state and kept with
    /// it. See [`ScratchPath`](super::ScratchPath).
    pub stream_ordered_scratch: bool,
}

/// The smallest sequential program that [`ExecutorConfig::auto_command_buffer`] records.
pub const AUTO_COMMAND_BUFFER_MIN: usize = 64;

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            streams: 2,
            sequential_below: 4,
            force_sequential: false,
            auto_command_buffer: true,
            plan_temps: true,
            stream_ordered_scratch: true,
        }
    }
}

impl ExecutorConfig {
    /// The in-order executor: one stream, program order.
    pub fn in_order() -> Self {
        ExecutorConfig {
            streams: 1,
            sequential_below: 0,
            force_sequential: true,
            auto_command_buffer: false,
            plan_temps: true,
            stream_ordered_scratch: true,
        }
    }

    /// Spread over `n` compute streams.
    pub fn with_streams(n: usize) -> Self {
        ExecutorConfig {
            streams: n.max(1),
            ..Default::default()
        }
    }
}

/// Anything kept alive by an execution until its work has finished
/// ([`ExecuteOptions::keep_alive`]).
pub type KeepAlive = Arc<dyn std::any::Any + Send + Sync>;

/// Options of one execution.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// Fail with `DeadlineExceeded` (naming the first pending thunk of every stream) if the
    /// execution has not finished after this long.
    pub deadline: Option<Duration>,
    /// Stop when this token is cancelled: checked (one atomic load) before every top-level
    /// thunk and before every trip of a host-driven loop; the run then stops issuing, waits
    /// for what it issued, and fails with `Cancelled`. Waiting for the streams stays a plain
    /// synchronize (work already issued is not stopped).
    pub cancel: Option<CancelToken>,
    /// This device's place in an SPMD run, for collective thunks. Without it the program
    /// runs as rank 0 of a world of 1.
    pub collectives: Option<CollectiveContext>,
    /// The SPMD run's progress record: with it (and `collectives`), this execution numbers
    /// its communication steps there, so that a hang's message can say where every rank is
    /// (see [`Progress`]); a failure freezes it.
    pub progress: Option<Arc<Progress>>,
    /// What the caller's buffers belong to, when it must outlive work a deadline abandons:
    /// an execution past its deadline returns without waiting for what it issued (a hung
    /// kernel must not block the caller), and keeps this until that work has finished.
    pub keep_alive: Option<KeepAlive>,
    /// Record this execution in a trace (`crate::trace`): every top-level thunk's issue
    /// span, with the tracer's device times its stream time too. `None`: nothing is recorded.
    pub trace: Option<Arc<crate::trace::Tracer>>,
}

/// One device's place in an SPMD run: its global rank, the number of ranks, and where its
/// communicators come from. Every rank acquires cliques in program order of the collective
/// thunks, the same on every rank.
#[derive(Clone)]
pub struct CollectiveContext {
    pub rank: u32,
    pub world: u32,
    pub cliques: Arc<dyn CliqueProvider>,
}

impl std::fmt::Debug for CollectiveContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectiveContext")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish_non_exhaustive()
    }
}
