//! The published root cause of a job's failure (`cause/<run>`, the etcd form of
//! [`CAUSE_KEY`](xthunk_core::distributed::CAUSE_KEY); one per run of the job id, so that an
//! earlier run's cause is never this one's): the first publisher wins (one transaction puts
//! it only if it is absent), and the cause outlives its publisher. A
//! rank puts it on a lease of its own, [`CAUSE_TTL_FACTOR`] times its TTL, that it never
//! revokes or renews (its own lease goes when it leaves, and the survivors, who learn of the
//! failure within a TTL, read the cause after that); the launcher puts it on its claim's
//! lease ([`JobClaim::publish_cause`](crate::JobClaim::publish_cause)), and deletes the
//! job's keys, the cause included, when it ends.

use crate::session::Ctx;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use xthunk_core::distributed::{CAUSE_TTL_FACTOR, DistributedResult};

/// Puts `cause` at `key` on `lease` unless `key` exists: `None` if it was put, else the
/// value already there.
pub(crate) async fn put_if_absent(
    client: &mut Client,
    key: &str,
    cause: &str,
    lease: i64,
) -> Result<Option<Vec<u8>>, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            cause,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let resp = client.txn(txn).await?;
    if resp.succeeded() {
        return Ok(None);
    }
    Ok(resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    }))
}

fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

impl Ctx {
    /// [`Coordinator::publish_cause`](xthunk_core::distributed::Coordinator::publish_cause)
    /// for this rank: on a new lease of [`CAUSE_TTL_FACTOR`] × its TTL.
    pub(crate) async fn publish_cause(&self, cause: &str) -> DistributedResult<String> {
        if let Some(earlier) = self.published_cause().await? {
            return Ok(earlier);
        }
        let key = self.cause_key();
        let mut client = self.client.clone();
        let secs = (self.ttl.as_secs().max(1)).saturating_mul(u64::from(CAUSE_TTL_FACTOR));
        let secs = i64::try_from(secs).unwrap_or(i64::MAX);
        let lease = self
            .req("grant the cause's lease", client.lease_grant(secs, None))
            .await?
            .id();
        let earlier = self
            .req(
                "publish the cause",
                put_if_absent(&mut client, &key, cause, lease),
            )
            .await?;
        match earlier {
            None => Ok(cause.to_string()),
            Some(v) => {
                // Another cause was first: the new lease holds nothing.
                let _ = self
                    .req("revoke the cause's lease", client.lease_revoke(lease))
                    .await;
                Ok(text(&v))
            }
        }
    }

    /// The cause of this run published so far, if any.
    pub(crate) async fn published_cause(&self) -> DistributedResult<Option<String>> {
        let mut client = self.client.clone();
        let key = self.cause_key();
        let now = self
            .req("read the cause", client.get(key.as_str(), None))
            .await?;
        Ok(now.kvs().first().map(|kv| text(kv.value())))
    }
}
