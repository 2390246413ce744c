//! Stream operations and the graphs made of them: what a queued (or captured) operation does,
//! a graph (a list of operations) and a conditional node with its body graphs, and running
//! them: each operation under the global execution lock with its memory ranges checked again,
//! a graph launch with its own condition values (see [`super::conditional`] for how
//! conditions and conditional nodes are made).
//!
//! Operations name what lies above them (a stream to wait for, an event to stamp, a kernel
//! launch) through the small traits here, so this module names no stream, event or launch.

use super::condition::CONDITIONS;
use super::exec::EXEC;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::HandleKind;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// `CU_GRAPH_NODE_TYPE_CONDITIONAL`.
pub const NODE_TYPE: u32 = 13;
/// `CU_GRAPH_COND_TYPE_IF`, `…_WHILE`, `…_SWITCH`.
pub const COND_IF: u32 = 0;
pub const COND_WHILE: u32 = 1;
pub const COND_SWITCH: u32 = 2;
/// The most trips of one WHILE node in one launch.
pub const MAX_TRIPS: u64 = 1 << 26;

/// A host callback (`CUhostFn`, `hipHostFn_t`).
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// A generic operation run by a worker (collectives use it).
pub type HostWork = Arc<dyn Fn(&str) -> EmuResult<()> + Send + Sync>;

/// A kernel launch ready to run (the launch module's `Launch`, decoded and checked when it
/// was queued): what an operation needs of it.
pub trait Kernel: Send + Sync {
    /// The kernel's name (an exec update compares them).
    fn name(&self) -> &str;
    /// Runs the kernel, re-checking its buffers, under the execution lock.
    fn execute(&self) -> EmuResult<()>;
}

/// A stream whose work an operation can wait for (a `StreamCore`).
pub trait Waitable: Send + Sync {
    /// Releases and waits until everything up to `seq` has run; the stream's error if any.
    fn wait_until(&self, seq: u64) -> EmuResult<()>;
}

/// An event whose time an operation marks (an `EventCore`).
pub trait Stampable: Send + Sync {
    /// Marks the event's time, if `generation` is still its latest record.
    fn stamp(&self, generation: u64);
}

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
    Kernel(Arc<dyn Kernel>),
    Gemm(Arc<crate::gemm::GemmOp>),
    /// Waits until `target` has run up to `seq` (releasing it in strict mode).
    Wait {
        target: Arc<dyn Waitable>,
        seq: u64,
    },
    /// Marks an event's time (generation `generation` of its records).
    Stamp {
        event: Arc<dyn Stampable>,
        generation: u64,
    },
    /// An executable graph's nodes.
    Graph(Arc<Vec<Op>>),
    /// A conditional node (IF, WHILE, SWITCH) and its body graphs.
    Conditional(Arc<Node>),
    HostFn {
        f: HostFn,
        data: usize,
    },
    Host(HostWork),
    /// Bookkeeping that takes effect in stream order even after the stream failed (a
    /// stream-ordered free: the program gave the memory back, whatever its work did).
    Release(HostWork),
}

impl Work {
    /// The CUDA graph node type (`CUgraphNodeType`) of this operation.
    pub fn node_type(&self) -> u32 {
        match self {
            Work::Kernel(_) | Work::Gemm(_) => 0,
            Work::Copy { .. } | Work::Upload { .. } => 1,
            Work::Memset { .. } => 2,
            Work::HostFn { .. } | Work::Host(_) | Work::Release(_) => 3,
            Work::Graph(_) => 4,
            Work::Wait { .. } => 6,
            Work::Stamp { .. } => 7,
            Work::Conditional(_) => NODE_TYPE,
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
                event.stamp(*generation);
                Ok(())
            }
            Work::Graph(nodes) => run_graph(nodes, call),
            Work::Conditional(node) => node.run(call),
            Work::HostFn { f, data } => {
                // SAFETY: the caller registered `f` with `data` (cuLaunchHostFunc); running it
                // on a worker thread is what the API specifies.
                unsafe { f(*data as *mut c_void) };
                Ok(())
            }
            Work::Host(f) | Work::Release(f) => f(call),
        }
    }
}

/// A captured (or empty) graph. Its nodes grow while a capture records into it, or when a
/// conditional node is added to it (see [`super::conditional`]).
pub struct GraphCore {
    pub ctx_id: u64,
    pub nodes: Mutex<Vec<Op>>,
    /// For the body graph of a conditional node: the graph holding that node (body graphs
    /// belong to their node: they cannot be destroyed or instantiated on their own).
    pub parent: Option<usize>,
}

impl GraphCore {
    /// An empty graph of context `ctx_id`.
    pub fn new(ctx_id: u64, parent: Option<usize>) -> GraphCore {
        GraphCore {
            ctx_id,
            nodes: Mutex::new(Vec::new()),
            parent,
        }
    }
}

