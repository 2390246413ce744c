//! One job, one incarnation: the launcher's [`JobClaim`] of a job id. The first launch of a
//! job id creates its `claim` key (in one transaction, only if it does not exist), bound to
//! the launcher's own lease and holding a fresh incarnation token; every rank it starts
//! carries the token and registers only while the claim holds it (see `session::register`).
//! A second launch of the same id, at any moment, finds the key and is refused whole.
//!
//! While its ranks run, the launcher publishes the cause of a failure it sees (a rank's
//! process ended) on the claim's lease ([`JobClaim::publish_cause`]: the first cause holds),
//! and when they have ended it deletes every key of the job ([`JobClaim::finish`]).

use crate::EtcdSecurity;
use crate::cause::put_if_absent;
use crate::client::{connect_client, coordinator_url, not_in_async, runtime, unreachable, within};
use crate::config::{job_prefix, store_error};
use crate::keys::Keys;
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio::time::sleep;
use xthunk_core::distributed::{DistributedError, DistributedResult, validate_job_id};

/// How long the launcher's requests while and after its ranks run may take (its main thread
/// waits for them).
const LAUNCHER_REQUEST_LIMIT: Duration = Duration::from_secs(2);

/// A launcher's claim of a job id in etcd, held (its lease kept alive every TTL/3) until
/// dropped; dropping it revokes the lease, so the claim key goes.
pub struct JobClaim {
    rt: Option<Runtime>,
    client: Client,
    lease: i64,
    token: String,
    job: String,
    /// `etcd://…`, as messages name it.
    coordinator: String,
    keep_alive: JoinHandle<()>,
}

impl std::fmt::Debug for JobClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobClaim")
            .field("job", &self.job)
            .field("lease", &self.lease)
            .field("token", &self.token)
            .finish()
    }
}

/// A fresh incarnation token: this process, the time, and 64 bits of a randomly keyed hash.
fn new_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(nanos);
    format!("{}-{nanos:x}-{:016x}", std::process::id(), h.finish())
}

impl JobClaim {
    /// Claims `job_id` in the etcd at `endpoints` for a lease of `ttl` (TLS and credentials
    /// from the environment: [`EtcdSecurity::from_env`]). Refused (a
    /// [`DistributedError::Config`] naming the job id) when the id is claimed already.
    pub fn acquire(endpoints: &[String], job_id: &str, ttl: Duration) -> DistributedResult<Self> {
        Self::acquire_with(endpoints, &EtcdSecurity::from_env()?, job_id, ttl)
    }

