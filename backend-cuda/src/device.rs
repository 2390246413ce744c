//! Probing the driver, and the backend and device objects.
//!
//! cudarc loads `libcuda` lazily and **panics** when the library or a symbol is missing. So
//! before cudarc is ever called, the probe
//!
//! 1. opens `libcuda.so.1` from `XTHUNK_CUDA_PATH` when given (by full path, kept open: cudarc's
//!    later `dlopen` by soname then resolves to it);
//! 2. opens the library under cudarc's own candidate names, exactly as cudarc will, recording
//!    every name tried (the equivalent of cudarc's `is_culib_present`, with reasons);
//! 3. checks that it exports every driver symbol this crate calls
//!    ([`DRIVER_SYMBOLS`](crate::loader::DRIVER_SYMBOLS));
//! 4. calls `cuInit(0)` and `cuDriverGetVersion` inside `catch_unwind` with a quiet panic hook,
//!    and refuses drivers older than CUDA 12.0;
//! 5. reads the devices' properties.
//!
//! Any failure is `Error::Unavailable { backend: "cuda", reason }`.

use crate::blas::{BlasLibrary, BlasSlot};
use crate::compile::Compiler;
use crate::conditional::ConditionalSlot;
use crate::context::{CompilerSlot, DeviceContext};
use crate::loader::{DriverLibrary, SearchConfig, guarded};
use crate::module::StandardModule;
use crate::result::{BACKEND, cu, cu_describe, unavailable};
use crate::sys::{self, CUdevice_attribute, CUresult};
use crate::vendor::{Cuda, CudaEvent, MemPool, MemoryRegistry};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::{Arc, OnceLock};
use xthunk_core::backend::{
    Backend, BackendInfo, Buffer, Capabilities, Device, DeviceInfo, DevicePtr, Event, LaunchLimits,
    LoadedModule, MemoryStats, Stream, Vendor,
};
use xthunk_core::ir::{DType, Dim3, MemorySpace, Module};
use xthunk_core::{Error, Result};
use xthunk_gpu::Vendor as _;

/// The oldest driver supported: CUDA 12.0 (`cuDriverGetVersion` encoding).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// What the probe found about one device.
#[derive(Clone, Debug)]
struct DeviceProps {
    dev: sys::CUdevice,
    info: DeviceInfo,
    cc: (i32, i32),
    warp_size: u32,
    managed: bool,
    /// The driver reports stream-ordered memory pools for the device.
    memory_pools: bool,
    launch_limits: LaunchLimits,
}

/// A usable driver.
struct Driver {
    version: i32,
    library: String,
    devices: Vec<DeviceProps>,
    /// Keeps the driver library (and an override's preloaded copy) open.
    _libs: Vec<libloading::Library>,
}

fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

impl Driver {
    fn init(config: &SearchConfig) -> std::result::Result<Driver, String> {
        let DriverLibrary {
            path: library,
            libs,
        } = DriverLibrary::open(config)?;
        // 4. cuInit and the version, with panics caught.
        // SAFETY: cuInit has no preconditions.
        let r = guarded("cuInit", || unsafe { sys::cuInit(0) })?;
        match r {
            CUresult::CUDA_SUCCESS => {}
            CUresult::CUDA_ERROR_NO_DEVICE => {
                return Err(format!(
                    "no CUDA device (cuInit: {}; driver library {library})",
                    cu_describe(r)
                ));
            }
            CUresult::CUDA_ERROR_STUB_LIBRARY => {
                return Err(format!(
                    "{library} is the toolkit's stub library, not a driver (cuInit: {})",
                    cu_describe(r)
                ));
            }
            other => {
                return Err(format!(
                    "cuInit failed: {} (driver library {library})",
                    cu_describe(other)
                ));
            }
        }
        let mut version = 0;
        // SAFETY: writes one int.
        let r = guarded("cuDriverGetVersion", || unsafe {
            sys::cuDriverGetVersion(&mut version)
        })?;
        if r != CUresult::CUDA_SUCCESS {
            return Err(format!("cuDriverGetVersion failed: {}", cu_describe(r)));
        }
        if version < MIN_DRIVER_VERSION {
            return Err(format!(
                "the driver supports CUDA {}; xthunk needs CUDA {} or newer ({library})",
                version_text(version),
                version_text(MIN_DRIVER_VERSION)
            ));
        }
        // 5. Devices.
        let devices = guarded("device query", query_devices)?.map_err(|e| e.to_string())?;
        if devices.is_empty() {
            return Err(format!(
                "no CUDA device (driver {} at {library})",
                version_text(version)
            ));
        }
        tracing::info!(
            "CUDA driver {} loaded from {library}: {} device(s)",
            version_text(version),
            devices.len()
        );
        Ok(Driver {
            version,
            library,
            devices,
            _libs: libs,
        })
    }
}

fn attribute(dev: sys::CUdevice, attr: CUdevice_attribute) -> Result<i32> {
    let mut v = 0;
    // SAFETY: writes one int for a valid device handle.
    cu("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attr, dev)
    })?;
    Ok(v)
}

