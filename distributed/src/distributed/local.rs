//! The in-process coordinator: the ranks of a job are threads of one process.

use super::{
    Coordinator, DistributedError, DistributedResult, FailureBoard, RankFailure, SHUTDOWN_BARRIER,
    validate_job_id, validate_name, validate_rank,
};
use crossbeam_channel::Receiver;
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The state that the [`LocalCoordinator`]s of any number of jobs share. Cheap to clone (a
/// handle). A job's state exists while at least one of its ranks holds a coordinator.
#[derive(Clone, Default)]
pub struct LocalStore {
    inner: Arc<StoreInner>,
}

#[derive(Default)]
struct StoreInner {
    jobs: Mutex<HashMap<String, JobState>>,
    /// Signalled on every change of any job.
    changed: Condvar,
}

/// A barrier is identified by its namespace (user or internal), its name and its round.
type BarrierId = (bool, String, u64);

struct JobState {
    world: usize,
    kv: HashMap<String, Vec<u8>>,
    /// Arrived ranks per barrier round, and how many ranks have seen the round complete
    /// (the entry goes when all have).
    barriers: HashMap<BarrierId, (BTreeSet<usize>, usize)>,
    /// Ranks that hold a live coordinator.
    members: BTreeSet<usize>,
    board: Arc<FailureBoard>,
}

impl fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalStore")
            .field("jobs", &self.job_ids())
            .finish()
    }
}

impl LocalStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins `job_id` as `rank` of `world_size` ranks, registered as alive until shutdown or
    /// drop. Fails if the rank is already held in this job, or if the job exists with another
    /// world size.
    pub fn join(
        &self,
        job_id: &str,
        rank: usize,
        world_size: usize,
    ) -> DistributedResult<LocalCoordinator> {
        validate_job_id(job_id)?;
        validate_rank(rank, world_size)?;
        let mut jobs = self.inner.jobs.lock();
        let job = jobs.entry(job_id.to_string()).or_insert_with(|| JobState {
            world: world_size,
            kv: HashMap::new(),
            barriers: HashMap::new(),
            members: BTreeSet::new(),
            board: Arc::new(FailureBoard::new()),
        });
        if job.world != world_size {
            return Err(DistributedError::Config(format!(
                "job `{job_id}` has {} ranks, but rank {rank} joins it with a world of {world_size}",
                job.world
            )));
        }
        if !job.members.insert(rank) {
            return Err(DistributedError::Config(format!(
                "rank {rank} of job `{job_id}` is already registered"
            )));
        }
        let board = job.board.clone();
        drop(jobs);
        self.inner.changed.notify_all();
        Ok(LocalCoordinator {
            store: self.clone(),
            job: job_id.to_string(),
            rank,
            world: world_size,
            board,
            rounds: Mutex::new(HashMap::new()),
            shut_down: Mutex::new(false),
        })
    }

    /// The jobs that have state in this store (at least one rank holds a coordinator).
    pub fn job_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.inner.jobs.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Removes `rank` from `job`; `failure` is recorded for the others if given. The job's
    /// state goes with its last member.
    fn leave(&self, job_id: &str, rank: usize, failure: Option<String>) {
        let mut jobs = self.inner.jobs.lock();
        if let Some(job) = jobs.get_mut(job_id) {
            job.members.remove(&rank);
            if let Some(reason) = failure {
                job.board.record(RankFailure::new(rank, reason));
            }
            if job.members.is_empty() {
                jobs.remove(job_id);
            }
        }
        drop(jobs);
        self.inner.changed.notify_all();
    }
}

/// One rank of a job whose ranks are threads of one process. See [`LocalStore::join`]; a
/// single-process job is [`LocalCoordinator::single`].
pub struct LocalCoordinator {
    store: LocalStore,
    job: String,
    rank: usize,
    world: usize,
    board: Arc<FailureBoard>,
    /// The next round of each barrier name this rank will enter, per namespace.
    rounds: Mutex<HashMap<(bool, String), u64>>,
    shut_down: Mutex<bool>,
}

impl fmt::Debug for LocalCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalCoordinator")
            .field("job", &self.job)
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish()
    }
}

