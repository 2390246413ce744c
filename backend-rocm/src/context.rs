//! The state every object of one AMD GPU shares ([`DeviceContext`]): the HIP runtime and the
//! device's ordinal (made current with `hipSetDevice` before each call, since HIP's current
//! device is per thread and any thread may drive any device), the device's name and
//! `gcnArchName`, and the hipRTC compiler, loaded on first use.
//!
//! Memory, streams, events, graphs, modules and rocBLAS hold an `Arc<DeviceContext>`; they
//! depend on this module, not on `device` or on each other in a cycle.

use crate::compile::{Compiler, default_cache};
use crate::loader::{Hip, SearchConfig};
use crate::result::{self, unavailable};
use crate::target::Target;
use std::ffi::c_int;
use std::sync::{Arc, OnceLock};
use xthunk_core::Result;

/// A compiler loaded on first use, or why it could not be: hipRTC and comgr through the
/// runtime's search (its folder first), with the default disk cache. One per runtime, shared
/// by its devices.
pub(crate) struct CompilerSlot {
    config: SearchConfig,
    hip: Arc<Hip>,
    compiler: OnceLock<std::result::Result<Arc<Compiler>, String>>,
}

impl CompilerSlot {
    /// A slot loading hipRTC through `config`, beside the HIP runtime `hip`.
    pub(crate) fn new(config: SearchConfig, hip: Arc<Hip>) -> Self {
        CompilerSlot {
            config,
            hip,
            compiler: OnceLock::new(),
        }
    }

    /// The compiler (loaded on the first call), or `Unavailable` saying why there is none.
    pub(crate) fn get(&self) -> Result<Arc<Compiler>> {
        self.compiler
            .get_or_init(|| {
                Compiler::with_hip(&self.config, Some(self.hip.clone()), default_cache())
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(unavailable)
    }
}

/// What every object of one device shares.
pub struct DeviceContext {
    pub(crate) hip: Arc<Hip>,
    pub(crate) ordinal: c_int,
    /// `rocm:0 (AMD Instinct MI210)`.
    pub(crate) name: String,
    /// The device's `gcnArchName`, parsed.
    pub(crate) arch: Target,
    pub(crate) managed_memory: bool,
    compiler: Arc<CompilerSlot>,
}

impl std::fmt::Debug for DeviceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceContext")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl DeviceContext {
    /// The context of device `ordinal` of the runtime `hip`.
    pub(crate) fn new(
        hip: Arc<Hip>,
        ordinal: c_int,
        name: String,
        arch: Target,
        managed_memory: bool,
        compiler: Arc<CompilerSlot>,
    ) -> Self {
        DeviceContext {
            hip,
            ordinal,
            name,
            arch,
            managed_memory,
            compiler,
        }
    }

    /// Makes this device current on the calling thread (HIP's current device is per thread).
    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: `ordinal` is a device index the runtime reported.
        let rc = unsafe { (self.hip.api.hipSetDevice)(self.ordinal) };
        result::hip("hipSetDevice", rc)
    }

    /// Waits for all work of the device.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: no arguments; waits for all work of the current (this) device.
        let rc = unsafe { (self.hip.api.hipDeviceSynchronize)() };
        result::hip("hipDeviceSynchronize", rc)
    }

    /// The hipRTC compiler (see [`CompilerSlot::get`]).
    pub(crate) fn compiler(&self) -> Result<Arc<Compiler>> {
        self.compiler.get()
    }
}
