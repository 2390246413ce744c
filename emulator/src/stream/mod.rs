//! Streams, events, stream capture and graphs.
//!
//! Every stream (including each context's legacy default stream) is a queue served by its own
//! worker thread. Operations get increasing sequence numbers; a stream has *run* everything up
//! to `done`. In **strict** mode (the default) the worker only runs operations up to the
//! `released` mark, which only moves when something waits: a stream/event/context
//! synchronize, a blocking copy, a query (which releases, then reports "not ready"), or an
//! event wait executed by another stream's worker. So work nobody waits for never runs, and a
//! missing synchronization in the caller reads poisoned memory every time, not just sometimes.
//! Without strict mode, work runs as soon as it is queued.
//!
//! The legacy default stream keeps its synchronizing semantics: work queued on it first waits
//! for all work already queued on the context's blocking streams, and work queued on a
//! blocking stream first waits for the legacy stream's queued work (non-blocking streams do
//! neither).
//!
//! Every operation runs under one global execution lock (kernels, copies, gemms run one at a
//! time), so racy caller code can produce wrong results but never a data race inside the
//! emulator. Each operation re-checks its memory ranges when it runs (a use after free that
//! happened after queuing is caught then) and a failure becomes the stream's and the
//! context's sticky error, returned by every later synchronization.
//!
//! Capture: `BeginCapture` turns a stream into a recorder; operations become graph nodes (a
//! linear list: queue order is a valid topological order). Other streams join a capture by
//! waiting on an event recorded in it. Calls that are illegal during capture (synchronous
//! copies, allocation, synchronization, queries, legacy-stream work) fail with
//! `STREAM_CAPTURE_UNSUPPORTED`/`_IMPLICIT` and invalidate the capture, as in CUDA; ending an
//! invalidated capture fails with `STREAM_CAPTURE_INVALIDATED`.
//!
//! Files, lowest first: `exec` (the execution lock), `condition` (condition handles), `op`
//! (what an operation does and running it; graphs and conditional nodes are operations),
//! `graph_table` (the graph table, destroying a graph tree), `record` (what a capture
//! records, the calls it forbids), `queue` (a stream, its worker, the legacy-stream ordering;
//! the context is an [`Owner`] to it), `event`, `capture` (beginning and ending a capture),
//! `conditional` (making conditions and conditional nodes), `graph` (executable graphs),
//! `teardown` (what a destroyed context still owns); this file re-exports them and resolves
//! stream handles.

mod capture;
mod condition;
pub mod conditional;
mod event;
mod exec;
mod graph;
mod graph_table;
mod op;
mod queue;
mod record;
mod teardown;

pub use capture::{begin_capture, begin_capture_into, capture_of, capture_status, end_capture};
pub use event::{
    EVENT_DISABLE_TIMING, EVENTS, EventCore, EventState, create_event, elapsed, query_event,
    record_event, synchronize_event, wait_event,
};
pub use exec::EXEC;
pub use graph::{EXECS, ExecCore, instantiate, launch_graph, update_exec};
pub use graph_table::GRAPHS;
pub use op::{GraphCore, HostFn, HostWork, Kernel, Op, Stampable, Waitable, Work, node_handle};
pub use queue::{
    Owner, STREAMS, StreamCore, StreamKind, create_stream, destroy_stream, legacy_barrier,
    query_stream, submit, synchronize_stream,
};
pub use record::{
    CAPTURE_GLOBAL, CAPTURE_RELAXED, CAPTURE_THREAD_LOCAL, Capture, CaptureSlot, capture_into,
    check_capture_rules,
};
pub use teardown::{context_objects, destroy_context_objects};

use crate::context::Ctx;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use std::sync::Arc;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` (HIP: `hipStreamPerThread` is 2 too).
pub const STREAM_LEGACY: usize = 1;
pub const STREAM_PER_THREAD: usize = 2;

/// The stream a raw handle names in `ctx`: NULL, `CU_STREAM_LEGACY` and the per-thread
/// default stream are the context's legacy stream (the per-thread stream is treated as the
/// legacy one: stricter ordering, never weaker).
pub fn resolve(ctx: &Arc<Ctx>, handle: usize, call: &str) -> EmuResult<Arc<StreamCore>> {
    if handle == 0 || handle == STREAM_LEGACY || handle == STREAM_PER_THREAD {
        return Ok(ctx.legacy.clone());
    }
    let s = STREAMS.get(handle, call)?;
    if s.ctx_id != ctx.id {
        return Err(EmuError::new(
            Code::InvalidHandle,
            Kind::InvalidHandle,
            call,
            format!("stream {handle:#x} belongs to another context"),
        ));
    }
    Ok(s)
}
