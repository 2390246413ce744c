//! Host streams and events: each stream is a worker thread running its queue in order, so
//! different streams run concurrently, exactly as GPU streams do. A stream's queue is
//! bounded ([`QUEUE_LIMIT`]): an issuer that gets that far ahead of the worker waits for it
//! (until its [issue deadline](crate::backend::Stream::set_issue_deadline), if it has one),
//! as a GPU's full launch queue blocks the host.

use super::conditional::{self, Recorder};
use super::memory::{MemoryRegistry, Region, RegionCache};
use super::module::HostKernelHandle;
use crate::backend::DevicePtr;
use crate::backend::{Event, GemmLaunch, KernelHandle, LaunchArg, LaunchDims, Stream};
use crate::error::{Error, Result};
use crate::ir::MemsetPattern;
use crate::kernels::HostArg;
use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

/// A unit of queued work (the backend's [`HostWork`](crate::backend::HostWork)). `Fn` rather
/// than `FnOnce` so that captured work can be replayed.
type Work = crate::backend::HostWork;

/// Kernel arguments with raw pointers, moved into a queued closure.
struct SendArgs(SmallVec<[HostArg; 8]>);
// SAFETY: the pointers refer to regions that the same closure keeps alive; the stream's order
// gives the work exclusive access to the bytes it writes, as on a GPU stream.
unsafe impl Send for SendArgs {}
// SAFETY: as above; the closure only reads the argument list.
unsafe impl Sync for SendArgs {}

/// A captured sequence of work, replayed as one queued operation.
pub struct HostGraph {
    ops: Arc<Vec<Work>>,
}

