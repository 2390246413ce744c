//! Collectives: what a communicator is, clique keys, the provider contract (one cached
//! communicator per clique and rank), rendezvous with hang detection, and the watchdog —
//! everything that does not depend on a backend. The implementations live with their backends:
//! the host backend's (in-process and shared memory) in `xthunk_core::host`, NCCL/RCCL's in the
//! `xthunk-nccl` crate. This module uses the backend traits only, never a backend.
//!
//! A [`Communicator`] is one rank's handle on a clique of devices. Collective operations are
//! issued on a stream, in order with the stream's other work; every rank of the clique must
//! issue the same operations in the same order (the executor guarantees it for SPMD programs by
//! keeping program order per communicator).
//!
//! # Cliques and the cache
//!
//! A clique is named by a [`CliqueKey`]: the participating global ranks (sorted: clique rank
//! `i` is the `i`-th smallest global rank), the [`StreamKind`] its operations run on, and, for
//! cliques made by [`CliqueProvider::split`], the split color. Keys are totally ordered, so a
//! program's cliques can be listed, compared and acquired in one deterministic order.
//!
//! A rank's place in a clique — its clique rank and global rank — is a [`Member`]
//! ([`CliqueKey::member`] checks a key against the ranks a provider serves).
//!
//! A [`CliqueProvider`] hands out one communicator per `(key, global rank)` and caches it (in a
//! [`CliqueCache`]), so that repeated executions reuse it. **Every rank must acquire its cliques in the same order**
//! (the executor acquires them in program order of the collective thunks): with NCCL/RCCL the
//! creation of a communicator is itself a collective call, and two ranks acquiring two cliques
//! in opposite orders deadlock there. The host provider does not need it to be safe, but keeps
//! the same contract so programs behave alike on every backend.
//!
//! # Hangs
//!
//! Ranks meet in a [`Rendezvous`] with a warn-after timeout (a `tracing` warning naming the
//! ranks that have not arrived, repeated) and a terminate-after timeout (an error naming them
//! on every waiting rank; the clique is then poisoned and every later operation on it fails
//! at once). [`Communicator::async_error`] reports such a failure, [`Communicator::abort`]
//! makes every pending and future operation of the clique fail promptly, and
//! [`Communicator::pending`] says who is missing, for watchdog messages. [`Watchdog`] polls a
//! set of communicators and aborts them all on the first error.

mod cache;
mod rendezvous;
mod watchdog;

pub use cache::CliqueCache;
pub use rendezvous::{PendingRound, Rendezvous, Ticket, Timeouts};
pub use rendezvous::{may_spin, spin_while};
pub use watchdog::{Watchdog, describe_pending, first_async_error};

use crate::backend::{Device, DevicePtr, Stream};
use crate::error::{Error, Result};
pub use crate::ir::ReduceOp;
use crate::ir::{AsyncKind, DType};
use std::fmt;
use std::sync::Arc;

