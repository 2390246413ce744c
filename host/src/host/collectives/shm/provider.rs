//! [`ShmCliqueProvider`]: one rank per process, a segment per clique, set up in the order
//! the executor acquires them; splits exchange colors through the coordinator.

use super::super::HostComm;
use super::names::{key_hash, remove_pending_segments};
use super::rank::ShmCommunicator;
use super::setup::join;
use super::{ShmOptions, shm_error};
use crate::collectives::{CliqueCache, CliqueKey, CliqueProvider, Communicator};
use crate::distributed::{Coordinator, DistributedError, exchange_split_colors};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Host collectives among the processes of one job on one host: this process is one rank
/// (the coordinator's), and every clique's data goes through a shared memory segment (how it is
/// set up, moves data and fails: `host/src/host/collectives/shm/mod.rs`).
pub struct ShmCliqueProvider {
    coordinator: Arc<dyn Coordinator>,
    options: ShmOptions,
    cliques: CliqueCache<Arc<ShmCommunicator>>,
    /// Serializes setups (they block), apart from the map that `abort_all` locks.
    creating: Mutex<()>,
    generations: Mutex<BTreeMap<CliqueKey, u64>>,
    splits: Mutex<BTreeMap<CliqueKey, u64>>,
}

impl fmt::Debug for ShmCliqueProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmCliqueProvider")
            .field("job", &self.coordinator.job_id())
            .field("rank", &self.coordinator.rank())
            .field("world", &self.coordinator.world_size())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ShmCliqueProvider {
    /// The provider of the rank `coordinator.rank()` of `coordinator`'s job.
    pub fn new(coordinator: Arc<dyn Coordinator>, options: ShmOptions) -> Self {
        ShmCliqueProvider {
            coordinator,
            options,
            cliques: CliqueCache::new(),
            creating: Mutex::new(()),
            generations: Mutex::new(BTreeMap::new()),
            splits: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn options(&self) -> ShmOptions {
        self.options
    }

    pub fn coordinator(&self) -> &Arc<dyn Coordinator> {
        &self.coordinator
    }

    /// The cliques set up so far, in key order.
    pub fn cliques(&self) -> Vec<CliqueKey> {
        self.cliques.keys()
    }

    /// Why a clique of this provider failed, if one did (the first in key order).
    pub fn failure(&self) -> Option<String> {
        let comms = self.comms();
        comms.iter().find_map(|c| c.transport().seg.poisoned())
    }

    /// Aborts every clique (its operations fail on every rank, at once) and removes the
    /// segments whose setup is in progress.
    pub fn abort_all(&self, reason: &str) {
        for c in self.comms() {
            c.abort(reason);
        }
        remove_pending_segments();
    }

    fn comms(&self) -> Vec<Arc<ShmCommunicator>> {
        self.cliques.with(|map| map.values().cloned().collect())
    }

    /// As [`CliqueProvider::acquire`], typed.
    pub fn communicator(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<Arc<ShmCommunicator>> {
        let world = self.coordinator.world_size();
        let me = self.coordinator.rank();
        let member = key.member(global_rank, world, &format!("a job of {world} ranks"))?;
        if global_rank != me {
            return Err(Error::InvalidArgument(format!(
                "this process is rank {me} of job `{}`: it cannot act as rank {global_rank} \
                 (shared memory cliques serve one rank per process)",
                self.coordinator.job_id()
            )));
        }
        let cached = || self.cliques.with(|map| map.get(key).cloned());
        if let Some(c) = cached() {
            return Ok(c);
        }
        let _one = self.creating.lock();
        if let Some(c) = cached() {
            return Ok(c);
        }
        let generation = {
            let mut g = self.generations.lock();
            let e = g.entry(key.clone()).or_insert(0);
            let v = *e;
            *e += 1;
            v
        };
        let st = join(&self.coordinator, member, generation, &self.options)?;
        let comm = Arc::new(HostComm::new(st));
        self.cliques
            .with(|map| map.insert(key.clone(), comm.clone()));
        Ok(comm)
    }
}

impl CliqueProvider for ShmCliqueProvider {
    fn num_ranks(&self) -> usize {
        self.coordinator.world_size()
    }

    fn acquire(&self, key: &CliqueKey, global_rank: usize) -> Result<Arc<dyn Communicator>> {
        Ok(self.communicator(key, global_rank)?)
    }

    /// Colors are exchanged through the coordinator (key
    /// `xthunk.shm-split/<parent hash>/<n>/<rank>`), then the new clique is set up as by
    /// `acquire`.
    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        let comm = self.communicator(parent, global_rank)?;
        let n = {
            let mut s = self.splits.lock();
            let e = s.entry(parent.clone()).or_insert(0);
            let v = *e;
            *e += 1;
            v
        };
        let round = format!("xthunk.shm-split/{:016x}/{n}", key_hash(parent));
        let fail = |e: DistributedError| shm_error("split", format!("{}: {e}", comm.describe()));
        let t = comm.transport().timeouts.terminate_after;
        let members = exchange_split_colors(
            self.coordinator.as_ref(),
            &round,
            parent.ranks(),
            global_rank,
            color,
            t,
        )
        .map_err(fail)?;
        let (Some(color), Some(members)) = (color, members) else {
            return Ok(None);
        };
        let key = CliqueKey::new(members, parent.stream_kind())?.with_color(color);
        Ok(Some(self.communicator(&key, global_rank)?))
    }

    fn abort_all(&self, reason: &str) {
        ShmCliqueProvider::abort_all(self, reason);
    }

    fn failure(&self) -> Option<String> {
        ShmCliqueProvider::failure(self)
    }

    fn evict_aborted(&self) -> Vec<CliqueKey> {
        self.cliques
            .evict_failed(|c| c.transport().seg.poisoned())
            .into_iter()
            .map(|(k, ..)| k)
            .collect()
    }
}
