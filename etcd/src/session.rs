//! A rank's session: what its blocking calls and its background tasks share (the client, the
//! lease, the failure board), one bounded request, joining the job (world size check,
//! registration as alive) and leaving it.

use crate::client::unreachable;
use crate::config::store_error;
use crate::keys::{Keys, listing};
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, WatchResponse, WatchStream};
use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use xthunk_core::distributed::{DistributedError, DistributedResult, FailureBoard, RankFailure};

/// What the calling thread and the background tasks share.
pub(crate) struct Ctx {
    pub(crate) client: Client,
    /// `etcd://HOST:PORT[,…]`, as messages name the coordinator.
    pub(crate) coordinator: String,
    pub(crate) keys: Keys,
    pub(crate) job: String,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    pub(crate) lease: i64,
    pub(crate) ttl: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) board: FailureBoard,
    /// Bumped on every new failure: wakes async waiters.
    pub(crate) failure_tick: tokio::sync::watch::Sender<u64>,
    /// The incarnation token of the launch that started this rank, if any: the rank
    /// registers only while the job's claim holds it.
    pub(crate) incarnation: Option<String>,
    /// Set when this rank starts leaving: the deletion of its own keys is then expected.
    pub(crate) leaving: AtomicBool,
    /// This run of the job, set at the registration: the launch's incarnation token, else
    /// `w<revision>` of the job's world key (created by its first rank). The published cause
    /// of a failure is per run, so that a cause left by an earlier run of the same job id is
    /// never read as this one's.
    pub(crate) run: OnceLock<String>,
}

impl Ctx {
    pub(crate) fn store_err(
        &self,
        op: impl Into<String>,
        message: impl fmt::Display,
    ) -> DistributedError {
        store_error(&self.job, op, message)
    }

    pub(crate) fn fail(&self, rank: usize, reason: String) {
        self.record(RankFailure::new(rank, reason));
    }

    /// This rank lost etcd (its heartbeats or its liveness watch failed for a TTL): the
    /// culprit is the coordinator.
    pub(crate) fn lost(&self, reason: String) {
        self.record(RankFailure::lost(self.rank, &self.coordinator, reason));
    }

    /// The key of this run's published cause.
    pub(crate) fn cause_key(&self) -> String {
        self.keys.cause(self.run.get().map_or("", String::as_str))
    }

    fn record(&self, failure: RankFailure) {
        if self.board.record(failure) {
            self.failure_tick.send_modify(|n| *n += 1);
        }
    }

    pub(crate) fn check(&self) -> DistributedResult<()> {
        match self.board.first() {
            Some(failure) => Err(DistributedError::RankFailed {
                job: self.job.clone(),
                failure,
            }),
            None => Ok(()),
        }
    }

