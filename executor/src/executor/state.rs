//! Per-execution resources (streams, events, temporaries, scratch, command-buffer
//! recordings), pooled by the [`LoadedExecutable`](super::LoadedExecutable) so that it can
//! run from many threads at once, and each execution's stream-ordered temp arenas
//! ([`OrderedScratch`], on the [`ScratchPath`] that has them).

use super::schedule::Schedule;
use super::scratch::{ScratchPath, is_ordered};
use super::temps::TempPlan;
use crate::backend::{Buffer, Device, DevicePtr, Event, Graph, Stream};
use crate::error::{Error, Result};
use crate::ir::MemorySpace;
use std::collections::HashMap;
use std::sync::Arc;

/// A command buffer's recording in one pooled state.
pub(super) struct Recording {
    /// The addresses of the bound allocations when it was recorded.
    pub(super) addresses: Vec<DevicePtr>,
    /// `None` when the backend cannot record (the body then runs directly).
    pub(super) graph: Option<Arc<dyn Graph>>,
    /// Memory the graph refers to (trip counters of device loops).
    pub(super) _kept: Vec<Buffer>,
}

/// Per-execution resources, pooled.
pub(super) struct ExecState {
    pub(super) streams: Vec<Arc<dyn Stream>>,
    /// The events of the nodes that record one (by node index).
    pub(super) events: HashMap<usize, Arc<dyn Event>>,
    /// The address of every temp (by allocation index) in `arenas`; the temps of
    /// stream-ordered arenas are placed by each execution (see `scratch`).
    pub(super) temps: Vec<(u32, DevicePtr)>,
    /// The memory of the [temp plan](super::TempPlan)'s arenas that are not stream-ordered,
    /// held while `temps` point into it (`None` for the stream-ordered ones and the
    /// collective ones, which the loaded executable holds).
    _arenas: Vec<Option<Buffer>>,
    /// Recorded on the first stream after each execution's stream-ordered arenas are
    /// allocated there, for the other streams to wait for (with several streams).
    pub(super) scratch_ready: Option<Arc<dyn Event>>,
    /// One per stream after the first, recorded at its end and waited for by the first
    /// before the stream-ordered arenas are freed there.
    pub(super) scratch_done: Vec<Arc<dyn Event>>,
    /// 8 bytes the host reads predicates and branch indices through.
    pub(super) scratch: Buffer,
    /// The `ragged_all_to_all` staging buffer (device memory, made at the first call, grown
    /// as needed; see `ragged.rs`).
    pub(super) ragged: Option<Buffer>,
    /// Command-buffer recordings by command-buffer id.
    pub(super) recordings: HashMap<usize, Recording>,
    /// One event per node, recorded after it when the execution has a deadline.
    pub(super) tracking: Vec<Arc<dyn Event>>,
    /// Timing events before and after each node, for traces with device times.
    pub(super) timing: Vec<[Arc<dyn Event>; 2]>,
    /// The event each execution's device times are measured from.
    pub(super) timing_reference: Option<Arc<dyn Event>>,
    /// Per input–output alias, where a donated parameter's bytes are copied when the program
    /// cannot write its output in place (made by the first execution that needs it).
    pub(super) shadows: Vec<Option<Buffer>>,
}

impl ExecState {
    /// Creates the streams, events, temporaries and scratch one execution of `schedule` on
    /// `device` needs, its temp arenas on `path`.
    pub(super) fn new(device: &dyn Device, schedule: &Schedule, path: ScratchPath) -> Result<Self> {
        let streams = (0..schedule.streams)
            .map(|_| device.create_stream())
            .collect::<Result<Vec<_>>>()?;
        let mut events = HashMap::new();
        for (i, n) in schedule.nodes.iter().enumerate() {
            if n.record {
                events.insert(i, device.create_event()?);
            }
        }
        let plan = &schedule.temps;
        let mut arenas = Vec::with_capacity(plan.arenas.len());
        for a in &plan.arenas {
            // Stream-ordered arenas come with each execution, collective ones with the
            // loaded executable (`collective_memory`).
            arenas.push(
                if is_ordered(path, a) || a.memory_space == MemorySpace::Collective {
                    None
                } else {
                    Some(device.allocate(a.size, a.alignment, a.memory_space)?)
                },
            );
        }
        let mut temps = vec![];
        for p in &plan.placements {
            match arenas.get(p.arena) {
                Some(Some(arena)) => temps.push((p.allocation, arena.ptr().offset(p.offset))),
                Some(None) => {}
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "internal: temp %{} placed in arena {} of {}",
                        p.allocation,
                        p.arena,
                        arenas.len()
                    )));
                }
            }
        }
        let ordered = plan.arenas.iter().any(|a| is_ordered(path, a));
        let (scratch_ready, scratch_done) = if ordered && streams.len() > 1 {
            let done = (1..streams.len())
                .map(|_| device.create_event())
                .collect::<Result<Vec<_>>>()?;
            (Some(device.create_event()?), done)
        } else {
            (None, vec![])
        };
        let space = if device
            .capabilities()
            .memory_spaces
            .contains(&MemorySpace::HostPinned)
        {
            MemorySpace::HostPinned
        } else {
            MemorySpace::Device
        };
        let scratch = device.allocate(8, 8, space)?;
        Ok(ExecState {
            streams,
            events,
            temps,
            _arenas: arenas,
            scratch_ready,
            scratch_done,
            scratch,
            ragged: None,
            recordings: HashMap::new(),
            tracking: vec![],
            timing: vec![],
            timing_reference: None,
            shadows: vec![],
        })
    }
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

/// Allocates the stream-ordered arenas of one execution with the temp `plan` under `path` on
/// `state`'s first stream, writes its temps' addresses into `table`, and makes the other
/// streams wait for the allocation.
pub(super) fn allocate_scratch(
    plan: &TempPlan,
    path: ScratchPath,
    state: &ExecState,
    table: &mut [DevicePtr],
) -> Result<OrderedScratch> {
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
