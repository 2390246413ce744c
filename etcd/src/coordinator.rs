//! [`EtcdCoordinator`]: one rank of a job, the [`Coordinator`] over a session, with its
//! private runtime and background tasks; connecting, shutting down, dropping.

use crate::client::{connect_client, coordinator_url, not_in_async, runtime};
use crate::config::{BACKEND, EtcdConfig, job_prefix, store_error};
use crate::keys::Keys;
use crate::session::{Ctx, register};
use crossbeam_channel::Receiver;
use etcd_client::PutOptions;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use xthunk_core::distributed::{
    Coordinator, DistributedError, DistributedResult, FailureBoard, RankFailure, SHUTDOWN_BARRIER,
    validate_job_id, validate_name, validate_rank,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Open,
    ShutDown,
    Abandoned,
}

/// One rank of a job coordinated through etcd. See the [crate documentation](crate).
pub struct EtcdCoordinator {
    rt: Option<Runtime>,
    ctx: Arc<Ctx>,
    tasks: Vec<JoinHandle<()>>,
    rounds: Mutex<HashMap<(bool, String), u64>>,
    state: Mutex<State>,
}

impl fmt::Debug for EtcdCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCoordinator")
            .field("job", &self.ctx.job)
            .field("rank", &self.ctx.rank)
            .field("world", &self.ctx.world)
            .field("lease", &self.ctx.lease)
            .field("ttl", &self.ctx.ttl)
            .finish()
    }
}

impl EtcdCoordinator {
    /// Connects, checks the job's world size, takes a lease and registers this rank as alive
    /// (failing if the rank is already alive in this job: another process with the same job
    /// id and rank, or a previous run whose lease has not expired yet), then starts the
    /// heartbeats and the liveness watch.
    pub fn connect(config: EtcdConfig) -> DistributedResult<Self> {
        validate_job_id(&config.job_id)?;
        validate_rank(config.rank, config.world_size)?;
        let job = config.job_id.clone();
        if config.endpoints.is_empty() {
            return Err(DistributedError::Config("no etcd endpoint given".into()));
        }
        let security = config.security()?;
        not_in_async(&job)?;
        let rt = runtime(&job)?;
        let store_err = |op: &str, message: String| store_error(&job, op, message);
        let ttl_secs = config.ttl.as_secs_f64().ceil().max(1.0) as i64;
        let ctx = rt.block_on(async {
            let mut client = connect_client(&config.endpoints, &security, config.request_timeout)
                .await
                .map_err(|e| store_err(&format!("connect to {}", config.endpoints.join(",")), e))?;
            let grant = timeout(config.request_timeout, client.lease_grant(ttl_secs, None))
                .await
                .map_err(|_| store_err("grant lease", "no answer".into()))?
                .map_err(|e| store_err("grant lease", e.to_string()))?;
            let (tick, _) = tokio::sync::watch::channel(0);
            let ctx = Ctx {
                client,
                coordinator: coordinator_url(&config.endpoints),
                keys: Keys {
                    prefix: job_prefix(&job),
                },
                job: job.clone(),
                rank: config.rank,
                world: config.world_size,
                lease: grant.id(),
                ttl: Duration::from_secs(grant.ttl().max(1).unsigned_abs()),
                request_timeout: config.request_timeout,
                board: FailureBoard::new(),
                failure_tick: tick,
                incarnation: config.incarnation.clone(),
                leaving: AtomicBool::new(false),
                run: std::sync::OnceLock::new(),
            };
            match register(&ctx).await {
                Ok(r) => Ok((ctx, r)),
                Err(e) => {
                    let mut c = ctx.client.clone();
                    let _ = timeout(ctx.request_timeout, c.lease_revoke(ctx.lease)).await;
                    Err(e)
                }
            }
        });
        let (ctx, (rev, alive)) = match ctx {
            Ok(v) => v,
            Err(e) => {
                rt.shutdown_background();
                return Err(e);
            }
        };
        let ctx = Arc::new(ctx);
        let tasks = vec![
            rt.spawn(ctx.clone().keep_alive()),
            rt.spawn(ctx.clone().watch_liveness(rev + 1, alive)),
        ];
        tracing::info!(
            job = %ctx.job, rank = ctx.rank, world = ctx.world, lease = ctx.lease,
            ttl = ?ctx.ttl, "joined the job through etcd"
        );
        Ok(EtcdCoordinator {
            rt: Some(rt),
            ctx,
            tasks,
            rounds: Mutex::new(HashMap::new()),
            state: Mutex::new(State::Open),
        })
    }

