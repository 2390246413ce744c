//! Admin helpers for launchers and tests: list and delete the keys of a job.

use crate::client::with_client;
use crate::config::job_prefix;
use crate::keys::listing;
use crate::security::EtcdSecurity;
use etcd_client::DeleteOptions;
use xthunk_core::distributed::{DistributedResult, validate_job_id};

/// Every key of `job_id` in the etcd at `endpoints` (an empty list after a clean shutdown, or
/// once the leases of dead ranks expired); TLS and credentials from the environment
/// ([`EtcdSecurity::from_env`]).
pub fn job_keys(endpoints: &[String], job_id: &str) -> DistributedResult<Vec<String>> {
    job_keys_with(endpoints, &EtcdSecurity::from_env()?, job_id)
}

/// [`job_keys`] with these TLS options and credentials.
pub fn job_keys_with(
    endpoints: &[String],
    security: &EtcdSecurity,
    job_id: &str,
) -> DistributedResult<Vec<String>> {
    validate_job_id(job_id)?;
    let prefix = job_prefix(job_id);
    with_client(endpoints, security, "list job keys", job_id, async |c| {
        let resp = c.get(prefix.clone(), Some(listing())).await?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect())
    })
}

/// Deletes every key of `job_id` (e.g. by a launcher after its ranks were killed, instead of
/// waiting for their leases to expire); returns how many went. TLS and credentials from the
/// environment ([`EtcdSecurity::from_env`]).
pub fn delete_job(endpoints: &[String], job_id: &str) -> DistributedResult<u64> {
    delete_job_with(endpoints, &EtcdSecurity::from_env()?, job_id)
}

/// [`delete_job`] with these TLS options and credentials.
pub fn delete_job_with(
    endpoints: &[String],
    security: &EtcdSecurity,
    job_id: &str,
) -> DistributedResult<u64> {
    validate_job_id(job_id)?;
    let prefix = job_prefix(job_id);
    with_client(endpoints, security, "delete job keys", job_id, async |c| {
        let resp = c
            .delete(prefix.clone(), Some(DeleteOptions::new().with_prefix()))
            .await?;
        Ok(resp.deleted().unsigned_abs())
    })
}
