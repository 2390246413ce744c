//! Command buffers in a [`Run`]: a body recorded once per pooled state as a backend graph,
//! replayed while the addresses it was recorded with stay the same, re-recorded (updating the
//! previous graph where the backend can) when one changes, and run step by step where the
//! backend cannot record.

use super::plan::Step;
use super::run::Run;
use super::state::{ExecState, Recording};
use crate::backend::{DevicePtr, Stream};
use crate::error::{Error, Result};

/// Runs command buffer `id` (its `body` bound to the allocations `bindings`) on `stream`.
pub(super) fn issue(
    run: &Run<'_>,
    id: usize,
    body: &[Step],
    bindings: &[u32],
    stream: &dyn Stream,
    state: &mut ExecState,
) -> Result<()> {
    let addresses: Vec<DevicePtr> = bindings.iter().map(|a| run.table[*a as usize]).collect();
    let reuse = state
        .recordings
        .get(&id)
        .is_some_and(|r| r.addresses == addresses);
    let rerecorded = !reuse && state.recordings.contains_key(&id);
    if !reuse {
        // The graph recorded for earlier addresses, if any: the backend may update
        // it in place instead of building a new one.
        let previous = state.recordings.get(&id).and_then(|r| r.graph.clone());
        super::device_control::prepare_trip_counters(run, body)?;
        run.conditional_nodes.set(0);
        let graph = match stream.begin_capture() {
            Ok(()) => {
                let was = run.capturing.replace(true);
                let issued = run.steps(body, stream, state);
                run.capturing.set(was);
                // Only a complete recording may update the previous graph.
                let captured = match &issued {
                    Ok(_) => stream.end_capture_reusing(previous.as_ref()),
                    Err(_) => stream.end_capture(),
                };
                match issued.and(captured) {
                    Ok(g) => {
                        super::device_control::note_recorded(run.conditional_nodes.get());
                        Some(g)
                    }
                    // Captured work never ran: fall back to running the body
                    // directly (now and on later executions of this state); a
                    // real error shows up again there, with its thunk.
                    Err(e) if super::device_control::is_unsupported(&e) => {
                        super::device_control::note_fallback(run.device.backend_name(), &e);
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
        let kept = std::mem::take(&mut *run.kept.borrow_mut());
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
    if let Some(t) = &run.trace {
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
        None => run.steps(body, stream, state),
    }
}
