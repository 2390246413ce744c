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

use crate::context::Ctx;
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use crate::launch::Launch;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;
use std::time::Instant;

/// The global execution lock: every operation that touches emulated memory holds it.
pub static EXEC: Mutex<()> = Mutex::new(());

pub static STREAMS: Table<StreamCore> = Table::new(HandleKind::Stream);
pub static EVENTS: Table<EventCore> = Table::new(HandleKind::Event);
pub static GRAPHS: Table<GraphCore> = Table::new(HandleKind::Graph);
pub static EXECS: Table<ExecCore> = Table::new(HandleKind::GraphExec);

/// A host callback (`CUhostFn`, `hipHostFn_t`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// A generic operation run by a worker (collectives use it).
pub type HostWork = Arc<dyn Fn(&str) -> EmuResult<()> + Send + Sync>;

/// What an operation does.
#[derive(Clone)]
pub enum Work {
    /// `len` bytes from `src` to `dst`; the `*_checked` sides must lie in live allocations
    /// (the others are host memory the caller vouches for).
    Copy {
        dst: usize,
        src: usize,
        len: usize,
        dst_checked: bool,
        src_checked: bool,
    },
    /// Staged host data (a copy from pageable memory) written to `dst`.
    Upload {
        dst: usize,
        data: Arc<Vec<u8>>,
    },
    /// `count` elements of `width` bytes set to `value`.
    Memset {
        dst: usize,
        width: usize,
        value: u32,
        count: usize,
    },
    Kernel(Arc<Launch>),
    Gemm(Arc<crate::gemm::GemmOp>),
    /// Waits until `target` has run up to `seq` (releasing it in strict mode).
    Wait {
        target: Arc<StreamCore>,
        seq: u64,
    },
    /// Marks an event's time (generation `generation` of its records).
    Stamp {
        event: Arc<EventCore>,
        generation: u64,
    },
    /// An executable graph's nodes.
    Graph(Arc<Vec<Op>>),
    HostFn {
        f: HostFn,
        data: usize,
    },
    Host(HostWork),
}

impl Work {
    /// The CUDA graph node type (`CUgraphNodeType`) of this operation.
    pub fn node_type(&self) -> u32 {
        match self {
            Work::Kernel(_) | Work::Gemm(_) => 0,
            Work::Copy { .. } | Work::Upload { .. } => 1,
            Work::Memset { .. } => 2,
            Work::HostFn { .. } | Work::Host(_) => 3,
            Work::Graph(_) => 4,
            Work::Wait { .. } => 6,
            Work::Stamp { .. } => 7,
        }
    }
}

/// An operation and the call that queued it (for diagnostics).
#[derive(Clone)]
pub struct Op {
    pub work: Work,
    pub call: Arc<str>,
}

impl Op {
    pub fn new(work: Work, call: &str) -> Op {
        Op {
            work,
            call: Arc::from(call),
        }
    }

