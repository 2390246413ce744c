//! Coordination of the ranks of one job: key-value exchange, barriers and liveness.
//!
//! A **job** is `world_size` ranks (processes, or threads of one process) that run one program
//! together. Before their communicators exist they need a way to meet: to exchange the
//! NCCL/RCCL unique id ([`exchange_unique_id`]), to wait for each other ([`Coordinator::barrier`])
//! and to learn that one of them died ([`Coordinator::failures`]). That is the [`Coordinator`]
//! trait. Three implementations:
//!
//! - [`LocalCoordinator`] (this module, the default): the ranks are threads of one process and
//!   share a [`LocalStore`]. A rank whose coordinator is dropped without
//!   [`Coordinator::shutdown`] (its thread returned early or panicked) is reported dead.
//! - `EtcdCoordinator` (crate `xthunk-etcd`, behind the `etcd` feature of the `xthunk`
//!   package): the ranks are processes, on one host or many, and meet in an etcd v3 cluster.
//!   Leases with keep-alive are the heartbeats; a watch on the liveness keys reports a rank whose
//!   lease expired.
//! - [`EmbeddedCoordinator`] ([`embedded`], Unix): the ranks are processes of one machine, and
//!   the `xthunk launch` that started them serves their coordinator on a Unix socket
//!   ([`EmbeddedServer`]): no server to install. Heartbeats on a session connection are the
//!   liveness; a rank that dies is seen at once (its socket closes), one that hangs after a TTL.
//!
//! Where rank, world size, coordinator and job id come from (flags, `XTHUNK_*` variables,
//! Slurm, Open MPI, Kubernetes indexed jobs) is [`env`](mod@env).
//!
//! # Contract
//!
//! - Everything is namespaced by the **job id**: two jobs on one store never see each other's
//!   keys, barriers or failures.
//! - A rank is registered as alive from the moment its coordinator is created until
//!   [`Coordinator::shutdown`]. A rank that disappears otherwise is a [`RankFailure`], reported
//!   to every other rank through [`Coordinator::failures`] and
//!   [`Coordinator::subscribe_failures`] (a coordinator may also report a failure of its own
//!   rank, e.g. when its own heartbeats stopped reaching the store).
//! - Blocking calls ([`Coordinator::get`], [`Coordinator::barrier`]) return
//!   [`DistributedError::RankFailed`] as soon as any failure is known: a job with a dead rank
//!   cannot finish, and failing fast and loudly beats waiting for a timeout.
//! - Every rank calls [`Coordinator::barrier`] with the same names in the same order; a name
//!   may be reused (each call is a new round of that barrier).
//! - [`Coordinator::shutdown`] is a barrier of every rank followed by the removal of this rank's
//!   state; once every rank has shut down nothing of the job is left in the store.

mod local;

#[cfg(unix)]
pub mod embedded;
pub mod env;

#[cfg(unix)]
pub use embedded::{EmbeddedCoordinator, EmbeddedServer, MachineJobClaim};

pub use env::{ClusterKind, CoordinatorSpec, DistributedConfig, Overrides};
pub use local::{LocalCoordinator, LocalStore};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::fmt;
use std::time::Duration;

/// The default lease TTL of a rank (the etcd lease, the embedded coordinator's heartbeat
/// timeout): a rank that stops renewing it is reported failed within about this long.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

/// The key under which the first rank that learns why the job fails (a rank never started,
/// a lease expired, a collective timed out, an error) publishes that cause
/// ([`Coordinator::publish_cause`]) before it leaves, so that the other ranks and the launcher
/// report it rather than that rank's departure. The published cause outlives its publisher:
/// the embedded coordinator keeps it until the job ends; etcd keeps it on a lease of its own
/// ([`CAUSE_TTL_FACTOR`] times the publisher's TTL, never revoked) or on the launcher's claim
/// lease, and the launcher deletes it with the job's keys.
pub const CAUSE_KEY: &str = "xthunk.cause";

/// How many lease TTLs a cause a rank published with etcd outlives its publisher: long
/// enough for every survivor to learn of the failure (within a TTL) and read it.
pub const CAUSE_TTL_FACTOR: u32 = 4;

/// The name of the barrier [`Coordinator::shutdown`] runs (in a namespace of its own: a user
/// barrier of the same name is a different barrier).
pub const SHUTDOWN_BARRIER: &str = "shutdown";

