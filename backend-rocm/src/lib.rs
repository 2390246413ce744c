//! xthunk's ROCm backend: AMD GPUs through HIP, hipRTC and rocBLAS, all opened with `dlopen`
//! at run time through hand-written declaration tables (no crate on crates.io fits: `hip-sys`
//! links `libamdhip64` at build time). The crate builds without ROCm, and a process using it
//! starts on a machine without ROCm or without an AMD GPU: `RocmBackend::probe` (the `Backend` trait) then says
//! why (`Unavailable`, with every path tried, or "no AMD GPU" and the runtime's version).
//!
//! Modules mirror the CUDA backend's: [`loader`] (library search, the HIP symbol table),
//! [`compile`] (hipRTC and comgr's ISA list, portable source → HSACO, disk
//! cache, [`compile_for_target`]), [`device`] (backend, probing, devices), [`memory`],
//! [`stream`] (streams, events, HIP graphs), [`module`] (image selection, argument
//! marshalling) and [`blas`] (rocBLAS gemm); [`sys`] holds the C declarations, [`result`] the
//! one mapping of vendor result codes, [`image`] the code object reader.
//!
//! Environment: `XTHUNK_ROCM_PATH` (`:`-separated folders searched first), `ROCM_PATH`,
//! `XTHUNK_ROCM_NO_DEFAULT_SEARCH` (search only `XTHUNK_ROCM_PATH`), `XDG_CACHE_HOME` (the
//! hsaco cache lives in `$XDG_CACHE_HOME/xthunk/kernels/rocm`).

pub mod blas;
pub mod compile;
pub mod context;
pub mod device;
pub mod graph;
pub mod image;
pub mod loader;
pub mod memory;
pub mod module;
pub mod result;
pub mod stream;
pub mod sys;
pub mod target;

pub use compile::{Compiled, Compiler, DiskCache, Origin, compile_for_target, precompile};
pub use device::{RocmBackend, RocmDevice, RuntimeLibrary};
pub use loader::SearchConfig;
pub use result::CompileError;
pub use stream::bind_current;
pub use target::Target;
