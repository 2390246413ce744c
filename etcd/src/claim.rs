//! One job, one incarnation: the launcher's [`JobClaim`] of a job id. The first launch of a
//! job id creates its `claim` key (in one transaction, only if it does not exist), bound to
//! the launcher's own lease and holding a fresh incarnation token; every rank it starts
//! carries the token and registers only while the claim holds it (see `session::register`).
//! A second launch of the same id, at any moment, finds the key and is refused whole.

use crate::client::{connect_client, not_in_async, runtime, within};
use crate::keys::Keys;
use crate::{job_prefix, store_error};
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio::time::sleep;
use xthunk_core::distributed::{DistributedError, DistributedResult, validate_job_id};

/// A launcher's claim of a job id in etcd, held (its lease kept alive every TTL/3) until
/// dropped; dropping it revokes the lease, so the claim key goes.
pub struct JobClaim {
    rt: Option<Runtime>,
    client: Client,
    lease: i64,
    token: String,
    job: String,
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
    /// Claims `job_id` in the etcd at `endpoints` for a lease of `ttl`. Refused (a
    /// [`DistributedError::Config`] naming the job id) when the id is claimed already.
    pub fn acquire(endpoints: &[String], job_id: &str, ttl: Duration) -> DistributedResult<Self> {
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
            let mut client = connect_client(endpoints, limit)
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
            keep_alive,
        })
    }

    /// The incarnation token every rank of this launch carries.
    pub fn token(&self) -> &str {
        &self.token
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
