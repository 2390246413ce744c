//! A stream: its queue, its worker thread and the strict-mode release marks; queuing with the
//! legacy default stream's ordering rules, and the synchronizing calls on one stream.

use super::graph_table::discard_capture;
use super::op::{Op, Waitable, Work};
use super::record::{Capture, CaptureSlot, check_capture_rules};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

pub static STREAMS: Table<StreamCore> = Table::new(HandleKind::Stream);

/// What a stream needs of the context that owns it (`context::Ctx`): its legacy stream and
/// user streams (for the legacy-stream ordering) and its sticky error.
pub trait Owner: Send + Sync {
    /// The context's id.
    fn id(&self) -> u64;
    /// The legacy default stream.
    fn legacy(&self) -> &Arc<StreamCore>;
    /// Live user streams.
    fn user_streams(&self) -> Vec<Arc<StreamCore>>;
    /// Adds a user stream made in the context.
    fn add_stream(&self, s: &Arc<StreamCore>);
    /// Records the context's first asynchronous error.
    fn set_sticky(&self, e: &EmuError);
    /// The sticky error, as the error of a synchronizing call.
    fn sticky_error(&self) -> EmuResult<()>;
    /// The owner itself, for the context module to recover its own type.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
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
}

/// A stream.
pub struct StreamCore {
    pub id: u64,
    pub ctx_id: u64,
    pub kind: StreamKind,
    owner: Mutex<Weak<dyn Owner>>,
    /// The handle, for messages (0 for legacy streams).
    pub handle: AtomicUsize,
    state: Mutex<State>,
    cv: Condvar,
    destroyed: AtomicBool,
    /// The capture the stream records into.
    capture: Arc<CaptureSlot>,
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

impl StreamCore {
    /// A new stream with its worker thread.
    pub fn spawn(
        ctx_id: u64,
        kind: StreamKind,
        owner: Weak<dyn Owner>,
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
            owner: Mutex::new(owner),
            handle: AtomicUsize::new(0),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                enqueued: 0,
                done: 0,
                released,
                error: None,
                shutdown: false,
            }),
            cv: Condvar::new(),
            destroyed: AtomicBool::new(false),
            capture: Arc::new(CaptureSlot::default()),
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

    pub fn set_owner(&self, owner: Weak<dyn Owner>) {
        *self.owner.lock() = owner;
    }

    /// The context owning the stream, while it lives (`context::of_stream` gives it as a
    /// context).
    pub fn owner(&self) -> Option<Arc<dyn Owner>> {
        self.owner.lock().upgrade()
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
                // After a failure the stream's work is skipped, but for releases.
                let skip = g.error.is_some() && !matches!(item.op.work, Work::Release(_));
                (item, skip)
            };
            let (item, skip) = item;
            let r = if skip { Ok(()) } else { item.op.run() };
            let mut g = self.state.lock();
            if let Err(e) = r {
                if g.error.is_none() {
                    g.error = Some(e.clone());
                }
                if let Some(c) = self.owner() {
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
        self.capture.get()
    }

    pub(super) fn set_capture(&self, c: Option<Arc<Capture>>) {
        self.capture.set(c);
    }

    /// Where the stream's capture is kept (a capture clears it when it ends).
    pub(super) fn capture_slot(&self) -> &Arc<CaptureSlot> {
        &self.capture
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

impl Waitable for StreamCore {
    fn wait_until(&self, seq: u64) -> EmuResult<()> {
        StreamCore::wait_until(self, seq)
    }
}

/// Creates a user stream in `ctx`; returns its handle.
pub fn create_stream<O: Owner + 'static>(
    ctx: &Arc<O>,
    kind: StreamKind,
    call: &str,
) -> EmuResult<usize> {
    let weak = Arc::downgrade(ctx);
    let owner: Weak<dyn Owner> = weak;
    let s = StreamCore::spawn(ctx.id(), kind, owner, call)?;
    ctx.add_stream(&s);
    let h = STREAMS.insert(s.clone());
    s.handle.store(h, Ordering::SeqCst);
    Ok(h)
}

/// Destroys a user stream handle.
pub fn destroy_stream(handle: usize, call: &str) -> EmuResult<()> {
    let s = STREAMS.remove(handle, call)?;
    if let Some(c) = s.capture() {
        c.invalidate(call, "the capturing stream was destroyed");
        let (nodes, _) = c.end();
        discard_capture(c.graph, !c.to_graph, &nodes, call);
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
    let ctx = stream.owner();
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
            let (enq, done) = ctx.legacy().marks();
            if enq > done {
                stream.push(Op::new(
                    Work::Wait {
                        target: ctx.legacy().clone(),
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
pub fn legacy_barrier(ctx: &dyn Owner, call: &str) -> EmuResult<()> {
    check_capture_rules(call, Code::CaptureUnsupported)?;
    ctx.legacy().wait_all()?;
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
    if s.kind == StreamKind::Legacy
        && let Some(ctx) = s.owner()
    {
        return legacy_barrier(&*ctx, call);
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
