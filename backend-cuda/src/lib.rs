//! xthunk's CUDA backend.
//!
//! - The **driver** through cudarc's `sys` layer, loaded with `dlopen` at run time (no CUDA is
//!   needed to build; a machine without it still starts). cudarc panics when a library or
//!   symbol is missing, so [`CudaBackend::probe`](xthunk_core::backend::Backend::probe)
//!   checks first: the library (override folders, then cudarc's own names), every symbol this
//!   crate calls, then `cuInit` / `cuDriverGetVersion` under `catch_unwind` with a quiet panic
//!   hook; drivers older than CUDA 12.0 are refused. Every failure is
//!   `Unavailable { backend: "cuda", reason }` naming what was tried.
//! - **NVRTC** and **cuBLAS** through the crate's own `libloading` tables ([`nvrtc`], `blas`),
//!   found by [`loader`] in `XTHUNK_CUDA_PATH`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`,
//!   pip's `nvidia-*` wheels and the system search.
//! - **Kernels**: modules load a cubin for the device's exact `sm_XX`, else compile the
//!   portable source ([`xthunk_core::kernels::portable`]) with NVRTC for the device (cached on
//!   disk, see [`compile`]), else hand PTX to the driver's JIT.
//! - **Graphs**: stream capture into CUDA graphs, instantiated once, launched on a stream.
//!
//! Vendor result codes are turned into errors in one place (`result`), with the call, the
//! code's name and number.
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

pub mod bench;
mod blas;
pub mod compile;
pub mod context;
pub mod cubin;
mod device;
pub mod graph;
pub mod loader;
mod memory;
mod module;
pub mod nvrtc;
mod result;
mod stream;
pub mod sys;

pub use compile::{CacheStatus, CompileOutput, Compiler, Target, default_cache_dir};
pub use device::{CudaBackend, CudaDevice};
pub use graph::CudaGraph;
pub use loader::SearchConfig;
pub use memory::CudaBuffer;
pub use module::{CudaKernel, CudaModule};
pub use stream::{CudaEvent, CudaStream, bind_current};

use xthunk_core::Error;
use xthunk_core::ir::ModuleImage;
use xthunk_core::kernels::portable;

/// Compiles a complete portable translation unit (as [`portable::standard_source`] or
/// [`portable::with_prelude`] give) for `target` (`sm_XX`: a cubin; `compute_XX`: PTX text)
/// with the environment's NVRTC, through the disk cache. Needs no GPU. For
/// `xthunk compile`.
pub fn compile_for_target(source: &str, target: &str) -> Result<Vec<u8>, Error> {
    let target = Target::parse(target)?;
    let nvrtc = nvrtc::Nvrtc::global()?;
    Ok(Compiler::new(nvrtc).compile(source, target)?.image)
}

/// The precompiled image of a portable module image for `target`: `Standard` and `Source`
/// become `Cubin { arch, data }` (for `sm_XX`) or `Ptx` (for `compute_XX`); other images
/// give `None` (they need no compiling).
pub fn precompile(image: &ModuleImage, target: &str) -> Result<Option<ModuleImage>, Error> {
    let source = match image {
        ModuleImage::Standard => portable::standard_source().to_string(),
        ModuleImage::Source { code } => portable::with_prelude(code),
        _ => return Ok(None),
    };
    let t = Target::parse(target)?;
    let data = compile_for_target(&source, target)?;
    Ok(Some(match t {
        Target::Sm(_) => ModuleImage::Cubin {
            arch: t.to_string(),
            data,
        },
        Target::Compute(_) => ModuleImage::Ptx {
            code: String::from_utf8_lossy(&data).into_owned(),
        },
    }))
}