    /// Runs the operation (on a worker, or on the calling thread for synchronous calls).
    pub fn run(&self) -> EmuResult<()> {
        let call = &*self.call;
        match &self.work {
            Work::Copy {
                dst,
                src,
                len,
                dst_checked,
                src_checked,
            } => {
                let _x = EXEC.lock();
                if *dst_checked {
                    crate::memory::check(*dst, *len, "destination", call, Code::IllegalAddress)?;
                }
                if *src_checked {
                    crate::memory::check(*src, *len, "source", call, Code::IllegalAddress)?;
                }
                if *len > 0 {
                    // SAFETY: the checked sides lie inside live allocations of at least `len`
                    // bytes (just verified, under the execution lock, so nothing frees them
                    // meanwhile); unchecked sides are host memory the API contract makes the
                    // caller keep valid until the copy completes. `copy` allows overlap.
                    unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len) };
                }
                Ok(())
            }
            Work::Upload { dst, data } => {
                let _x = EXEC.lock();
                crate::memory::check(*dst, data.len(), "destination", call, Code::IllegalAddress)?;
                // SAFETY: `dst` holds `data.len()` bytes of a live allocation (checked under
                // the lock); `data` is our own staging buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), *dst as *mut u8, data.len())
                };
                Ok(())
            }
            Work::Memset {
                dst,
                width,
                value,
                count,
            } => {
                let _x = EXEC.lock();
                let bytes = width * count;
                crate::memory::check(*dst, bytes, "destination", call, Code::IllegalAddress)?;
                let p = *dst as *mut u8;
                // SAFETY: `count` elements of `width` bytes at `dst` lie inside a live
                // allocation (checked under the lock); unaligned writes are used.
                unsafe {
                    match width {
                        1 => std::ptr::write_bytes(p, *value as u8, *count),
                        2 => {
                            for i in 0..*count {
                                std::ptr::write_unaligned(p.add(2 * i).cast::<u16>(), *value as u16)
                            }
                        }
                        _ => {
                            for i in 0..*count {
                                std::ptr::write_unaligned(p.add(4 * i).cast::<u32>(), *value)
                            }
                        }
                    }
                }
                Ok(())
            }
            Work::Kernel(l) => l.execute(),
            Work::Gemm(g) => g.execute(call),
            Work::Wait { target, seq } => {
                // The waited-on stream's own error is reported by its own synchronization.
                let _ = target.wait_until(*seq);
                Ok(())
            }
            Work::Stamp { event, generation } => {
                let mut s = event.state.lock();
                if s.generation == *generation {
                    s.time = Some(Instant::now());
                }
                Ok(())
            }
            Work::Graph(nodes) => {
                for n in nodes.iter() {
                    n.run()?;
                }
                Ok(())
            }
            Work::HostFn { f, data } => {
                // SAFETY: the caller registered `f` with `data` (cuLaunchHostFunc); running it
                // on a worker thread is what the API specifies.
                unsafe { f(*data as *mut c_void) };
                Ok(())
            }
            Work::Host(f) => f(call),
        }
    }
}

/// How a stream orders with the legacy default stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Legacy,
    Blocking,
    NonBlocking,
}

struct Item {
    seq: u64,
    op: Op,
}

struct State {
    queue: VecDeque<Item>,
    /// Sequence number of the last queued operation.
    enqueued: u64,
    /// Every operation up to this one has run.
    done: u64,
    /// The worker may run operations up to this one.
    released: u64,
    error: Option<EmuError>,
    shutdown: bool,
    capture: Option<Arc<Capture>>,
}