/// One rank's handle on a clique. All operations are asynchronous on `stream`: they are
/// queued in order with the stream's other work and complete when the stream reaches them
/// on every participating rank. Counts are in elements of `dtype`.
pub trait Communicator: Send + Sync {
    /// This rank (0-based) within the clique.
    fn rank(&self) -> usize;
    /// Number of ranks in the clique.
    fn size(&self) -> usize;
    /// `dst[i] = op over ranks of src[i]`, `count` elements; `src == dst` is allowed.
    fn all_reduce(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// `dst[r*count .. (r+1)*count] = src of rank r`.
    fn all_gather(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()>;
    /// `dst = op over ranks of src[rank*count .. (rank+1)*count]`.
    fn reduce_scatter(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// `dst[r*count ..] = src of rank r at [rank*count ..]` (`count` elements per peer).
    fn all_to_all(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()>;
    /// `dst = src of root` on every rank (`root` is a clique rank; `src` is only read on the
    /// root).
    fn broadcast(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        root: usize,
    ) -> Result<()>;
    /// Sends `count` elements to clique rank `peer` (matched by a `recv` there: the `k`-th send
    /// from `a` to `b` meets the `k`-th receive on `b` from `a`; both name the same count and
    /// dtype).
    fn send(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()>;
    /// Receives `count` elements from clique rank `peer`.
    fn recv(
        &self,
        stream: &dyn Stream,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()>;
    /// Groups the sends and receives issued until [`Communicator::group_end`] so they progress
    /// together (a permute is a group of one send and one receive per rank).
    /// Groups nest; every send and receive of a group must be issued on the same stream.
    fn group_start(&self) -> Result<()>;
    fn group_end(&self) -> Result<()>;
    /// Ends a group, naming the stream its sends and receives were issued on. Prefer it to
    /// [`Communicator::group_end`]: the host backend needs the stream (it queues the whole
    /// group there as one operation, posting every send and receive before waiting on any)
    /// and fails a non-empty group ended without one. The default calls `group_end` (NCCL
    /// and RCCL launch each operation on its own stream).
    fn group_end_on(&self, stream: &dyn Stream) -> Result<()> {
        let _ = stream;
        self.group_end()
    }
    /// An error the communicator hit asynchronously (a peer failed, a timeout, a mismatch of
    /// operations across ranks, an abort), if any. Cheap: a watchdog may poll it.
    fn async_error(&self) -> Result<()>;
    /// Aborts: pending and future operations fail on every rank instead of hanging.
    fn abort(&self, reason: &str);
    /// This rank and its clique in words, for messages (`rank 1 of clique [0, 2] communication`).
    fn describe(&self) -> String {
        format!("rank {} of a clique of {}", self.rank(), self.size())
    }
    /// What this rank's clique is waiting on right now, if anything: each rendezvous in
    /// progress with the ranks that have arrived and those that have not. `None` when nothing
    /// is pending or the backend cannot tell. For watchdog and deadline messages.
    fn pending(&self) -> Option<String> {
        None
    }
    /// Registers `bytes` at `ptr` (collective memory of an executable) with this
    /// communicator, for zero-copy and symmetric collectives: a symmetric window where the
    /// library has them and the memory came from its allocator (`from_library`), else a
    /// user-buffer registration, else nothing (`None`). Collective where the library's window
    /// registration is (every rank of the clique registers in the same order). Dropping the
    /// registration deregisters; it keeps the communicator alive until then.
    fn register(
        self: Arc<Self>,
        ptr: DevicePtr,
        bytes: u64,
        from_library: bool,
    ) -> Result<Option<Box<dyn Registration>>> {
        let _ = (ptr, bytes, from_library);
        Ok(None)
    }
}

/// How a buffer is registered with a communicator ([`Communicator::register`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegistrationKind {
    /// A symmetric window (`ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC`).
    Window,
    /// A user-buffer registration (`ncclCommRegister`).
    UserBuffer,
}

impl RegistrationKind {
    pub const fn name(self) -> &'static str {
        match self {
            RegistrationKind::Window => "window",
            RegistrationKind::UserBuffer => "user buffer",
        }
    }
}

/// A buffer's registration with one communicator; dropping it deregisters.
pub trait Registration: Send + Sync {
    fn kind(&self) -> RegistrationKind;
}

/// Which stream a clique's operations run on. Part of the [`CliqueKey`]: the same devices get
/// distinct communicators for compute-stream and communication-stream collectives, so that
/// the two never order against each other inside the communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StreamKind {
    Compute,
    Communication,
}

impl StreamKind {
    pub const fn name(self) -> &'static str {
        match self {
            StreamKind::Compute => "compute",
            StreamKind::Communication => "communication",
        }
    }
}

impl From<AsyncKind> for StreamKind {
    fn from(k: AsyncKind) -> Self {
        match k {
            AsyncKind::Compute => StreamKind::Compute,
            AsyncKind::Communication => StreamKind::Communication,
        }
    }
}

impl fmt::Display for StreamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name of a clique: its global ranks in clique order (ascending), its stream kind and,
/// for cliques made by a split, the split color. Totally ordered (ranks, then stream kind, then
/// color), so that every rank can sort the cliques of a program the same way.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CliqueKey {
    ranks: Vec<usize>,
    stream_kind: StreamKind,
    color: Option<u64>,
}

impl CliqueKey {
    /// A clique of `ranks` (global ranks, in any order: they are sorted, so clique rank `i` is
    /// the `i`-th smallest). Fails on an empty or repeated rank list.
    pub fn new(ranks: impl IntoIterator<Item = usize>, stream_kind: StreamKind) -> Result<Self> {
        let mut ranks: Vec<usize> = ranks.into_iter().collect();
        ranks.sort_unstable();
        if ranks.is_empty() {
            return Err(Error::InvalidArgument(
                "a clique needs at least one rank".into(),
            ));
        }
        if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument(format!(
                "rank {} appears twice in clique {ranks:?}",
                w[0]
            )));
        }
        Ok(CliqueKey {
            ranks,
            stream_kind,
            color: None,
        })
    }

    /// The same ranks as a clique made by a split with `color` (see [`split_color`]).
    pub fn with_color(mut self, color: u64) -> Self {
        self.color = Some(color);
        self
    }

    /// Global ranks in clique order.
    /// A hash of the key that is the same in every process and build (FNV-1a 64 over its
    /// ranks, stream kind and color): names the key's cliques in shared names (segments,
    /// coordinator keys).
    pub fn stable_hash(&self) -> u64 {
        let h = self
            .ranks()
            .iter()
            .fold(crate::hash::Fnv1a::new().u64(self.size() as u64), |h, r| {
                h.u64(*r as u64)
            });
        h.u64(self.stream_kind() as u64)
            .u64(self.color().map_or(u64::MAX, |c| c))
            .finish()
    }

    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    pub fn stream_kind(&self) -> StreamKind {
        self.stream_kind
    }

    pub fn color(&self) -> Option<u64> {
        self.color
    }

    /// The clique rank of `global_rank`, if it belongs to the clique.
    pub fn rank_of(&self, global_rank: usize) -> Option<usize> {
        self.ranks.binary_search(&global_rank).ok()
    }

    /// The global rank of clique rank `rank`.
    pub fn global_rank(&self, rank: usize) -> Option<usize> {
        self.ranks.get(rank).copied()
    }

    /// `global_rank`'s place in this clique, for a provider that serves `world` global ranks:
    /// fails if a rank of the key is not below `world` (`serves` names what the provider
    /// serves, for the message: "4 host devices") or `global_rank` is not a member.
    pub fn member(&self, global_rank: usize, world: usize, serves: &str) -> Result<Member> {
        if let Some(bad) = self.ranks.iter().find(|r| **r >= world) {
            return Err(Error::InvalidArgument(format!(
                "{self}: rank {bad} does not exist ({serves})"
            )));
        }
        let Some(rank) = self.rank_of(global_rank) else {
            return Err(Error::InvalidArgument(format!(
                "rank {global_rank} is not a member of {self}"
            )));
        };
        Ok(Member {
            key: self.clone(),
            rank,
            global: global_rank,
        })
    }
}

