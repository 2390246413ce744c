//! [`NcclJobCliqueProvider`]: NCCL/RCCL cliques among the ranks of a job of several
//! processes (`xthunk launch`, Slurm, Open MPI, Kubernetes), each process driving one or more
//! devices.
//!
//! The job's global ranks are numbered process by process: the process of coordinator rank
//! `p` with `D` devices holds global ranks `p·D .. p·D + D` (its local device `i` is global
//! rank `p·D + i`). The executor acquires a clique's communicator on every rank of the clique,
//! each rank on its own thread, in the same order everywhere. The first acquire of a key in a
//! process makes an entry with the next *generation* of that key (a clique evicted after a
//! failure and made again gets a fresh id, and processes count alike because they evict
//! alike); then, on each rank:
//!
//! 1. the rank makes its device current ([`BindRank`]); the clique's rank 0 makes the unique
//!    id (`ncclGetUniqueId`) and publishes it through the job's coordinator under
//!    `xthunk.unique_id/<flavor>/<key hash>.<generation>` (or why it could not, so its peers
//!    fail at once with its reason); the other ranks wait for it up to the terminate timeout
//!    ([`exchange_unique_id`]);
//! 2. every rank calls `ncclCommInitRankConfig` (non-blocking, bounded by the terminate
//!    timeout: a rank that never comes fails its peers' init instead of hanging them) on its
//!    own device, and logs the clique: ranks, devices, id hash, library version, init time.
//!
//! A clique of more than `ranks_per_root` ranks (default 128, `XTHUNK_NCCL_RANKS_PER_ROOT`,
//! [`NcclJobCliqueProvider::ranks_per_root`]) on a library with `ncclCommInitRankScalable`
//! (2.23) has `ceil(size / ranks_per_root)` roots, clique ranks `i * size / roots`: each makes
//! and publishes one id (root 0 under the name above, root `i` under `<name>.root<i>`), every
//! rank reads them all in order and calls `ncclCommInitRankScalable` with them.
//!
//! The key is bound to the publisher's lease (it goes with its process). Splits exchange
//! colors through the coordinator (`xthunk.nccl-split/<parent hash>/<n>/<rank>`) and make
//! each new clique as above (one id per group). Collectives wait without a timeout inside the
//! library: the provider's [completion timeout](CliqueProvider::completion_timeout) (the
//! terminate timeout) lets the executor abort a collective that waits too long.

use crate::comm::{CommOptions, Meeting, NcclCommunicator};
use crate::loader::{Flavor, Nccl};
use crate::provider::{
    BindRank, check_devices, comms_failure, is_root, log_ready, ranks_per_root_from_env, roots_for,
};
use crate::sys::NCCL_UNIQUE_ID_BYTES;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;
use xthunk_core::collectives::{
    CliqueCache, CliqueKey, CliqueProvider, Communicator, JobPlacement, Member, Timeouts,
    Undetected, error_message,
};
use xthunk_core::distributed::{Coordinator, exchange_split_colors, exchange_unique_id};
use xthunk_core::{Error, Result};

/// A clique's state in this process.
struct Entry {
    generation: u64,
    /// Per clique rank (only this process's ranks are ever set).
    comms: Vec<Option<Arc<NcclCommunicator>>>,
    /// Why the clique failed, once it did (a rank's failed setup, an abort).
    failed: Arc<Failed>,
}

/// A clique's failure as its communicators report it (the provider's stand-in for the
/// in-process rendezvous of [`crate::NcclCliqueProvider`]).
#[derive(Default)]
struct Failed(Mutex<Option<String>>);

impl Meeting for Failed {
    fn poison(&self, message: &str) {
        self.0.lock().get_or_insert_with(|| message.to_string());
    }

    fn describe_pending(&self) -> Option<String> {
        None
    }
}

impl Entry {
    fn failure(&self) -> Option<String> {
        if let Some(f) = self.failed.0.lock().clone() {
            return Some(f);
        }
        comms_failure(&self.comms)
    }
}

