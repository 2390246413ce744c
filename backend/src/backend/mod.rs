//! The backend traits: what every backend (host, CUDA, ROCm) implements. All traits are
//! object safe: backends are chosen at run time.
//!
//! Pointers crossing this interface are [`DevicePtr`]s: opaque device addresses that only the
//! backend that produced them may dereference. Every backend checks a pointer range against
//! its live allocations before touching it, so a wrong address is an error, not memory
//! corruption.
//!
//! This file holds the backend- and device-level traits and their data; the stream-level
//! traits are in `stream.rs` and the plain launch data in `types.rs` (a leaf), both
//! re-exported here, so every item is named `backend::X`.

use crate::error::Result;
use crate::ir::{DType, MemorySpace, Module};
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
mod stream;
mod types;
pub use conditional::{ConditionHandle, ConditionalKind, SetCondition};
pub use limits::{LaunchLimits, check_launch_limits};
pub use registry::{BackendChoice, BackendRegistry, BackendStatus};
pub use stream::{Event, Graph, HostWork, Stream};
pub use types::{
    Buffer, DeviceMemory, DevicePtr, DeviceRange, ExternalAllocator, GemmLaunch, KernelHandle,
    LaunchArg, LaunchDims,
};

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
    /// Allocations made since the device was opened (freed ones too): what a loop that
    /// should allocate nothing per step compares.
    pub allocations_made: u64,
}

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
    /// Allocates `size` bytes of `space` with `alloc` (a library's allocator, called with
    /// this device current), registered and checked like the backend's own allocations;
    /// dropping the buffer gives the memory back to `alloc`. `Unsupported` by default (the
    /// host backend: its collective memory is plain memory).
    fn allocate_external(
        &self,
        size: u64,
        alignment: u64,
        space: MemorySpace,
        alloc: std::sync::Arc<dyn ExternalAllocator>,
    ) -> Result<Buffer> {
        let _ = (size, alignment, space);
        Err(crate::Error::Unsupported {
            backend: self.backend_name().into(),
            feature: format!("memory from {}", alloc.name()),
        })
    }
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