/// One rank's place in a clique: the clique's key, the rank in it and the global rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    key: CliqueKey,
    rank: usize,
    global: usize,
}

impl Member {
    pub fn key(&self) -> &CliqueKey {
        &self.key
    }

    /// The clique rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn global_rank(&self) -> usize {
        self.global
    }
}

impl fmt::Display for Member {
    /// `rank 1 (global rank 3) of clique [1, 3] compute`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} (global rank {}) of {}",
            self.rank, self.global, self.key
        )
    }
}

impl fmt::Display for CliqueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "clique {:?} {}", self.ranks, self.stream_kind)?;
        if let Some(c) = self.color {
            write!(f, " color {c:#x}")?;
        }
        Ok(())
    }
}

/// The split color of a replica group: a deterministic hash of its ranks (sorted, so every
/// member computes the same value; FNV-1a 64 over the little-endian `u64` of the group size
/// and of each rank, independent of platform, process and run), folded to 31 bits so that it
/// is also a valid (non-negative `int`) color for `ncclCommSplit`. Two different groups may
/// collide with probability about 2^-31 per pair; on the host the key also holds the ranks,
/// so a collision there is harmless.
pub fn split_color(group: &[usize]) -> u64 {
    let mut sorted = group.to_vec();
    sorted.sort_unstable();
    let h = sorted
        .iter()
        .fold(
            crate::hash::Fnv1a::new().u64(sorted.len() as u64),
            |h, r| h.u64(*r as u64),
        )
        .finish();
    (h ^ (h >> 31) ^ (h >> 62)) & 0x7fff_ffff
}

