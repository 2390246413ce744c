//! Stream capture: a capturing stream records operations as graph nodes; the calls that are
//! illegal during capture invalidate it.

use super::{GRAPHS, GraphCore, Op, StreamCore, StreamKind};
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

/// `CU_STREAM_CAPTURE_MODE_*`.
pub const CAPTURE_GLOBAL: u32 = 0;
pub const CAPTURE_THREAD_LOCAL: u32 = 1;
pub const CAPTURE_RELAXED: u32 = 2;

struct CaptureState {
    nodes: Vec<Op>,
    invalid: Option<String>,
    members: Vec<Weak<StreamCore>>,
    ended: bool,
}

/// A stream capture in progress.
pub struct Capture {
    pub id: u64,
    pub mode: u32,
    pub thread: ThreadId,
    pub ctx_id: u64,
    origin: Weak<StreamCore>,
    state: Mutex<CaptureState>,
}

static CAPTURES: Mutex<Vec<Arc<Capture>>> = Mutex::new(Vec::new());
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

impl Capture {
    pub(super) fn add(&self, op: Op) -> EmuResult<()> {
        let mut st = self.state.lock();
        if st.invalid.is_none() {
            st.nodes.push(op);
        }
        Ok(())
    }

    /// Marks the capture invalid (ending it will fail).
    pub fn invalidate(&self, call: &str, why: &str) {
        let mut st = self.state.lock();
        if st.invalid.is_none() {
            st.invalid = Some(format!("{call}: {why}"));
            drop(st);
            diag::record(
                Kind::InvalidState,
                call,
                format!("stream capture invalidated: {why}"),
            );
        }
    }

    pub(super) fn join(&self, s: &Arc<StreamCore>) {
        self.state.lock().members.push(Arc::downgrade(s));
    }

    pub(super) fn is_ended(&self) -> bool {
        self.state.lock().ended
    }

    pub fn is_invalid(&self) -> bool {
        self.state.lock().invalid.is_some()
    }

    /// Ends the capture on every member stream; returns the nodes and the invalidation reason.
    pub(super) fn end(&self) -> (Vec<Op>, Option<String>) {
        let (members, nodes, invalid) = {
            let mut st = self.state.lock();
            st.ended = true;
            (
                std::mem::take(&mut st.members),
                std::mem::take(&mut st.nodes),
                st.invalid.clone(),
            )
        };
        for m in members.iter().filter_map(Weak::upgrade) {
            m.set_capture(None);
        }
        if let Some(o) = self.origin.upgrade() {
            o.set_capture(None);
        }
        CAPTURES.lock().retain(|c| c.id != self.id);
        (nodes, invalid)
    }
}

/// Fails (and invalidates the captures concerned) when a capture that forbids "unsafe" calls
/// is active: a global-mode capture on any thread, or a thread-local one on this thread.
pub fn check_capture_rules(call: &str, code: Code) -> EmuResult<()> {
    let me = std::thread::current().id();
    let hit: Vec<Arc<Capture>> = CAPTURES
        .lock()
        .iter()
        .filter(|c| c.mode == CAPTURE_GLOBAL || (c.mode == CAPTURE_THREAD_LOCAL && c.thread == me))
        .cloned()
        .collect();
    if hit.is_empty() {
        return Ok(());
    }
    for c in &hit {
        c.invalidate(call, "a call that is not allowed during stream capture");
    }
    Err(EmuError::new(
        code,
        Kind::InvalidState,
        call,
        "not allowed while a stream is being captured (the capture is invalidated)",
    ))
}

/// `cuStreamBeginCapture`.
pub fn begin_capture(s: &Arc<StreamCore>, mode: u32, call: &str) -> EmuResult<()> {
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
    let c = Arc::new(Capture {
        id: NEXT_CAPTURE.fetch_add(1, Ordering::SeqCst),
        mode,
        thread: std::thread::current().id(),
        ctx_id: s.ctx_id,
        origin: Arc::downgrade(s),
        state: Mutex::new(CaptureState {
            nodes: Vec::new(),
            invalid: None,
            members: Vec::new(),
            ended: false,
        }),
    });
    CAPTURES.lock().push(c.clone());
    s.set_capture(Some(c));
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
    let origin = c.origin.upgrade();
    if !origin.as_ref().is_some_and(|o| Arc::ptr_eq(o, s)) {
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
        return Err(EmuError::new(
            Code::CaptureInvalidated,
            Kind::InvalidState,
            call,
            format!("the capture was invalidated ({why})"),
        ));
    }
    Ok(GRAPHS.insert(Arc::new(GraphCore {
        ctx_id: c.ctx_id,
        nodes,
    })))
}

/// `CU_STREAM_CAPTURE_STATUS_*` of a stream.
pub fn capture_status(s: &Arc<StreamCore>) -> (u32, u64) {
    match s.capture() {
        None => (0, 0),
        Some(c) if c.is_invalid() => (2, c.id),
        Some(c) => (1, c.id),
    }
}
