//! xthunk's CUDA backend.
//!
//! - The **driver** through cudarc's `sys` layer, loaded with `dlopen` at run time (no CUDA is
//!   needed to build; a machine without it still starts). cudarc panics when a library or
//!   symbol is missing, so [`CudaBackend::probe`](xthunk_core::backend::Backend::probe)
//!   checks first: the library (override folders, then cudarc's own names), every symbol this
//!   crate calls, then `cuInit` / `cuDriverGetVersion` under `catch_unwind` with a quiet panic
//!   hook; drivers older than CUDA 12.0 are refused. Every failure is
//!   `Unavailable { backend: "cuda", reason }` naming what was tried.
//! - **NVRTC** and **cuBLAS** through the crate's symbol tables ([`loader`], declared with
//!   core's one mechanism, `xthunk_core::backend::dylib`), found
//!   in `XTHUNK_CUDA_PATH`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`, pip's `nvidia-*`
//!   wheels and the system search.
//! - **Kernels**: modules load a cubin for the device's exact `sm_XX`, else compile the
//!   portable source ([`xthunk_core::kernels::portable`]) with NVRTC for the device (cached on
//!   disk in core's kernel cache, see [`compile`]), else hand PTX to the driver's JIT.
//! - **Graphs**: stream capture into CUDA graphs, instantiated once, launched on a stream.
//!
//! Vendor result codes are turned into errors in one place ([`result`]), with the call, the
//! code's name and number.
//!
//! # Modules
//!
//! The same files, with the same roles, as the ROCm backend (`xthunk-rocm`):
//!
//! - [`sys`]: the C declarations (cudarc's driver bindings re-exported, NVRTC, cuBLAS);
//! - [`loader`]: finding and opening the libraries, and their symbol tables;
//! - [`result`]: vendor result codes as errors, `unsupported`, `unavailable`;
//! - [`context`]: the per-device state every object of a device shares (`DeviceContext`);
//! - [`device`]: the backend (probing) and its devices;
//! - [`vendor`]: the driver's raw calls behind the shared GPU layer (`xthunk-gpu`: memory,
//!   streams, events), and the shared types named for this crate;
//! - `pool`: the driver calls of the device's memory pool for stream-ordered allocation
//!   (`cuMemAllocFromPoolAsync`);
//! - [`stream`]: streams and events;
//! - [`module`]: image choice, loading, kernel lookup and argument marshalling;
//! - [`params`]: kernel parameters as the driver lays them out, and the launch check;
//! - [`compile`]: the runtime compiler (NVRTC) and its disk cache;
//! - [`target`]: `sm_XX` / `compute_XX` target names;
//! - [`image`]: reading cubins;
//! - [`blas`]: gemm through cuBLAS;
//! - [`graph`]: CUDA graphs;
//! - [`conditional`]: conditional graph nodes (`while`/`conditional` in command buffers,
//!   CUDA 12.4+) and the set-condition kernels;
//! - `bench` (with the `bench` feature; not public): the device's raw vendor baselines for
//!   `xthunk bench`, handed out by `Device::raw_baseline`.
//!
//! # What runs without a GPU
//!
//! The crate's tests run on any machine: probing with no driver (`Unavailable` naming every
//! path tried, no panic text), NVRTC for real when it is installed (every standard kernel
//! compiled for sm_80 and sm_90, the cubins' ELF header and symbols checked, the disk cache
//! hit, rebuilt when corrupt, compile errors carrying NVRTC's log, PTX fallback), and the
//! portable kernels executed on the CPU through a C++ compiler and compared with the host
//! reference. The driver paths (memory, streams, launches, graphs, module loading, cuBLAS)
//! need a GPU or the driver emulator.
//!
//! NVRTC for tests: `python3 -m pip install --target "$HOME/.cache/xthunk/pip"
//! nvidia-cuda-nvrtc-cu12` (found there by default; elsewhere point `XTHUNK_PIP_PREFIX` or
//! `XTHUNK_CUDA_PATH` at it). `XTHUNK_REQUIRE_NVRTC=1` / `XTHUNK_REQUIRE_CXX=1` turn the
//! tests' skips into failures.

#[cfg(feature = "bench")]
mod bench;
pub mod blas;
pub mod compile;
pub mod conditional;
pub mod context;
pub mod device;
pub mod graph;
pub mod image;
pub mod loader;
pub mod module;
pub mod params;
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
pub use device::{CudaBackend, CudaDevice};
pub use graph::CudaGraph;
pub use loader::SearchConfig;
pub use module::{CudaKernel, CudaModule};
pub use stream::{CudaStream, bind_current};
pub use target::Target;
pub use vendor::{Cuda, CudaBuffer, CudaEvent};