/// The message of `e` without the `backend: call failed:` prefix of a backend error, for a
/// communicator or provider that wraps the error again with its own context.
pub fn error_message(e: &Error) -> String {
    match e {
        Error::Backend { message, .. } => message.clone(),
        e => e.to_string(),
    }
}

/// Hands out communicators, one per `(clique key, global rank)`, cached and reused across
/// executions.
///
/// **Every rank must acquire (and split) cliques in the same order** — the executor acquires
/// them in program order of the collective thunks. On NCCL/RCCL, creating a communicator is a
/// collective call of all its ranks.
pub trait CliqueProvider: Send + Sync {
    /// The number of global ranks (devices) this provider serves.
    fn num_ranks(&self) -> usize;
    /// The communicator of `global_rank` in the clique `key` (created on first use, then
    /// cached). Fails if `global_rank` is not in the clique or a rank is out of range. An
    /// aborted clique is returned as it is (failing) until [`CliqueProvider::evict_aborted`].
    fn acquire(&self, key: &CliqueKey, global_rank: usize) -> Result<Arc<dyn Communicator>>;
    /// Splits the clique `parent`: a collective call of all its ranks (each from its own
    /// thread). Ranks passing the same `color` form a new clique (key: their ranks, the
    /// parent's stream kind, that color), returned here (and cached, as by `acquire`); a rank
    /// passing `None` joins no clique and gets `None`.
    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>>;
    /// Forgets every clique that failed (aborted, timed out, mismatched), so that the next
    /// acquire of its key creates a fresh one; returns their keys. A failed clique stays
    /// failed until then — every operation on it fails at once — so that a rank still
    /// running an old execution can never meet ranks of a new one: call this only when no
    /// rank is running (e.g. between SPMD runs).
    fn evict_aborted(&self) -> Vec<CliqueKey>;
    /// The failures this provider's cliques do not detect by themselves (see [`Undetected`]).
    /// The default: none (the host providers detect both within their [`Timeouts`]).
    fn undetected(&self) -> Undetected {
        Undetected::default()
    }
    /// How long one operation may wait for its peers once its stream reached it, for a
    /// provider whose library waits without a timeout of its own (NCCL/RCCL): the executor
    /// then fails an execution whose collective has been waiting that long, aborting its
    /// communicators (the progress record says since when: see
    /// `xthunk_core::executor::Progress`). The default: `None` (the provider's cliques time out
    /// by themselves, within their [`Timeouts`]).
    fn completion_timeout(&self) -> Option<std::time::Duration> {
        None
    }
    /// Aborts every clique of the provider (their pending and later operations fail on every
    /// rank at once) and fails every setup in progress: a job's failure handler calls it
    /// before the process exits. The default: nothing (a provider without such a handle).
    fn abort_all(&self, reason: &str) {
        let _ = reason;
    }
    /// Why one of the provider's cliques failed, if one did (for the message of a job that
    /// ends because of another rank). The default: `None`.
    fn failure(&self) -> Option<String> {
        None
    }
    /// The collective library's allocator for the device of `global_rank` (`ncclMemAlloc`),
    /// for an executable's collective memory, when the library has one; `None` (the default)
    /// when it has none: the memory is then the device's own.
    fn collective_allocator(
        &self,
        global_rank: usize,
    ) -> Option<Arc<dyn crate::backend::ExternalAllocator>> {
        let _ = global_rank;
        None
    }
}

