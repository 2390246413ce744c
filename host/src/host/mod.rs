//! The host (CPU) backend: the reference every GPU result is compared with.
//!
//! Devices are host memory with per-space accounting (large allocations lazily zeroed
//! mappings, checked against the memory still available); streams are worker threads with
//! bounded queues; kernels are the standard library's host implementations (and any
//! registered host library), and source modules run through the CPU execution of portable
//! kernels ([`cpu`]); gemm runs on a CPU BLAS opened at run time ([`blas`]: OpenBLAS or
//! BLIS) for f32 and f64 (f16/bf16 widened to f32), else on the `gemm` crate. A host backend
//! can expose several devices (for collectives and multi-device tests); they share the
//! machine but not their allocations. Its collectives, in
//! one process ([`HostCliqueProvider`]) and across the processes of one host through shared
//! memory ([`ShmCliqueProvider`]), implement the traits of [`crate::collectives`].

mod available;
mod blas;
#[cfg(test)]
mod blas_tests;
mod collectives;
mod conditional;
pub mod cpu;
mod gemm;
mod memory;
mod module;
mod stream;

pub use available::available as available_memory;
pub use collectives::{
    HostCliqueFactory, HostCliqueProvider, HostCommunicator, ShmCliqueProvider, ShmCommunicator,
    ShmOptions, job_segment_prefix, job_segments, remove_job_segments, remove_pending_segments,
};
pub use memory::HostBuffer;
pub use module::{CpuKernelHandle, CpuModule, HostKernelHandle, HostModule};
pub use stream::{HostEvent, HostStream};

use crate::backend::{
    Backend, BackendInfo, Buffer, Capabilities, Device, DeviceInfo, DevicePtr, Event, LoadedModule,
    MemoryStats, Stream, Vendor,
};
use crate::error::{Error, Result};
use crate::ir::{DType, MemorySpace, Module, ModuleImage};
use crate::kernels::{KernelLibrary, standard_library};
use memory::MemoryRegistry;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// The gemm the host backend runs f32 and f64 gemms on, in one line: the CPU BLAS found
/// (`OpenBLAS 0.3.21 (/usr/lib/…/libopenblas.so.0, 2 threads)`) or the built-in `gemm` crate
/// and why. The search runs (once per process) on first use.
pub fn gemm_library() -> String {
    blas::choice().describe()
}

/// Shared registry of host kernel libraries (besides the standard one).
type Libraries = Arc<RwLock<BTreeMap<String, Arc<KernelLibrary>>>>;

/// The host backend.
pub struct HostBackend {
    num_devices: usize,
    devices: Mutex<Vec<Option<Arc<HostDevice>>>>,
    libraries: Libraries,
    cpu_warp_size: u32,
}

impl HostBackend {
    /// A host backend with one device.
    pub fn new() -> Self {
        Self::with_devices(1)
    }

    /// A host backend exposing `n` devices (at least one).
    pub fn with_devices(n: usize) -> Self {
        let n = n.max(1);
        HostBackend {
            num_devices: n,
            devices: Mutex::new(vec![None; n]),
            libraries: Default::default(),
            cpu_warp_size: 32,
        }
    }

    /// The warp size source kernels run with on the CPU: 32 (the default), or 64 to behave
    /// as an AMD wavefront. Other values are refused.
    pub fn with_cpu_warp_size(mut self, lanes: u32) -> Result<Self> {
        if lanes != 32 && lanes != 64 {
            return Err(Error::InvalidArgument(format!(
                "the CPU warp size is 32 or 64, not {lanes}"
            )));
        }
        self.cpu_warp_size = lanes;
        Ok(self)
    }

    /// Registers a host kernel library, loadable through `ModuleImage::Host { library }`.
    pub fn register_library(&self, library: KernelLibrary) {
        self.libraries
            .write()
            .insert(library.name.clone(), Arc::new(library));
    }

    fn info(ordinal: usize) -> DeviceInfo {
        DeviceInfo {
            ordinal,
            name: format!("host CPU ({})", cpu_model()),
            vendor: Vendor::Host,
            arch: std::env::consts::ARCH.to_string(),
            total_memory: total_memory(),
            compute_units: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            emulated: false,
        }
    }
}

