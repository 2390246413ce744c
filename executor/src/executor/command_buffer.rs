//! Command buffers in a [`Run`]: a body recorded once per pooled state as a backend graph,
//! replayed while the addresses it was recorded with stay the same, re-recorded (updating the
//! previous graph where the backend can) when one changes, and run step by step where the
//! backend cannot record.

use super::plan::Step;
use super::run::Run;
use super::state::ExecState;
use crate::backend::{DevicePtr, Graph, Stream};
use crate::error::{Error, Result};
use std::sync::Arc;

/// A command buffer's recording in one pooled state.
pub(super) struct Recording {
    /// The addresses of the bound allocations when it was recorded.
    addresses: Vec<DevicePtr>,
    /// `None` when the backend cannot record (the body then runs directly).
    graph: Option<Arc<dyn Graph>>,
    /// Memory the graph refers to (trip counters of device loops).
    _kept: Vec<crate::backend::Buffer>,
}

impl Run<'_> {
    /// Runs command buffer `id` (its `body` bound to the allocations `bindings`) on `stream`.
    pub(super) fn command_buffer(
        &self,
        id: usize,
        body: &[Step],
        bindings: &[u32],
        stream: &dyn Stream,
        state: &mut ExecState,
    ) -> Result<()> {
        let addresses: Vec<DevicePtr> = bindings.iter().map(|a| self.table[*a as usize]).collect();
        let reuse = state
            .recordings
            .get(&id)
            .is_some_and(|r| r.addresses == addresses);
        let rerecorded = !reuse && state.recordings.contains_key(&id);
        if !reuse {
            // The graph recorded for earlier addresses, if any: the backend may update
            // it in place instead of building a new one.
            let previous = state.recordings.get(&id).and_then(|r| r.graph.clone());
            self.prepare_trip_counters(body)?;
            self.conditional_nodes.set(0);
            let graph = match stream.begin_capture() {
                Ok(()) => {
                    let was = self.capturing.replace(true);
                    let issued = self.steps(body, stream, state);
                    self.capturing.set(was);
                    // Only a complete recording may update the previous graph.
                    let captured = match &issued {
                        Ok(_) => stream.end_capture_reusing(previous.as_ref()),
                        Err(_) => stream.end_capture(),
                    };
                    match issued.and(captured) {
                        Ok(g) => {
                            super::device_control::note_recorded(self.conditional_nodes.get());
                            Some(g)
                        }
                        // Captured work never ran: fall back to running the body
                        // directly (now and on later executions of this state); a
                        // real error shows up again there, with its thunk.
                        Err(e) if super::device_control::is_unsupported(&e) => {
                            super::device_control::note_fallback(
                                self.exe.device.backend_name(),
                                &e,
                            );
                            None
                        }
                        Err(e) => {
                            tracing::warn!(
                                command_buffer = id,
                                "recording failed, running the body directly: {e}"
                            );
                            None
                        }
                    }
                }
                Err(Error::Unsupported { .. }) => None,
                Err(e) => return Err(e),
            };
            tracing::debug!(
                command_buffer = id,
                nodes = graph.as_ref().map(|g| g.node_count()),
                "recorded command buffer"
            );
            let kept = std::mem::take(&mut *self.kept.borrow_mut());
            state.recordings.insert(
                id,
                Recording {
                    addresses,
                    graph,
                    _kept: kept,
                },
            );
        }
        let graph = state.recordings.get(&id).and_then(|r| r.graph.clone());
        if let Some(t) = &self.trace {
            use crate::trace::CommandBufferNote as N;
            t.note_command_buffer(match (&graph, reuse, rerecorded) {
                (None, _, _) => N::Direct,
                (Some(_), true, _) => N::Replayed,
                (Some(_), false, true) => N::Updated,
                (Some(_), false, false) => N::Recorded,
            });
        }
        match graph {
            Some(g) => stream.launch_graph(&g),
            // No graph support: run the body directly.
            None => self.steps(body, stream, state),
        }
    }
}