impl crate::backend::Graph for HostGraph {
    fn node_count(&self) -> usize {
        self.ops.len()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

enum Op {
    /// Device work: skipped once the stream has a pending error.
    Work(Work),
    /// Synchronization (event records and waits): always runs, so that other streams waiting
    /// on this one never hang because of an error here.
    Control(Box<dyn FnOnce() + Send>),
}

#[derive(Default)]
struct Progress {
    done: Mutex<u64>,
    cv: Condvar,
    error: Mutex<Option<Error>>,
    /// True while `error` holds an error (checked without the lock on the fast path).
    failed: std::sync::atomic::AtomicBool,
}

impl Progress {
    /// Keeps the first error of the stream's work.
    fn set_error(&self, e: Error) {
        let mut g = self.error.lock();
        if g.is_none() {
            *g = Some(e);
            self.failed.store(true, Ordering::SeqCst);
        }
    }
}

/// Operations a stream holds queued before its issuer waits for the worker to catch up.
pub(crate) const QUEUE_LIMIT: u64 = 4096;

/// A host stream.
pub struct HostStream {
    tx: Option<crossbeam_channel::Sender<Op>>,
    issued: AtomicU64,
    progress: Arc<Progress>,
    worker: Option<JoinHandle<()>>,
    memory: Arc<MemoryRegistry>,
    id: u64,
    capture: Mutex<Option<Vec<Work>>>,
    /// The conditions of the graph being recorded (see `super::conditional`).
    conditions: Mutex<Vec<Arc<std::sync::atomic::AtomicU32>>>,
    /// Run work in the issuing thread when nothing is queued (see `Stream::set_immediate`).
    immediate: std::sync::atomic::AtomicBool,
    capturing: std::sync::atomic::AtomicBool,
    cache: Mutex<RegionCache>,
    /// When a full queue stops blocking the issuer (see `Stream::set_issue_deadline`).
    issue_deadline: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for HostStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStream")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl HostStream {
    pub(crate) fn new(memory: Arc<MemoryRegistry>, id: u64) -> Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<Op>();
        let progress = Arc::new(Progress::default());
        let p = progress.clone();
        let worker = std::thread::Builder::new()
            .name(format!("xthunk-host-stream-{id}"))
            .spawn(move || {
                while let Ok(op) = rx.recv() {
                    match op {
                        Op::Work(w) => {
                            let failed = p.failed.load(Ordering::SeqCst);
                            if !failed && let Err(e) = w() {
                                p.set_error(e);
                            }
                        }
                        Op::Control(c) => c(),
                    }
                    let mut d = p.done.lock();
                    *d += 1;
                    p.cv.notify_all();
                }
            })
            .map_err(|e| Error::backend("host", "spawn stream thread", e.to_string()))?;
        Ok(HostStream {
            tx: Some(tx),
            issued: AtomicU64::new(0),
            progress,
            worker: Some(worker),
            memory,
            id,
            capture: Mutex::new(None),
            conditions: Mutex::new(vec![]),
            immediate: std::sync::atomic::AtomicBool::new(false),
            capturing: std::sync::atomic::AtomicBool::new(false),
            cache: Mutex::new(RegionCache::default()),
            issue_deadline: Mutex::new(None),
        })
    }

    fn push(&self, op: Op) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Err(Error::backend("host", "stream", "stream is closed"));
        };
        self.throttle();
        self.issued.fetch_add(1, Ordering::SeqCst);
        tx.send(op)
            .map_err(|_| Error::backend("host", "stream", "stream worker has exited"))
    }

    /// Waits while [`QUEUE_LIMIT`] operations are queued, until the worker has run one of
    /// them or the issue deadline passed (then the caller queues anyway and finds the
    /// deadline passed itself).
    fn throttle(&self) {
        let issued = self.issued.load(Ordering::SeqCst);
        if issued < QUEUE_LIMIT {
            return;
        }
        let mut done = self.progress.done.lock();
        if issued.saturating_sub(*done) < QUEUE_LIMIT {
            return;
        }
        let deadline = *self.issue_deadline.lock();
        while issued.saturating_sub(*done) >= QUEUE_LIMIT {
            match deadline {
                Some(at) => {
                    if self.progress.cv.wait_until(&mut done, at).timed_out() {
                        return;
                    }
                }
                None => self.progress.cv.wait(&mut done),
            }
        }
    }

    fn work(&self, f: impl Fn() -> Result<()> + Send + Sync + 'static) -> Result<()> {
        if self.capturing.load(Ordering::SeqCst) {
            let mut cap = self.capture.lock();
            if let Some(list) = cap.as_mut() {
                list.push(Arc::new(f));
                return Ok(());
            }
        }
        if self.immediate.load(Ordering::Relaxed) && self.run_inline(&f) {
            return Ok(());
        }
        self.push(Op::Work(Arc::new(f)))
    }

    /// A launch of a source kernel through the CPU execution: the buffers checked against
    /// live allocations (kept alive until the kernel ran), the arguments against the
    /// kernel's declared parameters, then queued in stream order like any kernel.
    fn launch_cpu(
        &self,
        k: &super::module::CpuKernelHandle,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        let mut regions: SmallVec<[Region; 6]> = SmallVec::new();
        let mut host_args: SmallVec<[HostArg; 8]> = SmallVec::new();
        {
            let mut cache = self.cache.lock();
            for a in args {
                match *a {
                    LaunchArg::Buffer { ptr, len } => {
                        let r = self.memory.region_cached(&mut cache, ptr, len)?;
                        host_args.push(HostArg::Buffer {
                            ptr: r.ptr(),
                            len: r.len(),
                        });
                        regions.push(r);
                    }
                    LaunchArg::Scalar(s) => host_args.push(HostArg::Scalar(s)),
                }
            }
        }
        let slots =
            super::module::cpu_slots(&k.entry, &host_args).map_err(|message| Error::Kernel {
                kernel: k.entry.name.clone(),
                message,
            })?;
        let shape = crate::host::cpu::Shape {
            grid: [dims.grid.x, dims.grid.y, dims.grid.z],
            block: [dims.block.x, dims.block.y, dims.block.z],
            shared_bytes: dims.shared_mem,
            warp_size: k.warp_size,
        };
        let (program, entry) = (k.program.clone(), k.entry.clone());
        let handle = kernel.clone();
        self.work(move || {
            let _keep_alive = &regions;
            // SAFETY: every pointer slot is a checked region of a live allocation kept alive
            // by `regions` for the whole call; stream order gives this launch exclusive use
            // of the memory it writes, as a GPU stream does. What the kernel does inside
            // its buffers is the kernel's own, as on a GPU.
            unsafe { program.launch(&entry, shape, &slots) }.map_err(|e| Error::Kernel {
                kernel: handle.name().to_string(),
                message: e.to_string(),
            })
        })
    }

    /// The immediate-mode launch: when nothing is queued, checks the arguments and runs the
    /// kernel right here, without building a queued operation. `None` when the stream is busy
    /// (the caller queues the launch instead).
    fn launch_inline(
        &self,
        func: crate::kernels::HostKernelFn,
        kernel: &Arc<dyn KernelHandle>,
        args: &[LaunchArg],
    ) -> Option<Result<()>> {
        let mut done = self.progress.done.lock();
        if *done != self.issued.load(Ordering::SeqCst) {
            return None;
        }
        let mut cache = self.cache.lock();
        cache.pin();
        let mut host_args: SmallVec<[HostArg; 8]> = SmallVec::new();
        for a in args {
            match *a {
                LaunchArg::Buffer { ptr, len } => {
                    match self.memory.resolve_raw(&mut cache, ptr, len) {
                        Ok(p) => host_args.push(HostArg::Buffer {
                            ptr: p,
                            len: len as usize,
                        }),
                        Err(e) => {
                            cache.unpin();
                            return Some(Err(e));
                        }
                    }
                }
                LaunchArg::Scalar(s) => host_args.push(HostArg::Scalar(s)),
            }
        }
        self.issued.fetch_add(1, Ordering::SeqCst);
        if !self.progress.failed.load(Ordering::SeqCst) {
            // SAFETY: every buffer pointer was checked against a live allocation that the
            // pinned cache keeps alive until after the call; nothing is queued on this stream,
            // so the kernel has the stream's exclusive use of the memory it writes.
            let r = unsafe { func(&host_args) };
            if let Err(e) = r {
                self.progress.set_error(Error::Kernel {
                    kernel: kernel.name().to_string(),
                    message: e.to_string(),
                });
            }
        }
        cache.unpin();
        *done += 1;
        self.progress.cv.notify_all();
        Some(Ok(()))
    }

    /// Runs `f` in the calling thread if nothing is queued (so stream order holds); returns
    /// false, without running it, otherwise.
    fn run_inline(&self, f: &dyn Fn() -> Result<()>) -> bool {
        let mut done = self.progress.done.lock();
        if *done != self.issued.load(Ordering::SeqCst) {
            return false;
        }
        if self.progress.failed.load(Ordering::SeqCst) {
            // Work after a failure is skipped, as on the worker.
            self.issued.fetch_add(1, Ordering::SeqCst);
            *done += 1;
            return true;
        }
        // Holding `done` keeps other threads from queueing ahead of this op's bookkeeping;
        // they wait briefly, as they would for a busy GPU stream's submission lock.
        self.issued.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = f() {
            self.progress.set_error(e);
        }
        *done += 1;
        self.progress.cv.notify_all();
        true
    }

    fn not_capturing(&self, what: &str) -> Result<()> {
        if self.capture.lock().is_some() {
            return Err(Error::Unsupported {
                backend: "host".into(),
                feature: format!("{what} during graph capture"),
            });
        }
        Ok(())
    }

    /// Blocks until all work queued so far ran; leaves any error pending.
    pub(crate) fn wait_idle(&self) {
        let target = self.issued.load(Ordering::SeqCst);
        let mut d = self.progress.done.lock();
        while *d < target {
            self.progress.cv.wait(&mut d);
        }
    }

    fn take_error(&self) -> Result<()> {
        let taken = {
            let mut g = self.progress.error.lock();
            self.progress.failed.store(false, Ordering::SeqCst);
            g.take()
        };
        match taken {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region> {
        self.memory.region_cached(&mut self.cache.lock(), ptr, len)
    }
}

impl Recorder for HostStream {
    fn capture_list(&self) -> &Mutex<Option<Vec<Work>>> {
        &self.capture
    }
    fn conditions(&self) -> &Mutex<Vec<Arc<std::sync::atomic::AtomicU32>>> {
        &self.conditions
    }
    fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region> {
        HostStream::region(self, ptr, len)
    }
    fn work(&self, f: impl Fn() -> Result<()> + Send + Sync + 'static) -> Result<()> {
        HostStream::work(self, f)
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

fn host_event(event: &dyn Event) -> Result<&HostEvent> {
    event
        .as_any()
        .downcast_ref::<HostEvent>()
        .ok_or_else(|| Error::InvalidArgument("event does not belong to the host backend".into()))
}

impl Stream for HostStream {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        let s = self.region(src, size)?;
        let d = self.region(dst, size)?;
        self.work(move || {
            // SAFETY: both regions were checked to lie inside live allocations that the
            // regions keep alive; `copy` allows overlap.
            unsafe { std::ptr::copy(s.ptr(), d.ptr(), s.len()) };
            Ok(())
        })
    }

    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        let w = pattern.width();
        if !size.is_multiple_of(w) {
            return Err(Error::InvalidArgument(format!(
                "memset of {size} bytes is not a multiple of the {w}-byte pattern"
            )));
        }
        let d = self.region(dst, size)?;
        self.work(move || {
            // SAFETY: the region was checked to lie inside a live allocation kept alive by it.
            let bytes = unsafe { std::slice::from_raw_parts_mut(d.ptr(), d.len()) };
            match pattern {
                MemsetPattern::U8(v) => bytes.fill(v),
                MemsetPattern::U16(v) => {
                    let p = v.to_le_bytes();
                    bytes
                        .chunks_exact_mut(2)
                        .for_each(|c| c.copy_from_slice(&p));
                }
                MemsetPattern::U32(v) => {
                    let p = v.to_le_bytes();
                    bytes
                        .chunks_exact_mut(4)
                        .for_each(|c| c.copy_from_slice(&p));
                }
            }
            Ok(())
        })
    }

    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        if let Some(k) = kernel
            .as_any()
            .downcast_ref::<super::module::CpuKernelHandle>()
        {
            return self.launch_cpu(k, kernel, dims, args);
        }
        let Some(k) = kernel.as_any().downcast_ref::<HostKernelHandle>() else {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` was not loaded by the host backend",
                kernel.name()
            )));
        };
        let func = k.kernel.func;
        if self.immediate.load(Ordering::Relaxed)
            && !self.capturing.load(Ordering::SeqCst)
            && let Some(r) = self.launch_inline(func, kernel, args)
        {
            return r;
        }
        let handle = kernel.clone();
        let mut regions: SmallVec<[Region; 6]> = SmallVec::new();
        let mut host_args: SmallVec<[HostArg; 8]> = SmallVec::new();
        {
            let mut cache = self.cache.lock();
            for a in args {
                match *a {
                    LaunchArg::Buffer { ptr, len } => {
                        let r = self.memory.region_cached(&mut cache, ptr, len)?;
                        host_args.push(HostArg::Buffer {
                            ptr: r.ptr(),
                            len: r.len(),
                        });
                        regions.push(r);
                    }
                    LaunchArg::Scalar(s) => host_args.push(HostArg::Scalar(s)),
                }
            }
        }
        let host_args = SendArgs(host_args);
        self.work(move || {
            let _keep_alive = &regions;
            let args: &SendArgs = &host_args;
            // SAFETY: every buffer argument is a checked region of a live allocation kept
            // alive by `regions` for the whole call; stream order gives this call exclusive
            // use of the memory it writes, as a GPU stream does.
            unsafe { func(&args.0) }.map_err(|e| Error::Kernel {
                kernel: handle.name().to_string(),
                message: e.to_string(),
            })
        })
    }

    fn gemm(&self, g: &GemmLaunch) -> Result<()> {
        let a = self.region(g.a.ptr, g.a.len)?;
        let b = self.region(g.b.ptr, g.b.len)?;
        let c = self.region(g.c.ptr, g.c.len)?;
        // Host addresses are device addresses: the ranges overlap as the regions do.
        g.check_disjoint()
            .map_err(|e| Error::InvalidArgument(format!("gemm: {e}")))?;
        let g = *g;
        self.work(move || super::gemm::run(&g, &a, &b, &c))
    }

    fn record(&self, event: &dyn Event) -> Result<()> {
        self.not_capturing("event record")?;
        let e = host_event(event)?.state.clone();
        let generation = {
            let mut s = e.state.lock();
            s.recorded += 1;
            s.recorded
        };
        if self.immediate.load(Ordering::Relaxed) {
            // Nothing queued: every earlier operation has finished, so the record completes
            // here (as a queued record would at once; no hand-off to the worker).
            let done = self.progress.done.lock();
            if *done == self.issued.load(Ordering::SeqCst) {
                e.complete(generation);
                return Ok(());
            }
        }
        self.push(Op::Control(Box::new(move || e.complete(generation))))
    }

    fn wait(&self, event: &dyn Event) -> Result<()> {
        self.not_capturing("event wait")?;
        let e = host_event(event)?.state.clone();
        let target = e.state.lock().recorded;
        if e.state.lock().completed >= target {
            return Ok(());
        }
        self.push(Op::Control(Box::new(move || {
            let mut s = e.state.lock();
            while s.completed < target {
                e.cv.wait(&mut s);
            }
        })))
    }

    fn synchronize(&self) -> Result<()> {
        let target = self.issued.load(Ordering::SeqCst);
        let mut d = self.progress.done.lock();
        while *d < target {
            self.progress.cv.wait(&mut d);
        }
        drop(d);
        self.take_error()
    }

    fn query(&self) -> Result<bool> {
        let target = self.issued.load(Ordering::SeqCst);
        let done = *self.progress.done.lock() >= target;
        if done {
            self.take_error()?;
        }
        Ok(done)
    }

    fn enqueue_host(&self, f: crate::backend::HostWork) -> Result<()> {
        self.work(move || f())
    }

    fn set_immediate(&self, on: bool) {
        self.immediate.store(on, Ordering::Relaxed);
    }

    fn set_issue_deadline(&self, at: Option<Instant>) {
        *self.issue_deadline.lock() = at;
    }

    fn begin_capture(&self) -> Result<()> {
        let mut cap = self.capture.lock();
        if cap.is_some() {
            return Err(Error::InvalidArgument("stream is already capturing".into()));
        }
        *cap = Some(vec![]);
        self.conditions.lock().clear();
        self.capturing.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn create_condition(&self) -> Result<crate::backend::ConditionHandle> {
        conditional::create(self)
    }

    fn set_condition(
        &self,
        condition: crate::backend::ConditionHandle,
        how: crate::backend::SetCondition,
    ) -> Result<()> {
        conditional::set(self, condition, how)
    }

    fn capture_conditional(
        &self,
        kind: crate::backend::ConditionalKind,
        condition: crate::backend::ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        conditional::capture(self, kind, condition, body)
    }

    fn end_capture(&self) -> Result<Arc<dyn crate::backend::Graph>> {
        self.capturing.store(false, Ordering::SeqCst);
        match self.capture.lock().take() {
            Some(ops) => Ok(Arc::new(HostGraph { ops: Arc::new(ops) })),
            None => Err(Error::InvalidArgument("stream is not capturing".into())),
        }
    }

    fn launch_graph(&self, graph: &Arc<dyn crate::backend::Graph>) -> Result<()> {
        self.not_capturing("graph launch")?;
        let Some(g) = graph.as_any().downcast_ref::<HostGraph>() else {
            return Err(Error::InvalidArgument(
                "graph does not belong to the host backend".into(),
            ));
        };
        let ops = g.ops.clone();
        // One queued operation replays the whole graph (in the issuing thread in immediate
        // mode when the stream is idle, like any other work).
        self.work(move || {
            for op in ops.iter() {
                op()?;
            }
            Ok(())
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Default, Debug)]
struct EventState {
    recorded: u64,
    completed: u64,
    /// When the last record completed (timing events only).
    completed_at: Option<std::time::Instant>,
}

#[derive(Default, Debug)]
struct EventShared {
    state: Mutex<EventState>,
    cv: Condvar,
    /// Take the time of each completion ([`HostEvent::timing`]).
    timing: bool,
}

impl EventShared {
    /// Record `generation` completed.
    fn complete(&self, generation: u64) {
        let mut s = self.state.lock();
        s.completed = s.completed.max(generation);
        if self.timing {
            s.completed_at = Some(std::time::Instant::now());
        }
        self.cv.notify_all();
    }
}

/// A host event.
#[derive(Default, Debug)]
pub struct HostEvent {
    state: Arc<EventShared>,
}

impl HostEvent {
    /// An event that takes the time its records complete at (on the stream's worker, or in
    /// the issuing thread in immediate mode): the host's stream time.
    pub fn timing() -> Self {
        HostEvent {
            state: Arc::new(EventShared {
                timing: true,
                ..Default::default()
            }),
        }
    }
}

impl Event for HostEvent {
    fn completed_at(&self) -> Option<std::time::Instant> {
        let s = self.state.state.lock();
        if s.completed >= s.recorded {
            s.completed_at
        } else {
            None
        }
    }

    fn elapsed_since(&self, start: &dyn Event) -> Result<std::time::Duration> {
        let at = |e: &HostEvent| {
            let s = e.state.state.lock();
            match (e.state.timing, s.completed >= s.recorded, s.completed_at) {
                (false, _, _) => Err(Error::InvalidArgument(
                    "event timing: an event was created without timing".into(),
                )),
                (true, true, Some(t)) => Ok(t),
                _ => Err(Error::InvalidArgument(
                    "event timing: an event has not completed".into(),
                )),
            }
        };
        let end = at(self)?;
        let begin = at(host_event(start)?)?;
        Ok(end.saturating_duration_since(begin))
    }

    fn synchronize(&self) -> Result<()> {
        let mut s = self.state.state.lock();
        let target = s.recorded;
        while s.completed < target {
            self.state.cv.wait(&mut s);
        }
        Ok(())
    }

    fn query(&self) -> Result<bool> {
        let s = self.state.state.lock();
        Ok(s.completed >= s.recorded)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ir::MemorySpace;
    use std::time::Duration;

    /// A stream whose worker is held until something is sent on the returned channel, and 64
    /// bytes to memset on it.
    fn held_stream() -> (
        Arc<HostStream>,
        DevicePtr,
        crossbeam_channel::Sender<()>,
        Arc<MemoryRegistry>,
    ) {
        let memory = Arc::new(MemoryRegistry::default());
        let a = memory
            .allocate("test", 64, 64, MemorySpace::Device)
            .unwrap();
        let ptr = DevicePtr(a.base() as u64);
        let s = Arc::new(HostStream::new(memory.clone(), 0).unwrap());
        let (open, gate) = crossbeam_channel::bounded::<()>(1);
        s.work(move || {
            let _ = gate.recv();
            Ok(())
        })
        .unwrap();
        (s, ptr, open, memory)
    }

    fn queued(s: &HostStream) -> u64 {
        s.issued.load(Ordering::SeqCst) - *s.progress.done.lock()
    }

    #[test]
    fn a_full_queue_blocks_the_issuer() {
        let (s, ptr, open, _memory) = held_stream();
        let issuer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..QUEUE_LIMIT + 100 {
                    s.memset(ptr, 64, MemsetPattern::U8(1)).unwrap();
                }
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let q = queued(&s);
        assert!(q <= QUEUE_LIMIT, "{q} operations queued");
        assert!(!issuer.is_finished());
        open.send(()).unwrap();
        issuer.join().unwrap();
        s.synchronize().unwrap();
        assert_eq!(queued(&s), 0);
    }

    #[test]
    fn a_full_queue_lets_the_issuer_go_at_its_deadline() {
        let (s, ptr, open, _memory) = held_stream();
        let start = Instant::now();
        s.set_issue_deadline(Some(start + Duration::from_millis(200)));
        for _ in 0..QUEUE_LIMIT + 10 {
            s.memset(ptr, 64, MemsetPattern::U8(1)).unwrap();
        }
        let took = start.elapsed();
        // Blocked until the deadline, not (much) beyond, while the worker is still held.
        assert!(took >= Duration::from_millis(190), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(queued(&s) > QUEUE_LIMIT);
        s.set_issue_deadline(None);
        open.send(()).unwrap();
        s.synchronize().unwrap();
    }
}
