//! [`Transport`]: what differs between the two host communicators (threads of one process,
//! processes through shared memory), and the buffers it runs on ([`RawBuf`], [`P2pOp`]).

use super::ops::OpDesc;
use crate::collectives::Member;
use crate::error::Result;
use crate::ir::DType;
use std::ptr;

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

/// A checked buffer of a rank, for the duration of one operation: null and empty when the
/// operation has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBuf {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: a `RawBuf` is only the address and length of a region that its rank's queued stream
// work checked against a live allocation and keeps alive for the whole operation; moving that
// address to another thread touches nothing. Every access through it is an unsafe block of a
// transport, which says why nobody else touches those bytes at that time (the in-process
// transport exposes buffers to peers only between a completed rendezvous and the peers' release;
// the shared memory transport never lets a buffer leave its rank).
unsafe impl Send for RawBuf {}
// SAFETY: as above; the struct itself is an immutable address and length.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    pub(crate) const NONE: RawBuf = RawBuf {
        ptr: ptr::null_mut(),
        len: 0,
    };
}

/// One send or receive of a group, as the run side gets it (`buf.len` bytes: `count`
/// elements of `dtype`).
#[derive(Clone, Copy, Debug)]
pub struct P2pOp {
    pub(crate) send: bool,
    /// Clique rank.
    pub(crate) peer: usize,
    pub(crate) count: u64,
    pub(crate) dtype: DType,
    pub(crate) buf: RawBuf,
}
