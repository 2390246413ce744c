//! The backend and its devices: loading and probing the HIP runtime, device properties, and
//! the `Device` trait (memory, synchronous copies, streams, events, modules).
//!
//! Probing: `hipInit` returning `hipErrorNoDevice` (100) or `hipErrorInvalidDevice` (101), or
//! `hipGetDeviceCount` returning 100 or no device, means "no AMD GPU": `Unavailable` with that
//! reason and the runtime's version and path. Device properties come from
//! `hipDeviceGetName`, `hipDeviceTotalMem` and `hipDeviceGetAttribute` (whose values are the
//! same in ROCm 5 and ≥ 6); only `gcnArchName` needs `hipDeviceProp_t`, read with
//! `hipGetDevicePropertiesR0600` when present (ROCm ≥ 6) and `hipGetDeviceProperties`
//! (ROCm 5) otherwise, into a zeroed buffer larger than both layouts, at the offset of that
//! layout, and accepted only when it reads as a gfx target.

use crate::blas::BlasLibrary;
use crate::compile::{Compiler, KernelCache};
use crate::context::{CompilerSlot, DeviceContext};
use crate::loader::{Hip, SearchConfig, format_hip_version};
use crate::module;
use crate::result::{self, BACKEND, hip_describe, means_no_device, unavailable};
use crate::stream::RocmStream;
use crate::sys;
use crate::target::Target;
use crate::vendor::{MemPool, MemoryRegistry, Rocm, RocmEvent};
use parking_lot::Mutex;
use std::ffi::{c_char, c_int};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};
use xthunk_core::backend::{
    Backend, BackendInfo, Buffer, Capabilities, Device, DeviceInfo, DevicePtr, Event, LaunchLimits,
    LoadedModule, MemoryStats, Stream, Vendor,
};
use xthunk_core::ir::{DType, Dim3, MemorySpace, Module};
use xthunk_core::{Error, Result};
use xthunk_gpu::Vendor as _;

/// The HIP runtime library this backend loaded (no GPU needed to get it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeLibrary {
    /// The file loaded.
    pub path: PathBuf,
    /// `hipRuntimeGetVersion`, e.g. `50221153`.
    pub version: i32,
    /// `5.2.21153`.
    pub version_string: String,
}

/// The ROCm backend (name `rocm`): AMD GPUs through HIP, loaded at run time.
pub struct RocmBackend {
    config: SearchConfig,
    hip: OnceLock<std::result::Result<Arc<Hip>, String>>,
    runtime: OnceLock<std::result::Result<Arc<Runtime>, String>>,
    devices: Mutex<Vec<Option<Arc<RocmDevice>>>>,
}

impl Default for RocmBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl RocmBackend {
    /// A backend searching where the environment says (see [`SearchConfig::from_env`]).
    /// Nothing is loaded until the first probe.
    pub fn new() -> Self {
        Self::with_config(SearchConfig::from_env())
    }

    /// A backend searching exactly as `config` says.
    pub fn with_config(config: SearchConfig) -> Self {
        RocmBackend {
            config,
            hip: OnceLock::new(),
            runtime: OnceLock::new(),
            devices: Mutex::new(Vec::new()),
        }
    }

