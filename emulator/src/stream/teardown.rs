//! Context teardown: reporting and destroying the streams, events, graphs, modules and BLAS
//! handles a destroyed context still owns.

use super::{EVENTS, EXECS, GRAPHS, STREAMS, destroy_stream};
use crate::blas::BLAS_HANDLES;
use crate::diag::{self, Kind};
use crate::launch::MODULES;

/// Reports the streams, events, graphs, modules and BLAS handles `ctx` still owns.
pub fn report_context_leaks(ctx: u64, call: &str, what: &str) {
    let counts = [
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
        (
            MODULES.handles_where(|m| m.ctx_id == ctx).len(),
            "module(s)",
        ),
        (
            BLAS_HANDLES.handles_where(|b| b.ctx_id == ctx).len(),
            "BLAS handle(s)",
        ),
    ];
    let leaked: Vec<String> = counts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, kind)| format!("{n} {kind}"))
        .collect();
    if !leaked.is_empty() {
        diag::record(
            Kind::Leak,
            call,
            format!("{} still live when {what} was destroyed", leaked.join(", ")),
        );
    }
}

/// Destroys every object of `ctx` (their handles become "destroyed").
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
    crate::launch::destroy_context_modules(ctx);
    for h in BLAS_HANDLES.handles_where(|b| b.ctx_id == ctx) {
        let _ = BLAS_HANDLES.remove(h, CALL);
    }
}