impl LocalCoordinator {
    /// Rank 0 of a job of one rank, in a store of its own: the default coordinator of a
    /// process that is not part of a larger job.
    pub fn single() -> Self {
        let store = LocalStore::new();
        match store.join("single", 0, 1) {
            Ok(c) => c,
            // `join` only fails on a bad id, rank or duplicate; none can happen here.
            Err(_) => LocalCoordinator {
                store,
                job: "single".into(),
                rank: 0,
                world: 1,
                board: Arc::new(FailureBoard::new()),
                rounds: Mutex::new(HashMap::new()),
                shut_down: Mutex::new(true),
            },
        }
    }

    /// Joins `world_size` ranks of `job_id` at once in a new store (for tests and for the
    /// threads of one process); element `i` is rank `i`.
    pub fn job(job_id: &str, world_size: usize) -> DistributedResult<Vec<LocalCoordinator>> {
        let store = LocalStore::new();
        (0..world_size)
            .map(|rank| store.join(job_id, rank, world_size))
            .collect()
    }

    /// The store this coordinator is part of.
    pub fn store(&self) -> &LocalStore {
        &self.store
    }

    fn ensure_open(&self) -> DistributedResult<()> {
        if *self.shut_down.lock() {
            return Err(DistributedError::ShutDown {
                job: self.job.clone(),
                rank: self.rank,
            });
        }
        Ok(())
    }

    fn failed(&self) -> Option<DistributedError> {
        self.board
            .first()
            .map(|failure| DistributedError::RankFailed {
                job: self.job.clone(),
                failure,
            })
    }

    fn gone(&self) -> DistributedError {
        // The job's state went with its last member; this rank is a member until shutdown,
        // so this only happens after a shutdown raced with a call from another thread.
        DistributedError::ShutDown {
            job: self.job.clone(),
            rank: self.rank,
        }
    }

    fn barrier_in(&self, internal: bool, name: &str, timeout: Duration) -> DistributedResult<()> {
        validate_name("barrier name", name)?;
        let round = {
            let mut rounds = self.rounds.lock();
            let next = rounds.entry((internal, name.to_string())).or_insert(0);
            let round = *next;
            *next += 1;
            round
        };
        let id: BarrierId = (internal, name.to_string(), round);
        let deadline = Instant::now() + timeout;
        let inner = &self.store.inner;
        let mut jobs = inner.jobs.lock();
        {
            let job = jobs.get_mut(&self.job).ok_or_else(|| self.gone())?;
            job.barriers
                .entry(id.clone())
                .or_default()
                .0
                .insert(self.rank);
        }
        inner.changed.notify_all();
        loop {
            let job = jobs.get_mut(&self.job).ok_or_else(|| self.gone())?;
            let world = job.world;
            if let Some((arrived, seen)) = job.barriers.get_mut(&id)
                && arrived.len() == world
            {
                *seen += 1;
                if *seen == world {
                    job.barriers.remove(&id);
                }
                return Ok(());
            }
            if let Some(e) = self.failed() {
                return Err(e);
            }
            if inner.changed.wait_until(&mut jobs, deadline).timed_out() {
                let job = jobs.get(&self.job).ok_or_else(|| self.gone())?;
                let arrived = job.barriers.get(&id).map(|b| &b.0);
                let missing: Vec<usize> = (0..world)
                    .filter(|r| !arrived.is_some_and(|a| a.contains(r)))
                    .collect();
                if missing.is_empty() {
                    continue;
                }
                let dead = missing
                    .iter()
                    .copied()
                    .filter(|r| !job.members.contains(r))
                    .collect();
                return Err(DistributedError::BarrierTimeout {
                    job: self.job.clone(),
                    name: name.to_string(),
                    timeout,
                    missing,
                    dead,
                });
            }
        }
    }
}

