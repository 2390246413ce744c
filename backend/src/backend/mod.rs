//! The backend traits: what every backend (host, CUDA, ROCm) implements. All traits are
//! object safe: backends are chosen at run time.
//!
//! Pointers crossing this interface are [`DevicePtr`]s: opaque device addresses that only the
//! backend that produced them may dereference. Every backend checks a pointer range against
//! its live allocations before touching it, so a wrong address is an error, not memory
//! corruption.

use crate::error::Result;
use crate::ir::{DType, Gemm, GemmOperand, MemorySpace, MemsetPattern, Module, Scalar};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

pub mod accounting;
pub mod baseline;
mod conditional;
pub mod dylib;
pub mod kernel_cache;
mod limits;
mod registry;
pub mod search;
pub use conditional::{ConditionHandle, ConditionalKind, SetCondition};
pub use limits::{LaunchLimits, check_launch_limits};
pub use registry::{BackendChoice, BackendRegistry, BackendStatus};

/// An address in a device's memory (for the host backend, a host address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Who made a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vendor {
    Host,
    Nvidia,
    Amd,
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Host => "host",
            Vendor::Nvidia => "NVIDIA",
            Vendor::Amd => "AMD",
        })
    }
}

/// What a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub vendor: Vendor,
    /// `sm_90`, `gfx90a`, or the host CPU architecture.
    pub arch: String,
    pub total_memory: u64,
    /// SMs, compute units, or CPU cores.
    pub compute_units: u32,
    /// True for devices of the driver emulator: never to be reported as a GPU result.
    pub emulated: bool,
}

/// What a backend found when probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// Runtime or driver version, and the library paths loaded.
    pub version: String,
    pub devices: Vec<DeviceInfo>,
}

/// What a device can do. Programs needing something absent fail with `Unsupported`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub memory_spaces: Vec<MemorySpace>,
    pub gemm_dtypes: Vec<DType>,
    /// Command buffers map onto native graphs.
    pub supports_graphs: bool,
    /// The warp (wavefront) size: the lanes of a warp in kernels compiled from portable source
    /// (on the host, its CPU execution's: 32, or 64 when asked).
    pub warp_size: u32,
    /// What one kernel launch may ask (from the driver on GPUs; [`LaunchLimits::PORTABLE`]
    /// on the host), checked for every kernel thunk at load ([`check_launch_limits`]).
    pub launch_limits: LaunchLimits,
    /// Device memory can be allocated and freed in stream order from a memory pool that
    /// keeps freed memory for reuse ([`Stream::allocate_ordered`]: `cuMemAllocAsync`,
    /// `hipMallocAsync`), decided from what the driver reports for the device. The executor
    /// takes each execution's temp arenas from it.
    pub stream_ordered_alloc: bool,
}

/// Live bytes per memory space (allocated and not yet freed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub live_bytes: u64,
    pub live_allocations: u64,
    pub per_space: Vec<(MemorySpace, u64)>,
    /// The largest `live_bytes` seen.
    pub peak_bytes: u64,
}

/// An allocation. Dropping it frees the memory (after work already queued on it finished).
pub trait DeviceMemory: Send + Sync + fmt::Debug {
    fn ptr(&self) -> DevicePtr;
    fn size(&self) -> u64;
    fn space(&self) -> MemorySpace;
}

/// An owned allocation.
pub type Buffer = Box<dyn DeviceMemory>;

/// A backend: a way to reach devices of one kind.
pub trait Backend: Send + Sync {
    /// `host`, `cuda`, `rocm`.
    fn name(&self) -> &'static str;
    /// Looks for the backend's libraries and devices: `Unavailable` says why not.
    fn probe(&self) -> Result<BackendInfo>;
    /// Opens a device (a cheap handle to a shared per-process device).
    fn device(&self, ordinal: usize) -> Result<Arc<dyn Device>>;
}