/// A rank that left the job without shutting down, and why; or this rank losing its
/// coordinator (`coordinator_lost`: then the culprit is the coordinator, not the rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    /// The rank that failed (the coordinator's own rank when it lost its coordinator).
    pub rank: usize,
    /// What was observed (e.g. "its liveness lease expired").
    pub reason: String,
    /// The coordinator this rank lost (e.g. `etcd://127.0.0.1:2379`), when that is the
    /// failure: it can no longer tell whether the others live, and the cause is the
    /// coordinator.
    pub coordinator_lost: Option<String>,
}

impl RankFailure {
    /// `rank` failed, for `reason`.
    pub fn new(rank: usize, reason: impl Into<String>) -> Self {
        RankFailure {
            rank,
            reason: reason.into(),
            coordinator_lost: None,
        }
    }

    /// `rank` (the observer itself) lost `coordinator`, for `reason`.
    pub fn lost(rank: usize, coordinator: impl Into<String>, reason: impl Into<String>) -> Self {
        RankFailure {
            rank,
            reason: reason.into(),
            coordinator_lost: Some(coordinator.into()),
        }
    }
}

impl fmt::Display for RankFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.coordinator_lost {
            Some(c) => write!(f, "lost the coordinator {c}: {}", self.reason),
            None => write!(f, "rank {} failed: {}", self.rank, self.reason),
        }
    }
}

/// Errors of coordination: timeouts, dead ranks, the store, configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DistributedError {
    /// [`Coordinator::get`] waited `timeout` and the key did not appear.
    #[error("job `{job}`: key `{key}` did not appear within {timeout:?}")]
    GetTimeout {
        job: String,
        key: String,
        timeout: Duration,
    },
    /// A barrier waited `timeout` and `missing` ranks did not arrive; those of them in `dead`
    /// are not even registered as alive (they died or never started).
    #[error(
        "job `{job}`: barrier `{name}` timed out after {timeout:?}: {} did not arrive{}",
        list_ranks(missing),
        dead_note(dead)
    )]
    BarrierTimeout {
        job: String,
        name: String,
        timeout: Duration,
        missing: Vec<usize>,
        dead: Vec<usize>,
    },
    /// Ranks did not reach the start of the job in time (the start barrier of a job: see
    /// `xthunk launch --start-timeout`).
    #[error(
        "job `{job}`: {} never started: {} not reach the start barrier within {timeout:?} \
         (`xthunk launch --start-timeout`, XTHUNK_START_TIMEOUT)",
        list_ranks(missing),
        if missing.len() == 1 { "it did" } else { "they did" }
    )]
    NeverStarted {
        job: String,
        missing: Vec<usize>,
        timeout: Duration,
    },
    /// A rank of the job failed; the job cannot finish.
    #[error("job `{job}`: {failure}")]
    RankFailed { job: String, failure: RankFailure },
    /// The store (etcd) refused or failed a request.
    #[error("job `{job}`: {backend} coordinator: {op} failed: {message}")]
    Store {
        job: String,
        backend: &'static str,
        op: String,
        message: String,
    },
    /// The coordinator (e.g. `etcd://HOST:PORT`) cannot be reached any more: the job cannot
    /// go on, and the cause is the coordinator, not a rank.
    #[error("job `{job}`: lost the coordinator {coordinator}: {op} failed: {message}")]
    CoordinatorLost {
        job: String,
        coordinator: String,
        op: String,
        message: String,
    },
    /// A value is larger than the coordinator carries.
    #[error(
        "job `{job}`: the value of key `{key}` is {size} bytes, more than the {backend} \
         coordinator's limit of {limit} bytes (coordinator values are meant to be small: ids, \
         addresses, configuration)"
    )]
    ValueTooLarge {
        job: String,
        backend: &'static str,
        key: String,
        size: usize,
        limit: usize,
    },
    /// The coordinator was used after [`Coordinator::shutdown`].
    #[error("job `{job}`: rank {rank}: the coordinator was already shut down")]
    ShutDown { job: String, rank: usize },
    /// Rank, world size, coordinator or job id are missing or inconsistent.
    #[error("distributed configuration: {0}")]
    Config(String),
    /// The root of a clique could not make its unique id.
    #[error("job `{job}`: unique id of {clique}: {message}")]
    UniqueId {
        job: String,
        clique: String,
        message: String,
    },
}

/// `rank 3` or `ranks 1, 2`.
pub fn list_ranks(ranks: &[usize]) -> String {
    match ranks {
        [r] => format!("rank {r}"),
        _ => {
            let list: Vec<String> = ranks.iter().map(ToString::to_string).collect();
            format!("ranks {}", list.join(", "))
        }
    }
}