/// NCCL or RCCL cliques across the processes of a job: see the [module documentation](self).
pub struct NcclJobCliqueProvider {
    lib: Arc<Nccl>,
    coordinator: Arc<dyn Coordinator>,
    placement: JobPlacement,
    bind: BindRank,
    timeouts: Timeouts,
    /// Ranks per root above which cliques initialize through several roots.
    ranks_per_root: usize,
    cliques: CliqueCache<Entry>,
    generations: Mutex<BTreeMap<CliqueKey, u64>>,
    splits: Mutex<BTreeMap<(CliqueKey, usize), u64>>,
}

impl fmt::Debug for NcclJobCliqueProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclJobCliqueProvider")
            .field("library", &self.lib.describe())
            .field("job", &self.coordinator.job_id())
            .field("placement", &self.placement)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl NcclJobCliqueProvider {
    /// The provider of this process's `placement` in `coordinator`'s job, with the library
    /// found by [`Nccl::load`] (missing: `Unavailable`, collectives off on that backend).
    /// `bind(i)` makes local device `i` current on the calling thread. The library must have
    /// `ncclCommInitRankConfig` (NCCL/RCCL 2.14): only non-blocking communicators can be
    /// aborted from another thread while a peer is missing.
    pub fn new(
        flavor: Flavor,
        coordinator: Arc<dyn Coordinator>,
        placement: JobPlacement,
        bind: BindRank,
        timeouts: Timeouts,
    ) -> Result<Self> {
        Self::with_library(Nccl::load(flavor)?, coordinator, placement, bind, timeouts)
    }

    /// As [`NcclJobCliqueProvider::new`], with a library already loaded.
    pub fn with_library(
        lib: Arc<Nccl>,
        coordinator: Arc<dyn Coordinator>,
        placement: JobPlacement,
        bind: BindRank,
        timeouts: Timeouts,
    ) -> Result<Self> {
        let flavor = lib.flavor();
        let JobPlacement {
            devices,
            first_rank,
            world,
        } = &placement;
        if devices.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{flavor} cliques need at least one device in each process"
            )));
        }
        let last = first_rank
            .checked_add(devices.len())
            .filter(|end| end <= world)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "global ranks {first_rank}.. of {} devices do not fit a job of {world} ranks",
                    devices.len()
                ))
            })?;
        check_devices(flavor, devices)?;
        if !lib.supports_config() {
            return Err(Error::Unsupported {
                backend: flavor.name().into(),
                feature: format!(
                    "cliques across processes ({} has no ncclCommInitRankConfig, needed for \
                     communicators that can be aborted; 2.14 or later has it)",
                    lib.describe()
                ),
            });
        }
        tracing::info!(
            library = %lib.describe(),
            job = coordinator.job_id(),
            ranks = format!("{first_rank}..{last} of {world}"),
            "{flavor} cliques across the processes of the job"
        );
        Ok(NcclJobCliqueProvider {
            lib,
            coordinator,
            placement,
            bind,
            timeouts,
            ranks_per_root: ranks_per_root_from_env(),
            cliques: CliqueCache::new(),
            generations: Mutex::new(BTreeMap::new()),
            splits: Mutex::new(BTreeMap::new()),
        })
    }

    /// As [`crate::NcclCliqueProvider::ranks_per_root`]: cliques of more than `n` ranks
    /// initialize through several roots, each publishing its unique id through the
    /// coordinator.
    pub fn ranks_per_root(mut self, n: usize) -> Self {
        self.ranks_per_root = n.max(1);
        self
    }

    /// The library the communicators come from.
    pub fn library(&self) -> &Arc<Nccl> {
        &self.lib
    }

    /// The cliques known so far, in key order.
    pub fn cliques(&self) -> Vec<CliqueKey> {
        self.cliques.keys()
    }

    fn name(&self) -> &'static str {
        self.lib.flavor().name()
    }

    /// The local device index of `global_rank`, after checking that this process holds it.
    fn local(&self, global_rank: usize) -> Result<usize> {
        let p = &self.placement;
        global_rank
            .checked_sub(p.first_rank)
            .filter(|i| *i < p.devices.len())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "this process (rank {} of job `{}`) holds global ranks {}..{}, not {global_rank}",
                    self.coordinator.rank(),
                    self.coordinator.job_id(),
                    p.first_rank,
                    p.first_rank + p.devices.len()
                ))
            })
    }

    /// The entry of `key` (made with the key's next generation on first use) and the cached
    /// communicator of clique rank `rank`, if any.
    fn entry(
        &self,
        key: &CliqueKey,
        rank: usize,
    ) -> (u64, Arc<Failed>, Option<Arc<NcclCommunicator>>) {
        self.cliques.with(|map| {
            let e = map.entry(key.clone()).or_insert_with(|| {
                let mut g = self.generations.lock();
                let n = g.entry(key.clone()).or_insert(0);
                let generation = *n;
                *n += 1;
                Entry {
                    generation,
                    comms: vec![None; key.size()],
                    failed: Arc::new(Failed::default()),
                }
            });
            (
                e.generation,
                e.failed.clone(),
                e.comms.get(rank).cloned().flatten(),
            )
        })
    }

    /// As [`CliqueProvider::acquire`], typed.
    pub fn communicator(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<Arc<NcclCommunicator>> {
        const CALL: &str = "communicator init";
        let local = self.local(global_rank)?;
        let serves = format!("a job of {} ranks", self.placement.world);
        let member: Member = key.member(global_rank, self.placement.world, &serves)?;
        let rank = member.rank();
        let (generation, failed, cached) = self.entry(key, rank);
        if let Some(c) = cached {
            return Ok(c);
        }
        if let Some(why) = failed.0.lock().clone() {
            return Err(Error::backend(self.name(), CALL, why));
        }
        let fail = |e: Error| -> Error {
            let msg = format!("{key}, rank {global_rank}: {}", error_message(&e));
            failed.poison(&msg);
            Error::backend(self.name(), CALL, msg)
        };
        let begun = Instant::now();
        let name = format!(
            "{}/{:016x}.{generation}",
            self.lib.flavor().name(),
            key.stable_hash()
        );
        let roots = roots_for(
            key.size(),
            self.ranks_per_root,
            self.lib.supports_scalable_init(),
        );
        let bound = (self.bind)(local).map_err(|e| error_message(&e));
        if let (Err(why), false) = (&bound, is_root(rank, key.size(), roots)) {
            return Err(fail(Error::backend(
                self.name(),
                "bind device",
                why.clone(),
            )));
        }
        // Root `i` (clique rank `i * size / roots`) publishes its id under `name` (root 0)
        // or `name.root<i>`; every rank reads them in order (a root publishes its own before
        // reading later ones, and root 0 reads none first, so no rank waits on itself).
        let mut ids: Vec<[u8; NCCL_UNIQUE_ID_BYTES]> = Vec::with_capacity(roots);
        for i in 0..roots {
            let root_name = if i == 0 {
                name.clone()
            } else {
                format!("{name}.root{i}")
            };
            let id = exchange_unique_id(
                self.coordinator.as_ref(),
                &root_name,
                rank == i * key.size() / roots,
                self.timeouts.terminate_after,
                || {
                    bound.clone().and_then(|()| {
                        self.lib
                            .unique_id()
                            .map(|id| id.to_vec())
                            .map_err(|e| error_message(&e))
                    })
                },
            )
            .map_err(|e| fail(Error::Distributed(e)))?;
            ids.push(id.as_slice().try_into().map_err(|_| {
                fail(Error::InvalidArgument(format!(
                    "the unique id published for {key} (root {i}) has {} bytes, not {NCCL_UNIQUE_ID_BYTES}",
                    id.len()
                )))
            })?);
        }
        let Some(&id) = ids.first() else {
            return Err(fail(Error::InvalidArgument(format!("{key}: no root"))));
        };
        if roots > 1 && rank == 0 {
            tracing::info!(
                library = %self.lib.describe(),
                %key,
                roots,
                ranks_per_root = self.ranks_per_root,
                "initializing through several roots (ncclCommInitRankScalable)"
            );
        }
        let bind = self.bind.clone();
        let options = CommOptions::nonblocking(Some(self.timeouts.terminate_after))
            .with_bind_device(move || bind(local));
        let comm = self
            .lib
            .init_rank_roots(key.size(), &ids, rank, &options)
            .map_err(fail)?;
        let comm = Arc::new(comm.in_clique(member, failed.clone()));
        log_ready(
            &self.lib,
            key,
            (rank, global_rank),
            self.placement.devices.get(local),
            &id,
            begun,
        );
        self.cliques.with(|map| {
            if let Some(e) = map.get_mut(key).filter(|e| e.generation == generation)
                && let Some(slot) = e.comms.get_mut(rank)
            {
                *slot = Some(comm.clone());
            }
        });
        Ok(comm)
    }

    /// Aborts every communicator of the provider and fails the setups in progress.
    pub fn abort_all(&self, reason: &str) {
        let comms: Vec<(Arc<Failed>, Vec<Arc<NcclCommunicator>>)> = self.cliques.with(|map| {
            map.values()
                .map(|e| {
                    (
                        e.failed.clone(),
                        e.comms.iter().flatten().cloned().collect(),
                    )
                })
                .collect()
        });
        for (failed, comms) in comms {
            failed.poison(&format!("aborted: {reason}"));
            for c in comms {
                c.abort(reason);
            }
        }
    }
}