/// A stream.
pub struct StreamCore {
    pub id: u64,
    pub ctx_id: u64,
    pub kind: StreamKind,
    ctx: Mutex<Weak<Ctx>>,
    /// The handle, for messages (0 for legacy streams).
    pub handle: AtomicUsize,
    state: Mutex<State>,
    cv: Condvar,
    destroyed: AtomicBool,
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

impl StreamCore {
    /// A new stream with its worker thread.
    pub fn spawn(
        ctx_id: u64,
        kind: StreamKind,
        ctx: Weak<Ctx>,
        call: &str,
    ) -> EmuResult<Arc<StreamCore>> {
        let released = if crate::config::get().strict {
            0
        } else {
            u64::MAX
        };
        let s = Arc::new(StreamCore {
            id: NEXT_STREAM.fetch_add(1, Ordering::SeqCst),
            ctx_id,
            kind,
            ctx: Mutex::new(ctx),
            handle: AtomicUsize::new(0),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                enqueued: 0,
                done: 0,
                released,
                error: None,
                shutdown: false,
                capture: None,
            }),
            cv: Condvar::new(),
            destroyed: AtomicBool::new(false),
        });
        let w = s.clone();
        std::thread::Builder::new()
            .name(format!("xthunk-emu-stream-{}", s.id))
            .spawn(move || w.work_loop())
            .map_err(|e| {
                EmuError::new(
                    Code::OutOfMemory,
                    Kind::InvalidState,
                    call,
                    format!("cannot start the stream's worker thread: {e}"),
                )
            })?;
        Ok(s)
    }

    pub fn set_ctx(&self, ctx: Weak<Ctx>) {
        *self.ctx.lock() = ctx;
    }

    pub fn ctx(&self) -> Option<Arc<Ctx>> {
        self.ctx.lock().upgrade()
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::SeqCst)
    }

    /// A name for messages.
    pub fn label(&self) -> String {
        match self.kind {
            StreamKind::Legacy => "the legacy default stream".to_string(),
            _ => format!("stream {:#x}", self.handle.load(Ordering::SeqCst)),
        }
    }

    fn work_loop(self: Arc<Self>) {
        loop {
            let item = {
                let mut g = self.state.lock();
                loop {
                    if let Some(front) = g.queue.front() {
                        if front.seq <= g.released {
                            break;
                        }
                    } else if g.shutdown {
                        return;
                    }
                    self.cv.wait(&mut g);
                }
                let Some(item) = g.queue.pop_front() else {
                    continue;
                };
                let skip = g.error.is_some();
                (item, skip)
            };
            let (item, skip) = item;
            let r = if skip { Ok(()) } else { item.op.run() };
            let mut g = self.state.lock();
            if let Err(e) = r {
                if g.error.is_none() {
                    g.error = Some(e.clone());
                }
                if let Some(c) = self.ctx() {
                    c.set_sticky(&e);
                }
            }
            g.done = item.seq;
            self.cv.notify_all();
        }
    }

    /// Queues `op` (no ordering with other streams), returning its sequence number.
    fn push(&self, op: Op) -> u64 {
        let mut g = self.state.lock();
        g.enqueued += 1;
        let seq = g.enqueued;
        g.queue.push_back(Item { seq, op });
        self.cv.notify_all();
        seq
    }

    /// The last queued sequence number and the last one run.
    pub fn marks(&self) -> (u64, u64) {
        let g = self.state.lock();
        (g.enqueued, g.done)
    }

    /// The capture this stream is recording into, if any.
    pub fn capture(&self) -> Option<Arc<Capture>> {
        self.state.lock().capture.clone()
    }

    fn set_capture(&self, c: Option<Arc<Capture>>) {
        self.state.lock().capture = c;
    }

    /// Lets the worker run up to `seq` (strict mode) without waiting.
    pub fn release(&self, seq: u64) {
        let mut g = self.state.lock();
        if g.released < seq {
            g.released = seq;
            self.cv.notify_all();
        }
    }

    /// Releases and waits until everything up to `seq` has run; the stream's error if any.
    pub fn wait_until(&self, seq: u64) -> EmuResult<()> {
        let mut g = self.state.lock();
        if g.released < seq {
            g.released = seq;
            self.cv.notify_all();
        }
        while g.done < seq {
            self.cv.wait(&mut g);
        }
        match &g.error {
            Some(e) => Err(EmuError::quiet(e.code, e.message.clone())),
            None => Ok(()),
        }
    }

    /// Waits for everything queued so far.
    pub fn wait_all(&self) -> EmuResult<()> {
        let seq = self.state.lock().enqueued;
        self.wait_until(seq)
    }

    /// `true` when everything queued has run; otherwise releases it (so polling makes
    /// progress) and returns `false`.
    pub fn poll(&self) -> EmuResult<bool> {
        let (enq, done) = self.marks();
        if done >= enq {
            let g = self.state.lock();
            return match &g.error {
                Some(e) => Err(EmuError::quiet(e.code, e.message.clone())),
                None => Ok(true),
            };
        }
        self.release(enq);
        Ok(false)
    }

    /// Destroys the stream: queued work still runs (released now), then the worker exits.
    pub fn shutdown(&self) {
        self.destroyed.store(true, Ordering::SeqCst);
        let mut g = self.state.lock();
        g.released = u64::MAX;
        g.shutdown = true;
        self.cv.notify_all();
    }
}