    /// [`JobClaim::acquire`] with these TLS options and credentials.
    pub fn acquire_with(
        endpoints: &[String],
        security: &EtcdSecurity,
        job_id: &str,
        ttl: Duration,
    ) -> DistributedResult<Self> {
        validate_job_id(job_id)?;
        not_in_async(job_id)?;
        let rt = runtime(job_id)?;
        let err = |op: &str, m: String| store_error(job_id, op, m);
        let limit = Duration::from_secs(10);
        let ttl_secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
        let token = new_token();
        let key = Keys {
            prefix: job_prefix(job_id),
        }
        .claim();
        let claimed = rt.block_on(async {
            let mut client = connect_client(endpoints, security, limit)
                .await
                .map_err(|e| err(&format!("connect to {}", endpoints.join(",")), e))?;
            let grant = within(limit, client.lease_grant(ttl_secs, None))
                .await
                .map_err(|e| err("grant lease", e))?;
            let lease = grant.id();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    token.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = match within(limit, client.txn(txn)).await {
                Ok(r) => r,
                Err(e) => {
                    let _ = within(limit, client.lease_revoke(lease)).await;
                    return Err(err("claim the job id", e));
                }
            };
            if resp.succeeded() {
                return Ok((client, lease));
            }
            let _ = within(limit, client.lease_revoke(lease)).await;
            let holder = resp
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Get(g) => g
                        .kvs()
                        .first()
                        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                    _ => None,
                })
                .unwrap_or_default();
            Err(DistributedError::Config(format!(
                "job id `{job_id}` is taken: another launch runs it (incarnation {holder}); a \
                 job id names one run, so this launch is refused and starts no rank (give \
                 another --job-id, or wait until that job ends)"
            )))
        });
        let (client, lease) = match claimed {
            Ok(v) => v,
            Err(e) => {
                rt.shutdown_background();
                return Err(e);
            }
        };
        let keep_alive = rt.spawn(keep_alive(client.clone(), lease, ttl, job_id.to_string()));
        tracing::info!(job = %job_id, token = %token, lease, "claimed the job id in etcd");
        Ok(JobClaim {
            rt: Some(rt),
            client,
            lease,
            token,
            job: job_id.to_string(),
            coordinator: coordinator_url(endpoints),
            keep_alive,
        })
    }

    /// The incarnation token every rank of this launch carries.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// One request of the launcher, bounded by [`LAUNCHER_REQUEST_LIMIT`]; an unreachable
    /// etcd is [`DistributedError::CoordinatorLost`].
    fn request<T>(
        &self,
        op: &str,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, etcd_client::Error>,
    ) -> DistributedResult<T> {
        let lost = |message: String| DistributedError::CoordinatorLost {
            job: self.job.clone(),
            coordinator: self.coordinator.clone(),
            op: op.to_string(),
            message,
        };
        let Some(rt) = &self.rt else {
            return Err(lost("the claim was released".into()));
        };
        not_in_async(&self.job)?;
        let mut client = self.client.clone();
        let fut = async move { tokio::time::timeout(LAUNCHER_REQUEST_LIMIT, f(&mut client)).await };
        match rt.block_on(fut) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if unreachable(&e) => Err(lost(e.to_string())),
            Ok(Err(e)) => Err(store_error(&self.job, op, e)),
            Err(_) => Err(lost(format!("no answer within {LAUNCHER_REQUEST_LIMIT:?}"))),
        }
    }

    /// Publishes `cause` as the root cause of the job's failure (on the claim's lease: it
    /// lasts as long as this launch) unless one was published first; returns the cause that
    /// holds.
    pub fn publish_cause(&self, cause: &str) -> DistributedResult<String> {
        let key = Keys {
            prefix: job_prefix(&self.job),
        }
        .cause(&self.token);
        let lease = self.lease;
        let earlier = self.request("publish the cause", async |c| {
            put_if_absent(c, &key, cause, lease).await
        })?;
        Ok(earlier.map_or_else(
            || cause.to_string(),
            |v| String::from_utf8_lossy(&v).into_owned(),
        ))
    }

    /// The root cause of the job's failure that a rank (or this launcher) published, if any.
    pub fn published_cause(&self) -> DistributedResult<Option<String>> {
        let key = Keys {
            prefix: job_prefix(&self.job),
        }
        .cause(&self.token);
        let resp = self.request("read the cause", async |c| c.get(key.as_str(), None).await)?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }

    /// The value of the job's key `key` (one a rank set with `Coordinator::set`), if set now.
    pub fn value(&self, key: &str) -> DistributedResult<Option<Vec<u8>>> {
        let key = Keys {
            prefix: job_prefix(&self.job),
        }
        .kv(key);
        let resp = self.request("read a key", async |c| c.get(key.as_str(), None).await)?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// The job has ended: deletes every key of the job (the ranks' that have not expired yet,
    /// the published cause, the claim), if the claim still holds this launch's token (the
    /// keys are then this launch's). Returns whether they were deleted.
    pub fn finish(&self) -> DistributedResult<bool> {
        let keys = Keys {
            prefix: job_prefix(&self.job),
        };
        let (claim, token) = (keys.claim(), self.token.clone());
        let resp = self.request("delete the job's keys", async |c| {
            let txn = Txn::new()
                .when([Compare::value(claim, CompareOp::Equal, token)])
                .and_then([TxnOp::delete(
                    keys.prefix.clone(),
                    Some(DeleteOptions::new().with_prefix()),
                )]);
            c.txn(txn).await
        })?;
        Ok(resp.succeeded())
    }
}

/// Keeps the claim's lease alive every TTL/3 until aborted (a failed round is retried; the
/// ranks' own leases are what report failures).
async fn keep_alive(client: Client, lease: i64, ttl: Duration, job: String) {
    let interval = (ttl / 3).max(Duration::from_millis(100));
    loop {
        let mut c = client.clone();
        match within(interval, c.lease_keep_alive(lease)).await {
            Ok((mut keeper, mut stream)) => loop {
                let round = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                match within(interval, round).await {
                    Ok(Some(resp)) if resp.ttl() > 0 => sleep(interval).await,
                    Ok(_) => {
                        tracing::warn!(job = %job, "the job's claim lease expired");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(job = %job, error = %e, "keeping the job's claim failed; retrying");
                        break;
                    }
                }
            },
            Err(e) => {
                tracing::warn!(job = %job, error = %e, "keeping the job's claim failed; retrying")
            }
        }
        sleep(Duration::from_millis(200)).await;
    }
}

impl Drop for JobClaim {
    fn drop(&mut self) {
        self.keep_alive.abort();
        if let Some(rt) = self.rt.take() {
            if tokio::runtime::Handle::try_current().is_err() {
                let mut client = self.client.clone();
                let lease = self.lease;
                let _ = rt.block_on(async move {
                    within(Duration::from_secs(2), client.lease_revoke(lease)).await
                });
            }
            rt.shutdown_background();
        }
    }
}