impl Coordinator for LocalCoordinator {
    fn backend(&self) -> &'static str {
        "local"
    }

    fn job_id(&self) -> &str {
        &self.job
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn set(&self, key: &str, value: &[u8]) -> DistributedResult<()> {
        self.ensure_open()?;
        validate_name("key", key)?;
        let mut jobs = self.store.inner.jobs.lock();
        let job = jobs.get_mut(&self.job).ok_or_else(|| self.gone())?;
        job.kv.insert(key.to_string(), value.to_vec());
        drop(jobs);
        self.store.inner.changed.notify_all();
        Ok(())
    }

    fn try_get(&self, key: &str) -> DistributedResult<Option<Vec<u8>>> {
        self.ensure_open()?;
        validate_name("key", key)?;
        let jobs = self.store.inner.jobs.lock();
        let job = jobs.get(&self.job).ok_or_else(|| self.gone())?;
        Ok(job.kv.get(key).cloned())
    }

    fn get(&self, key: &str, timeout: Duration) -> DistributedResult<Vec<u8>> {
        self.ensure_open()?;
        validate_name("key", key)?;
        let deadline = Instant::now() + timeout;
        let inner = &self.store.inner;
        let mut jobs = inner.jobs.lock();
        loop {
            let job = jobs.get(&self.job).ok_or_else(|| self.gone())?;
            if let Some(v) = job.kv.get(key) {
                return Ok(v.clone());
            }
            if let Some(e) = self.failed() {
                return Err(e);
            }
            if inner.changed.wait_until(&mut jobs, deadline).timed_out() {
                let job = jobs.get(&self.job).ok_or_else(|| self.gone())?;
                if let Some(v) = job.kv.get(key) {
                    return Ok(v.clone());
                }
                return Err(DistributedError::GetTimeout {
                    job: self.job.clone(),
                    key: key.to_string(),
                    timeout,
                });
            }
        }
    }

    fn barrier(&self, name: &str, timeout: Duration) -> DistributedResult<()> {
        self.ensure_open()?;
        self.barrier_in(false, name, timeout)
    }

    fn failures(&self) -> Vec<RankFailure> {
        self.board.all()
    }

    fn subscribe_failures(&self) -> Receiver<RankFailure> {
        self.board.subscribe()
    }

    fn shutdown(&self, timeout: Duration) -> DistributedResult<()> {
        if *self.shut_down.lock() {
            return Ok(());
        }
        let result = self.barrier_in(true, SHUTDOWN_BARRIER, timeout);
        *self.shut_down.lock() = true;
        self.store.leave(&self.job, self.rank, None);
        result
    }
}