/// Creates a user stream in `ctx`; returns its handle.
pub fn create_stream(ctx: &Arc<Ctx>, kind: StreamKind, call: &str) -> EmuResult<usize> {
    let s = StreamCore::spawn(ctx.id, kind, Arc::downgrade(ctx), call)?;
    ctx.streams.lock().push(Arc::downgrade(&s));
    let h = STREAMS.insert(s.clone());
    s.handle.store(h, Ordering::SeqCst);
    Ok(h)
}

/// Destroys a user stream handle.
pub fn destroy_stream(handle: usize, call: &str) -> EmuResult<()> {
    let s = STREAMS.remove(handle, call)?;
    if let Some(c) = s.capture() {
        c.invalidate(call, "the capturing stream was destroyed");
        c.end();
    }
    s.shutdown();
    Ok(())
}

/// Queues `op` on `stream` with the legacy-stream ordering rules, or records it when the
/// stream is capturing. Returns the sequence number (0 when captured).
pub fn submit(stream: &Arc<StreamCore>, op: Op) -> EmuResult<u64> {
    if let Some(c) = stream.capture() {
        c.add(op)?;
        return Ok(0);
    }
    let ctx = stream.ctx();
    match (stream.kind, &ctx) {
        (StreamKind::Legacy, Some(ctx)) => {
            check_capture_rules(&op.call, Code::CaptureImplicit)?;
            for s in ctx.user_streams() {
                if s.kind == StreamKind::Blocking {
                    let (enq, done) = s.marks();
                    if enq > done {
                        stream.push(Op::new(
                            Work::Wait {
                                target: s.clone(),
                                seq: enq,
                            },
                            &op.call,
                        ));
                    }
                }
            }
        }
        (StreamKind::Blocking, Some(ctx)) => {
            let (enq, done) = ctx.legacy.marks();
            if enq > done {
                stream.push(Op::new(
                    Work::Wait {
                        target: ctx.legacy.clone(),
                        seq: enq,
                    },
                    &op.call,
                ));
            }
        }
        _ => {}
    }
    Ok(stream.push(op))
}

/// Waits for what a synchronous legacy-stream call orders after: the legacy stream and every
/// blocking stream of the context (not the non-blocking ones).
pub fn legacy_barrier(ctx: &Ctx, call: &str) -> EmuResult<()> {
    check_capture_rules(call, Code::CaptureUnsupported)?;
    ctx.legacy.wait_all()?;
    for s in ctx.user_streams() {
        if s.kind == StreamKind::Blocking {
            s.wait_all()?;
        }
    }
    ctx.sticky_error()
}

/// Synchronizes one stream (`cuStreamSynchronize`), refusing a capturing one.
pub fn synchronize_stream(s: &Arc<StreamCore>, call: &str) -> EmuResult<()> {
    if let Some(c) = s.capture() {
        c.invalidate(call, "synchronizing a capturing stream");
        return Err(EmuError::new(
            Code::CaptureUnsupported,
            Kind::InvalidState,
            call,
            format!("{} is capturing: it cannot be synchronized", s.label()),
        ));
    }
    if s.kind == StreamKind::Legacy {
        if let Some(ctx) = s.ctx() {
            return legacy_barrier(&ctx, call);
        }
    }
    s.wait_all()
}

/// Queries one stream (`cuStreamQuery`): `Ok(true)` when idle.
pub fn query_stream(s: &Arc<StreamCore>, call: &str) -> EmuResult<bool> {
    if let Some(c) = s.capture() {
        c.invalidate(call, "querying a capturing stream");
        return Err(EmuError::new(
            Code::CaptureUnsupported,
            Kind::InvalidState,
            call,
            format!("{} is capturing: it cannot be queried", s.label()),
        ));
    }
    s.poll()
}

// ---- events --------------------------------------------------------------------------------

/// `CU_EVENT_DISABLE_TIMING` / `hipEventDisableTiming`.
pub const EVENT_DISABLE_TIMING: u32 = 2;

pub struct EventState {
    /// The stream and sequence number of the last record.
    rec: Option<(Arc<StreamCore>, u64)>,
    /// The capture the last record happened in.
    captured: Option<Arc<Capture>>,
    generation: u64,
    time: Option<Instant>,
}