fn dead_note(dead: &[usize]) -> String {
    if dead.is_empty() {
        String::new()
    } else {
        format!(
            " ({} not registered as alive: died or never started)",
            list_ranks(dead)
        )
    }
}

pub type DistributedResult<T> = std::result::Result<T, DistributedError>;

/// Key-value exchange, barriers and liveness among the ranks of one job. See the
/// [module documentation](self) for the contract every implementation keeps.
pub trait Coordinator: Send + Sync + fmt::Debug {
    /// `local`, `etcd`: for messages.
    fn backend(&self) -> &'static str;
    /// The job this coordinator belongs to.
    fn job_id(&self) -> &str;
    /// This rank, in `0..world_size()`.
    fn rank(&self) -> usize;
    /// The number of ranks of the job.
    fn world_size(&self) -> usize;
    /// Sets `key` to `value` for every rank of the job (overwriting).
    fn set(&self, key: &str, value: &[u8]) -> DistributedResult<()>;
    /// The value of `key`, if it is set now.
    fn try_get(&self, key: &str) -> DistributedResult<Option<Vec<u8>>>;
    /// The value of `key`, waiting until some rank sets it; [`DistributedError::GetTimeout`]
    /// after `timeout`, [`DistributedError::RankFailed`] as soon as a rank is known dead.
    fn get(&self, key: &str, timeout: Duration) -> DistributedResult<Vec<u8>>;
    /// Waits until every rank of the job has called `barrier(name)` (for the same time: the
    /// n-th call of a name meets the n-th call of every other rank). After `timeout`,
    /// [`DistributedError::BarrierTimeout`] names the ranks that did not arrive.
    fn barrier(&self, name: &str, timeout: Duration) -> DistributedResult<()>;
    /// Every failure seen so far (at most one per rank, the first reason), in the order seen.
    fn failures(&self) -> Vec<RankFailure>;
    /// A channel that yields every failure: those already seen, at once, then each new one.
    /// It disconnects when the coordinator is dropped.
    fn subscribe_failures(&self) -> Receiver<RankFailure>;
    /// A barrier of every rank ([`SHUTDOWN_BARRIER`]), then this rank leaves the job: its
    /// liveness registration and everything it stored are removed, and the last rank to leave
    /// removes whatever of the job is left. Afterwards every call fails with
    /// [`DistributedError::ShutDown`]. This rank's state is removed even when the barrier
    /// fails (its error is returned); a second call does nothing.
    fn shutdown(&self, timeout: Duration) -> DistributedResult<()>;

    /// Publishes `cause` under [`CAUSE_KEY`] as the root cause of the job's failure, unless
    /// a cause was published first; returns the cause that holds (`cause`, or the earlier
    /// one). The published cause outlives this rank, so that the others and the launcher
    /// read it after it left (see [`CAUSE_KEY`]). The default sets the key if it is absent
    /// (not atomically); the coordinators of several processes do it atomically.
    fn publish_cause(&self, cause: &str) -> DistributedResult<String> {
        if let Some(earlier) = self.published_cause()? {
            return Ok(earlier);
        }
        self.set(CAUSE_KEY, cause.as_bytes())?;
        Ok(cause.to_string())
    }

