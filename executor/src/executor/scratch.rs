//! Where each execution's temp memory comes from ([`ScratchPath`]): on a device with a
//! stream-ordered memory pool ([`Capabilities::stream_ordered_alloc`]) the device arenas of
//! the [temp plan](super::TempPlan) are allocated on the execution's first stream when it
//! starts and freed there when it ends, so the pool (whose release threshold keeps its
//! memory) serves repeated executions without a driver allocation and the memory is shared
//! with every other user of the pool between executions; elsewhere (and for arenas in other
//! memory spaces) the arenas are allocated once per pooled execution state and kept with it.
//! Which path a backend's devices take is logged once per process. The per-execution
//! allocation itself is the execution state's (`state.rs`).
//!
//! [`Capabilities::stream_ordered_alloc`]: crate::backend::Capabilities::stream_ordered_alloc

use super::config::ExecutorConfig;
use super::temps::TempArena;
use crate::backend::Device;
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
