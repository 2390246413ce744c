//! The stream-level traits: [`Stream`] (an in-order queue of device work: copies, memsets,
//! launches, gemms, events, host work, capture into graphs, conditional nodes,
//! stream-ordered allocation), [`Graph`] (a recorded, replayable sequence) and [`Event`]; with
//! [`HostWork`]. `mod.rs` re-exports them beside the [`Device`](super::Device) that creates
//! them.

use super::conditional::{ConditionHandle, ConditionalKind, SetCondition};
use super::types::{Buffer, DevicePtr, GemmLaunch, KernelHandle, LaunchArg, LaunchDims};
use crate::error::Result;
use crate::ir::MemsetPattern;
use std::any::Any;
use std::sync::Arc;

/// Host work queued on a stream ([`Stream::enqueue_host`]): `Fn`, so that replays run it again.
pub type HostWork = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// An in-order queue of device work. Work on different streams may run concurrently; order
/// across streams comes only from events.
pub trait Stream: Send + Sync {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()>;
    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()>;
    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()>;
    fn gemm(&self, gemm: &GemmLaunch) -> Result<()>;
    /// Records `event` at the current end of this stream.
    fn record(&self, event: &dyn Event) -> Result<()>;
    /// Makes later work on this stream wait for the last record of `event`.
    fn wait(&self, event: &dyn Event) -> Result<()>;
    /// Blocks until all queued work finished; returns the first error of that work.
    fn synchronize(&self) -> Result<()>;
    /// True when all queued work finished (an error of that work is returned).
    fn query(&self) -> Result<bool>;
    /// The native stream handle (`CUstream`, `hipStream_t`) as an integer, for vendor
    /// libraries that take one (BLAS, NCCL/RCCL); `None` on the host.
    fn native_handle(&self) -> Option<usize> {
        None
    }
    /// Runs `f` on the host in this stream's order (after the work queued before it, before
    /// the work queued after), and records it when the stream is capturing, so that a replay
    /// runs it again. An error it returns is the stream's error. The host backend supports it;
    /// others return `Unsupported` by default.
    fn enqueue_host(&self, f: HostWork) -> Result<()> {
        let _ = f;
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "host work in stream order".into(),
        })
    }
    /// A hint: when on, the backend may run work in the issuing thread whenever nothing is
    /// queued on the stream, instead of handing it to the stream's own queue. The host backend
    /// does (it removes a thread hand-off per operation); GPU backends ignore it. Order and
    /// results are the same either way; the issuing call just returns after the work.
    fn set_immediate(&self, on: bool) {
        let _ = on;
    }
    /// A hint: the instant after which the issuer must not be kept waiting. A backend that
    /// blocks the issuing thread while the stream's queue is full (back-pressure, as the host
    /// backend does) stops blocking then, so that the caller can fail its deadline. `None`
    /// clears it. Ignored by default.
    fn set_issue_deadline(&self, at: Option<std::time::Instant>) {
        let _ = at;
    }
    /// Starts recording: work issued until [`Stream::end_capture`] is recorded into a graph
    /// instead of running. Backends without graphs return `Unsupported`.
    fn begin_capture(&self) -> Result<()> {
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "graph capture".into(),
        })
    }
    /// Ends recording and returns the graph.
    fn end_capture(&self) -> Result<Arc<dyn Graph>> {
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "graph capture".into(),
        })
    }
    /// Ends recording like [`Stream::end_capture`], given the graph an earlier recording of
    /// the same work produced (`previous`, when there is one). A backend may update that
    /// graph's executable form in place from the new recording instead of building a new one
    /// (CUDA's `cuGraphExecUpdate`), and must fall back to a fresh graph when it cannot.
    /// After an in-place update the two graphs share that executable form, so `previous`
    /// then runs the new recording too: callers pass the graph they are replacing. Either
    /// graph stays valid however long the other lives. The default ignores `previous`.
    fn end_capture_reusing(&self, previous: Option<&Arc<dyn Graph>>) -> Result<Arc<dyn Graph>> {
        let _ = previous;
        self.end_capture()
    }
    /// While capturing: a new condition for conditional nodes of the graph being recorded
    /// (see [`ConditionHandle`]). `Unsupported` where the backend has no conditional nodes.
    fn create_condition(&self) -> Result<ConditionHandle> {
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "conditional graph nodes".into(),
        })
    }
    /// While capturing: records work that sets `condition` on the device, as `how` says.
    fn set_condition(&self, condition: ConditionHandle, how: SetCondition) -> Result<()> {
        let _ = (condition, how);
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "conditional graph nodes".into(),
        })
    }
    /// While capturing: records a conditional node of `kind` reading `condition`, its body
    /// recorded by `body` on the stream it is given.
    fn capture_conditional(
        &self,
        kind: ConditionalKind,
        condition: ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        let _ = (kind, condition, body);
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "conditional graph nodes".into(),
        })
    }
    /// Allocates `size` bytes of device memory (0 is allowed), aligned to at least
    /// `alignment`, in this stream's order from the device's memory pool (where
    /// [`Capabilities::stream_ordered_alloc`](super::Capabilities::stream_ordered_alloc);
    /// `Unsupported` by default). Work queued on this stream after the call may use it; work
    /// on another stream, after waiting for an event recorded here after the call. Dropping
    /// the buffer frees it in this stream's order: work queued on this stream before the drop
    /// still runs on it, and work of other streams that uses it must be ordered before the
    /// drop by the caller. The pool keeps freed memory for later allocations (its release
    /// threshold is the largest), so a repeated allocation of a size it has held makes no
    /// call to the driver's allocator. Not while capturing.
    fn allocate_ordered(&self, size: u64, alignment: u64) -> Result<Buffer> {
        let _ = (size, alignment);
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "stream-ordered allocation".into(),
        })
    }
    /// Runs a recorded graph on this stream, in order with the stream's other work.
    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        let _ = graph;
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "graph launch".into(),
        })
    }
    fn as_any(&self) -> &dyn Any;
}

/// A recorded, replayable sequence of stream work (a CUDA/HIP graph; a pre-resolved list of
/// operations on the host). It keeps the memory it refers to alive on the host backend; GPU
/// backends require the executor to re-record when addresses change.
pub trait Graph: Send + Sync {
    fn node_count(&self) -> usize;
    fn as_any(&self) -> &dyn Any;
}

/// A marker in a stream.
pub trait Event: Send + Sync {
    /// Blocks until the last record completed.
    fn synchronize(&self) -> Result<()>;
    fn query(&self) -> Result<bool>;
    /// The time from the completion of `start`'s last record to that of this event's (both
    /// from [`Device::create_timing_event`](super::Device::create_timing_event), both
    /// completed). `Unsupported` by default.
    /// The host instant the last record completed at, when the backend knows it exactly (the
    /// host backend's timing events); `None` by default. Traces anchor device times on it.
    fn completed_at(&self) -> Option<std::time::Instant> {
        None
    }
    fn elapsed_since(&self, start: &dyn Event) -> Result<std::time::Duration> {
        let _ = start;
        Err(crate::Error::Unsupported {
            backend: "this backend".into(),
            feature: "event timing".into(),
        })
    }
    fn as_any(&self) -> &dyn Any;
}