impl Default for HostBackend {
    fn default() -> Self {
        Self::new()
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn probe(&self) -> Result<BackendInfo> {
        Ok(BackendInfo {
            version: format!(
                "xthunk {} host reference backend; gemm: {}",
                env!("CARGO_PKG_VERSION"),
                blas::choice().describe()
            ),
            devices: (0..self.num_devices).map(Self::info).collect(),
        })
    }

    fn device(&self, ordinal: usize) -> Result<Arc<dyn Device>> {
        let mut devs = self.devices.lock();
        let Some(slot) = devs.get_mut(ordinal) else {
            return Err(Error::InvalidArgument(format!(
                "host device {ordinal} does not exist ({} devices)",
                self.num_devices
            )));
        };
        if let Some(d) = slot {
            return Ok(d.clone());
        }
        let d = Arc::new(HostDevice {
            info: Self::info(ordinal),
            caps: Capabilities {
                memory_spaces: MemorySpace::ALL.to_vec(),
                gemm_dtypes: vec![DType::F32, DType::F64, DType::F16, DType::BF16],
                supports_graphs: true,
                // The lanes of a warp of kernels compiled from portable source.
                warp_size: self.cpu_warp_size,
                launch_limits: crate::backend::LaunchLimits::PORTABLE,
                // No memory pool: the executor keeps temp arenas with its pooled state.
                stream_ordered_alloc: false,
            },
            memory: Arc::new(MemoryRegistry::default()),
            streams: Mutex::new(vec![]),
            next_stream: AtomicU64::new(0),
            libraries: self.libraries.clone(),
            cpu_warp_size: self.cpu_warp_size,
        });
        *slot = Some(d.clone());
        Ok(d)
    }
}

impl HostDevice {
    /// Waits until every stream of the device has run its queued work (without consuming
    /// their pending errors, which belong to whoever synchronizes the stream).
    fn wait_idle(&self) {
        let streams: Vec<Arc<HostStream>> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for s in streams {
            s.wait_idle();
        }
    }
}

/// A host device.
pub struct HostDevice {
    info: DeviceInfo,
    caps: Capabilities,
    memory: Arc<MemoryRegistry>,
    streams: Mutex<Vec<Weak<HostStream>>>,
    next_stream: AtomicU64,
    libraries: Libraries,
    cpu_warp_size: u32,
}

impl Device for HostDevice {
    fn backend_name(&self) -> &'static str {
        "host"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn allocate(&self, size: u64, alignment: u64, space: MemorySpace) -> Result<Buffer> {
        let alloc = self
            .memory
            .allocate(&self.info.name, size, alignment, space)?;
        Ok(Box::new(HostBuffer {
            alloc,
            registry: self.memory.clone(),
        }))
    }

    fn memory_stats(&self) -> MemoryStats {
        self.memory.stats()
    }

    fn available_memory(&self) -> Option<u64> {
        available::available()
    }

    fn create_stream(&self) -> Result<Arc<dyn Stream>> {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let s = Arc::new(HostStream::new(self.memory.clone(), id)?);
        let mut streams = self.streams.lock();
        streams.retain(|w| w.strong_count() > 0);
        streams.push(Arc::downgrade(&s));
        Ok(s)
    }

    fn create_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(HostEvent::default()))
    }

    fn create_timing_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(HostEvent::timing()))
    }

    fn load_module(&self, module: &Module) -> Result<Arc<dyn LoadedModule>> {
        for img in &module.images {
            match img {
                ModuleImage::Standard => {
                    return Ok(Arc::new(HostModule {
                        name: module.name.clone(),
                        image: img.describe(),
                        library: Arc::new(KernelLibrary::new("")),
                        library_ref: Some(standard_library()),
                    }));
                }
                ModuleImage::Source { code } => {
                    let unit = cpu::module_unit(module, code);
                    let program = cpu::load(&module.name, &unit).map_err(|e| match e {
                        cpu::CpuError::Unavailable { reason } => Error::Unavailable {
                            backend: "host (CPU execution of source modules)".to_string(),
                            reason,
                        },
                        // The module is named once, by `Error::Module`.
                        cpu::CpuError::Compile { compiler, log, .. } => Error::Module {
                            module: module.name.clone(),
                            message: format!(
                                "`{compiler}` failed to compile the portable source:\n{log}"
                            ),
                        },
                        other => Error::Module {
                            module: module.name.clone(),
                            message: other.to_string(),
                        },
                    })?;
                    return Ok(Arc::new(CpuModule {
                        name: module.name.clone(),
                        program,
                        warp_size: self.cpu_warp_size,
                    }));
                }
                ModuleImage::Host { library } => {
                    if let Some(lib) = self.libraries.read().get(library) {
                        return Ok(Arc::new(HostModule {
                            name: module.name.clone(),
                            image: img.describe(),
                            library: lib.clone(),
                            library_ref: None,
                        }));
                    }
                }
                _ => {}
            }
        }
        let have: Vec<String> = module.images.iter().map(|i| i.describe()).collect();
        let libs: Vec<String> = self.libraries.read().keys().cloned().collect();
        Err(Error::Module {
            module: module.name.clone(),
            message: format!(
                "no image the host backend can run: the module has [{}], the host needs `standard`, `source` or host(<library>) with a registered library (registered: [{}])",
                have.join(", "),
                libs.join(", ")
            ),
        })
    }

    fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        self.wait_idle();
        let r = self.memory.region(src, dst.len() as u64)?;
        // SAFETY: the region lies inside a live allocation (kept alive by `r`) and has
        // exactly `dst.len()` bytes; `dst` is a distinct host slice.
        unsafe { std::ptr::copy_nonoverlapping(r.ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy_from_host(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        self.wait_idle();
        let r = self.memory.region(dst, src.len() as u64)?;
        // SAFETY: as in `copy_to_host`, in the other direction.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), r.ptr(), src.len()) };
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        let streams: Vec<Arc<HostStream>> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut first = Ok(());
        for s in streams {
            let r = s.synchronize();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
