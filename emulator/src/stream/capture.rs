//! Stream capture: a capturing stream records operations as graph nodes; the calls that are
//! illegal during capture invalidate it.
//!
//! A capture has its graph handle from the start (`cuStreamGetCaptureInfo_v2` reports it, so
//! that conditional handles and nodes can be created in it), and may record into an
//! existing empty graph (`cuStreamBeginCaptureToGraph`: a conditional node's body). Graphs
//! are linear here, so a node added to the capturing graph with `cuGraphAddNode` must depend
//! on the capture's current dependencies, and the capture must then be told to depend on it
//! (`cuStreamUpdateCaptureDependencies`) before more work is captured; work captured before
//! that would run unordered with the node on a GPU, and invalidates the capture.

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
    /// A node added with `cuGraphAddNode` that the capture does not depend on yet.
    unjoined: Option<usize>,
    /// The array `cuStreamGetCaptureInfo_v2` hands out (valid while the capture lives).
    deps: Box<[usize; 1]>,
}

/// A stream capture in progress.
pub struct Capture {
    pub id: u64,
    pub mode: u32,
    pub thread: ThreadId,
    pub ctx_id: u64,
    /// The graph being recorded (its handle is live from the start).
    pub graph: usize,
    /// Recording into a graph that existed before (`cuStreamBeginCaptureToGraph`).
    pub to_graph: bool,
    origin: Weak<StreamCore>,
    state: Mutex<CaptureState>,
}

static CAPTURES: Mutex<Vec<Arc<Capture>>> = Mutex::new(Vec::new());
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

impl Capture {
    pub(super) fn add(&self, op: Op) -> EmuResult<()> {
        let mut st = self.state.lock();
        if let Some(n) = st.unjoined {
            drop(st);
            self.invalidate(
                &op.call,
                &format!(
                    "work captured after node {n:#x} was added to the capture graph, without \
                     cuStreamUpdateCaptureDependencies making the capture depend on it (on a \
                     GPU the two would run unordered)"
                ),
            );
            return Ok(());
        }
        if st.invalid.is_none() {
            st.nodes.push(op);
        }
        Ok(())
    }

    /// The handle of the capture's last node (its current dependency in a linear graph).
    fn last_node(&self, st: &CaptureState) -> Option<usize> {
        st.nodes
            .len()
            .checked_sub(1)
            .map(|i| super::node_handle(self.graph, i))
    }

    /// `cuStreamGetCaptureInfo_v2`'s dependencies: a pointer to them and their count.
    pub fn dependencies(&self) -> (*const usize, usize) {
        let mut st = self.state.lock();
        match st.unjoined.or_else(|| self.last_node(&st)) {
            Some(n) => {
                st.deps[0] = n;
                (st.deps.as_ptr(), 1)
            }
            None => (std::ptr::null(), 0),
        }
    }

    /// Appends a node added to the capturing graph by `cuGraphAddNode` after `deps` (which
    /// must be the capture's current dependencies); returns the node's handle. The capture
    /// must be made to depend on it before more work is captured.
    pub fn add_node(&self, op: Op, deps: &[usize], call: &str) -> EmuResult<usize> {
        let mut st = self.state.lock();
        let current: Vec<usize> = st
            .unjoined
            .or_else(|| self.last_node(&st))
            .into_iter()
            .collect();
        if deps != current.as_slice() {
            return Err(crate::error::unsupported(
                call,
                format!(
                    "the emulator's graphs are linear: a node added to a capturing graph must \
                     depend on exactly the capture's current dependencies ({current:x?}), not \
                     {deps:x?}"
                ),
            ));
        }
        if st.invalid.is_some() {
            return Err(EmuError::new(
                Code::CaptureInvalidated,
                Kind::InvalidState,
                call,
                "the capture was invalidated",
            ));
        }
        st.nodes.push(op);
        let h = super::node_handle(self.graph, st.nodes.len() - 1);
        st.unjoined = Some(h);
        Ok(h)
    }

    /// `cuStreamUpdateCaptureDependencies`: `deps` with `set` (else added to the current).
    pub fn update_dependencies(&self, deps: &[usize], set: bool, call: &str) -> EmuResult<()> {
        let mut st = self.state.lock();
        let last = self.last_node(&st);
        let ok = match st.unjoined {
            // The new node is the last one: depending on it orders after everything.
            Some(n) => deps.contains(&n) && deps.iter().all(|d| Some(*d) == last || *d == n),
            // Adding nothing changes nothing; otherwise only the last node can be named
            // (setting no dependencies would unorder the next work: refused unless empty).
            None if deps.is_empty() => !set || last.is_none(),
            None => deps.iter().all(|d| Some(*d) == last),
        };
        if !ok {
            return Err(crate::error::unsupported(
                call,
                format!(
                    "the emulator's graphs are linear: the capture can only be made to depend \
                     on its last node ({last:x?}), not on {deps:x?}"
                ),
            ));
        }
        st.unjoined = None;
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
            if CAPTURES.lock().iter().any(|c| c.graph == h) {
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
    let c = Arc::new(Capture {
        id: NEXT_CAPTURE.fetch_add(1, Ordering::SeqCst),
        mode,
        thread: std::thread::current().id(),
        ctx_id: s.ctx_id,
        graph,
        to_graph: into.is_some(),
        origin: Arc::downgrade(s),
        state: Mutex::new(CaptureState {
            nodes: Vec::new(),
            invalid: None,
            members: Vec::new(),
            ended: false,
            unjoined: None,
            deps: Box::new([0]),
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
        super::conditional::discard_capture(c.graph, !c.to_graph, &nodes, call);
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

/// The live capture recording into `graph`, if any.
pub fn capture_into(graph: usize) -> Option<Arc<Capture>> {
    CAPTURES.lock().iter().find(|c| c.graph == graph).cloned()
}

/// `CU_STREAM_CAPTURE_STATUS_*` of a stream.
pub fn capture_status(s: &Arc<StreamCore>) -> (u32, u64) {
    match s.capture() {
        None => (0, 0),
        Some(c) if c.is_invalid() => (2, c.id),
        Some(c) => (1, c.id),
    }
}