impl Drop for LocalCoordinator {
    fn drop(&mut self) {
        if !*self.shut_down.get_mut() {
            let reason = if std::thread::panicking() {
                "its thread panicked (the coordinator was dropped without shutdown)"
            } else {
                "its coordinator was dropped without shutdown (the rank returned early)"
            };
            self.store
                .leave(&self.job, self.rank, Some(reason.to_string()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::thread;

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn kv_get_waits_for_the_writer() {
        let ranks = LocalCoordinator::job("kv", 3).unwrap();
        thread::scope(|s| {
            for c in &ranks {
                s.spawn(move || {
                    if c.rank() == 2 {
                        thread::sleep(Duration::from_millis(50));
                        c.set("answer", &[42]).unwrap();
                    }
                    assert_eq!(c.get("answer", T).unwrap(), vec![42]);
                });
            }
        });
        assert_eq!(ranks[0].try_get("nothing").unwrap(), None);
        let e = ranks[0]
            .get("nothing", Duration::from_millis(20))
            .unwrap_err();
        assert!(matches!(e, DistributedError::GetTimeout { .. }), "{e}");
        thread::scope(|s| {
            for c in &ranks {
                s.spawn(move || c.shutdown(T).unwrap());
            }
        });
    }

    #[test]
    fn barriers_repeat_and_shutdown_cleans_up() {
        let ranks = LocalCoordinator::job("b", 4).unwrap();
        let store = ranks[0].store().clone();
        thread::scope(|s| {
            for c in ranks {
                s.spawn(move || {
                    for _ in 0..50 {
                        c.barrier("step", T).unwrap();
                    }
                    c.shutdown(T).unwrap();
                    assert!(matches!(
                        c.set("x", b""),
                        Err(DistributedError::ShutDown { .. })
                    ));
                    assert!(c.shutdown(T).is_ok());
                });
            }
        });
        assert!(store.job_ids().is_empty());
    }

    #[test]
    fn barrier_timeout_names_the_missing_rank() {
        let ranks = LocalCoordinator::job("t", 3).unwrap();
        let e = thread::scope(|s| {
            let a = s.spawn(|| ranks[0].barrier("x", Duration::from_millis(200)));
            let b = s.spawn(|| ranks[2].barrier("x", Duration::from_millis(200)));
            let _ = b.join();
            a.join()
        })
        .unwrap()
        .unwrap_err();
        match &e {
            DistributedError::BarrierTimeout { missing, dead, .. } => {
                assert_eq!(missing, &[1]);
                assert!(dead.is_empty());
            }
            other => panic!("unexpected {other}"),
        }
        assert!(e.to_string().contains("rank 1 did not arrive"), "{e}");
    }

    #[test]
    fn a_dropped_rank_is_reported_and_wakes_waiters() {
        let mut ranks = LocalCoordinator::job("d", 3).unwrap();
        let dead = ranks.remove(1);
        let rx = ranks[0].subscribe_failures();
        let started = Instant::now();
        let e = thread::scope(|s| {
            let waiter = s.spawn(|| ranks[0].barrier("never", Duration::from_secs(30)));
            thread::sleep(Duration::from_millis(50));
            drop(dead);
            waiter.join()
        })
        .unwrap()
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        match &e {
            DistributedError::RankFailed { failure, .. } => assert_eq!(failure.rank, 1),
            other => panic!("unexpected {other}"),
        }
        assert_eq!(rx.recv_timeout(T).unwrap().rank, 1);
        assert_eq!(ranks[1].failures().len(), 1);
        assert!(ranks[1].check().is_err());
        assert!(matches!(
            ranks[1].get("k", T),
            Err(DistributedError::RankFailed { .. })
        ));
    }

    #[test]
    fn jobs_do_not_mix() {
        let store = LocalStore::new();
        let a = store.join("a", 0, 1).unwrap();
        let b = store.join("b", 0, 2).unwrap();
        a.set("k", b"a").unwrap();
        assert_eq!(b.try_get("k").unwrap(), None);
        assert!(store.join("a", 0, 1).is_err(), "duplicate rank");
        assert!(store.join("b", 1, 3).is_err(), "world size mismatch");
        let b1 = store.join("b", 1, 2).unwrap();
        drop(a);
        assert!(b.failures().is_empty(), "a failure of job a is not job b's");
        // The ranks of b meet among themselves only.
        thread::scope(|s| {
            s.spawn(|| b.barrier("x", T).unwrap());
            s.spawn(|| b1.barrier("x", T).unwrap());
        });
        assert_eq!(store.job_ids(), vec!["b".to_string()]);
    }

    #[test]
    fn unique_id_exchange() {
        let ranks = LocalCoordinator::job("u", 4).unwrap();
        let ids: Vec<Vec<u8>> = thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        super::super::exchange_unique_id(
                            c,
                            "clique [0, 1, 2, 3]",
                            c.rank() == 0,
                            T,
                            || Ok(vec![7; 128]),
                        )
                        .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| id == &vec![7; 128]));
        let e = super::super::exchange_unique_id(&ranks[0], "c2", true, T, || {
            Err("ncclGetUniqueId failed".into())
        })
        .unwrap_err();
        assert!(e.to_string().contains("ncclGetUniqueId failed"), "{e}");
        // The others learn why at once, not at their timeout.
        let t = std::time::Instant::now();
        let e =
            super::super::exchange_unique_id(&ranks[1], "c2", false, T, || Ok(vec![])).unwrap_err();
        assert!(
            e.to_string()
                .contains("could not make the id: ncclGetUniqueId failed"),
            "{e}"
        );
        assert!(t.elapsed() < T / 2, "{:?}", t.elapsed());
    }

    #[test]
    fn single_is_a_world_of_one() {
        let c = LocalCoordinator::single();
        assert_eq!((c.rank(), c.world_size()), (0, 1));
        c.barrier("x", T).unwrap();
        c.shutdown(T).unwrap();
    }
}
