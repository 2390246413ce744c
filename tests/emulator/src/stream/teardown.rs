//! Context teardown: reporting and destroying the streams, events, graphs, modules and BLAS
//! handles a destroyed context still owns.

use super::{EVENTS, EXECS, GRAPHS, STREAMS, destroy_stream};
use crate::diag::{self, Kind};

/// Reports the streams, events, graphs, modules and BLAS handles `ctx` still owns.
pub fn report_context_leaks(ctx: u64, call: &str, what: &str) {
    let mut leaked: Vec<String> = Vec::new();
    let n = STREAMS
        .all()
        .iter()
        .filter(|(_, s)| s.ctx_id == ctx)
        .count();
    if n > 0 {
        leaked.push(format!("{n} stream(s)"));
    }
    let n = EVENTS.all().iter().filter(|(_, e)| e.ctx_id == ctx).count();
    if n > 0 {
        leaked.push(format!("{n} event(s)"));
    }
    let n = GRAPHS.all().iter().filter(|(_, g)| g.ctx_id == ctx).count();
    if n > 0 {
        leaked.push(format!("{n} graph(s)"));
    }
    let n = EXECS.all().iter().filter(|(_, g)| g.ctx_id == ctx).count();
    if n > 0 {
        leaked.push(format!("{n} executable graph(s)"));
    }
    let n = crate::launch::MODULES
        .all()
        .iter()
        .filter(|(_, m)| m.ctx_id == ctx)
        .count();
    if n > 0 {
        leaked.push(format!("{n} module(s)"));
    }
    let n = crate::gemm::BLAS_HANDLES
        .all()
        .iter()
        .filter(|(_, b)| b.ctx_id == ctx)
        .count();
    if n > 0 {
        leaked.push(format!("{n} BLAS handle(s)"));
    }
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
    for (h, s) in STREAMS.all() {
        if s.ctx_id == ctx {
            let _ = destroy_stream(h, CALL);
        }
    }
    for (h, e) in EVENTS.all() {
        if e.ctx_id == ctx {
            let _ = EVENTS.remove(h, CALL);
        }
    }
    for (h, g) in GRAPHS.all() {
        if g.ctx_id == ctx {
            let _ = GRAPHS.remove(h, CALL);
        }
    }
    for (h, g) in EXECS.all() {
        if g.ctx_id == ctx {
            let _ = EXECS.remove(h, CALL);
        }
    }
    crate::launch::destroy_context_modules(ctx);
    for (h, b) in crate::gemm::BLAS_HANDLES.all() {
        if b.ctx_id == ctx {
            let _ = crate::gemm::BLAS_HANDLES.remove(h, CALL);
        }
    }
}
