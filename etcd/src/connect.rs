//! The coordinator a configuration asks for: etcd, the embedded coordinator `xthunk launch`
//! serves, or the local one.

use crate::config::EtcdConfig;
use crate::coordinator::EtcdCoordinator;
use std::time::Duration;
use xthunk_core::distributed::{
    Coordinator, CoordinatorSpec, DistributedConfig, DistributedError, DistributedResult,
    LocalCoordinator,
};

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
