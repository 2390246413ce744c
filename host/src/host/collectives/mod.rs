//! The host backend's collectives: communicators among the devices of one process
//! ([`HostCliqueProvider`]) and across the processes of one host, one rank each
//! ([`ShmCliqueProvider`], through POSIX shared memory). They implement the backend-neutral
//! [`Communicator`](crate::collectives::Communicator) and
//! [`CliqueProvider`](crate::collectives::CliqueProvider).
//!
//! Both communicators are one type, [`HostComm`], over two [`Transport`]s: they share the
//! issue side ([`comm`]: checks, groups of sends and receives) and the built-in host kernel an
//! operation is queued on the rank's host stream as ([`kernel`]: its arguments, encoded and
//! decoded there; [`ops`]: the operation's description and codes). When the stream reaches the
//! launch, the kernel hands the operation to the transport, which meets the other ranks and
//! moves the data: [`local`] directly between the ranks' buffers, [`shm`] through a shared
//! memory segment. Both reduce with [`reduce`], in rank order, so their results are
//! bit-identical.

mod comm;
mod kernel;
mod local;
mod ops;
mod reduce;
mod shm;
mod transport;

pub use comm::HostComm;
pub use local::{HostCliqueFactory, HostCliqueProvider, LocalRank};
pub use shm::{
    ShmCliqueProvider, ShmCommunicator, ShmOptions, job_segment_prefix, job_segments,
    remove_job_segments, remove_pending_segments,
};

/// One rank's communicator among the devices of one process.
pub type HostCommunicator = HostComm<LocalRank>;
