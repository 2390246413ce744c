//! Context teardown of the stream machinery: counting and destroying the streams, events,
//! graphs and executable graphs a destroyed context still owns.

use super::event::EVENTS;
use super::graph::EXECS;
use super::graph_table::GRAPHS;
use super::queue::{STREAMS, destroy_stream};

/// How many streams, events, graphs and executable graphs context `ctx` still owns, with the
/// leak report's name of each kind.
pub fn context_objects(ctx: u64) -> [(usize, &'static str); 4] {
    [
        (
            STREAMS.handles_where(|s| s.ctx_id == ctx).len(),
            "stream(s)",
        ),
        (EVENTS.handles_where(|e| e.ctx_id == ctx).len(), "event(s)"),
        (GRAPHS.handles_where(|g| g.ctx_id == ctx).len(), "graph(s)"),
        (
            EXECS.handles_where(|g| g.ctx_id == ctx).len(),
            "executable graph(s)",
        ),
    ]
}

/// Destroys every stream, event, graph and executable graph of `ctx` (their handles become
/// "destroyed").
pub fn destroy_context_objects(ctx: u64) {
    const CALL: &str = "context destruction";
    for h in STREAMS.handles_where(|s| s.ctx_id == ctx) {
        let _ = destroy_stream(h, CALL);
    }
    for h in EVENTS.handles_where(|e| e.ctx_id == ctx) {
        let _ = EVENTS.remove(h, CALL);
    }
    for h in GRAPHS.handles_where(|g| g.ctx_id == ctx) {
        let _ = GRAPHS.remove(h, CALL);
    }
    for h in EXECS.handles_where(|g| g.ctx_id == ctx) {
        let _ = EXECS.remove(h, CALL);
    }
}