    /// Where this backend looks for ROCm.
    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    fn hip(&self) -> Result<Arc<Hip>> {
        self.hip
            .get_or_init(|| {
                Hip::load(&self.config)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(unavailable)
    }

    /// Loads the HIP runtime (without initializing it) and says which one it is.
    pub fn runtime_library(&self) -> Result<RuntimeLibrary> {
        let hip = self.hip()?;
        Ok(RuntimeLibrary {
            path: hip.path.clone(),
            version: hip.runtime_version,
            version_string: format_hip_version(hip.runtime_version),
        })
    }

    /// A hipRTC compiler loaded through this backend's search (for `xthunk compile` and
    /// tests), with `cache` as its disk cache.
    pub fn compiler(&self, cache: Option<KernelCache>) -> Result<Compiler> {
        let hip = self.hip().ok();
        Ok(Compiler::with_hip(&self.config, hip, cache)?)
    }

    fn runtime(&self) -> Result<Arc<Runtime>> {
        self.runtime
            .get_or_init(|| {
                let hip = self.hip().map_err(|e| match e {
                    Error::Unavailable { reason, .. } => reason,
                    other => other.to_string(),
                })?;
                Runtime::init(hip, self.config.clone()).map(Arc::new)
            })
            .clone()
            .map_err(unavailable)
    }
}

/// The initialized HIP runtime and what probing found.
pub(crate) struct Runtime {
    pub(crate) hip: Arc<Hip>,
    config: SearchConfig,
    version: String,
    devices: Vec<Probed>,
    /// hipRTC through this runtime's search, shared by its devices.
    compiler: Arc<CompilerSlot>,
    rocblas: OnceLock<std::result::Result<Arc<BlasLibrary>, String>>,
}

struct Probed {
    info: DeviceInfo,
    arch: Target,
    warp_size: u32,
    managed_memory: bool,
    /// The runtime reports stream-ordered memory pools for the device.
    memory_pools: bool,
    launch_limits: LaunchLimits,
}

/// `hipDeviceAttribute_t` values of the launch limits (the same in ROCm 5 and 6):
/// `MaxBlockDimX` (Y and Z follow), `MaxGridDimX` (likewise), `MaxThreadsPerBlock`,
/// `MaxSharedMemoryPerBlock`.
const ATTR_MAX_BLOCK_DIM_X: sys::hipDeviceAttribute_t = 26;
const ATTR_MAX_GRID_DIM_X: sys::hipDeviceAttribute_t = 29;
const ATTR_MAX_THREADS_PER_BLOCK: sys::hipDeviceAttribute_t = 56;
const ATTR_MAX_SHARED_MEMORY_PER_BLOCK: sys::hipDeviceAttribute_t = 74;

impl Runtime {
    fn init(hip: Arc<Hip>, config: SearchConfig) -> std::result::Result<Runtime, String> {
        let api = &hip.api;
        // SAFETY: hipInit takes flags (must be 0) and may be called more than once.
        let rc = unsafe { (api.hipInit)(0) };
        if means_no_device(rc) {
            return Err(format!(
                "no AMD GPU: hipInit returned {}; {}",
                hip_describe(rc),
                hip.describe()
            ));
        }
        if rc != sys::hipSuccess {
            return Err(format!(
                "hipInit failed: {}; {}",
                hip_describe(rc),
                hip.describe()
            ));
        }
        let mut count: c_int = 0;
        // SAFETY: writes one int.
        let rc = unsafe { (api.hipGetDeviceCount)(&mut count) };
        if rc == sys::hipErrorNoDevice || (rc == sys::hipSuccess && count <= 0) {
            return Err(format!(
                "no AMD GPU: hipGetDeviceCount returned {} with {count} devices; {}",
                hip_describe(rc),
                hip.describe()
            ));
        }
        if rc != sys::hipSuccess {
            return Err(format!(
                "hipGetDeviceCount failed: {}; {}",
                hip_describe(rc),
                hip.describe()
            ));
        }
        let mut devices = Vec::new();
        for ordinal in 0..count {
            devices.push(probe_device(&hip, ordinal)?);
        }
        let version = hip.describe();
        tracing::info!(devices = devices.len(), "{version}");
        Ok(Runtime {
            compiler: Arc::new(CompilerSlot::new(config.clone(), hip.clone())),
            hip,
            config,
            version,
            devices,
            rocblas: OnceLock::new(),
        })
    }

    /// rocBLAS, or why it is not there.
    pub(crate) fn rocblas(&self) -> std::result::Result<Arc<BlasLibrary>, String> {
        self.rocblas
            .get_or_init(|| {
                BlasLibrary::load(&self.config, self.hip.folder())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }
}

/// Reads one device's properties.
fn probe_device(hip: &Hip, ordinal: c_int) -> std::result::Result<Probed, String> {
    let api = &hip.api;
    let fail = |call: &str, rc| format!("{call}(device {ordinal}) failed: {}", hip_describe(rc));
    let mut name = [0u8; 256];
    // SAFETY: `name` has room for the 256 bytes the length argument allows.
    let rc = unsafe { (api.hipDeviceGetName)(name.as_mut_ptr().cast::<c_char>(), 256, ordinal) };
    if rc != sys::hipSuccess {
        return Err(fail("hipDeviceGetName", rc));
    }
    let name = c_string(&name);
    let mut total = 0usize;
    // SAFETY: writes one size_t.
    let rc = unsafe { (api.hipDeviceTotalMem)(&mut total, ordinal) };
    if rc != sys::hipSuccess {
        return Err(fail("hipDeviceTotalMem", rc));
    }
    let attr = |a: sys::hipDeviceAttribute_t| -> std::result::Result<i32, String> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let rc = unsafe { (api.hipDeviceGetAttribute)(&mut v, a, ordinal) };
        if rc != sys::hipSuccess {
            return Err(fail(&format!("hipDeviceGetAttribute({a})"), rc));
        }
        Ok(v)
    };
    let compute_units = attr(sys::hipDeviceAttributeMultiprocessorCount)?;
    // A negative answer reads as 0: nothing fits.
    let limit = |a| attr(a).map(|v| u32::try_from(v).unwrap_or(0));
    let dim3 = |first| -> std::result::Result<Dim3, String> {
        Ok(Dim3::new(
            limit(first)?,
            limit(first + 1)?,
            limit(first + 2)?,
        ))
    };
    let launch_limits = LaunchLimits {
        max_threads_per_block: limit(ATTR_MAX_THREADS_PER_BLOCK)?,
        max_block: dim3(ATTR_MAX_BLOCK_DIM_X)?,
        max_grid: dim3(ATTR_MAX_GRID_DIM_X)?,
        max_shared_mem_per_block: limit(ATTR_MAX_SHARED_MEMORY_PER_BLOCK)?,
        // hipModuleLaunchKernel refuses 2^32 or more work-items along a dimension.
        max_threads_per_dim: u64::from(u32::MAX),
    };
    let warp_size = attr(sys::hipDeviceAttributeWarpSize)?;
    let managed = attr(sys::hipDeviceAttributeManagedMemory).unwrap_or(0) != 0;
    // An attribute older runtimes may not know: not an error, just no pools.
    let memory_pools = attr(sys::hipDeviceAttributeMemoryPoolsSupported).unwrap_or(0) != 0;
    let arch_name = gcn_arch_name(hip, ordinal)?;
    let arch = Target::parse(&arch_name).map_err(|e| e.to_string())?;
    // The driver emulator (emulator/) names its devices "… (xthunk emulated)", as the
    // CUDA backend expects; its control API's `xthunk_emu_version` export marks it too.
    let emulated = name.contains("xthunk emulated") || api.xthunk_emu_version.is_some();
    Ok(Probed {
        info: DeviceInfo {
            ordinal: ordinal as usize,
            name: if emulated && !name.contains("xthunk emulated") {
                format!("{name} (xthunk emulated)")
            } else {
                name
            },
            vendor: Vendor::Amd,
            arch: arch_name,
            total_memory: total as u64,
            compute_units: compute_units.max(0) as u32,
            emulated,
        },
        arch,
        warp_size: warp_size.max(1) as u32,
        managed_memory: managed,
        memory_pools,
        launch_limits,
    })
}

/// `gcnArchName` through whichever `hipGetDeviceProperties*` the runtime has.
fn gcn_arch_name(hip: &Hip, ordinal: c_int) -> std::result::Result<String, String> {
    let api = &hip.api;
    let (call, f, offset) = match (api.hipGetDevicePropertiesR0600, api.hipGetDeviceProperties) {
        (Some(f), _) => (
            "hipGetDevicePropertiesR0600",
            f,
            sys::props_r0600::GCN_ARCH_NAME,
        ),
        (None, Some(f)) => ("hipGetDeviceProperties", f, sys::props_r0000::GCN_ARCH_NAME),
        (None, None) => {
            return Err(
                "the HIP runtime has neither hipGetDevicePropertiesR0600 nor hipGetDeviceProperties: cannot read gcnArchName".into(),
            );
        }
    };
    // u64 elements: 8-byte aligned, as the struct (it holds size_t fields) requires.
    let mut buf = vec![0u64; sys::PROPS_BUFFER_SIZE / 8];
    // SAFETY: `buf` is zeroed, 8-byte aligned and larger than both hipDeviceProp_t layouts;
    // the function writes one such struct.
    let rc = unsafe { f(buf.as_mut_ptr().cast(), ordinal) };
    if rc != sys::hipSuccess {
        return Err(format!(
            "{call}(device {ordinal}) failed: {}",
            hip_describe(rc)
        ));
    }
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    arch_from_props(&bytes, offset).map_err(|e| format!("{call}: {e}"))
}

/// The `gcnArchName` field at `offset` of a `hipDeviceProp_t` image, accepted only when it
/// reads as a gfx target (anything else means the layout is not the one assumed).
pub fn arch_from_props(props: &[u8], offset: usize) -> std::result::Result<String, String> {
    let field = props
        .get(offset..offset.saturating_add(sys::GCN_ARCH_NAME_LEN))
        .ok_or("the properties buffer is too small")?;
    let name = c_string(field);
    match Target::parse(&name) {
        Ok(_) => Ok(name),
        Err(_) => Err(format!(
            "gcnArchName at offset {offset} reads {name:?}, not a gfx target: unknown hipDeviceProp_t layout"
        )),
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl Backend for RocmBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn probe(&self) -> Result<BackendInfo> {
        let rt = self.runtime()?;
        let blas = match rt.rocblas() {
            Ok(b) => format!("rocBLAS {} ({})", b.version, b.path.display()),
            Err(why) => format!("no rocBLAS, gemm disabled ({why})"),
        };
        Ok(BackendInfo {
            version: format!("{}; {blas}", rt.version),
            devices: rt.devices.iter().map(|d| d.info.clone()).collect(),
        })
    }

    fn device(&self, ordinal: usize) -> Result<Arc<dyn Device>> {
        let rt = self.runtime()?;
        let Some(p) = rt.devices.get(ordinal) else {
            return Err(Error::InvalidArgument(format!(
                "ROCm device {ordinal} does not exist ({} devices)",
                rt.devices.len()
            )));
        };
        let mut devs = self.devices.lock();
        if devs.len() < rt.devices.len() {
            devs.resize(rt.devices.len(), None);
        }
        if let Some(Some(d)) = devs.get(ordinal) {
            return Ok(d.clone());
        }
        let blas = rt.rocblas();
        if let Err(why) = &blas {
            tracing::warn!("rocBLAS unavailable, gemm disabled on rocm:{ordinal}: {why}");
        }
        let mut memory_spaces = vec![MemorySpace::Device, MemorySpace::HostPinned];
        if p.managed_memory {
            memory_spaces.push(MemorySpace::Unified);
        }
        let ctx = Arc::new(DeviceContext::new(
            rt.hip.clone(),
            ordinal as c_int,
            format!("rocm:{ordinal} ({})", p.info.name),
            p.arch.clone(),
            p.managed_memory,
            rt.compiler.clone(),
        ));
        let pool = match MemPool::create(&ctx, p.memory_pools) {
            Ok(pool) => Some(pool),
            Err(why) => {
                tracing::info!(device = %p.info.name, "no stream-ordered allocation: {why}");
                None
            }
        };
        let d = Arc::new(RocmDevice {
            caps: Capabilities {
                memory_spaces,
                gemm_dtypes: if blas.is_ok() {
                    vec![DType::F32, DType::F64, DType::F16, DType::BF16]
                } else {
                    vec![]
                },
                supports_graphs: rt.hip.api.has_graphs(),
                warp_size: p.warp_size,
                launch_limits: p.launch_limits,
                stream_ordered_alloc: pool.is_some(),
            },
            info: p.info.clone(),
            ctx,
            memory: Arc::new(MemoryRegistry::default()),
            blas,
            streams: Mutex::new(Vec::new()),
            pool,
        });
        if let Some(slot) = devs.get_mut(ordinal) {
            *slot = Some(d.clone());
        }
        Ok(d)
    }
}

/// An AMD GPU.
pub struct RocmDevice {
    ctx: Arc<DeviceContext>,
    memory: Arc<MemoryRegistry>,
    /// rocBLAS, or why it is absent.
    blas: std::result::Result<Arc<BlasLibrary>, String>,
    info: DeviceInfo,
    caps: Capabilities,
    streams: Mutex<Vec<Weak<RocmStream>>>,
    /// The device's memory pool for stream-ordered allocation, where it has one.
    pool: Option<Arc<MemPool>>,
}

impl RocmDevice {
    /// The device's full `gcnArchName` (e.g. `gfx90a:sramecc+:xnack-`).
    pub fn gcn_arch_name(&self) -> &str {
        &self.ctx.arch.full
    }
}

impl Device for RocmDevice {
    fn backend_name(&self) -> &'static str {
        Rocm::BACKEND
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn allocate(&self, size: u64, alignment: u64, space: MemorySpace) -> Result<Buffer> {
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
        let s = Arc::new(crate::stream::create(
            self.ctx.clone(),
            self.memory.clone(),
            self.blas.clone(),
            self.pool.clone(),
        )?);
        let mut streams = self.streams.lock();
        streams.retain(|w| w.strong_count() > 0);
        streams.push(Arc::downgrade(&s));
        Ok(s)
    }

    fn create_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(RocmEvent::new(self.ctx.clone())?))
    }

    fn create_timing_event(&self) -> Result<Arc<dyn Event>> {
        Ok(Arc::new(RocmEvent::timing(self.ctx.clone())?))
    }

    fn load_module(&self, module: &Module) -> Result<Arc<dyn LoadedModule>> {
        module::load(&self.ctx, module)
    }

    fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let r = self.memory.region(src, dst.len() as u64)?;
        // After all queued work (the streams are non-blocking: the null stream does not wait
        // for them).
        self.synchronize()?;
        // SAFETY: the source range lies inside a live allocation (kept alive by `r`), `dst`
        // is a distinct host buffer of exactly that length; hipMemcpy returns when the copy
        // is done.
        let rc = unsafe {
            (self.ctx.hip.api.hipMemcpy)(
                dst.as_mut_ptr().cast(),
                r.ptr(),
                dst.len(),
                sys::hipMemcpyDefault,
            )
        };
        result::hip("hipMemcpy", rc)
    }

    fn copy_from_host(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let r = self.memory.region(dst, src.len() as u64)?;
        self.synchronize()?;
        // SAFETY: as in `copy_to_host`, in the other direction.
        let rc = unsafe {
            (self.ctx.hip.api.hipMemcpy)(
                r.ptr(),
                src.as_ptr().cast(),
                src.len(),
                sys::hipMemcpyDefault,
            )
        };
        result::hip("hipMemcpy", rc)
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.synchronize()
    }

    #[cfg(feature = "bench")]
    fn raw_baseline(&self) -> Option<Arc<dyn xthunk_core::backend::baseline::RawBaseline>> {
        Some(Arc::new(xthunk_gpu::bench::Baseline::<
            crate::bench::RocmBaselines,
        >::new(self.ctx.clone(), self.blas.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_is_read_at_the_layout_offset() {
        for offset in [
            sys::props_r0000::GCN_ARCH_NAME,
            sys::props_r0600::GCN_ARCH_NAME,
        ] {
            let mut props = vec![0u8; sys::PROPS_BUFFER_SIZE];
            let name = b"gfx90a:sramecc+:xnack-";
            props[offset..offset + name.len()].copy_from_slice(name);
            assert_eq!(
                arch_from_props(&props, offset).as_deref(),
                Ok("gfx90a:sramecc+:xnack-")
            );
        }
        // A wrong layout reads something that is not a gfx target: refused, not guessed.
        let mut props = vec![0u8; sys::PROPS_BUFFER_SIZE];
        props[0..6].copy_from_slice(b"AMD MI");
        let e = arch_from_props(&props, 0).err().unwrap_or_default();
        assert!(e.contains("unknown hipDeviceProp_t layout"), "{e}");
        assert!(arch_from_props(&props, sys::PROPS_BUFFER_SIZE).is_err());
    }
}
