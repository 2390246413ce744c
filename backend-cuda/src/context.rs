//! The state every object of one CUDA device shares ([`DeviceContext`]): the device's
//! retained primary context, made current before each driver call (any thread may drive any
//! device), the device's name and SM architecture, and its NVRTC compiler, loaded on first
//! use.
//!
//! Memory, streams, events, graphs, modules and cuBLAS hold an `Arc<DeviceContext>`; they
//! depend on this module, not on `device` or on each other in a cycle.

use crate::compile::{Compiler, Nvrtc, default_cache};
use crate::loader::SearchConfig;
use crate::result::{cu, cu_describe, unavailable};
use crate::sys::{self, CUresult};
use std::sync::{Arc, OnceLock};
use xthunk_core::Result;

/// A compiler loaded on first use, or why it could not be: the first NVRTC of the search
/// whose major version the driver can load, with the default disk cache.
pub(crate) struct CompilerSlot {
    config: SearchConfig,
    /// The driver's CUDA major version (a newer NVRTC emits images it cannot load).
    max_major: Option<i32>,
    compiler: OnceLock<std::result::Result<Arc<Compiler>, String>>,
}

impl CompilerSlot {
    /// A slot loading NVRTC through `config`, for a driver of version `driver_version`
    /// (`cuDriverGetVersion` encoding).
    pub(crate) fn new(config: SearchConfig, driver_version: i32) -> Self {
        CompilerSlot {
            config,
            max_major: Some(driver_version / 1000),
            compiler: OnceLock::new(),
        }
    }

    /// The compiler (loaded on the first call), or `Unavailable` saying why there is none.
    pub(crate) fn get(&self) -> Result<Arc<Compiler>> {
        self.compiler
            .get_or_init(|| {
                Nvrtc::load_max_major(&self.config, self.max_major)
                    .map(|n| Arc::new(Compiler::new(Arc::new(n), default_cache())))
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(unavailable)
    }
}

/// What every object of one CUDA device shares; the primary context is retained for as long
/// as this lives.
pub struct DeviceContext {
    pub(crate) dev: sys::CUdevice,
    raw: sys::CUcontext,
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub(crate) name: String,
    /// The SM architecture number (`90` for sm_90).
    pub(crate) sm: u32,
    /// The driver's CUDA version (`cuDriverGetVersion` encoding, 12040 for 12.4).
    pub(crate) driver_version: i32,
    compiler: CompilerSlot,
}

// SAFETY: a CUcontext is a driver handle usable from any thread (made current per call with
// cuCtxSetCurrent); this struct only retains and releases it.
unsafe impl Send for DeviceContext {}
// SAFETY: as above; the handle is immutable after creation.
unsafe impl Sync for DeviceContext {}

impl std::fmt::Debug for DeviceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceContext")
            .field("dev", &self.dev)
            .field("raw", &self.raw)
            .field("name", &self.name)
            .field("sm", &self.sm)
            .finish_non_exhaustive()
    }
}

impl DeviceContext {
    /// Retains the primary context of `dev`.
    pub(crate) fn new(
        dev: sys::CUdevice,
        name: String,
        sm: u32,
        driver_version: i32,
        compiler: CompilerSlot,
    ) -> Result<DeviceContext> {
        let mut raw: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle for a valid device ordinal's handle.
        cu("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut raw, dev)
        })?;
        Ok(DeviceContext {
            dev,
            raw,
            name,
            sm,
            driver_version,
            compiler,
        })
    }

    /// The primary context's handle (for driver calls that name a context).
    pub(crate) fn raw(&self) -> sys::CUcontext {
        self.raw
    }

    /// Makes this context current on the calling thread (cheap; done before every driver
    /// call, since any thread may drive any device).
    pub(crate) fn bind(&self) -> Result<()> {
        // SAFETY: `raw` is a retained primary context.
        cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.raw) })
    }

    /// Waits for all work of the context.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the context is current.
        cu("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// The device's NVRTC compiler (see [`CompilerSlot::get`]).
    pub(crate) fn compiler(&self) -> Result<Arc<Compiler>> {
        self.compiler.get()
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        // SAFETY: releases the reference retained in `new`, once.
        let r = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
        if r != CUresult::CUDA_SUCCESS {
            tracing::error!("cuDevicePrimaryCtxRelease_v2: {}", cu_describe(r));
        }
    }
}
