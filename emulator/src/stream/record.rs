//! A stream capture's record: the nodes it recorded, the streams taking part, whether it was
//! invalidated, and the check that invalidates captures when a call that is illegal during
//! capture is made. Starting and ending a capture on a stream is [`super::capture`].
//!
//! A capture has its graph handle from the start (`cuStreamGetCaptureInfo_v2` reports it, so
//! that conditional handles and nodes can be created in it), and may record into an
//! existing empty graph (`cuStreamBeginCaptureToGraph`: a conditional node's body). Graphs
//! are linear here, so a node added to the capturing graph with `cuGraphAddNode` must depend
//! on the capture's current dependencies, and the capture must then be told to depend on it
//! (`cuStreamUpdateCaptureDependencies`) before more work is captured; work captured before
//! that would run unordered with the node on a GPU, and invalidates the capture.

use super::op::{Op, node_handle};
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

/// The capture a stream records into (none while it is not capturing): each stream holds
/// one, and a capture clears its members' when it ends.
#[derive(Default)]
pub struct CaptureSlot(Mutex<Option<Arc<Capture>>>);

impl CaptureSlot {
    /// The capture recorded into, if any.
    pub fn get(&self) -> Option<Arc<Capture>> {
        self.0.lock().clone()
    }

    pub(super) fn set(&self, c: Option<Arc<Capture>>) {
        *self.0.lock() = c;
    }
}

struct CaptureState {
    nodes: Vec<Op>,
    invalid: Option<String>,
    members: Vec<Weak<CaptureSlot>>,
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
    origin: Weak<CaptureSlot>,
    state: Mutex<CaptureState>,
}

static CAPTURES: Mutex<Vec<Arc<Capture>>> = Mutex::new(Vec::new());
static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

impl Capture {
    /// Starts a capture of mode `mode` on this thread, recording into `graph` (`to_graph`: a
    /// graph that existed before) from the stream holding `origin`, which it is set in.
    pub(super) fn start(
        mode: u32,
        ctx_id: u64,
        graph: usize,
        to_graph: bool,
        origin: &Arc<CaptureSlot>,
    ) {
        let c = Arc::new(Capture {
            id: NEXT_CAPTURE.fetch_add(1, Ordering::SeqCst),
            mode,
            thread: std::thread::current().id(),
            ctx_id,
            graph,
            to_graph,
            origin: Arc::downgrade(origin),
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
        origin.set(Some(c));
    }

    /// Whether the capture was begun on the stream holding `slot`.
    pub(super) fn begun_on(&self, slot: &Arc<CaptureSlot>) -> bool {
        self.origin.upgrade().is_some_and(|o| Arc::ptr_eq(&o, slot))
    }

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
            .map(|i| node_handle(self.graph, i))
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
        let h = node_handle(self.graph, st.nodes.len() - 1);
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

    /// Adds the stream holding `slot` to the capture (it is set there by the caller).
    pub(super) fn join(&self, slot: &Arc<CaptureSlot>) {
        self.state.lock().members.push(Arc::downgrade(slot));
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
            m.set(None);
        }
        if let Some(o) = self.origin.upgrade() {
            o.set(None);
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

/// The live capture recording into `graph`, if any.
pub fn capture_into(graph: usize) -> Option<Arc<Capture>> {
    CAPTURES.lock().iter().find(|c| c.graph == graph).cloned()
}
