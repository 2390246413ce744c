//! Stream capture on a stream: beginning it (a new graph, or an existing empty one), ending it
//! into its graph, and what a stream's capture status is. What a capture records, and the
//! calls it forbids, is [`super::record`].

use super::graph_table::{GRAPHS, discard_capture};
use super::op::GraphCore;
use super::queue::{StreamCore, StreamKind};
use super::record::{CAPTURE_RELAXED, Capture, capture_into};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use std::sync::Arc;

/// `cuStreamBeginCapture`.
pub fn begin_capture(s: &Arc<StreamCore>, mode: u32, call: &str) -> EmuResult<()> {
    begin_capture_into(s, mode, None, call)
}

/// `cuStreamBeginCapture` (`into`: None) or `cuStreamBeginCaptureToGraph` (the handle of an
/// empty graph of the stream's context, with no dependencies).
pub fn begin_capture_into(
    s: &Arc<StreamCore>,
    mode: u32,
    into: Option<usize>,
    call: &str,
) -> EmuResult<()> {
    if mode > CAPTURE_RELAXED {
        return Err(crate::error::invalid(call, format!("capture mode {mode}")));
    }
    if s.kind == StreamKind::Legacy {
        return Err(EmuError::new(
            Code::CaptureUnsupported,
            Kind::InvalidState,
            call,
            "the legacy default stream cannot be captured",
        ));
    }
    if s.capture().is_some() {
        return Err(EmuError::new(
            Code::IllegalState,
            Kind::InvalidState,
            call,
            format!("{} is already capturing", s.label()),
        ));
    }
    let graph = match into {
        Some(h) => {
            let g = GRAPHS.get(h, call)?;
            if g.ctx_id != s.ctx_id {
                return Err(crate::error::invalid(
                    call,
                    "the graph belongs to another context than the stream",
                ));
            }
            if !g.nodes.lock().is_empty() {
                return Err(crate::error::unsupported(
                    call,
                    "capturing into a graph that already has nodes (the emulator only \
                     captures into empty graphs)",
                ));
            }
            if capture_into(h).is_some() {
                return Err(EmuError::new(
                    Code::IllegalState,
                    Kind::InvalidState,
                    call,
                    format!("graph {h:#x} is already being captured into"),
                ));
            }
            h
        }
        None => GRAPHS.insert(Arc::new(GraphCore::new(s.ctx_id, None))),
    };
    Capture::start(mode, s.ctx_id, graph, into.is_some(), s.capture_slot());
    Ok(())
}

/// `cuStreamEndCapture`: the new graph's handle.
pub fn end_capture(s: &Arc<StreamCore>, call: &str) -> EmuResult<usize> {
    let Some(c) = s.capture() else {
        return Err(EmuError::new(
            Code::IllegalState,
            Kind::InvalidState,
            call,
            format!("{} is not capturing", s.label()),
        ));
    };
    if !c.begun_on(s.capture_slot()) {
        return Err(EmuError::new(
            Code::CaptureUnmatched,
            Kind::InvalidState,
            call,
            "the capture was not begun on this stream",
        ));
    }
    if c.mode != CAPTURE_RELAXED && c.thread != std::thread::current().id() {
        c.invalidate(call, "ended from another thread");
        return Err(EmuError::new(
            Code::CaptureWrongThread,
            Kind::InvalidState,
            call,
            "a global or thread-local capture must be ended by the thread that began it",
        ));
    }
    let (nodes, invalid) = c.end();
    if let Some(why) = invalid {
        discard_capture(c.graph, !c.to_graph, &nodes, call);
        return Err(EmuError::new(
            Code::CaptureInvalidated,
            Kind::InvalidState,
            call,
            format!("the capture was invalidated ({why})"),
        ));
    }
    let g = GRAPHS.get(c.graph, call)?;
    g.nodes.lock().extend(nodes);
    Ok(c.graph)
}

/// The capture a stream is part of, with its status (`CU_STREAM_CAPTURE_STATUS_*`).
pub fn capture_of(s: &Arc<StreamCore>) -> Option<Arc<Capture>> {
    s.capture()
}

/// `CU_STREAM_CAPTURE_STATUS_*` of a stream.
pub fn capture_status(s: &Arc<StreamCore>) -> (u32, u64) {
    match s.capture() {
        None => (0, 0),
        Some(c) if c.is_invalid() => (2, c.id),
        Some(c) => (1, c.id),
    }
}