/// The device's launch limits, from the driver (a negative answer reads as 0: nothing fits).
fn launch_limits(dev: sys::CUdevice) -> Result<LaunchLimits> {
    use CUdevice_attribute as A;
    let get = |a| attribute(dev, a).map(|v| u32::try_from(v).unwrap_or(0));
    Ok(LaunchLimits {
        max_threads_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block: Dim3::new(
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ),
        max_grid: Dim3::new(
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ),
        // Without the per-kernel opt-in (cuFuncSetAttribute), which xthunk does not make.
        max_shared_mem_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        max_threads_per_dim: u64::MAX,
    })
}

fn query_devices() -> Result<Vec<DeviceProps>> {
    let mut n = 0;
    // SAFETY: writes one int.
    cu("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    let mut out = vec![];
    for ordinal in 0..n.max(0) {
        let mut dev: sys::CUdevice = 0;
        // SAFETY: writes one device handle; `ordinal < count`.
        cu("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut dev, ordinal)
        })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds 256 chars; the driver writes a NUL-terminated name into it.
        cu("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev)
        })?;
        let bytes: Vec<u8> = name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let name = String::from_utf8_lossy(&bytes).into_owned();
        let mut mem = 0usize;
        // SAFETY: writes one size_t.
        cu("cuDeviceTotalMem_v2", unsafe {
            sys::cuDeviceTotalMem_v2(&mut mem, dev)
        })?;
        use CUdevice_attribute as A;
        let major = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attribute(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let warp = attribute(dev, A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?;
        let managed = attribute(dev, A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0;
        // An attribute older drivers may not know: not an error, just no pools.
        let memory_pools =
            attribute(dev, A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED).is_ok_and(|v| v != 0);
        out.push(DeviceProps {
            dev,
            info: DeviceInfo {
                ordinal: ordinal as usize,
                emulated: name.contains("xthunk emulated"),
                name,
                vendor: Vendor::Nvidia,
                arch: format!("sm_{major}{minor}"),
                total_memory: mem as u64,
                compute_units: sms.max(0) as u32,
            },
            cc: (major, minor),
            warp_size: warp.max(1) as u32,
            managed,
            memory_pools,
            launch_limits: launch_limits(dev)?,
        });
    }
    Ok(out)
}

/// The CUDA backend. Construct it freely: nothing is loaded until it is probed.
pub struct CudaBackend {
    config: SearchConfig,
    driver: OnceLock<std::result::Result<Arc<Driver>, String>>,
    devices: Mutex<HashMap<usize, Arc<CudaDevice>>>,
}

impl Default for CudaBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CudaBackend {
    /// A backend searching as the environment says ([`SearchConfig::from_env`]).
    pub fn new() -> Self {
        Self::with_config(SearchConfig::from_env())
    }

    /// A backend with an explicit search (tests, embedders).
    pub fn with_config(config: SearchConfig) -> Self {
        CudaBackend {
            config,
            driver: OnceLock::new(),
            devices: Mutex::new(HashMap::new()),
        }
    }

    /// Where this backend looks for the NVIDIA libraries.
    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    fn driver(&self) -> Result<Arc<Driver>> {
        self.driver
            .get_or_init(|| Driver::init(&self.config).map(Arc::new))
            .clone()
            .map_err(unavailable)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn probe(&self) -> Result<BackendInfo> {
        let d = self.driver()?;
        Ok(BackendInfo {
            version: format!("CUDA driver {} ({})", version_text(d.version), d.library),
            devices: d.devices.iter().map(|p| p.info.clone()).collect(),
        })
    }

    fn device(&self, ordinal: usize) -> Result<Arc<dyn Device>> {
        let d = self.driver()?;
        let mut devs = self.devices.lock();
        if let Some(dev) = devs.get(&ordinal) {
            return Ok(dev.clone());
        }
        let Some(props) = d.devices.get(ordinal) else {
            return Err(Error::InvalidArgument(format!(
                "CUDA device {ordinal} does not exist ({} devices)",
                d.devices.len()
            )));
        };
        let dev = Arc::new(CudaDevice::new(props.clone(), &self.config, d.version)?);
        devs.insert(ordinal, dev.clone());
        Ok(dev)
    }
}

/// One CUDA device (its primary context).
pub struct CudaDevice {
    info: DeviceInfo,
    caps: Capabilities,
    pub(crate) ctx: Arc<DeviceContext>,
    pub(crate) memory: Arc<MemoryRegistry>,
    pub(crate) blas: Arc<BlasSlot>,
    /// The standard library compiled for this device, shared by every module using it.
    standard: StandardModule,
    /// The set-condition kernels (conditional graph nodes), built on first use.
    conditional: Arc<ConditionalSlot>,
    /// The device's memory pool for stream-ordered allocation, where it has one.
    pool: Option<Arc<MemPool>>,
}

impl CudaDevice {
    fn new(props: DeviceProps, config: &SearchConfig, driver_version: i32) -> Result<Self> {
        let sm = (props.cc.0.max(0) * 10 + props.cc.1.max(0)) as u32;
        let ctx = Arc::new(DeviceContext::new(
            props.dev,
            props.info.name.clone(),
            sm,
            driver_version,
            CompilerSlot::new(config.clone(), driver_version),
        )?);
        let blas_lib = match BlasLibrary::load(config) {
            Ok(l) => Some(Arc::new(l)),
            Err(e) => {
                tracing::info!("cuBLAS unavailable, gemm disabled: {e}");
                None
            }
        };
        let mut gemm_dtypes = vec![];
        if blas_lib.is_some() {
            gemm_dtypes = vec![DType::F32, DType::F64, DType::F16];
            if props.cc.0 >= 8 {
                gemm_dtypes.push(DType::BF16);
            }
        }
        let mut memory_spaces = vec![
            MemorySpace::Device,
            MemorySpace::HostPinned,
            MemorySpace::Collective,
        ];
        if props.managed {
            memory_spaces.push(MemorySpace::Unified);
        }
        let pool = match MemPool::create(&ctx, props.memory_pools) {
            Ok(p) => Some(p),
            Err(why) => {
                tracing::info!(
                    device = %props.info.name,
                    "no stream-ordered allocation: {why}"
                );
                None
            }
        };
        Ok(CudaDevice {
            caps: Capabilities {
                memory_spaces,
                gemm_dtypes,
                supports_graphs: true,
                warp_size: props.warp_size,
                launch_limits: props.launch_limits,
                stream_ordered_alloc: pool.is_some(),
            },
            memory: Arc::new(MemoryRegistry::default()),
            blas: Arc::new(BlasSlot::new(blas_lib, ctx.clone(), props.cc)),
            ctx,
            info: props.info,
            standard: StandardModule::default(),
            conditional: Arc::default(),
            pool,
        })
    }

    /// The SM architecture number (`90` for sm_90).
    pub fn sm(&self) -> u32 {
        self.ctx.sm
    }

    /// The NVRTC compiler for this device: the first NVRTC found whose major version the
    /// driver can load, with the default disk cache.
    pub fn compiler(&self) -> Result<Arc<Compiler>> {
        self.ctx.compiler()
    }
}

impl Device for CudaDevice {
    fn backend_name(&self) -> &'static str {
        Cuda::BACKEND
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn allocate(&self, size: u64, alignment: u64, space: MemorySpace) -> Result<Buffer> {
        if !self.caps.memory_spaces.contains(&space) {
            return Err(Error::Unsupported {
                backend: BACKEND.into(),
                feature: format!("{space} memory on {}", self.info.name),
            });
        }
        let buffer = self.memory.allocate(&self.ctx, size, alignment, space)?;
        Ok(Box::new(buffer))
    }

    fn allocate_external(
        &self,
        size: u64,
        alignment: u64,
        space: MemorySpace,
        alloc: Arc<dyn xthunk_core::backend::ExternalAllocator>,
    ) -> Result<Buffer> {
        let buffer = self
            .memory
            .allocate_external(&self.ctx, size, alignment, space, alloc)?;
        Ok(Box::new(buffer))
    }

    fn memory_stats(&self) -> MemoryStats {
        self.memory.stats()
    }

    fn create_stream(&self) -> Result<Arc<dyn Stream>> {
        Ok(Arc::new(crate::stream::create(
            self.ctx.clone(),
            self.memory.clone(),
            self.blas.clone(),
            self.conditional.clone(),
            self.pool.clone(),
        )?))
    }

    fn create_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(CudaEvent::new(self.ctx.clone())?))
    }

    fn create_timing_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(CudaEvent::timing(self.ctx.clone())?))
    }

    fn load_module(&self, module: &Module) -> Result<Arc<dyn LoadedModule>> {
        crate::module::load(&self.ctx, &self.standard, module)
    }

    fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        let r = self.memory.region(src, dst.len() as u64)?;
        self.ctx.synchronize()?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: the region lies inside a live allocation; `dst` is a host buffer of exactly
        // `len` bytes; the context is current (bound by `synchronize`).
        cu("cuMemcpyDtoH_v2", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), r.addr(), dst.len())
        })
    }

    fn copy_from_host(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        let r = self.memory.region(dst, src.len() as u64)?;
        self.ctx.synchronize()?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `copy_to_host`, in the other direction.
        cu("cuMemcpyHtoD_v2", unsafe {
            sys::cuMemcpyHtoD_v2(r.addr(), src.as_ptr().cast(), src.len())
        })
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.synchronize()
    }

    #[cfg(feature = "bench")]
    fn raw_baseline(&self) -> Option<Arc<dyn xthunk_core::backend::baseline::RawBaseline>> {
        Some(Arc::new(xthunk_gpu::bench::Baseline::<
            crate::bench::CudaBaselines,
        >::new(
            self.ctx.clone(),
            self.blas
                .library()
                .cloned()
                .ok_or_else(|| "libcublas.so.13/.12 was not found".to_string()),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version_text(12040), "12.4");
        assert_eq!(version_text(13000), "13.0");
    }
}
