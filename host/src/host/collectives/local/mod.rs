//! The in-process transport: host collectives among the devices of one process, each rank
//! reading and writing its peers' buffers directly (host device memory is host memory).
//!
//! # How an operation runs
//!
//! Each operation is queued on the rank's [`HostStream`](crate::host::HostStream) as ordinary
//! stream work (a launch of a built-in host kernel whose arguments are the operation's buffers
//! — so the stream checks every pointer range against the device's live allocations and keeps
//! the memory alive while the work runs — and scalars describing the operation). When the
//! stream reaches it, on the stream's worker (or in the issuing thread, in the stream's
//! immediate mode):
//!
//! 1. the rank takes the communicator's next **sequence number** (counted when operations run,
//!    so captured command buffers replay correctly) and meets the other ranks at the
//!    rendezvous `collective #seq` (warn-after and terminate-after timeouts, abortable),
//!    contributing the operation's description and its buffer addresses;
//! 2. every rank compares the descriptions: any difference (kind, count, dtype, operator,
//!    root) fails the operation on **every** rank with a message listing what each rank
//!    issued, and poisons the clique;
//! 3. the ranks move the data directly between each other's buffers (host device memory is
//!    host memory), each rank doing a disjoint share of the work in parallel;
//! 4. each rank counts down a shared counter when its share is done and leaves only when it
//!    reaches zero: nobody's buffers are released or reused before every peer is done with
//!    them. That wait has no timeout and ignores aborts — it is bounded by the peers' memory
//!    copies, which never block — because leaving earlier could let a peer write into memory
//!    the stream has already given back; it is how the design stays memory safe when an
//!    operation fails half way.
//!
//! **All-reduce** is fused and chunked: the elements are split into one chunk per rank
//! (aligned to cache lines); rank `r` reduces chunk `r` across every rank's input, block by
//! block in L1-sized blocks, and writes the result to every rank's output (reduce-scatter and
//! all-gather in one pass, every input byte read once and every output byte written once,
//! large outputs with non-temporal stores). **Reduce-scatter**: each rank reduces its own
//! block. **All-gather**, **broadcast**, **all-to-all**: each rank pulls what it receives
//! (in-place all-to-all stages through a private buffer and writes once everyone has read). In-place
//! forms are the NCCL ones (`src == dst`; all-gather `src == dst + rank·count`;
//! reduce-scatter `dst == src + rank·count`); other overlaps are rejected when issued.
//!
//! **Send/receive**: the `k`-th send from `a` to `b` meets the `k`-th receive on `b` from `a`
//! (counted when they run). A group (`group_start` … [`Communicator::group_end_on`]) is queued
//! as one operation: the rank posts all its sends and receives first and only then waits, so
//! a permute (one send and one receive per rank, in any order) cannot deadlock; the receiver
//! copies and releases the sender, which leaves only then. Once any round of a group may
//! have completed, every posted round is seen through, even after an error.
//!
//! Any failure inside an operation (timeout, mismatch, abort) poisons the clique, so no rank
//! is ever left waiting for one that gave up. The communicator stays failed: after an abort,
//! [`CliqueProvider::evict_aborted`] makes the next acquire create a fresh clique.
//!
//! **Immediate mode** (`Stream::set_immediate`) runs an operation in the issuing thread when
//! the stream is idle, so it blocks there until the peers arrive: issue each rank from its own
//! thread then (as an SPMD executor does). Queued (the default), one thread may issue for
//! every rank.
//!
//! [`CliqueProvider::evict_aborted`]: crate::collectives::CliqueProvider::evict_aborted
//! [`Communicator::group_end_on`]: crate::collectives::Communicator::group_end_on

mod algorithms;
mod provider;
mod touching;

pub use provider::{HostCliqueFactory, HostCliqueProvider};

use super::ops::OpDesc;
use super::transport::Transport;
use super::transport::{P2pOp, RawBuf};
use crate::collectives::{CliqueKey, Member, Rendezvous, Timeouts, error_message};
use crate::error::{Error, Result};
use crate::ir::DType;
use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use touching::Touching;