    /// The lease TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ctx.ttl
    }

    /// This rank's lease id.
    pub fn lease_id(&self) -> i64 {
        self.ctx.lease
    }

    /// Stops the heartbeats and goes away without revoking or deleting anything, as a killed
    /// process would: the lease expires after its TTL and the other ranks report this rank
    /// failed. For fault-injection tests.
    pub fn abandon(self) {
        *self.state.lock() = State::Abandoned;
    }

    fn block<T>(&self, fut: impl Future<Output = DistributedResult<T>>) -> DistributedResult<T> {
        not_in_async(&self.ctx.job)?;
        if *self.state.lock() != State::Open {
            return Err(DistributedError::ShutDown {
                job: self.ctx.job.clone(),
                rank: self.ctx.rank,
            });
        }
        match &self.rt {
            Some(rt) => rt.block_on(fut),
            None => Err(DistributedError::ShutDown {
                job: self.ctx.job.clone(),
                rank: self.ctx.rank,
            }),
        }
    }

    fn next_round(&self, internal: bool, name: &str) -> u64 {
        let mut rounds = self.rounds.lock();
        let next = rounds.entry((internal, name.to_string())).or_insert(0);
        let round = *next;
        *next += 1;
        round
    }

    fn stop_tasks(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Coordinator for EtcdCoordinator {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn job_id(&self) -> &str {
        &self.ctx.job
    }

    fn rank(&self) -> usize {
        self.ctx.rank
    }

    fn world_size(&self) -> usize {
        self.ctx.world
    }

    fn set(&self, key: &str, value: &[u8]) -> DistributedResult<()> {
        validate_name("key", key)?;
        let ctx = &self.ctx;
        self.block(async {
            let mut client = ctx.client.clone();
            let put = client.put(
                ctx.keys.kv(key),
                value,
                Some(PutOptions::new().with_lease(ctx.lease)),
            );
            ctx.req("set", put).await.map(drop)
        })
    }

    fn try_get(&self, key: &str) -> DistributedResult<Option<Vec<u8>>> {
        validate_name("key", key)?;
        let ctx = &self.ctx;
        self.block(async {
            let mut client = ctx.client.clone();
            let resp = ctx.req("get", client.get(ctx.keys.kv(key), None)).await?;
            Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    fn get(&self, key: &str, timeout: Duration) -> DistributedResult<Vec<u8>> {
        validate_name("key", key)?;
        let full = self.ctx.keys.kv(key);
        self.block(self.ctx.get_wait(&full, key, timeout))
    }

    fn barrier(&self, name: &str, timeout: Duration) -> DistributedResult<()> {
        validate_name("barrier name", name)?;
        let round = self.next_round(false, name);
        self.block(self.ctx.barrier(false, name, round, timeout))
    }

    fn publish_cause(&self, cause: &str) -> DistributedResult<String> {
        self.block(self.ctx.publish_cause(cause))
    }

    fn published_cause(&self) -> DistributedResult<Option<String>> {
        self.block(self.ctx.published_cause())
    }

    fn failures(&self) -> Vec<RankFailure> {
        self.ctx.board.all()
    }

    fn subscribe_failures(&self) -> Receiver<RankFailure> {
        self.ctx.board.subscribe()
    }

    fn shutdown(&self, timeout: Duration) -> DistributedResult<()> {
        if *self.state.lock() != State::Open {
            return Ok(());
        }
        let round = self.next_round(true, SHUTDOWN_BARRIER);
        let result = self.block(self.ctx.barrier(true, SHUTDOWN_BARRIER, round, timeout));
        for t in &self.tasks {
            // The heartbeats stop first, so that nothing renews the lease being revoked.
            t.abort();
        }
        let left = self.block(self.ctx.leave(result.is_ok()));
        *self.state.lock() = State::ShutDown;
        if let Err(e) = &left {
            tracing::warn!(error = %e, "leaving the job cleanly failed; its keys expire with the lease");
        }
        result.and(left)
    }
}

impl Drop for EtcdCoordinator {
    fn drop(&mut self) {
        let state = *self.state.get_mut();
        self.stop_tasks();
        if state == State::Open && tokio::runtime::Handle::try_current().is_err() {
            // Not shut down: revoke the lease so that the other ranks learn at once that this
            // rank is gone (without a `left` key, they report it failed).
            if let Some(rt) = &self.rt {
                let ctx = &self.ctx;
                ctx.leaving.store(true, Ordering::SeqCst);
                let mut client = ctx.client.clone();
                let lease = ctx.lease;
                let _ = rt.block_on(async move {
                    timeout(Duration::from_secs(1), client.lease_revoke(lease)).await
                });
            }
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
