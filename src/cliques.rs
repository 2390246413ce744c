//! How each backend's devices form cliques: the collective support the [`Runtime`] registers
//! with every backend (a [`CliqueFactory`] for cliques within one process, a
//! [`JobCliqueFactory`] for jobs of several processes), and NCCL/RCCL as both.
//!
//! [`Runtime`]: crate::Runtime

use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::collectives::{CliqueFactory, CliqueProvider, JobPlacement, Timeouts};
use xthunk_core::distributed::Coordinator;
use xthunk_core::host::{ShmCliqueProvider, ShmOptions};
use xthunk_core::{Error, Result};
use xthunk_nccl::{BindRank, Flavor, NcclCliqueProvider, NcclJobCliqueProvider};

/// What a backend's devices can do with collectives, registered with the backend.
#[derive(Clone, Default)]
pub struct BackendCollectives {
    /// Cliques among devices of this process, one thread per rank (`run --devices N`, the
    /// conformance suite); `None`: the backend has none.
    pub cliques: Option<Arc<dyn CliqueFactory>>,
    /// Cliques among the ranks of a job of several processes (`xthunk launch`, Slurm, MPI,
    /// Kubernetes); `None`: such jobs cannot run collectives on this backend.
    pub jobs: Option<Arc<dyn JobCliqueFactory>>,
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
            jobs: None,
        }
    }

    /// Also across the processes of a job, from `factory`.
    pub fn across_processes(mut self, factory: impl JobCliqueFactory + 'static) -> Self {
        self.jobs = Some(Arc::new(factory));
        self
    }
}

/// This process's part of a job's cliques: the job's coordinator, this process's devices and
/// the global ranks they are (see [`JobPlacement`]), the rendezvous timeouts.
#[derive(Clone, Debug)]
pub struct JobCliques {
    pub coordinator: Arc<dyn Coordinator>,
    pub placement: JobPlacement,
    pub timeouts: Timeouts,
}

/// Makes the [`CliqueProvider`] of one process of a job.
pub trait JobCliqueFactory: Send + Sync {
    /// How the collectives travel, in words (`shared memory`, `NCCL`): for the rank's banner.
    fn transport(&self) -> &'static str;
    /// The most devices one process may drive (`None`: no limit).
    fn devices_per_process(&self) -> Option<usize>;
    /// Whether the processes of one host may all use the same device ordinals (the host
    /// backend's device is this process's memory); otherwise each process takes its own
    /// devices by its local rank.
    fn shares_devices(&self) -> bool;
    fn create(&self, job: JobCliques) -> Result<Arc<dyn CliqueProvider>>;
}

/// Host jobs: one rank per process, cliques through shared memory segments
/// ([`ShmCliqueProvider`]; host memory only, so only for the host backend, on one host).
#[derive(Clone, Copy, Debug, Default)]
pub struct ShmJobCliqueFactory;

impl JobCliqueFactory for ShmJobCliqueFactory {
    fn transport(&self) -> &'static str {
        "shared memory"
    }

    fn devices_per_process(&self) -> Option<usize> {
        Some(1)
    }

    fn shares_devices(&self) -> bool {
        true
    }

    fn create(&self, job: JobCliques) -> Result<Arc<dyn CliqueProvider>> {
        let me = job.coordinator.rank();
        if job.placement.devices.len() != 1 || job.placement.first_rank != me {
            return Err(Error::Unsupported {
                backend: "host".into(),
                feature: format!(
                    "{} devices in one process of a job (shared memory cliques serve one rank \
                     per process): drop --devices",
                    job.placement.devices.len()
                ),
            });
        }
        Ok(Arc::new(ShmCliqueProvider::new(
            job.coordinator,
            ShmOptions::default().with_timeouts(job.timeouts),
        )))
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

    /// The hook that makes `devices[i]` current on the calling thread.
    fn bind_hook(&self, devices: &[Arc<dyn Device>]) -> BindRank {
        let bind_one = self.bind;
        let devices = devices.to_vec();
        Arc::new(move |i: usize| {
            let device = devices
                .get(i)
                .ok_or_else(|| Error::InvalidArgument(format!("no device {i} to bind")))?;
            bind_one(device.as_ref())
        })
    }
}

impl CliqueFactory for NcclCliqueFactory {
    fn create(
        &self,
        devices: &[Arc<dyn Device>],
        timeouts: Timeouts,
    ) -> Result<Arc<dyn CliqueProvider>> {
        Ok(Arc::new(NcclCliqueProvider::new(
            self.flavor,
            devices.to_vec(),
            self.bind_hook(devices),
            timeouts,
        )?))
    }
}

impl JobCliqueFactory for NcclCliqueFactory {
    fn transport(&self) -> &'static str {
        self.flavor.name()
    }

    fn devices_per_process(&self) -> Option<usize> {
        None
    }

    fn shares_devices(&self) -> bool {
        false
    }

    fn create(&self, job: JobCliques) -> Result<Arc<dyn CliqueProvider>> {
        let bind = self.bind_hook(&job.placement.devices);
        Ok(Arc::new(NcclJobCliqueProvider::new(
            self.flavor,
            job.coordinator,
            job.placement,
            bind,
            job.timeouts,
        )?))
    }
}