// ---------------------------------------------------------------------------------------------
// What the ranks of a clique meet on.

/// What ranks contribute at a rendezvous.
enum Msg {
    Op {
        desc: OpDesc,
        src: RawBuf,
        dst: RawBuf,
        /// Every rank brings one; clique rank 0's is used.
        touching: Arc<Touching>,
    },
    P2p {
        count: u64,
        dtype: DType,
        buf: RawBuf,
        /// The sender's: released by the receiver once it copied.
        touching: Arc<Touching>,
    },
    Split {
        color: Option<u64>,
    },
}

/// A rendezvous round of a clique. Ranks are global ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RvKey {
    Op { seq: u64 },
    P2p { from: usize, to: usize, n: u64 },
    Split { n: u64 },
}

impl fmt::Display for RvKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RvKey::Op { seq } => write!(f, "collective #{seq}"),
            RvKey::P2p { from, to, n } => write!(f, "send #{n} from rank {from} to rank {to}"),
            RvKey::Split { n } => write!(f, "split #{n}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cliques and ranks.

struct HostClique {
    key: CliqueKey,
    rv: Rendezvous<RvKey, Msg>,
}

impl HostClique {
    fn new(key: &CliqueKey, timeouts: Timeouts) -> Arc<Self> {
        Arc::new(HostClique {
            key: key.clone(),
            rv: Rendezvous::new(format!("host {key}"), timeouts),
        })
    }
}

/// One rank of an in-process clique: the [`Transport`] of a
/// [`HostCommunicator`](super::HostCommunicator).
pub struct LocalRank {
    clique: Arc<HostClique>,
    member: Member,
    /// Collectives run so far.
    seq: AtomicU64,
    /// Per peer (clique rank): sends and receives run so far.
    p2p: Mutex<Vec<[u64; 2]>>,
    /// Splits so far (issued by the host thread, not a stream).
    splits: AtomicU64,
}

impl LocalRank {
    fn new(clique: Arc<HostClique>, member: Member) -> Self {
        let size = clique.key.size();
        LocalRank {
            clique,
            member,
            seq: AtomicU64::new(0),
            p2p: Mutex::new(vec![[0, 0]; size]),
            splits: AtomicU64::new(0),
        }
    }
}

impl LocalRank {
    /// Poisons the clique with `what` failed because of `e`, and returns the error.
    fn fail(&self, what: &str, e: Error) -> Error {
        let msg = format!("{what} on {}: {}", self.describe(), error_message(&e));
        // Whatever went wrong, nobody may wait for this rank any longer.
        self.clique.rv.poison(&msg);
        Error::backend("host", "collective", msg)
    }
}

impl Transport for LocalRank {
    fn backend(&self) -> &'static str {
        "host"
    }

    fn member(&self) -> &Member {
        &self.member
    }

    fn describe(&self) -> String {
        self.member.to_string()
    }

    unsafe fn run_collective(&self, desc: OpDesc, src: RawBuf, dst: RawBuf) -> Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let what = format!("{desc} (collective #{seq})");
        // SAFETY: forwarded.
        unsafe { self.collective(seq, desc, src, dst) }.map_err(|e| self.fail(&what, e))
    }

    unsafe fn run_group(&self, ops: &[P2pOp]) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.p2p_group(ops) }.map_err(|e| self.fail("send/recv group", e))
    }

    fn async_error(&self) -> Result<()> {
        match self.clique.rv.poisoned() {
            Some(msg) => Err(Error::backend(
                "host",
                "collective",
                format!("{}: {msg}", self.describe()),
            )),
            None => Ok(()),
        }
    }

    fn abort(&self, reason: &str) {
        tracing::warn!(communicator = %self.describe(), reason, "aborting host communicator");
        self.clique.rv.poison(&format!(
            "{} aborted by rank {}: {reason}",
            self.clique.key,
            self.member.global_rank()
        ));
    }

    fn pending(&self) -> Option<String> {
        self.clique.rv.describe_pending()
    }
}

fn peer_failed() -> Error {
    Error::backend(
        "host",
        "collective",
        "another rank could not do its share of the operation",
    )
}