    /// One request, bounded by the request timeout. An unreachable or silent etcd is
    /// [`DistributedError::CoordinatorLost`]; a request it refused, a store error.
    pub(crate) async fn req<T>(
        &self,
        op: &str,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> DistributedResult<T> {
        match tokio::time::timeout(self.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if unreachable(&e) => Err(self.lost_err(op, e)),
            Ok(Err(e)) => Err(self.store_err(op, e)),
            Err(_) => {
                Err(self.lost_err(op, format!("no answer within {:?}", self.request_timeout)))
            }
        }
    }

    pub(crate) fn lost_err(&self, op: &str, message: impl fmt::Display) -> DistributedError {
        DistributedError::CoordinatorLost {
            job: self.job.clone(),
            coordinator: self.coordinator.clone(),
            op: op.to_string(),
            message: message.to_string(),
        }
    }

    /// Ranks that have an `alive` key now.
    pub(crate) async fn alive_ranks(&self) -> DistributedResult<BTreeSet<usize>> {
        let mut client = self.client.clone();
        let prefix = self.keys.alive_prefix();
        let resp = self
            .req(
                "list live ranks",
                client.get(prefix.clone(), Some(listing())),
            )
            .await?;
        Ok(self.keys.alive_in(resp.kvs()))
    }

    /// Leaves the job: marks a clean exit if `clean`, revokes the lease (every key of this
    /// rank goes), and deletes the job's keys if no rank is alive any more, but for the
    /// launcher's claim and the published cause of a failure (the launcher reads the cause,
    /// then deletes both; without a launcher the cause expires with its own lease).
    pub(crate) async fn leave(&self, clean: bool) -> DistributedResult<()> {
        self.leaving.store(true, Ordering::SeqCst);
        let mut client = self.client.clone();
        if clean {
            let put = client.put(
                self.keys.left(self.rank),
                "",
                Some(PutOptions::new().with_lease(self.lease)),
            );
            self.req("mark clean exit", put).await?;
        }
        self.req("revoke lease", client.lease_revoke(self.lease))
            .await?;
        if self.alive_ranks().await?.is_empty() {
            let kept = [self.cause_key(), self.keys.claim()];
            let del = client.txn(Txn::new().and_then(self.keys.delete_all_but(&kept)));
            self.req("delete job keys", del).await?;
        }
        Ok(())
    }
}

/// Checks the world size and registers `ctx.rank` as alive; returns the revision of the
/// registration and the ranks alive at it.
pub(crate) async fn register(ctx: &Ctx) -> DistributedResult<(i64, HashSet<usize>)> {
    let mut client = ctx.client.clone();
    let lease = Some(PutOptions::new().with_lease(ctx.lease));
    let world_key = ctx.keys.world();
    let world = ctx.world.to_string();
    // Every write of the registration holds only while the job's claim is this rank's own
    // incarnation: a rank of another launch of the same job id can never join this one.
    let claim_key = ctx.keys.claim();
    let claimed = |mut when: Vec<Compare>| {
        if let Some(token) = &ctx.incarnation {
            when.push(Compare::value(
                claim_key.clone(),
                CompareOp::Equal,
                token.as_str(),
            ));
        }
        when
    };
    let txn = Txn::new()
        .when(claimed(vec![Compare::create_revision(
            world_key.clone(),
            CompareOp::Equal,
            0,
        )]))
        .and_then([TxnOp::put(world_key.clone(), world.clone(), lease.clone())])
        .or_else([
            TxnOp::get(world_key.clone(), None),
            TxnOp::get(claim_key.clone(), None),
        ]);
    let resp = ctx.req("check world size", client.txn(txn)).await?;
    let world_rev = if resp.succeeded() {
        resp.header().map(|h| h.revision())
    } else {
        resp.op_responses().first().and_then(|op| match op {
            etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        })
    };
    let run = match &ctx.incarnation {
        Some(token) => token.clone(),
        None => format!("w{}", world_rev.unwrap_or(0)),
    };
    let _ = ctx.run.set(run);
    if !resp.succeeded() {
        let values = got_values(resp.op_responses());
        check_incarnation(ctx, values.get(1).cloned().flatten())?;
        if let Some(Some(v)) = values.first()
            && v != world.as_bytes()
        {
            return Err(DistributedError::Config(format!(
                "job `{}` has {} ranks in etcd, but rank {} joins it with a world of {}",
                ctx.job,
                String::from_utf8_lossy(v),
                ctx.rank,
                ctx.world
            )));
        }
    }
    let alive_key = ctx.keys.alive(ctx.rank);
    let txn = Txn::new()
        .when(claimed(vec![Compare::create_revision(
            alive_key.clone(),
            CompareOp::Equal,
            0,
        )]))
        .and_then([TxnOp::put(alive_key, "", lease)])
        .or_else([TxnOp::get(claim_key.clone(), None)]);
    let resp = ctx.req("register as alive", client.txn(txn)).await?;
    if !resp.succeeded() {
        let values = got_values(resp.op_responses());
        check_incarnation(ctx, values.first().cloned().flatten())?;
        return Err(DistributedError::Config(format!(
            "rank {} of job `{}` is already alive in etcd: another process uses this job id and \
             rank, or a previous run's lease has not expired yet (wait for its TTL, or use \
             another job id)",
            ctx.rank, ctx.job
        )));
    }
    let rev = resp.header().map_or(0, |h| h.revision());
    let opts = listing().with_revision(rev);
    let now = ctx
        .req(
            "list live ranks",
            client.get(ctx.keys.alive_prefix(), Some(opts)),
        )
        .await?;
    Ok((rev, ctx.keys.alive_in(now.kvs())))
}

/// The value of each `get` of a transaction's responses (`None` for a missing key).
fn got_values(ops: Vec<etcd_client::TxnOpResponse>) -> Vec<Option<Vec<u8>>> {
    ops.into_iter()
        .filter_map(|op| match op {
            etcd_client::TxnOpResponse::Get(g) => {
                Some(g.kvs().first().map(|kv| kv.value().to_vec()))
            }
            _ => None,
        })
        .collect()
}

/// Fails when this rank carries an incarnation token and the job's claim (`claim`, its value
/// or `None`) holds another one, or none.
fn check_incarnation(ctx: &Ctx, claim: Option<Vec<u8>>) -> DistributedResult<()> {
    let Some(token) = &ctx.incarnation else {
        return Ok(());
    };
    match claim {
        Some(v) if v == token.as_bytes() => Ok(()),
        Some(v) => Err(DistributedError::Config(format!(
            "job `{}` is claimed by another launch (incarnation {}; rank {} belongs to \
             incarnation {token}): a job id names one run, so this rank does not join it",
            ctx.job,
            String::from_utf8_lossy(&v),
            ctx.rank
        ))),
        None => Err(DistributedError::Config(format!(
            "job `{}` has no claim in etcd for incarnation {token} of rank {}: the launch that \
             started this rank has ended, or its claim expired",
            ctx.job, ctx.rank
        ))),
    }
}

/// The next response of a watch, or why the watch is over (canceled, ended, failed).
pub(crate) async fn next_response(stream: &mut WatchStream) -> Result<WatchResponse, String> {
    match stream.message().await {
        Ok(Some(resp)) if resp.canceled() => {
            Err(format!("watch canceled: {}", resp.cancel_reason()))
        }
        Ok(Some(resp)) => Ok(resp),
        Ok(None) => Err("watch stream ended".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Resolves when the failure tick changes; never, once its sender is gone.
pub(crate) async fn changed(tick: &mut tokio::sync::watch::Receiver<u64>) {
    if tick.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
