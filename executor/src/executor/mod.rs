//! The executor: loads a validated executable onto a device (modules, kernels, constants, a
//! static schedule) and runs it.
//!
//! At load, the entry sequence is flattened (nested sequences and async bodies become nodes;
//! `While`, `Conditional` and `CommandBuffer` stay single composite nodes) and its
//! [dependency graph](graph::DependencyGraph) is built. Nodes are then assigned to streams
//! (continuing a chain on its stream when possible, otherwise the least loaded stream; async
//! communication bodies on a dedicated stream), and each cross-stream edge becomes an event
//! record/wait, minus the waits already implied by earlier ones (per-stream vector clocks).
//! Linear or tiny graphs, and `streams = 1`, take the sequential path: one stream, program
//! order.
//!
//! Per-execution state (streams, events, temporaries, command-buffer recordings) is drawn
//! from a pool, so one [`LoadedExecutable`] can be executed from many threads at once.
//!
//! The modules, in the order a program goes through them:
//! - [`session`]: [`Session`], the one way to run a program on a device (load, bind inputs,
//!   execute, read outputs), over a [`Program`] (`crate::program`: verified once, loaded anywhere);
//! - `config`: how a program is scheduled and how one execution runs (options, the SPMD
//!   rank's collective context);
//! - `plan`: thunks resolved into steps at load, each kind's step made by `dispatch` (the
//!   executor's one table over thunk kinds: what each kind becomes at load and how each step
//!   is issued; handed to the planner and the run as functions, so neither names a kind);
//! - `arrange`: what each step uses, and the steps on streams with their vector clocks
//!   (shared by the schedule and the temp plan);
//! - `schedule`: the steps on streams, with their cross-stream events;
//! - `loaded`: [`LoadedExecutable`], its loading and its `execute`;
//! - `execution`: [`Execution`], the handle of an asynchronous execution
//!   ([`LoadedExecutable::execute_async`]: wait, poll, timeout, callback, `Future`), and what
//!   overlaps; `workers`: the threads they run on; `cancel`: [`CancelToken`], the flag (and
//!   optional probe) a run checks between thunks;
//! - `alias`: input–output aliases (in place or not, their ordering resource, what an
//!   execution binds: a donated buffer, or a copy);
//! - `state`: the pooled per-execution resources, and each execution's stream-ordered arenas;
//! - `temps`: the temp memory plan (temps whose live ranges cannot overlap share memory);
//! - `collective_memory`: the collective-space arenas, allocated once per loaded executable
//!   with the collective library's allocator and registered with each clique that uses them;
//! - `scratch`: where each execution's temp arenas come from (the device's stream-ordered
//!   memory pool, or the pooled state);
//! - `progress`: the SPMD run's record of where every rank is in its communication steps;
//! - `run`: one execution issuing and waiting for its steps (all of `Run`'s methods); the
//!   kinds' issue functions take the run: `collective` (the communication steps),
//!   `command_buffer` (recording and replaying command buffers), `device_control` (`while`
//!   and `conditional` recorded as conditional graph nodes) and `custom_call`;
//! - [`graph`]: the dependency graph of the steps' buffer uses;
//! - [`spmd`]: one program on several devices of one process, a session and a thread per
//!   rank ([`spmd::Ranks`]: all the ranks of an SPMD run, or a launched process's share).

mod alias;
mod arrange;
mod cancel;
mod collective;
mod collective_memory;
mod command_buffer;
mod config;
mod custom_call;
mod device_control;
mod dispatch;
mod execution;
pub use device_control::recorded_conditional_nodes;
pub mod graph;
mod loaded;
mod plan;
mod progress;
mod ragged;
mod run;
mod schedule;
mod scratch;
pub mod session;
pub mod spmd;
mod state;
mod temps;
mod trace;
#[doc(hidden)]
pub mod white_box;
mod workers;

pub use crate::program::Program;
pub use cancel::{CancelProbe, CancelToken};
pub use collective_memory::{COLLECTIVE_ALIGNMENT, CollectiveMemoryReport};
pub use config::{
    AUTO_COMMAND_BUFFER_MIN, CollectiveContext, ExecuteOptions, ExecutorConfig, KeepAlive,
};
pub use execution::{DoneCallback, Execution, RunBuffers};
pub use loaded::LoadedExecutable;
pub use progress::{Progress, RankPosition, describe_positions, describe_positions_gone};
pub use schedule::ScheduleInfo;
pub use scratch::ScratchPath;
pub use session::Session;
pub use temps::{PAIR_BUDGET, TempArena, TempPlacement, TempPlan, plan_temps};
