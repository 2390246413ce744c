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

pub use comm::HostComm;
pub use kernel::{P2pOp, RawBuf};
pub use local::{HostCliqueFactory, HostCliqueProvider, LocalRank};
pub use ops::OpDesc;
pub use shm::{
    ShmCliqueProvider, ShmOptions, ShmRank, job_segment_prefix, job_segments, remove_job_segments,
    remove_pending_segments,
};

use crate::collectives::Member;
use crate::error::Result;

/// One rank's communicator among the devices of one process.
pub type HostCommunicator = HostComm<LocalRank>;
/// This process's rank in one clique of a [`ShmCliqueProvider`].
pub type ShmCommunicator = HostComm<ShmRank>;

/// How one rank of a host clique reaches the others: the run side of every operation (called by
/// the built-in kernel when the rank's stream reaches it) and the clique's failure state.
/// Everything else a communicator does is [`HostComm`]'s, the same for every transport.
pub trait Transport: Send + Sync + 'static {
    /// The backend errors name (`host`, `host-shm`).
    fn backend(&self) -> &'static str;
    /// This rank's place in its clique.
    fn member(&self) -> &Member;
    /// This rank and its clique in words, for messages.
    fn describe(&self) -> String;
    /// Runs collective `desc` with this rank's buffers.
    ///
    /// # Safety
    /// `src` and `dst` point to valid memory of the lengths `desc` implies for this rank
    /// ([`OpDesc::lens`]; null and empty where the rank has no such buffer) for the whole call.
    unsafe fn run_collective(&self, desc: OpDesc, src: RawBuf, dst: RawBuf) -> Result<()>;
    /// Runs a group of sends and receives.
    ///
    /// # Safety
    /// Every buffer points to valid memory of its length for the whole call.
    unsafe fn run_group(&self, ops: &[P2pOp]) -> Result<()>;
    /// An error the clique hit (see [`Communicator::async_error`](crate::collectives::Communicator::async_error)).
    fn async_error(&self) -> Result<()>;
    /// Fails every pending and future operation of the clique, on every rank.
    fn abort(&self, reason: &str);
    /// What the clique is waiting on, if anything.
    fn pending(&self) -> Option<String>;
}
