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
//! `config` ([`EtcdConfig`], the key prefix, store errors), `connect` (the coordinator a
//! configuration asks for), `coordinator` ([`EtcdCoordinator`]), `client` (the private runtime and connecting),
//! `security` (TLS and authentication options), `admin` (listing and deleting a job's keys).
//!
//! [`Coordinator`]: xthunk_core::distributed::Coordinator
//! [`Coordinator::failures`]: xthunk_core::distributed::Coordinator::failures
//! [`Coordinator::subscribe_failures`]: xthunk_core::distributed::Coordinator::subscribe_failures
//! [`Coordinator::shutdown`]: xthunk_core::distributed::Coordinator::shutdown
//! [`DistributedError::CoordinatorLost`]: xthunk_core::distributed::DistributedError::CoordinatorLost

mod admin;
mod barrier;
mod cause;
mod claim;
mod client;
mod config;
mod connect;
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
pub use config::{DEFAULT_TTL, EtcdConfig, job_prefix};
pub use connect::{connect, connect_incarnation};
pub use coordinator::EtcdCoordinator;
pub use crossbeam_channel::Receiver;
pub use security::{EtcdSecurity, EtcdTls, EtcdUser};