/// Where this process sits in the job: its devices and the global ranks they are.
#[derive(Clone)]
pub struct JobPlacement {
    /// This process's devices: local device `i` is global rank `first_rank + i`.
    pub devices: Vec<Arc<dyn Device>>,
    /// The global rank of `devices[0]`.
    pub first_rank: usize,
    /// The number of global ranks of the job (every process's devices).
    pub world: usize,
}

impl fmt::Debug for JobPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobPlacement")
            .field("devices", &self.devices.len())
            .field("first_rank", &self.first_rank)
            .field("world", &self.world)
            .finish()
    }
}

/// The provider of devices whose collective library is missing (e.g. no `libnccl`): a
/// program without collectives still runs; every acquire fails with `Unavailable` and the
/// reason, naming the clique.
#[derive(Clone, Debug)]
pub struct UnavailableCliques {
    backend: String,
    reason: String,
    ranks: usize,
}

impl UnavailableCliques {
    /// For `ranks` global ranks of `backend`, unavailable because of `reason`.
    pub fn new(backend: impl Into<String>, reason: impl Into<String>, ranks: usize) -> Self {
        UnavailableCliques {
            backend: backend.into(),
            reason: reason.into(),
            ranks,
        }
    }

    fn error(&self, key: &CliqueKey) -> Error {
        Error::Unavailable {
            backend: self.backend.clone(),
            reason: format!("collectives ({key}): {}", self.reason),
        }
    }
}

impl CliqueProvider for UnavailableCliques {
    fn num_ranks(&self) -> usize {
        self.ranks
    }

    fn acquire(&self, key: &CliqueKey, _global_rank: usize) -> Result<Arc<dyn Communicator>> {
        Err(self.error(key))
    }

    fn split(
        &self,
        parent: &CliqueKey,
        _global_rank: usize,
        _color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        Err(self.error(parent))
    }

    fn evict_aborted(&self) -> Vec<CliqueKey> {
        vec![]
    }
}

/// Failures a [`CliqueProvider`]'s cliques do not detect by themselves within its [`Timeouts`]:
/// each `Some(why)`. Such a failure leaves the ranks waiting until the clique is aborted (by
/// [`Watchdog`], a deadline, a coordinator's failure report), so whoever provokes one on
/// purpose (the conformance suite) must not do it there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Undetected {
    /// Ranks of one clique issuing different operations (kind, count, dtype, root).
    pub mismatch: Option<&'static str>,
    /// A rank that never issues the operation its peers wait for.
    pub missing_rank: Option<&'static str>,
}

/// Makes the [`CliqueProvider`] of some devices of one backend (global rank `r` is `devices[r]`,
/// every rendezvous with `timeouts`): how that backend's devices form cliques within one
/// process. The `xthunk` facade registers one with each backend; the CLI and the conformance
/// harness are handed it. Any closure of this signature is one.
pub trait CliqueFactory: Send + Sync {
    fn create(
        &self,
        devices: &[Arc<dyn Device>],
        timeouts: Timeouts,
    ) -> Result<Arc<dyn CliqueProvider>>;
}

impl<F> CliqueFactory for F
where
    F: Fn(&[Arc<dyn Device>], Timeouts) -> Result<Arc<dyn CliqueProvider>> + Send + Sync,
{
    fn create(
        &self,
        devices: &[Arc<dyn Device>],
        timeouts: Timeouts,
    ) -> Result<Arc<dyn CliqueProvider>> {
        self(devices, timeouts)
    }
}