impl CliqueProvider for NcclJobCliqueProvider {
    fn num_ranks(&self) -> usize {
        self.placement.world
    }

    fn acquire(&self, key: &CliqueKey, global_rank: usize) -> Result<Arc<dyn Communicator>> {
        Ok(self.communicator(key, global_rank)?)
    }

    fn collective_allocator(
        &self,
        _global_rank: usize,
    ) -> Option<Arc<dyn xthunk_core::backend::ExternalAllocator>> {
        self.lib.allocator()
    }

    /// Colors are exchanged through the coordinator, then the new clique is made as by
    /// `acquire` (one unique id per group).
    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        const CALL: &str = "communicator split";
        let comm = self.communicator(parent, global_rank)?;
        let n = {
            let mut s = self.splits.lock();
            let e = s.entry((parent.clone(), global_rank)).or_insert(0);
            let v = *e;
            *e += 1;
            v
        };
        let round = format!("xthunk.nccl-split/{:016x}/{n}", parent.stable_hash());
        let members = exchange_split_colors(
            self.coordinator.as_ref(),
            &round,
            parent.ranks(),
            global_rank,
            color,
            self.timeouts.terminate_after,
        )
        .map_err(|e| Error::backend(self.name(), CALL, format!("{}: {e}", comm.describe())))?;
        let (Some(color), Some(members)) = (color, members) else {
            return Ok(None);
        };
        let key = CliqueKey::new(members, parent.stream_kind())?.with_color(color);
        Ok(Some(self.communicator(&key, global_rank)?))
    }

    /// Forgets every clique that failed; the communicators of this process's ranks in it are
    /// aborted (never destroyed: a destroy may wait for peers that are gone).
    fn evict_aborted(&self) -> Vec<CliqueKey> {
        let dead = self.cliques.evict_failed(Entry::failure);
        for (k, e, why) in &dead {
            tracing::warn!(library = self.name(), key = %k, reason = %why, "evicting a failed clique");
            for c in e.comms.iter().flatten() {
                c.abort(&format!("{k} evicted: {why}"));
            }
        }
        dead.into_iter().map(|(k, ..)| k).collect()
    }

    fn undetected(&self) -> Undetected {
        Undetected {
            mismatch: Some(
                "NCCL/RCCL do not detect mismatched collectives (they hang, or complete with \
                 wrong data)",
            ),
            missing_rank: None,
        }
    }

    fn completion_timeout(&self) -> Option<std::time::Duration> {
        Some(self.timeouts.terminate_after)
    }

    fn abort_all(&self, reason: &str) {
        NcclJobCliqueProvider::abort_all(self, reason);
    }

    fn failure(&self) -> Option<String> {
        self.cliques
            .with(|map| map.values().find_map(Entry::failure))
    }
}
