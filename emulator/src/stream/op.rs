//! Stream operations: what a queued (or captured) operation does, and running it under the
//! global execution lock with its memory ranges checked again.

use super::{EXEC, EventCore, StreamCore};
use crate::error::{Code, EmuResult};
use std::ffi::c_void;
use std::sync::Arc;

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
    /// A conditional node (IF, WHILE, SWITCH) and its body graphs.
    Conditional(Arc<super::conditional::Node>),
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
            Work::Conditional(_) => super::conditional::NODE_TYPE,
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
            Work::Graph(nodes) => super::conditional::run_graph(nodes, call),
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
