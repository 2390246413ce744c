//! `While` and `Conditional` inside a command buffer's recording, as conditional graph nodes
//! (device-side control flow: no read-back to the host per trip or branch).
//!
//! A `while` with a `cond` records `cond`, then a set of its condition from `pred`, then a
//! `While` node whose body is `body`, `cond` and the set again; a `while` with a trip count
//! records a zeroed trip counter, a set from it, and a `While` node of `body` and the set. A
//! conditional with `k` branches records the `k` conditions first (branch `i`'s is 1 when
//! the index selects it: the branches may overwrite the index), then one `If` node per
//! branch. Bodies nest.
//!
//! Where the backend has no conditional nodes the recording fails with `Unsupported`, the
//! command buffer runs with host-driven control flow (see `command_buffer`), and this is
//! logged once per backend per process.

use super::plan::{Op, Step};
use super::run::Run;
use super::state::ExecState;
use crate::backend::{ConditionalKind, SetCondition, Stream};
use crate::error::{Error, Result};
use crate::ir::{DType, MemorySpace, MemsetPattern, Slice};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// Backends the fallback was already logged for.
static LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Conditional nodes in command buffer recordings the backends accepted (this process).
static RECORDED: AtomicU64 = AtomicU64::new(0);

/// How many conditional graph nodes (one per `while`, one per branch of a `conditional`)
/// the command buffers recorded so far in this process hold, counted when the backend
/// accepted the recording: a recording that fell back to host-driven control flow adds
/// none.
pub fn recorded_conditional_nodes() -> u64 {
    RECORDED.load(Ordering::Relaxed)
}

pub(super) fn note_recorded(nodes: u64) {
    RECORDED.fetch_add(nodes, Ordering::Relaxed);
}

/// How many `while` loops with a trip count `steps` hold (nested ones included).
fn trip_loops(steps: &[Step]) -> usize {
    steps
        .iter()
        .map(|s| match &s.op {
            Op::While {
                cond,
                body,
                trip_count,
                ..
            } => usize::from(trip_count.is_some()) + trip_loops(cond) + trip_loops(body),
            Op::Conditional { branches, .. } => branches.iter().map(|b| trip_loops(b)).sum(),
            Op::CommandBuffer { body, .. } => trip_loops(body),
            _ => 0,
        })
        .sum()
}

/// Logs (once per backend) that `e` sends command buffers with control flow to the host.
pub(super) fn note_fallback(backend: &str, e: &Error) {
    if LOGGED.lock().insert(backend.to_string()) {
        tracing::info!(
            backend,
            reason = %e,
            "the {backend} backend records no conditional graph nodes: command buffers with \
             `while` or `conditional` run with host-driven control flow"
        );
    }
}

/// Whether `e` (perhaps wrapped in thunk paths) is the missing conditional-node support.
pub(super) fn is_unsupported(e: &Error) -> bool {
    match e {
        Error::Unsupported { .. } => true,
        Error::Thunk { source, .. } => is_unsupported(source),
        _ => false,
    }
}

/// Allocates the trip counters a recording of `body` needs before it starts (drivers
/// refuse allocation while capturing).
pub(super) fn prepare_trip_counters(run: &Run<'_>, body: &[Step]) -> Result<()> {
    let n = trip_loops(body);
    let mut spare = run.spare.borrow_mut();
    while spare.len() < n {
        spare.push(run.device.allocate(8, 8, MemorySpace::Device)?);
    }
    Ok(())
}

/// Records a `While` as a conditional `While` node on the capturing `stream`.
pub(super) fn device_while(
    run: &Run<'_>,
    cond: &[Step],
    pred: &Slice,
    body: &[Step],
    trip_count: Option<u64>,
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<()> {
    let h = stream.create_condition()?;
    let set = match trip_count {
        Some(n) => {
            // A counter the recording keeps (its address is in the graph).
            let spare = run.spare.borrow_mut().pop();
            let counter = match spare {
                Some(c) => c,
                None => run.device.allocate(8, 8, MemorySpace::Device)?,
            };
            let ptr = counter.ptr();
            run.keep(counter);
            stream.memset(ptr, 8, MemsetPattern::U32(0))?;
            SetCondition::TripsBelow { counter: ptr, n }
        }
        None => {
            run.steps(cond, stream, state)?;
            SetCondition::Pred {
                pred: run.ptr(pred),
            }
        }
    };
    stream.set_condition(h, set)?;
    let with_cond = trip_count.is_none();
    stream.capture_conditional(ConditionalKind::While, h, &mut |s| {
        run.steps(body, s, state)?;
        if with_cond {
            run.steps(cond, s, state)?;
        }
        s.set_condition(h, set)
    })?;
    run.conditional_nodes.set(run.conditional_nodes.get() + 1);
    Ok(())
}

/// Records a `Conditional` as one conditional `If` node per branch on `stream`.
pub(super) fn device_conditional(
    run: &Run<'_>,
    index: &Slice,
    index_type: DType,
    branches: &[Vec<Step>],
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<()> {
    let count = u32::try_from(branches.len())
        .map_err(|_| Error::InvalidArgument("too many branches".into()))?;
    let mut handles = Vec::with_capacity(branches.len());
    for branch in 0..count {
        let h = stream.create_condition()?;
        stream.set_condition(
            h,
            SetCondition::Branch {
                index: run.ptr(index),
                pred: index_type == DType::Pred,
                branch,
                branches: count,
            },
        )?;
        handles.push(h);
    }
    for (h, b) in handles.into_iter().zip(branches) {
        stream.capture_conditional(ConditionalKind::If, h, &mut |s| run.steps(b, s, state))?;
        run.conditional_nodes.set(run.conditional_nodes.get() + 1);
    }
    Ok(())
}
