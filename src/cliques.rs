//! How each backend's devices form cliques: the collective support the [`Runtime`] registers
//! with every backend (a [`CliqueFactory`] for cliques within one process, and whether jobs
//! of several processes can run collectives on it), and NCCL/RCCL as a [`CliqueFactory`].
//!
//! [`Runtime`]: crate::Runtime

use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::collectives::{CliqueFactory, CliqueProvider, Timeouts};
use xthunk_core::{Error, Result};
use xthunk_nccl::{BindRank, Flavor, NcclCliqueProvider};

/// What a backend's devices can do with collectives, registered with the backend.
#[derive(Clone, Default)]
pub struct BackendCollectives {
    /// Cliques among devices of this process, one thread per rank (`run --devices N`, the
    /// conformance suite); `None`: the backend has none.
    pub cliques: Option<Arc<dyn CliqueFactory>>,
    /// Ranks in different processes of one job (`xthunk launch`) meet through shared memory
    /// segments ([`xthunk_core::collectives::ShmCliqueProvider`]), which move data through
    /// host memory: only for backends whose device memory is host memory.
    pub across_processes: bool,
}

impl BackendCollectives {
    /// No collectives.
    pub fn none() -> Self {
        Self::default()
    }

    /// Cliques within one process from `factory`; none across processes.
    pub fn in_process(factory: impl CliqueFactory + 'static) -> Self {
        BackendCollectives {
            cliques: Some(Arc::new(factory)),
            across_processes: false,
        }
    }

    /// Also across the processes of a job (through host shared memory).
    pub fn across_processes(mut self) -> Self {
        self.across_processes = true;
        self
    }
}

/// Makes one device current on the calling thread (`xthunk_cuda::bind_current`,
/// `xthunk_rocm::bind_current`).
pub type BindDevice = fn(&dyn Device) -> Result<()>;

/// NCCL (CUDA) or RCCL (ROCm) cliques: an [`NcclCliqueProvider`] whose [`BindRank`] hook makes
/// device `r` current on rank `r`'s thread before its communicator is created
/// (`ncclCommInitRank` binds to the current device).
#[derive(Clone, Copy, Debug)]
pub struct NcclCliqueFactory {
    flavor: Flavor,
    bind: BindDevice,
}

impl NcclCliqueFactory {
    /// `flavor`'s cliques among devices that `bind` makes current.
    pub fn new(flavor: Flavor, bind: BindDevice) -> Self {
        NcclCliqueFactory { flavor, bind }
    }

    /// NCCL among CUDA devices.
    pub fn nccl() -> Self {
        Self::new(Flavor::Nccl, xthunk_cuda::bind_current)
    }

    /// RCCL among ROCm devices.
    pub fn rccl() -> Self {
        Self::new(Flavor::Rccl, xthunk_rocm::bind_current)
    }
}

impl CliqueFactory for NcclCliqueFactory {
    fn create(
        &self,
        devices: &[Arc<dyn Device>],
        timeouts: Timeouts,
    ) -> Result<Arc<dyn CliqueProvider>> {
        let bind_one = self.bind;
        let bind_devices = devices.to_vec();
        let bind: BindRank = Arc::new(move |rank: usize| {
            let device = bind_devices
                .get(rank)
                .ok_or_else(|| Error::InvalidArgument(format!("no device for rank {rank}")))?;
            bind_one(device.as_ref())
        });
        Ok(Arc::new(NcclCliqueProvider::new(
            self.flavor,
            devices.to_vec(),
            bind,
            timeouts,
        )?))
    }
}
