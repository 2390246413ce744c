//! xthunk: a vendor-neutral GPU runtime. Programs are serializable thunk sequences; one
//! executor runs them through one backend trait on CUDA, HIP or the host (CPU) reference
//! backend, chosen at run time.
//!
//! ```no_run
//! use xthunk::{Runtime, BackendChoice, ExecuteOptions};
//! let rt = Runtime::new();
//! let (backend, _skipped) = rt.select(&BackendChoice::Auto)?;
//! let device = backend.device(0)?;
//! let program = xthunk::proto::load_file("examples/mlp.txtpb")?;
//! let exe = xthunk::LoadedExecutable::load(device, program)?;
//! # let inputs: Vec<&[u8]> = vec![];
//! let outputs = exe.run_with_host_data(&inputs, &ExecuteOptions::default())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use xthunk_core as core;
pub use xthunk_core::backend::{
    Backend, BackendChoice, BackendRegistry, Buffer, Device, DeviceInfo, DeviceMemory, Stream,
};
pub use xthunk_core::builder;
pub use xthunk_core::executor::{CancelToken, ExecuteOptions, Execution, LoadedExecutable};
pub use xthunk_core::ir;
pub use xthunk_core::{Error, Result};
pub use xthunk_cuda::Target as CudaTarget;
pub use xthunk_proto as proto;
pub use xthunk_rocm::Target as RocmTarget;

mod cliques;
/// What the C ABI and the Python package share.
pub mod embed;
pub mod plugins;
pub mod program_file;
pub use cliques::{
    BackendCollectives, BindDevice, JobCliqueFactory, JobCliques, NcclCliqueFactory,
    ShmJobCliqueFactory,
};
pub use program_file::{load_file, load_program};

use std::sync::Arc;
use xthunk_core::host::HostCliqueFactory;

/// The backends compiled into this binary, in `auto` order (GPU backends first, host last),
/// each with its collective support ([`BackendCollectives`]): the one place that says which
/// clique provider a backend's devices use.
pub struct Runtime {
    registry: BackendRegistry,
    /// Per registered backend, in registration order.
    collectives: Vec<(&'static str, BackendCollectives)>,
}

impl Runtime {
    /// A runtime with every backend of this build; the host backend has one device.
    pub fn new() -> Self {
        Self::with_host_devices(1)
    }

    /// A runtime whose host backend exposes `n` devices.
    pub fn with_host_devices(n: usize) -> Self {
        let mut rt = Runtime {
            registry: BackendRegistry::new(),
            collectives: Vec::new(),
        };
        rt.register(
            Arc::new(xthunk_cuda::CudaBackend::new()),
            BackendCollectives::in_process(NcclCliqueFactory::nccl())
                .across_processes(NcclCliqueFactory::nccl()),
        );
        rt.register(
            Arc::new(xthunk_rocm::RocmBackend::new()),
            BackendCollectives::in_process(NcclCliqueFactory::rccl())
                .across_processes(NcclCliqueFactory::rccl()),
        );
        rt.register(
            Arc::new(xthunk_core::host::HostBackend::with_devices(n)),
            BackendCollectives::in_process(HostCliqueFactory).across_processes(ShmJobCliqueFactory),
        );
        rt
    }

    /// Adds `backend` (last in `auto` order) with its collective support.
    pub fn register(&mut self, backend: Arc<dyn Backend>, collectives: BackendCollectives) {
        self.collectives.push((backend.name(), collectives));
        self.registry.register(backend);
    }

    pub fn registry(&self) -> &BackendRegistry {
        &self.registry
    }

    /// Picks a backend (see [`BackendRegistry::select`]).
    pub fn select(&self, choice: &BackendChoice) -> Result<(Arc<dyn Backend>, Vec<String>)> {
        self.registry.select(choice)
    }

    /// The collective support registered with the backend named `backend` (none for a
    /// backend this runtime does not have).
    pub fn collectives(&self, backend: &str) -> BackendCollectives {
        self.collectives
            .iter()
            .find(|(name, _)| *name == backend)
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    }
}

/// Compiles a portable module image (`Standard` or `Source`) for a CUDA target (`sm_90`, or
/// `compute_90` for PTX) with NVRTC; `None` for images that need no compilation.
pub fn compile_cuda(image: &ir::ModuleImage, target: &str) -> Result<Option<ir::ModuleImage>> {
    xthunk_cuda::precompile(image, target)
}

/// Compiles a portable module image for an AMD target (`gfx90a`) with hipRTC.
pub fn compile_rocm(image: &ir::ModuleImage, target: &str) -> Result<Option<ir::ModuleImage>> {
    xthunk_rocm::precompile(image, target)
}

/// [`compile_cuda`] of an image of `module`: with the module's compile options; messages
/// name the module and the user's lines.
pub fn compile_cuda_module(
    module: &ir::Module,
    image: &ir::ModuleImage,
    target: &str,
) -> Result<Option<ir::ModuleImage>> {
    xthunk_cuda::precompile_module(module, image, target)
}

/// [`compile_rocm`] of an image of `module`: with the module's compile options; messages
/// name the module and the user's lines.
pub fn compile_rocm_module(
    module: &ir::Module,
    image: &ir::ModuleImage,
    target: &str,
) -> Result<Option<ir::ModuleImage>> {
    xthunk_rocm::precompile_module(module, image, target)
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}
