//! Per-execution resources (streams, events, temporaries, scratch, command-buffer
//! recordings), pooled by the [`LoadedExecutable`] so that it can run from many threads at
//! once.

use super::LoadedExecutable;
use super::command_buffer::Recording;
use crate::backend::{Buffer, DevicePtr, Event, Stream};
use crate::error::{Error, Result};
use crate::ir::MemorySpace;
use std::collections::HashMap;
use std::sync::Arc;

/// Per-execution resources, pooled.
pub(super) struct ExecState {
    pub(super) streams: Vec<Arc<dyn Stream>>,
    /// The events of the nodes that record one (by node index).
    pub(super) events: HashMap<usize, Arc<dyn Event>>,
    /// The address of every temp (by allocation index), in `arenas`.
    pub(super) temps: Vec<(u32, DevicePtr)>,
    /// The memory of the [temp plan](super::TempPlan)'s arenas, held while `temps` point
    /// into it.
    _arenas: Vec<Buffer>,
    /// 8 bytes the host reads predicates and branch indices through.
    pub(super) scratch: Buffer,
    /// Command-buffer recordings by command-buffer id.
    pub(super) recordings: HashMap<usize, Recording>,
    /// One event per node, recorded after it when the execution has a deadline.
    pub(super) tracking: Vec<Arc<dyn Event>>,
    /// Timing events before and after each node, for traces with device times.
    pub(super) timing: Vec<[Arc<dyn Event>; 2]>,
    /// The event each execution's device times are measured from.
    pub(super) timing_reference: Option<Arc<dyn Event>>,
}

impl ExecState {
    /// Creates the streams, events, temporaries and scratch one execution of `exe` needs.
    pub(super) fn new(exe: &LoadedExecutable) -> Result<Self> {
        let streams = (0..exe.schedule.streams)
            .map(|_| exe.device.create_stream())
            .collect::<Result<Vec<_>>>()?;
        let mut events = HashMap::new();
        for (i, n) in exe.schedule.nodes.iter().enumerate() {
            if n.record {
                events.insert(i, exe.device.create_event()?);
            }
        }
        let plan = &exe.schedule.temps;
        let arenas = plan
            .arenas
            .iter()
            .map(|a| exe.device.allocate(a.size, a.alignment, a.memory_space))
            .collect::<Result<Vec<_>>>()?;
        let mut temps = vec![];
        for p in &plan.placements {
            let Some(arena) = arenas.get(p.arena) else {
                return Err(Error::InvalidArgument(format!(
                    "internal: temp %{} placed in arena {} of {}",
                    p.allocation,
                    p.arena,
                    arenas.len()
                )));
            };
            temps.push((p.allocation, arena.ptr().offset(p.offset)));
        }
        let space = if exe
            .device
            .capabilities()
            .memory_spaces
            .contains(&MemorySpace::HostPinned)
        {
            MemorySpace::HostPinned
        } else {
            MemorySpace::Device
        };
        let scratch = exe.device.allocate(8, 8, space)?;
        Ok(ExecState {
            streams,
            events,
            temps,
            _arenas: arenas,
            scratch,
            recordings: HashMap::new(),
            tracking: vec![],
            timing: vec![],
            timing_reference: None,
        })
    }
}