/// The handle of node `i` of the graph `graph`.
pub fn node_handle(graph: usize, i: usize) -> usize {
    ((HandleKind::GraphNode as usize) << 48) | (((graph >> 4) & 0xff_ffff) << 24) | ((i + 1) << 4)
}

/// A body graph: live while the graph holding the node is being built, frozen in an
/// executable graph.
pub enum Body {
    Live(Arc<GraphCore>),
    Frozen(Arc<Vec<Op>>),
}

/// A conditional node.
pub struct Node {
    pub handle: u64,
    /// `COND_IF`, `COND_WHILE` or `COND_SWITCH`.
    pub kind: u32,
    pub bodies: Vec<Body>,
    /// The body graphs' handles: the CUDA-owned array `phGraph_out` points to (empty once
    /// frozen).
    pub(super) body_handles: Box<[usize]>,
}

/// The operations of a body in an executable graph (frozen; a live body has none there).
pub(super) fn frozen(b: &Body) -> &[Op] {
    match b {
        Body::Frozen(f) => f,
        // Executable graphs hold frozen bodies only.
        Body::Live(_) => &[],
    }
}

thread_local! {
    /// The conditions of the graph launches running on this thread (innermost last): value
    /// by handle, `None` while unset.
    static LAUNCHES: RefCell<Vec<HashMap<u64, Option<u32>>>> = const { RefCell::new(Vec::new()) };
}

fn collect(nodes: &[Op], out: &mut HashMap<u64, Option<u32>>) {
    for op in nodes {
        if let Work::Conditional(n) = &op.work {
            let value = CONDITIONS
                .lock()
                .as_ref()
                .and_then(|m| m.get(&n.handle).cloned())
                .and_then(|c| c.assign_default.then_some(c.default));
            out.insert(n.handle, value);
            for b in &n.bodies {
                collect(frozen(b), out);
            }
        }
    }
}

/// Runs an executable graph's nodes: a launch with its own condition values.
pub fn run_graph(nodes: &[Op], _call: &str) -> EmuResult<()> {
    let mut conds = HashMap::new();
    collect(nodes, &mut conds);
    if conds.is_empty() {
        return run_all(nodes);
    }
    LAUNCHES.with(|l| l.borrow_mut().push(conds));
    let r = run_all(nodes);
    LAUNCHES.with(|l| l.borrow_mut().pop());
    r
}

fn run_all(nodes: &[Op]) -> EmuResult<()> {
    for n in nodes {
        n.run()?;
    }
    Ok(())
}

fn value(handle: u64, call: &str) -> EmuResult<u32> {
    let v = LAUNCHES.with(|l| l.borrow().last().and_then(|m| m.get(&handle).copied()));
    match v {
        Some(Some(v)) => Ok(v),
        _ => Err(EmuError::new(
            Code::LaunchFailed,
            Kind::InvalidState,
            call,
            format!(
                "a conditional node read condition {handle:#x}, which has no default value \
                 and was not set in this launch"
            ),
        )),
    }
}

/// `cudaGraphSetConditional(handle, value)` from a kernel running on this thread: the
/// condition must be one of the graph launch that runs the kernel.
pub fn set(handle: u64, v: u32) -> Result<(), String> {
    LAUNCHES.with(|l| {
        let mut l = l.borrow_mut();
        let Some(top) = l.last_mut() else {
            return Err(format!(
                "cudaGraphSetConditional({handle:#x}) from a kernel that is not part of a graph \
                 launch with conditional nodes"
            ));
        };
        match top.get_mut(&handle) {
            Some(slot) => {
                *slot = Some(v);
                Ok(())
            }
            None => Err(format!(
                "cudaGraphSetConditional({handle:#x}): not a condition of a conditional node of \
                 the graph launch running the kernel"
            )),
        }
    })
}

impl Node {
    /// Runs the node in the current launch.
    pub fn run(&self, call: &str) -> EmuResult<()> {
        match self.kind {
            COND_IF => {
                let v = value(self.handle, call)?;
                if v != 0 {
                    run_all(frozen(&self.bodies[0]))
                } else if let Some(b) = self.bodies.get(1) {
                    run_all(frozen(b))
                } else {
                    Ok(())
                }
            }
            COND_WHILE => {
                let mut trips = 0u64;
                while value(self.handle, call)? != 0 {
                    trips += 1;
                    if trips > MAX_TRIPS {
                        return Err(EmuError::new(
                            Code::LaunchFailed,
                            Kind::InvalidState,
                            call,
                            format!(
                                "a WHILE node ran {MAX_TRIPS} trips without its condition \
                                 becoming 0 (a runaway loop; the emulator stops it)"
                            ),
                        ));
                    }
                    run_all(frozen(&self.bodies[0]))?;
                }
                Ok(())
            }
            _ => {
                let v = value(self.handle, call)? as usize;
                match self.bodies.get(v) {
                    Some(b) => run_all(frozen(b)),
                    None => Ok(()),
                }
            }
        }
    }
}
