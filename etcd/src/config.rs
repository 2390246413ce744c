//! A rank's etcd configuration ([`EtcdConfig`]), the key prefix of a job, and the one mapping
//! of store failures to errors.

use crate::security::{self, EtcdSecurity};
use std::time::Duration;
use xthunk_core::distributed::{DistributedError, DistributedResult};

/// The backend name in errors and
/// [`Coordinator::backend`](xthunk_core::distributed::Coordinator::backend).
pub(crate) const BACKEND: &str = "etcd";

/// The error of a failed etcd operation `op` of job `job` (with a hint of what to set when
/// etcd asked for authentication).
pub(crate) fn store_error(
    job: &str,
    op: impl Into<String>,
    message: impl std::fmt::Display,
) -> DistributedError {
    let mut message = message.to_string();
    if let Some(hint) = security::auth_hint(&message) {
        message = format!("{message} ({hint})");
    }
    DistributedError::Store {
        job: job.to_string(),
        backend: BACKEND,
        op: op.into(),
        message,
    }
}

/// The default lease TTL: a dead rank is noticed within about this long.
pub const DEFAULT_TTL: Duration = xthunk_core::distributed::DEFAULT_LEASE_TTL;

/// How to reach etcd and who this rank is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `HOST:PORT` of one or more etcd members (`https://` is added when no scheme is given
    /// and TLS is configured, else `http://`).
    pub endpoints: Vec<String>,
    pub job_id: String,
    pub rank: usize,
    pub world_size: usize,
    /// The lease TTL (whole seconds, at least 1; etcd may grant more): a rank whose heartbeats
    /// stop is reported dead within about this long. Keep-alives go every TTL/3.
    pub ttl: Duration,
    /// How long connecting, and each single request, may take.
    pub request_timeout: Duration,
    /// The incarnation token of the launch that started this rank ([`JobClaim::token`](crate::JobClaim::token)):
    /// the rank joins only while the job's claim holds it. `None` (ranks started by a
    /// scheduler) joins without that check.
    pub incarnation: Option<String>,
    /// TLS and credentials; `None`: from the `XTHUNK_ETCD_*` environment variables at
    /// connect ([`EtcdSecurity::from_env`]).
    pub security: Option<EtcdSecurity>,
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>, job_id: &str, rank: usize, world_size: usize) -> Self {
        EtcdConfig {
            endpoints,
            job_id: job_id.to_string(),
            rank,
            world_size,
            ttl: DEFAULT_TTL,
            request_timeout: Duration::from_secs(10),
            incarnation: None,
            security: None,
        }
    }

    pub fn with_security(mut self, security: EtcdSecurity) -> Self {
        self.security = Some(security);
        self
    }

    /// [`EtcdConfig::security`], else the environment's.
    pub fn security(&self) -> DistributedResult<EtcdSecurity> {
        match &self.security {
            Some(s) => Ok(s.clone()),
            None => EtcdSecurity::from_env(),
        }
    }

    pub fn with_incarnation(mut self, token: Option<String>) -> Self {
        self.incarnation = token;
        self
    }

    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn with_request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }
}

/// The key prefix of every key of `job_id`: `/xthunk/<job>/`.
pub fn job_prefix(job_id: &str) -> String {
    format!("/xthunk/{job_id}/")
}
