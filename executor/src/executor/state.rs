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
    /// The address of every temp (by allocation index) in `arenas`; the temps of
    /// stream-ordered arenas are placed by each execution (see `scratch`).
    pub(super) temps: Vec<(u32, DevicePtr)>,
    /// The memory of the [temp plan](super::TempPlan)'s arenas that are not stream-ordered,
    /// held while `temps` point into it (`None` for the stream-ordered ones).
    _arenas: Vec<Option<Buffer>>,
    /// Recorded on the first stream after each execution's stream-ordered arenas are
    /// allocated there, for the other streams to wait for (with several streams).
    pub(super) scratch_ready: Option<Arc<dyn Event>>,
    /// One per stream after the first, recorded at its end and waited for by the first
    /// before the stream-ordered arenas are freed there.
    pub(super) scratch_done: Vec<Arc<dyn Event>>,
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
        let path = exe.scratch_path;
        let mut arenas = Vec::with_capacity(plan.arenas.len());
        for a in &plan.arenas {
            arenas.push(if super::scratch::is_ordered(path, a) {
                None
            } else {
                Some(exe.device.allocate(a.size, a.alignment, a.memory_space)?)
            });
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
        let ordered = arenas.iter().any(Option::is_none);
        let (scratch_ready, scratch_done) = if ordered && streams.len() > 1 {
            let done = (1..streams.len())
                .map(|_| exe.device.create_event())
                .collect::<Result<Vec<_>>>()?;
            (Some(exe.device.create_event()?), done)
        } else {
            (None, vec![])
        };
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
            scratch_ready,
            scratch_done,
            scratch,
            recordings: HashMap::new(),
            tracking: vec![],
            timing: vec![],
            timing_reference: None,
        })
    }
}