    /// The root cause of the job's failure some rank (or the launcher) published, if any.
    fn published_cause(&self) -> DistributedResult<Option<String>> {
        Ok(self
            .try_get(CAUSE_KEY)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// This rank leaves the job because of another's failure (`cause`, the job's root
    /// cause): it never shuts down, but says why it goes, so that the others read its
    /// departure as a consequence (`it aborted because of the job's failure: CAUSE`) and never
    /// as a cause. The default does nothing: dropping the coordinator then ends the rank's
    /// registration as it does (etcd revokes its lease).
    fn abandon(&self, cause: &str) {
        let _ = cause;
    }

    /// `Err(RankFailed)` with the first failure seen, if any.
    fn check(&self) -> DistributedResult<()> {
        match self.failures().into_iter().next() {
            Some(failure) => Err(DistributedError::RankFailed {
                job: self.job_id().to_string(),
                failure,
            }),
            None => Ok(()),
        }
    }
}

/// The key under which [`exchange_unique_id`] publishes the id of `clique`.
pub fn unique_id_key(clique: &str) -> String {
    format!("xthunk.unique_id/{clique}")
}

/// The NCCL/RCCL bootstrap: the root rank of a clique (`is_root`, its first rank) makes the
/// unique id with `create` and publishes it; every other rank waits for it up to `timeout`.
/// Every rank returns the same bytes. A root that cannot make the id publishes why, so that
/// the other ranks fail at once with its reason instead of at their timeout. `clique` names
/// the clique (e.g. a `CliqueKey`'s display, with a generation if the same clique is made
/// twice in one job).
///
/// The value is tagged: `+` and the id, or `!` and the root's reason.
pub fn exchange_unique_id(
    coordinator: &dyn Coordinator,
    clique: &str,
    is_root: bool,
    timeout: Duration,
    create: impl FnOnce() -> Result<Vec<u8>, String>,
) -> DistributedResult<Vec<u8>> {
    let key = unique_id_key(clique);
    let failed = |message: String| DistributedError::UniqueId {
        job: coordinator.job_id().to_string(),
        clique: clique.to_string(),
        message,
    };
    if is_root {
        match create() {
            Ok(id) => {
                let mut value = Vec::with_capacity(id.len() + 1);
                value.push(b'+');
                value.extend_from_slice(&id);
                coordinator.set(&key, &value)?;
                Ok(id)
            }
            Err(message) => {
                let mut value = b"!".to_vec();
                value.extend_from_slice(message.as_bytes());
                if let Err(e) = coordinator.set(&key, &value) {
                    tracing::warn!(error = %e, "could not tell the clique why there is no id");
                }
                Err(failed(message))
            }
        }
    } else {
        let value = coordinator.get(&key, timeout)?;
        match value.split_first() {
            Some((b'+', id)) => Ok(id.to_vec()),
            Some((b'!', why)) => Err(failed(format!(
                "its first rank could not make the id: {}",
                String::from_utf8_lossy(why)
            ))),
            _ => Err(failed(format!(
                "the value published under `{key}` is not a unique id ({} bytes)",
                value.len()
            ))),
        }
    }
}

/// One rank's part of a split of a clique across processes: publishes this rank's `color`
/// (`None`: it joins no new clique) under `<round>/<global_rank>` and, with a color, reads
/// every other rank of `parent_ranks` (waiting up to `timeout` for each) and returns the
/// ranks of its color, in order. `round` names the split (the parent and its n-th split),
/// the same on every rank.
pub fn exchange_split_colors(
    coordinator: &dyn Coordinator,
    round: &str,
    parent_ranks: &[usize],
    global_rank: usize,
    color: Option<u64>,
    timeout: Duration,
) -> DistributedResult<Option<Vec<usize>>> {
    let key = |r: usize| format!("{round}/{r}");
    let mine = color.map_or_else(|| "none".to_string(), |c| c.to_string());
    coordinator.set(&key(global_rank), mine.as_bytes())?;
    if color.is_none() {
        return Ok(None);
    }
    let mut members = vec![];
    for &g in parent_ranks {
        let theirs = if g == global_rank {
            mine.clone().into_bytes()
        } else {
            coordinator.get(&key(g), timeout)?
        };
        if theirs == mine.as_bytes() {
            members.push(g);
        }
    }
    Ok(Some(members))
}

/// Calls `on_failure` on a new thread with the first failure `coordinator` reports (e.g. to log
/// it, clean up and exit non-zero, as XLA terminates on a missed heartbeat). The thread ends
/// after the call, or without calling when the coordinator is dropped.
pub fn spawn_failure_handler(
    coordinator: &dyn Coordinator,
    on_failure: impl FnOnce(RankFailure) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let failures = coordinator.subscribe_failures();
    std::thread::Builder::new()
        .name("xthunk-failures".into())
        .spawn(move || {
            if let Ok(failure) = failures.recv() {
                on_failure(failure);
            }
        })
}

/// The failures a coordinator has seen and its subscribers: shared by the implementations.
#[derive(Debug, Default)]
pub struct FailureBoard {
    inner: Mutex<BoardInner>,
}

#[derive(Debug, Default)]
struct BoardInner {
    failures: Vec<RankFailure>,
    subscribers: Vec<Sender<RankFailure>>,
}

impl FailureBoard {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `failure` unless its rank already failed; true if it was new. Subscribers get
    /// it; a subscriber whose receiver is gone is forgotten.
    pub fn record(&self, failure: RankFailure) -> bool {
        let mut inner = self.inner.lock();
        if inner.failures.iter().any(|f| f.rank == failure.rank) {
            return false;
        }
        tracing::error!(rank = failure.rank, reason = %failure.reason, "rank failure");
        inner
            .subscribers
            .retain(|s| s.send(failure.clone()).is_ok());
        inner.failures.push(failure);
        true
    }

    /// Every failure recorded, in order.
    pub fn all(&self) -> Vec<RankFailure> {
        self.inner.lock().failures.clone()
    }

    /// The first failure recorded.
    pub fn first(&self) -> Option<RankFailure> {
        self.inner.lock().failures.first().cloned()
    }

    /// A channel with every failure recorded so far, then each new one.
    pub fn subscribe(&self) -> Receiver<RankFailure> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut inner = self.inner.lock();
        for f in &inner.failures {
            // The receiver is alive (held here): this cannot fail.
            let _ = tx.send(f.clone());
        }
        inner.subscribers.push(tx);
        rx
    }
}

/// Checks a job id: 1 to 128 characters of `[A-Za-z0-9._-]`, not `.` or `..` (it becomes a
/// path segment of every key of the job, so that two jobs never share a prefix).
pub fn validate_job_id(job_id: &str) -> DistributedResult<()> {
    let ok_chars = job_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if job_id.is_empty() || job_id.len() > 128 || !ok_chars || job_id == "." || job_id == ".." {
        return Err(DistributedError::Config(format!(
            "invalid job id `{job_id}`: expected 1 to 128 characters of [A-Za-z0-9._-]"
        )));
    }
    Ok(())
}

/// The most ranks a job may have (coordinators keep per-rank state sized by the world).
pub const MAX_WORLD_SIZE: usize = 1 << 16;

/// Checks a rank against its world size (at least 1, at most [`MAX_WORLD_SIZE`]).
pub fn validate_rank(rank: usize, world_size: usize) -> DistributedResult<()> {
    if world_size == 0 {
        return Err(DistributedError::Config(
            "the world size must be at least 1".into(),
        ));
    }
    if world_size > MAX_WORLD_SIZE {
        return Err(DistributedError::Config(format!(
            "a world of {world_size} ranks is more than the {MAX_WORLD_SIZE} a job may have"
        )));
    }
    if rank >= world_size {
        return Err(DistributedError::Config(format!(
            "rank {rank} is out of range for a world of {world_size} ranks"
        )));
    }
    Ok(())
}

/// Checks a key or barrier name: not empty, at most 1024 bytes.
pub fn validate_name(what: &str, name: &str) -> DistributedResult<()> {
    if name.is_empty() || name.len() > 1024 {
        return Err(DistributedError::Config(format!(
            "invalid {what} `{name}`: expected 1 to 1024 bytes"
        )));
    }
    Ok(())
}

/// `name` as one path segment: `%` and `/` escaped (`%25`, `%2F`), so that a name with slashes
/// cannot reach into another name's keys.
pub fn escape_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_ranks() {
        let e = DistributedError::BarrierTimeout {
            job: "j".into(),
            name: "start".into(),
            timeout: Duration::from_secs(2),
            missing: vec![1, 3],
            dead: vec![3],
        };
        assert_eq!(
            e.to_string(),
            "job `j`: barrier `start` timed out after 2s: ranks 1, 3 did not arrive \
             (rank 3 not registered as alive: died or never started)"
        );
        let e = DistributedError::RankFailed {
            job: "j".into(),
            failure: RankFailure::new(2, "its lease expired"),
        };
        assert_eq!(e.to_string(), "job `j`: rank 2 failed: its lease expired");
        let lost = RankFailure::lost(1, "etcd://h:1", "its heartbeats stopped");
        assert_eq!(
            lost.to_string(),
            "lost the coordinator etcd://h:1: its heartbeats stopped"
        );
    }

    #[test]
    fn board_dedups_and_replays() {
        let board = FailureBoard::new();
        let early = board.subscribe();
        assert!(board.record(RankFailure::new(1, "a")));
        assert!(!board.record(RankFailure::new(1, "b")));
        let late = board.subscribe();
        assert_eq!(early.try_recv().map(|f| f.rank), Ok(1));
        assert_eq!(late.try_recv().map(|f| f.reason), Ok("a".to_string()));
        assert!(late.try_recv().is_err());
        assert_eq!(board.all().len(), 1);
    }

    #[test]
    fn job_ids_and_segments() {
        assert!(validate_job_id("slurm-123.0").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(129)] {
            assert!(validate_job_id(bad).is_err(), "{bad:?}");
        }
        assert_eq!(escape_segment("a/b%c"), "a%2Fb%25c");
        assert!(validate_rank(3, 4).is_ok());
        assert!(validate_rank(4, 4).is_err());
        assert!(validate_rank(0, 0).is_err());
        assert!(validate_rank(0, MAX_WORLD_SIZE).is_ok());
        assert!(validate_rank(0, MAX_WORLD_SIZE + 1).is_err());
    }
}
