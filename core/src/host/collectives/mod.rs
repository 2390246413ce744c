//! The host backend's collectives: communicators among the devices of one process
//! ([`HostCliqueProvider`]) and across the processes of one host, one rank each
//! ([`ShmCliqueProvider`], through POSIX shared memory). They implement the backend-neutral
//! [`crate::collectives::Communicator`] and [`crate::collectives::CliqueProvider`].

mod issue;
mod local;
mod reduce;
mod shm;

pub use local::{HostCliqueProvider, HostCommunicator};
pub use shm::{
    ShmCliqueProvider, ShmCommunicator, ShmOptions, job_segment_prefix, job_segments,
    remove_job_segments, remove_pending_segments,
};