pub struct EventCore {
    pub ctx_id: u64,
    pub flags: u32,
    state: Mutex<EventState>,
}

pub fn create_event(ctx: &Ctx, flags: u32) -> usize {
    EVENTS.insert(Arc::new(EventCore {
        ctx_id: ctx.id,
        flags,
        state: Mutex::new(EventState {
            rec: None,
            captured: None,
            generation: 0,
            time: None,
        }),
    }))
}

/// `cuEventRecord`.
pub fn record_event(e: &Arc<EventCore>, s: &Arc<StreamCore>, call: &str) -> EmuResult<()> {
    if let Some(c) = s.capture() {
        let mut st = e.state.lock();
        st.captured = Some(c);
        st.rec = None;
        st.generation += 1;
        return Ok(());
    }
    let generation = {
        let mut st = e.state.lock();
        st.generation += 1;
        st.captured = None;
        st.time = None;
        st.generation
    };
    let seq = submit(
        s,
        Op::new(
            Work::Stamp {
                event: e.clone(),
                generation,
            },
            call,
        ),
    )?;
    e.state.lock().rec = Some((s.clone(), seq));
    Ok(())
}

fn captured_event_error(call: &str) -> EmuError {
    EmuError::new(
        Code::CapturedEvent,
        Kind::InvalidState,
        call,
        "the event was last recorded in a capturing stream",
    )
}

/// `cuEventSynchronize`.
pub fn synchronize_event(e: &Arc<EventCore>, call: &str) -> EmuResult<()> {
    let (rec, captured) = {
        let st = e.state.lock();
        (st.rec.clone(), st.captured.is_some())
    };
    if captured {
        return Err(captured_event_error(call));
    }
    match rec {
        Some((s, seq)) => s.wait_until(seq),
        None => Ok(()),
    }
}

/// `cuEventQuery`: `Ok(true)` when complete (releasing the work otherwise).
pub fn query_event(e: &Arc<EventCore>, call: &str) -> EmuResult<bool> {
    let (rec, captured) = {
        let st = e.state.lock();
        (st.rec.clone(), st.captured.is_some())
    };
    if captured {
        return Err(captured_event_error(call));
    }
    match rec {
        Some((s, seq)) => {
            if s.marks().1 >= seq {
                Ok(true)
            } else {
                s.release(seq);
                Ok(false)
            }
        }
        None => Ok(true),
    }
}

/// `cuStreamWaitEvent`.
pub fn wait_event(s: &Arc<StreamCore>, e: &Arc<EventCore>, call: &str) -> EmuResult<()> {
    let (rec, captured) = {
        let st = e.state.lock();
        (st.rec.clone(), st.captured.clone())
    };
    if let Some(c) = captured {
        match s.capture() {
            Some(mine) if Arc::ptr_eq(&mine, &c) => return Ok(()),
            Some(_) => {
                return Err(EmuError::new(
                    Code::IllegalState,
                    Kind::InvalidState,
                    call,
                    "the stream is capturing into another graph than the event's",
                ));
            }
            None => {
                if c.is_ended() {
                    return Err(captured_event_error(call));
                }
                // Fork: the stream joins the capture.
                c.join(s);
                s.set_capture(Some(c));
                return Ok(());
            }
        }
    }
    let Some((target, seq)) = rec else {
        return Ok(());
    };
    if let Some(c) = s.capture() {
        if Arc::ptr_eq(&target, s) {
            return Ok(());
        }
        c.invalidate(call, "waiting on an event recorded outside the capture");
        return Err(EmuError::new(
            Code::CaptureIsolation,
            Kind::InvalidState,
            call,
            "a capturing stream cannot wait on an event recorded outside the capture",
        ));
    }
    if Arc::ptr_eq(&target, s) {
        return Ok(());
    }
    submit(s, Op::new(Work::Wait { target, seq }, call))?;
    Ok(())
}

