//! [`HostCliqueProvider`]: one rank per device of a host backend, one clique (and its
//! rendezvous) per key, communicators cached per key and rank; splits meet on the parent.

use super::super::{HostComm, HostCommunicator};
use super::{HostClique, LocalRank, Msg, RvKey};
use crate::backend::Device;
use crate::collectives::{
    CliqueCache, CliqueFactory, CliqueKey, CliqueProvider, Communicator, Timeouts, error_message,
};
use crate::error::{Error, Result};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

struct Entry {
    clique: Arc<HostClique>,
    comms: Vec<Option<Arc<HostCommunicator>>>,
}

impl Entry {
    fn new(key: &CliqueKey, timeouts: Timeouts) -> Self {
        Entry {
            clique: HostClique::new(key, timeouts),
            comms: vec![None; key.size()],
        }
    }
}

/// Communicators among the devices of one host backend in one process: one rank per device,
/// global rank = index in `devices`.
pub struct HostCliqueProvider {
    devices: Vec<Arc<dyn Device>>,
    timeouts: Timeouts,
    cliques: CliqueCache<Entry>,
}

impl fmt::Debug for HostCliqueProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostCliqueProvider")
            .field("devices", &self.devices.len())
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl HostCliqueProvider {
    /// A provider for `devices` (all of the host backend). `timeouts` apply to every
    /// rendezvous of its cliques.
    pub fn new(devices: Vec<Arc<dyn Device>>, timeouts: Timeouts) -> Result<Self> {
        if let Some(d) = devices.iter().find(|d| d.backend_name() != "host") {
            return Err(Error::InvalidArgument(format!(
                "host collectives need host devices, got a `{}` device ({})",
                d.backend_name(),
                d.info().name
            )));
        }
        Ok(HostCliqueProvider {
            devices,
            timeouts,
            cliques: CliqueCache::new(),
        })
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// The cliques created so far, in key order.
    pub fn cliques(&self) -> Vec<CliqueKey> {
        self.cliques.keys()
    }

    /// As [`CliqueProvider::acquire`], typed.
    pub fn communicator(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<Arc<HostCommunicator>> {
        let n = self.devices.len();
        let member = key.member(global_rank, n, &format!("{n} host devices"))?;
        let rank = member.rank();
        self.cliques.with(|map| {
            let entry = map
                .entry(key.clone())
                .or_insert_with(|| Entry::new(key, self.timeouts));
            if let Some(c) = entry.comms.get(rank).and_then(Option::as_ref) {
                return Ok(c.clone());
            }
            let clique = entry.clique.clone();
            let comm = Arc::new(HostComm::new(Arc::new(LocalRank::new(clique, member))));
            if let Some(slot) = entry.comms.get_mut(rank) {
                *slot = Some(comm.clone());
            }
            tracing::debug!(%key, rank, global_rank, "created host communicator");
            Ok(comm)
        })
    }

    /// Aborts every clique of this provider.
    pub fn abort_all(&self, reason: &str) {
        self.cliques.with(|map| {
            for e in map.values() {
                e.clique
                    .rv
                    .poison(&format!("{} aborted: {reason}", e.clique.key));
            }
        });
    }

    /// What every clique is waiting on, if anything (for watchdog messages).
    pub fn pending(&self) -> Option<String> {
        let lines: Vec<String> = self.cliques.with(|map| {
            map.values()
                .filter_map(|e| e.clique.rv.describe_pending())
                .collect()
        });
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

impl CliqueProvider for HostCliqueProvider {
    fn num_ranks(&self) -> usize {
        self.devices.len()
    }

    fn acquire(&self, key: &CliqueKey, global_rank: usize) -> Result<Arc<dyn Communicator>> {
        Ok(self.communicator(key, global_rank)?)
    }

    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        let comm = self.communicator(parent, global_rank)?;
        let st = comm.transport();
        let n = st.splits.fetch_add(1, Ordering::Relaxed);
        let all = st
            .clique
            .rv
            .arrive(
                RvKey::Split { n },
                parent.ranks(),
                global_rank,
                Msg::Split { color },
            )
            .map_err(|e| {
                Error::backend(
                    "host",
                    "split",
                    format!("{}: {}", comm.describe(), error_message(&e)),
                )
            })?;
        let Some(color) = color else {
            return Ok(None);
        };
        let members = parent
            .ranks()
            .iter()
            .zip(all.iter())
            .filter(|(_, m)| matches!(m, Msg::Split { color: Some(c) } if *c == color))
            .map(|(g, _)| *g);
        let key = CliqueKey::new(members, parent.stream_kind())?.with_color(color);
        Ok(Some(self.communicator(&key, global_rank)?))
    }

    fn evict_aborted(&self) -> Vec<CliqueKey> {
        self.cliques
            .evict_failed(|e| e.clique.rv.poisoned().map(|m| m.to_string()))
            .into_iter()
            .map(|(k, ..)| k)
            .collect()
    }
}

/// The [`CliqueFactory`] of the host backend's devices: a [`HostCliqueProvider`].
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCliqueFactory;

impl CliqueFactory for HostCliqueFactory {
    fn create(
        &self,
        devices: &[Arc<dyn Device>],
        timeouts: Timeouts,
    ) -> Result<Arc<dyn CliqueProvider>> {
        Ok(Arc::new(HostCliqueProvider::new(
            devices.to_vec(),
            timeouts,
        )?))
    }
}
