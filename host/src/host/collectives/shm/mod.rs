//! The shared memory transport: host collectives across the processes of one host, one rank per
//! process, through POSIX shared memory segments (`/dev/shm` on Linux).
//!
//! # Setting a clique up
//!
//! A clique (a [`CliqueKey`]) gets one segment, named from the job id, a hash of the key, a
//! generation and a nonce (`xthunk-shm@<job>@<hash>.<generation>.<nonce>`: two jobs never
//! share a name, a clique made again after [`CliqueProvider::evict_aborted`] gets a new one, and
//! the 128-bit random nonce, drawn for each setup, keeps other users of the host from creating
//! the name first). Every member acquires it in the same order (the executor's program order),
//! as NCCL's communicator creation is a collective call:
//!
//! 1. the clique's first rank draws the nonce, creates the segment (exclusively, mode 0600
//!    whatever the umask; a name that exists already is refused and left alone), reserves its
//!    memory (`posix_fallocate`: a full `/dev/shm` is an error here, never a `SIGBUS` later),
//!    writes the header and announces the segment through the [`Coordinator`] (key
//!    `xthunk.shm/<hash>/<generation>`: the name and a random token);
//! 2. every other member reads the announcement (up to the terminate timeout: a first rank that
//!    never arrives is named), checks that the name is one of this setup, opens the segment
//!    and checks it (`fstat` of the open descriptor: a regular file owned by this user with
//!    mode 0600, else it is refused with an error naming its owner and mode, before it is
//!    mapped: another user, or anyone who can write the coordinator, may have put it there),
//!    then maps it and checks the header against the announcement;
//! 3. each member marks itself joined in the segment and waits until every member did (the
//!    clique's barrier, with the timeouts below); then every member unlinks the name. From
//!    then on the segment lives only in the members' mappings: nothing is left in `/dev/shm`
//!    whatever happens to the processes later, killed ones included.
//!
//! A failed setup unlinks the name at once. The names a process may still have in `/dev/shm`
//! (a setup in progress) are also kept in a process-wide list, so that a failure handler can
//! remove them ([`remove_pending_segments`]); [`remove_job_segments`] removes every segment of
//! a job, for a process that is exiting because its job failed.
//!
//! # Moving data
//!
//! The segment holds a control block per rank (a phase counter and the description of its
//! current operation), two staging slots per rank (a bounded size: large buffers go through in
//! chunks), and two mailbox chunks per ordered pair of ranks for sends and receives. Every
//! word other processes read is an atomic in the shared memory.
//!
//! A collective runs in **phases**, one per chunk: each rank writes the operation's description
//! and its part of the chunk into its slot of the phase's parity, publishes the phase (release
//! store), waits until every rank published it (acquire loads), checks that every rank issued
//! the same operation (else every rank fails, with a message listing what each issued), then
//! reads what it needs from the others' slots — a reduction over every rank's slot, in rank
//! order, with the same code as the in-process host collectives, so results are bit-identical
//! to theirs. Slots alternate between two parities, so one barrier per chunk suffices: a rank
//! writes the slot of phase `p + 1` only after every rank arrived at `p`, hence finished
//! reading `p - 1`.
//!
//! **Send/receive** go through the mailbox of the ordered pair, a ring of two chunks with a
//! written and a read counter: the `k`-th send from `a` to `b` meets the `k`-th receive on `b`
//! from `a`, and the receiver checks that both name the same count and type. A group (a
//! permute) progresses all its sends and receives together, so no order of them deadlocks.
//!
//! # Failing loudly
//!
//! A waiting rank warns after [`Timeouts::warn_after`] naming the ranks it waits for, and fails
//! after [`Timeouts::terminate_after`] naming them; it polls the [`Coordinator`]'s failures, so
//! a rank the coordinator reports dead is named as soon as that is known. Any failure inside an
//! operation (a timeout, a mismatch, a dead peer, [`Communicator::abort`]) **poisons** the
//! segment with its message: every rank waiting in it, and every later operation, fails at once
//! with that message. Unlike the in-process collectives, no rank ever touches another rank's
//! memory (only the shared segment), so a rank may leave an operation at any moment.
//!
//! [`CliqueKey`]: crate::collectives::CliqueKey
//! [`CliqueProvider::evict_aborted`]: crate::collectives::CliqueProvider::evict_aborted
//! [`Coordinator`]: crate::distributed::Coordinator
//! [`Timeouts::warn_after`]: crate::collectives::Timeouts::warn_after
//! [`Timeouts::terminate_after`]: crate::collectives::Timeouts::terminate_after
//! [`Communicator::abort`]: crate::collectives::Communicator::abort

mod algorithms;
mod layout;
mod names;
mod provider;
mod rank;
mod segment;
mod setup;
#[cfg(test)]
mod tests;

pub use names::{job_segment_prefix, job_segments, remove_job_segments, remove_pending_segments};
pub use provider::ShmCliqueProvider;
pub use rank::ShmCommunicator;

use crate::collectives::Timeouts;
use crate::error::Error;

pub(super) const BACKEND: &str = "host-shm";

/// Sizes and timeouts of the cliques of a [`ShmCliqueProvider`]. The sizes are upper bounds,
/// applied by each clique's first rank (the others take what its segment says); large cliques
/// get smaller slots so that a segment stays within about 32 MiB of `/dev/shm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOptions {
    /// Applied to every wait: clique setup, collective phases, sends and receives.
    pub timeouts: Timeouts,
    /// Bytes of one staging slot (each rank has two): the chunk size of collectives.
    pub slot_bytes: usize,
    /// Bytes of one mailbox chunk (two per ordered pair of ranks): the chunk size of sends.
    pub mailbox_bytes: usize,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            timeouts: Timeouts::default(),
            slot_bytes: 256 << 10,
            mailbox_bytes: 64 << 10,
        }
    }
}

impl ShmOptions {
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

pub(super) fn shm_error(call: &str, message: impl Into<String>) -> Error {
    Error::backend(BACKEND, call, message)
}