/// `cuEventElapsedTime` in milliseconds.
pub fn elapsed(start: &Arc<EventCore>, end: &Arc<EventCore>, call: &str) -> EmuResult<f32> {
    if start.flags & EVENT_DISABLE_TIMING != 0 || end.flags & EVENT_DISABLE_TIMING != 0 {
        return Err(EmuError::new(
            Code::InvalidHandle,
            Kind::InvalidValue,
            call,
            "an event was created with timing disabled",
        ));
    }
    let t = |e: &Arc<EventCore>| -> EmuResult<Instant> {
        let st = e.state.lock();
        if st.rec.is_none() {
            return Err(EmuError::new(
                Code::InvalidHandle,
                Kind::InvalidValue,
                call,
                "an event was never recorded",
            ));
        }
        st.time
            .ok_or_else(|| EmuError::quiet(Code::NotReady, "the event has not completed"))
    };
    let (a, b) = (t(start)?, t(end)?);
    let ms = if b >= a {
        (b - a).as_secs_f64() * 1e3
    } else {
        -((a - b).as_secs_f64() * 1e3)
    };
    Ok(ms as f32)
}

// ---- capture -------------------------------------------------------------------------------

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
    fn add(&self, op: Op) -> EmuResult<()> {
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

    fn join(&self, s: &Arc<StreamCore>) {
        self.state.lock().members.push(Arc::downgrade(s));
    }

    fn is_ended(&self) -> bool {
        self.state.lock().ended
    }

    pub fn is_invalid(&self) -> bool {
        self.state.lock().invalid.is_some()
    }

    /// Ends the capture on every member stream; returns the nodes and the invalidation reason.
    fn end(&self) -> (Vec<Op>, Option<String>) {
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

// ---- graphs --------------------------------------------------------------------------------

/// A captured (or empty) graph.
pub struct GraphCore {
    pub ctx_id: u64,
    pub nodes: Vec<Op>,
}

/// An instantiated graph (its nodes can be replaced by an update).
pub struct ExecCore {
    pub ctx_id: u64,
    pub nodes: Mutex<Arc<Vec<Op>>>,
}

/// The handle of node `i` of the graph `graph`.
pub fn node_handle(graph: usize, i: usize) -> usize {
    ((HandleKind::GraphNode as usize) << 48) | (((graph >> 4) & 0xff_ffff) << 24) | ((i + 1) << 4)
}

/// `cuGraphInstantiate`.
pub fn instantiate(g: &GraphCore) -> usize {
    EXECS.insert(Arc::new(ExecCore {
        ctx_id: g.ctx_id,
        nodes: Mutex::new(Arc::new(g.nodes.clone())),
    }))
}

/// Why an executable graph cannot take another graph's parameters: `(CUgraphExecUpdateResult,
/// index of the node, message)`.
pub fn update_exec(exec: &ExecCore, g: &GraphCore) -> Result<(), (u32, Option<usize>, String)> {
    let mut cur = exec.nodes.lock();
    if cur.len() != g.nodes.len() {
        return Err((
            2,
            None,
            format!(
                "topology changed: {} nodes instead of {}",
                g.nodes.len(),
                cur.len()
            ),
        ));
    }
    for (i, (a, b)) in cur.iter().zip(&g.nodes).enumerate() {
        if a.work.node_type() != b.work.node_type() {
            return Err((3, Some(i), format!("node {i} changed type")));
        }
        if let (Work::Kernel(x), Work::Kernel(y)) = (&a.work, &b.work) {
            if x.name != y.name {
                return Err((
                    4,
                    Some(i),
                    format!("node {i} runs `{}` instead of `{}`", y.name, x.name),
                ));
            }
        }
    }
    *cur = Arc::new(g.nodes.clone());
    Ok(())
}

/// `cuGraphLaunch`.
pub fn launch_graph(exec: &ExecCore, s: &Arc<StreamCore>, call: &str) -> EmuResult<()> {
    let nodes = exec.nodes.lock().clone();
    submit(s, Op::new(Work::Graph(nodes), call))?;
    Ok(())
}

// ---- context teardown ----------------------------------------------------------------------

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
