//! xthunk's ROCm backend: AMD GPUs through HIP, hipRTC and rocBLAS, all opened with `dlopen`
//! at run time through hand-written declaration tables (no crate on crates.io fits: `hip-sys`
//! links `libamdhip64` at build time). The crate builds without ROCm, and a process using it
//! starts on a machine without ROCm or without an AMD GPU: `RocmBackend::probe` (the
//! `Backend` trait) then says why (`Unavailable`, with every path tried, or "no AMD GPU" and
//! the runtime's version).
//!
//! Vendor result codes are turned into errors in one place ([`result`]), with the call, the
//! code's name and number.
//!
//! # Modules
//!
//! The same files, with the same roles, as the CUDA backend (`xthunk-cuda`):
//!
//! - [`sys`]: the C declarations (HIP runtime, hipRTC, comgr, rocBLAS);
//! - [`loader`]: finding and opening the libraries, and their symbol tables;
//! - [`result`]: vendor result codes as errors, `unsupported`, `unavailable`, [`CompileError`];
//! - [`context`]: the per-device state every object of a device shares (`DeviceContext`);
//! - [`device`]: the backend (probing) and its devices;
//! - [`vendor`]: the HIP runtime's raw calls behind the shared GPU layer (`xthunk-gpu`:
//!   memory, streams, events), and the shared types named for this crate;
//! - `pool`: the HIP calls of the device's memory pool for stream-ordered allocation
//!   (`hipMallocFromPoolAsync`);
//! - [`stream`]: streams and events;
//! - [`module`]: image choice, loading, kernel lookup and argument marshalling;
//! - [`compile`]: the runtime compiler (hipRTC, comgr's ISA list) and its disk cache;
//! - [`target`]: gfx target names;
//! - [`image`]: reading code objects and offload bundles;
//! - [`blas`]: gemm through rocBLAS;
//! - [`graph`]: HIP graphs;
//! - `bench` (with the `bench` feature; not public): the device's raw vendor baselines for
//!   `xthunk bench`, handed out by `Device::raw_baseline`.
//!
//! Environment: `XTHUNK_ROCM_PATH` (`:`-separated folders searched first), `ROCM_PATH`,
//! `XTHUNK_ROCM_NO_DEFAULT_SEARCH` (search only `XTHUNK_ROCM_PATH`), `XDG_CACHE_HOME` (the
//! hsaco cache, core's kernel cache, lives in `$XDG_CACHE_HOME/xthunk/kernels/rocm`).

#[cfg(feature = "bench")]
mod bench;
pub mod blas;
pub mod compile;
pub mod context;
pub mod device;
pub mod graph;
pub mod image;
pub mod loader;
pub mod module;
mod pool;
pub mod result;
pub mod stream;
pub mod sys;
pub mod target;
pub mod vendor;

pub use compile::{
    CacheStatus, CompileOutput, Compiler, KernelCache, compile_for_target, default_cache,
    precompile, precompile_module,
};
pub use device::{RocmBackend, RocmDevice, RuntimeLibrary};
pub use graph::RocmGraph;
pub use loader::SearchConfig;
pub use module::{RocmKernel, RocmModule};
pub use result::CompileError;
pub use stream::{RocmStream, bind_current};
pub use target::Target;
pub use vendor::{Rocm, RocmBuffer, RocmEvent};
