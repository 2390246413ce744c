//! xthunk coordination over etcd v3: the [`Coordinator`] of a job whose ranks are processes,
//! on one host or many.
//!
//! etcd is the store and the consensus; this crate only lays out keys and watches them:
//!
//! ```text
//! /xthunk/<job>/meta/world                  the world size (checked by every rank that joins)
//! /xthunk/<job>/meta/claim                  the launch's incarnation token (on its lease)
//! /xthunk/<job>/live/alive/<rank>           liveness: exists while the rank's lease lives
//! /xthunk/<job>/live/left/<rank>            written just before a clean exit
//! /xthunk/<job>/kv/<key>                    Coordinator::set / get
//! /xthunk/<job>/cause/<run>                 the root cause of a failure of one run (the
//!                                           launch's token, else the world key's revision)
//! /xthunk/<job>/barrier/<name>/<round>/<rank>   user barriers (name with `/` and `%` escaped)
//! /xthunk/<job>/sys/<name>/<round>/<rank>       internal barriers (shutdown)
//! ```
//!
//! Every key a rank writes is attached to its **lease**, kept alive every TTL/3: the lease is
//! the heartbeat. When a process dies, hangs or loses etcd for longer than the TTL, etcd
//! deletes its keys, and every other rank's **watch** on `live/` sees its `alive` key go
//! without a `left` key before it: that rank is reported failed ([`Coordinator::failures`],
//! [`Coordinator::subscribe_failures`]) and every blocking call fails at once. A rank that
//! loses its own lease reports a failure of itself. A clean [`Coordinator::shutdown`] is a
//! barrier, a `left` key, and the revocation of the lease: nothing of the rank is left, and the
//! last rank out deletes the job's keys but for the launcher's claim and the published cause
//! of a failure (`cause`: first publisher wins, on a lease of its own that outlives its
//! publisher; the launcher reads it, then deletes every key of the job when it ends). A rank
//! that cannot reach etcd for a TTL reports the loss of its coordinator (`lost the
//! coordinator etcd://…: …`), and a request etcd does not answer fails with
//! [`DistributedError::CoordinatorLost`]. Dropping a coordinator without shutdown revokes its
//! lease (the others see the rank fail at once); [`EtcdCoordinator::abandon`] stops the
//! heartbeats without revoking anything, as a killed process would.
//!
//! Values are meant to be small (ids, addresses, configuration): etcd refuses requests over
//! 1.5 MiB by default (`--max-request-bytes`).
//!
//! The coordinator is blocking: it drives etcd-client on a private tokio runtime, and must not
//! be called from inside another async runtime (that is reported as an error). [`server`]
//! starts a throwaway etcd for tests.
//!
//! Anyone who can reach an etcd without authentication can read and write every job's keys
//! (join a job, announce segments, fail it): [`security`] adds TLS (`https://`, a CA, a client
//! certificate) and user/password authentication, from the `XTHUNK_ETCD_*` environment
//! variables unless given in [`EtcdConfig::security`] (`docs/security.md`).
//!
//! Files: `keys` (the key layout), `session` (what a rank's calls and background tasks share:
//! the client, the lease, the failure board; joining and leaving), `kv` (waiting for a key),
//! `claim` ([`JobClaim`]: one job id, one incarnation), `cause` (publishing the root cause),
//! `barrier`, `heartbeat` (lease keep-alive), `liveness` (the watch on `live/`),
//! `coordinator` ([`EtcdCoordinator`]), `client` (the private runtime and connecting),
//! `security` (TLS and authentication options), `admin` (listing and deleting a job's keys).

mod admin;
mod barrier;
mod cause;
mod claim;
mod client;
mod coordinator;
mod heartbeat;
mod keys;
mod kv;
mod liveness;
pub mod security;
pub mod server;
mod session;

pub use admin::{delete_job, delete_job_with, job_keys, job_keys_with};
pub use claim::JobClaim;
pub use coordinator::EtcdCoordinator;
pub use crossbeam_channel::Receiver;
pub use security::{EtcdSecurity, EtcdTls, EtcdUser};

use std::time::Duration;
use xthunk_core::distributed::{
    Coordinator, CoordinatorSpec, DistributedConfig, DistributedError, DistributedResult,
    LocalCoordinator,
};

/// The backend name in errors and [`Coordinator::backend`].
const BACKEND: &str = "etcd";

/// The error of a failed etcd operation `op` of job `job` (with a hint of what to set when
/// etcd asked for authentication).
fn store_error(
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
    /// The incarnation token of the launch that started this rank ([`JobClaim::token`]):
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

/// The coordinator `config` asks for: [`EtcdCoordinator`] for `etcd://`, an
/// `EmbeddedCoordinator` for `unix://` (the socket `xthunk launch` serves), or, for `local`, a
/// [`LocalCoordinator`] when the job is this process alone (the local coordinator cannot span
/// processes: a `local` job of more ranks is an error here).
pub fn connect(
    config: &DistributedConfig,
    ttl: Duration,
) -> DistributedResult<Box<dyn Coordinator>> {
    connect_incarnation(config, ttl, None)
}

/// [`connect`] for a rank of the launch whose incarnation token is `incarnation` (an etcd
/// rank then joins only that incarnation of the job; the other coordinators ignore it).
pub fn connect_incarnation(
    config: &DistributedConfig,
    ttl: Duration,
    incarnation: Option<String>,
) -> DistributedResult<Box<dyn Coordinator>> {
    match &config.coordinator {
        CoordinatorSpec::Local if config.world_size == 1 => {
            Ok(Box::new(LocalCoordinator::single()))
        }
        CoordinatorSpec::Local => Err(DistributedError::Config(format!(
            "job `{}` has {} processes, but the local coordinator serves the threads of one \
             process: start the job with `xthunk launch -n N` (it serves a coordinator), or \
             use --coordinator etcd://HOST:PORT",
            config.job_id, config.world_size
        ))),
        #[cfg(unix)]
        CoordinatorSpec::Unix { path } => Ok(Box::new(
            xthunk_core::distributed::EmbeddedCoordinator::connect(
                path,
                &config.job_id,
                config.rank,
                config.world_size,
                ttl,
            )?,
        )),
        #[cfg(not(unix))]
        CoordinatorSpec::Unix { path } => Err(DistributedError::Config(format!(
            "the embedded coordinator at {} needs Unix sockets",
            path.display()
        ))),
        CoordinatorSpec::Etcd { endpoints } => {
            let c = EtcdConfig::new(
                endpoints.clone(),
                &config.job_id,
                config.rank,
                config.world_size,
            )
            .with_ttl(ttl)
            .with_incarnation(incarnation);
            Ok(Box::new(EtcdCoordinator::connect(c)?))
        }
    }
}