/// A device: memory, streams, events, modules.
pub trait Device: Send + Sync {
    fn backend_name(&self) -> &'static str;
    fn info(&self) -> &DeviceInfo;
    fn capabilities(&self) -> &Capabilities;
    /// Allocates `size` bytes (0 is allowed) aligned to at least `alignment`.
    fn allocate(&self, size: u64, alignment: u64, space: MemorySpace) -> Result<Buffer>;
    fn memory_stats(&self) -> MemoryStats;
    fn create_stream(&self) -> Result<Arc<dyn Stream>>;
    fn create_event(&self) -> Result<Arc<dyn Event>>;
    /// An event that also takes the time it completes at, for [`Event::elapsed_since`]
    /// (traces with device times). `Unsupported` by default.
    fn create_timing_event(&self) -> Result<Arc<dyn Event>> {
        Err(crate::Error::Unsupported {
            backend: self.backend_name().into(),
            feature: "timing events".into(),
        })
    }
    /// Loads a module, picking the best image for this device; the error names what the
    /// module has and what the device needs.
    fn load_module(&self, module: &Module) -> Result<Arc<dyn LoadedModule>>;
    /// Copies device memory to the host, synchronously (after all queued work on it).
    fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()>;
    /// Copies host memory to the device, synchronously.
    fn copy_from_host(&self, src: &[u8], dst: DevicePtr) -> Result<()>;
    /// Waits for all work on all streams of the device.
    fn synchronize(&self) -> Result<()>;
    /// The device's raw vendor baselines for benchmarks ([`baseline::RawBaseline`]), when its
    /// vendor crate provides them (the CUDA and ROCm crates with their `bench` feature). None
    /// by default.
    fn raw_baseline(&self) -> Option<Arc<dyn baseline::RawBaseline>> {
        None
    }
    /// The bytes that can still be allocated on the device now (for the executor's check of
    /// a program's memory at load), when the backend can tell; `None` by default.
    fn available_memory(&self) -> Option<u64> {
        None
    }
}

/// A loaded module.
pub trait LoadedModule: Send + Sync {
    fn name(&self) -> &str;
    /// Which image was loaded, e.g. `cubin(sm_90)`.
    fn image(&self) -> String;
    fn kernel(&self, name: &str) -> Result<Arc<dyn KernelHandle>>;
}

/// A kernel ready to launch.
pub trait KernelHandle: Send + Sync {
    fn name(&self) -> &str;
    fn as_any(&self) -> &dyn Any;
}

/// A kernel argument at launch time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaunchArg {
    /// A pointer into device memory, with the byte length the kernel may touch.
    Buffer {
        ptr: DevicePtr,
        len: u64,
    },
    Scalar(Scalar),
}

/// Launch configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: crate::ir::Dim3,
    pub block: crate::ir::Dim3,
    pub shared_mem: u32,
}

/// `len` bytes of device memory at `ptr`: a gemm operand at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRange {
    pub ptr: DevicePtr,
    pub len: u64,
}

impl GemmOperand for DeviceRange {
    fn start(&self) -> u64 {
        self.ptr.0
    }
    fn bytes(&self) -> u64 {
        self.len
    }
    fn describe(&self) -> String {
        format!("the buffer at {}", self.ptr)
    }
    fn describe_start(&self) -> String {
        format!("address {}", self.ptr)
    }
    fn overlaps(&self, other: &Self) -> bool {
        let (a, b) = (self.ptr.0, other.ptr.0);
        self.len > 0
            && other.len > 0
            && a < b.saturating_add(other.len)
            && b < a.saturating_add(self.len)
    }
}

/// A gemm with resolved operands: the [`crate::ir::GemmThunk`]'s shape over device ranges.
/// Backends check it with [`Gemm::check`] and map it for a column-major BLAS with
/// [`Gemm::column_major`].
pub type GemmLaunch = Gemm<DeviceRange>;

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
    /// [`Capabilities::stream_ordered_alloc`]; `Unsupported` by default). Work queued on this
    /// stream after the call may use it; work on another stream, after waiting for an event
    /// recorded here after the call. Dropping the buffer frees it in this stream's order:
    /// work queued on this stream before the drop still runs on it, and work of other
    /// streams that uses it must be ordered before the drop by the caller. The pool keeps
    /// freed memory for later allocations (its release threshold is the largest), so a
    /// repeated allocation of a size it has held makes no call to the driver's allocator.
    /// Not while capturing.
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
    /// from [`Device::create_timing_event`], both completed). `Unsupported` by default.
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
