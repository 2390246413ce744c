//! Where each execution's temp memory comes from ([`ScratchPath`]): on a device with a
//! stream-ordered memory pool ([`Capabilities::stream_ordered_alloc`]) the device arenas of
//! the [temp plan](super::TempPlan) are allocated on the execution's first stream when it
//! starts and freed there when it ends, so the pool (whose release threshold keeps its
//! memory) serves repeated executions without a driver allocation and the memory is shared
//! with every other user of the pool between executions; elsewhere (and for arenas in other
//! memory spaces) the arenas are allocated once per pooled execution state and kept with it.
//! Which path a backend's devices take is logged once per process.
//!
//! [`Capabilities::stream_ordered_alloc`]: crate::backend::Capabilities::stream_ordered_alloc

use super::LoadedExecutable;
use super::config::ExecutorConfig;
use super::state::ExecState;
use super::temps::TempArena;
use crate::backend::{Buffer, Device, DevicePtr};
use crate::error::{Error, Result};
use crate::ir::MemorySpace;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::fmt;

/// How an executable's temp arenas are allocated (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScratchPath {
    /// Device arenas from the device's memory pool, in stream order, per execution.
    StreamOrdered,
    /// Arenas allocated once per pooled execution state and kept with it.
    Pooled,
}

impl ScratchPath {
    /// What the path means, for logs and reports.
    pub fn describe(self) -> &'static str {
        match self {
            ScratchPath::StreamOrdered => {
                "stream-ordered: device temp arenas come from the device's memory pool at each \
                 execution's start and go back to it at its end"
            }
            ScratchPath::Pooled => {
                "pooled state: temp arenas are allocated once per pooled execution state and \
                 kept with it"
            }
        }
    }
}

impl fmt::Display for ScratchPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScratchPath::StreamOrdered => "stream-ordered",
            ScratchPath::Pooled => "pooled state",
        })
    }
}

/// The (backend, path) pairs already logged.
static LOGGED: Mutex<BTreeSet<(String, bool)>> = Mutex::new(BTreeSet::new());

/// The path executables loaded onto `device` with `config` take; logged once per backend and
/// path per process.
pub(super) fn choose(device: &dyn Device, config: &ExecutorConfig) -> ScratchPath {
    let pools = device.capabilities().stream_ordered_alloc;
    let path = if pools && config.stream_ordered_scratch {
        ScratchPath::StreamOrdered
    } else {
        ScratchPath::Pooled
    };
    let backend = device.backend_name();
    if LOGGED
        .lock()
        .insert((backend.to_string(), path == ScratchPath::StreamOrdered))
    {
        let why = match (pools, path) {
            (_, ScratchPath::StreamOrdered) => "the device has a stream-ordered memory pool",
            (true, ScratchPath::Pooled) => "stream-ordered scratch is off in the configuration",
            (false, _) => "the device has no stream-ordered memory pool",
        };
        tracing::info!(
            backend,
            scratch = %path,
            "temp memory on {backend} devices: {} ({why})",
            path.describe()
        );
    }
    path
}

/// Whether `arena` is allocated per execution, in stream order, under `path`.
pub(super) fn is_ordered(path: ScratchPath, arena: &TempArena) -> bool {
    path == ScratchPath::StreamOrdered && arena.memory_space == MemorySpace::Device
}

/// The stream-ordered arenas of one execution, freed in the order of the first stream when
/// dropped: by [`OrderedScratch::free`] once everything is issued (the memory goes back to
/// the pool as the execution completes, for any user of the pool), or after the streams are
/// drained when the execution failed.
#[derive(Default)]
pub(super) struct OrderedScratch {
    arenas: Vec<Buffer>,
}

impl OrderedScratch {
    /// Frees the arenas in the first stream's order after the work of every stream of
    /// `state` issued so far (the other streams' ends are joined into the first through
    /// events). On an error the arenas stay, to be dropped after the streams are drained.
    pub(super) fn free(&mut self, state: &ExecState) -> Result<()> {
        if self.arenas.is_empty() {
            return Ok(());
        }
        if let Some(first) = state.streams.first() {
            for (s, done) in state.streams[1..].iter().zip(&state.scratch_done) {
                s.record(done.as_ref())?;
                first.wait(done.as_ref())?;
            }
        }
        self.arenas.clear();
        Ok(())
    }
}

/// Allocates the stream-ordered arenas of one execution of `exe` on `state`'s first stream,
/// writes its temps' addresses into `table`, and makes the other streams wait for the
/// allocation.
pub(super) fn allocate(
    exe: &LoadedExecutable,
    state: &ExecState,
    table: &mut [DevicePtr],
) -> Result<OrderedScratch> {
    let plan = &exe.schedule.temps;
    let path = exe.scratch_path;
    if !plan.arenas.iter().any(|a| is_ordered(path, a)) {
        return Ok(OrderedScratch::default());
    }
    let Some(first) = state.streams.first() else {
        return Err(Error::InvalidArgument(
            "internal: an execution state without streams".into(),
        ));
    };
    let mut arenas: Vec<Option<Buffer>> = Vec::with_capacity(plan.arenas.len());
    for a in &plan.arenas {
        arenas.push(if is_ordered(path, a) {
            Some(first.allocate_ordered(a.size, a.alignment)?)
        } else {
            None
        });
    }
    for p in &plan.placements {
        if let Some(Some(arena)) = arenas.get(p.arena) {
            let Some(slot) = table.get_mut(p.allocation as usize) else {
                return Err(Error::InvalidArgument(format!(
                    "internal: temp %{} outside the allocation table",
                    p.allocation
                )));
            };
            *slot = arena.ptr().offset(p.offset);
        }
    }
    let scratch = OrderedScratch {
        arenas: arenas.into_iter().flatten().collect(),
    };
    if let Some(ready) = &state.scratch_ready {
        first.record(ready.as_ref())?;
        for s in &state.streams[1..] {
            s.wait(ready.as_ref())?;
        }
    }
    Ok(scratch)
}
