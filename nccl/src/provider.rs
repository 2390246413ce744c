//! [`NcclCliqueProvider`]: NCCL/RCCL communicators for the devices of one process, as an
//! xthunk [`CliqueProvider`].
//!
//! The executor acquires a clique's communicator on every rank of the clique, each rank on its
//! own thread (as `xthunk_core::executor::spmd::run_spmd` runs them), in the same order on
//! every rank. The first acquire of a key creates the clique's communicators collectively:
//!
//! 1. each rank makes its device current on its own thread (the caller's [`BindRank`] hook),
//!    and the clique's rank 0 makes the unique id (`ncclGetUniqueId`);
//! 2. the ranks meet in an in-process [`Rendezvous`] with the provider's [`Timeouts`]: a rank
//!    that has not arrived is logged after `warn_after` and named in the error of every waiting
//!    rank after `terminate_after` (the clique is then failed, never entered half-way). A
//!    rank whose step 1 failed still arrives, with its error, so that its peers fail at once
//!    with that error instead of entering `ncclCommInitRank` without it;
//! 3. every rank calls `ncclCommInitRank` (or `ncclCommInitRankConfig` for a
//!    [non-blocking](NcclCliqueProvider::nonblocking) provider) with the shared id, binding its
//!    device again right before the call.
//!
//! A clique of more than `ranks_per_root` ranks ([`NcclCliqueProvider::ranks_per_root`],
//! default [`DEFAULT_RANKS_PER_ROOT`] or `XTHUNK_NCCL_RANKS_PER_ROOT`) on a library with
//! `ncclCommInitRankScalable` (2.23) initializes through `ceil(size / ranks_per_root)` roots:
//! clique ranks `i * size / roots` each make a unique id in step 1, and step 3 passes them all,
//! in rank order, to `ncclCommInitRankScalable`.
//!
//! The result is cached per `(key, rank)` and reused by later executions. A split
//! ([`CliqueProvider::split`]) meets on the parent clique (every rank learns the others'
//! colors) and then uses `ncclCommSplit` (NCCL/RCCL 2.18 and later) or, without it, creates
//! each new clique afresh as above. [`CliqueProvider::evict_aborted`] drops the cliques that
//! failed (a rendezvous timeout, a failed init, an abort, an asynchronous error), aborting the
//! communicators of all their ranks.
//!
//! Devices: rank `r` is `devices[r]`; the provider never touches device memory or streams
//! itself (operations run on the streams the executor passes, through their native handles).
//! The [`BindRank`] hook makes device `r` current on the calling thread — on CUDA the device's
//! primary context (`cuCtxSetCurrent`), on ROCm `hipSetDevice` — because `ncclCommInitRank`
//! and `ncclCommSplit` bind the new communicator to the calling thread's current device.

use crate::comm::{CommOptions, Meeting, NcclCommunicator};
use crate::loader::{Flavor, Nccl};
use crate::sys::NCCL_UNIQUE_ID_BYTES;
use std::fmt;
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::collectives::{
    CliqueCache, CliqueKey, CliqueProvider, Communicator, Member, Rendezvous, Timeouts, Undetected,
    error_message,
};
use xthunk_core::{Error, Result};

/// Ranks per root above which a clique initializes through several roots
/// (`ncclCommInitRankScalable`), unless `XTHUNK_NCCL_RANKS_PER_ROOT` says otherwise.
pub const DEFAULT_RANKS_PER_ROOT: usize = 128;

/// `XTHUNK_NCCL_RANKS_PER_ROOT` (at least 1), else [`DEFAULT_RANKS_PER_ROOT`].
pub fn ranks_per_root_from_env() -> usize {
    std::env::var("XTHUNK_NCCL_RANKS_PER_ROOT")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(DEFAULT_RANKS_PER_ROOT)
}

/// How many roots a clique of `size` ranks initializes through: one up to `per_root` ranks
/// or without `ncclCommInitRankScalable` (`scalable`), else `ceil(size / per_root)`.
pub fn roots_for(size: usize, per_root: usize, scalable: bool) -> usize {
    if scalable && size > per_root.max(1) {
        size.div_ceil(per_root.max(1))
    } else {
        1
    }
}

/// Whether clique rank `rank` of `size` is one of `roots` roots (ranks `i * size / roots`),
/// which make the unique ids.
pub fn is_root(rank: usize, size: usize, roots: usize) -> bool {
    (0..roots).any(|i| i * size / roots.max(1) == rank)
}

/// Makes device `rank` (an index into the provider's devices) current on the calling thread.
pub type BindRank = Arc<dyn Fn(usize) -> Result<()> + Send + Sync>;

/// A unique id, as the rendezvous passes it around.
type UniqueId = [u8; NCCL_UNIQUE_ID_BYTES];

/// The rounds the ranks of one clique meet in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Round {
    /// Creating the clique's communicators.
    Init,
    /// The `n`-th split of the clique (counted per rank; every rank splits in the same order).
    Split(u64),
}

impl fmt::Display for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Round::Init => f.write_str("communicator init"),
            Round::Split(n) => write!(f, "split #{n}"),
        }
    }
}

/// What a rank brings to a round.
#[derive(Clone, Debug)]
enum Arrival {
    /// Ready to init (rank 0 with the unique id, the others with `None`), or why not.
    Init(std::result::Result<Option<UniqueId>, String>),
    /// Its color, and the cliques made by splits of this parent that it already has.
    Split {
        color: Option<u64>,
        cached: Vec<CliqueKey>,
    },
}

/// The rendezvous of a clique, as its communicators see it.
type CliqueRendezvous = Rendezvous<Round, Arrival>;

impl Meeting for CliqueRendezvous {
    fn poison(&self, message: &str) {
        Rendezvous::poison(self, message);
    }

    fn describe_pending(&self) -> Option<String> {
        Rendezvous::describe_pending(self)
    }
}

/// One clique: where its ranks meet, and their communicators once made.
struct Entry {
    rv: Arc<CliqueRendezvous>,
    /// Per clique rank.
    comms: Vec<Option<Arc<NcclCommunicator>>>,
    /// Per clique rank: how many splits of this clique the rank has started.
    splits: Vec<u64>,
}

impl Entry {
    fn new(flavor: Flavor, key: &CliqueKey, timeouts: Timeouts) -> Self {
        Entry {
            rv: Arc::new(Rendezvous::new(format!("{flavor} {key}"), timeouts)),
            comms: vec![None; key.size()],
            splits: vec![0; key.size()],
        }
    }

    /// Why this clique failed, if it did: its rendezvous was poisoned (a timeout, a failed
    /// init, an abort), or one of its communicators was aborted or has an asynchronous error.
    fn failure(&self) -> Option<String> {
        if let Some(p) = self.rv.poisoned() {
            return Some(p.to_string());
        }
        comms_failure(&self.comms)
    }
}

/// NCCL or RCCL cliques among the devices of one process (one thread per rank): see the
/// [module documentation](self).
pub struct NcclCliqueProvider {
    lib: Arc<Nccl>,
    devices: Vec<Arc<dyn Device>>,
    bind: BindRank,
    timeouts: Timeouts,
    nonblocking: bool,
    /// Ranks per root above which cliques initialize through several roots.
    ranks_per_root: usize,
    cliques: CliqueCache<Entry>,
}

impl fmt::Debug for NcclCliqueProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NcclCliqueProvider")
            .field("library", &self.lib.describe())
            .field("devices", &self.devices.len())
            .field("timeouts", &self.timeouts)
            .field("nonblocking", &self.nonblocking)
            .finish_non_exhaustive()
    }
}

/// The backend whose devices a library serves.
pub(crate) const fn backend_of(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Nccl => "cuda",
        Flavor::Rccl => "rocm",
    }
}

/// Every one of `devices` is of the backend `flavor` serves.
pub(crate) fn check_devices(flavor: Flavor, devices: &[Arc<dyn Device>]) -> Result<()> {
    let want = backend_of(flavor);
    match devices.iter().find(|d| d.backend_name() != want) {
        Some(d) => Err(Error::InvalidArgument(format!(
            "{flavor} cliques need `{want}` devices, got a `{}` device ({})",
            d.backend_name(),
            d.info().name
        ))),
        None => Ok(()),
    }
}

/// Why one of a clique's communicators failed, if one did: aborted, or an asynchronous error.
pub(crate) fn comms_failure(comms: &[Option<Arc<NcclCommunicator>>]) -> Option<String> {
    comms.iter().flatten().find_map(|c| {
        if c.is_aborted() {
            return Some(format!("{} was aborted", c.describe()));
        }
        c.async_error()
            .err()
            .map(|e| format!("{}: {}", c.describe(), error_message(&e)))
    })
}

/// Logs a communicator made for clique rank `rank` (global `global_rank`) of `key` on
/// `device`, from unique id `id`, `begun` when its making started.
pub(crate) fn log_ready(
    lib: &Nccl,
    key: &CliqueKey,
    (rank, global_rank): (usize, usize),
    device: Option<&Arc<dyn Device>>,
    id: &UniqueId,
    begun: std::time::Instant,
) {
    let device = device.map_or_else(String::new, |d| {
        format!(
            "{}:{} {}",
            d.backend_name(),
            d.info().ordinal,
            d.info().name
        )
    });
    tracing::info!(
        library = %lib.describe(),
        %key,
        rank,
        global_rank,
        %device,
        id_hash = %format!("{:016x}", xthunk_core::hash::fnv1a64(id)),
        init_ms = begun.elapsed().as_secs_f64() * 1e3,
        "communicator ready"
    );
}

impl NcclCliqueProvider {
    /// A provider for `devices` (rank `r` is `devices[r]`; all of the `cuda` backend for
    /// NCCL, of `rocm` for RCCL) with the library found by [`Nccl::load`]. `bind(r)` must make
    /// `devices[r]` current on the calling thread. `timeouts` apply to every rendezvous of the
    /// provider's cliques. A missing library is `Unavailable` (collectives are then off on
    /// that backend, not the backend).
    pub fn new(
        flavor: Flavor,
        devices: Vec<Arc<dyn Device>>,
        bind: BindRank,
        timeouts: Timeouts,
    ) -> Result<Self> {
        let lib = Nccl::load(flavor)?;
        Self::with_library(lib, devices, bind, timeouts)
    }

    /// As [`NcclCliqueProvider::new`], with a library already loaded (e.g. by
    /// [`Nccl::load_with`]).
    pub fn with_library(
        lib: Arc<Nccl>,
        devices: Vec<Arc<dyn Device>>,
        bind: BindRank,
        timeouts: Timeouts,
    ) -> Result<Self> {
        let flavor = lib.flavor();
        if devices.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{flavor} cliques need at least one device"
            )));
        }
        check_devices(flavor, &devices)?;
        tracing::debug!(
            library = %lib.describe(),
            devices = devices.len(),
            "{flavor} clique provider"
        );
        Ok(NcclCliqueProvider {
            lib,
            devices,
            bind,
            timeouts,
            nonblocking: false,
            ranks_per_root: ranks_per_root_from_env(),
            cliques: CliqueCache::new(),
        })
    }

    /// Cliques of more than `n` ranks initialize through `ceil(size / n)` roots with
    /// `ncclCommInitRankScalable` where the library has it (2.23); default
    /// `XTHUNK_NCCL_RANKS_PER_ROOT`, else [`DEFAULT_RANKS_PER_ROOT`].
    pub fn ranks_per_root(mut self, n: usize) -> Self {
        self.ranks_per_root = n.max(1);
        self
    }

    /// Makes communicators non-blocking (`ncclCommInitRankConfig` with `blocking = 0`; needs
    /// NCCL/RCCL 2.14): no call then stays inside the library, every call that does not
    /// complete within the terminate timeout aborts its communicator and fails, and aborts are
    /// immediate. Off by default (plain `ncclCommInitRank`, every supported version).
    pub fn nonblocking(mut self, on: bool) -> Result<Self> {
        if on && !self.lib.supports_config() {
            return Err(Error::Unsupported {
                backend: self.lib.flavor().name().into(),
                feature: format!(
                    "non-blocking communicators ({} has no ncclCommInitRankConfig; 2.14 or later has)",
                    self.lib.describe()
                ),
            });
        }
        self.nonblocking = on;
        Ok(self)
    }

    /// The library the communicators come from.
    pub fn library(&self) -> &Arc<Nccl> {
        &self.lib
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// The cliques known so far (made, or being made), in key order.
    pub fn cliques(&self) -> Vec<CliqueKey> {
        self.cliques.keys()
    }

    /// What the cliques' ranks are waiting on in their rendezvous, if anything.
    pub fn pending(&self) -> Option<String> {
        let lines: Vec<String> = self.cliques.with(|map| {
            map.values()
                .filter_map(|e| e.rv.describe_pending())
                .collect()
        });
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// Aborts every communicator of the provider, and fails every rendezvous in progress.
    ///
    /// The cache is only read under its lock; the aborts (each may wait for a communicator's
    /// lock) run after it is released, so acquires and splits on other cliques never wait
    /// behind them.
    pub fn abort_all(&self, reason: &str) {
        type Clique = (String, Arc<CliqueRendezvous>, Vec<Arc<NcclCommunicator>>);
        let cliques: Vec<Clique> = self.cliques.with(|map| {
            map.iter()
                .map(|(key, e)| {
                    let comms = e.comms.iter().flatten().cloned().collect();
                    (key.to_string(), e.rv.clone(), comms)
                })
                .collect()
        });
        for (key, rv, comms) in cliques {
            rv.poison(&format!("{key} aborted: {reason}"));
            for c in comms {
                c.abort(reason);
            }
        }
    }

    fn name(&self) -> &'static str {
        self.lib.flavor().name()
    }

    /// `global_rank`'s place in `key`, after checking the key against the devices.
    fn member(&self, key: &CliqueKey, global_rank: usize) -> Result<Member> {
        let n = self.devices.len();
        let serves = format!("{n} {} devices", backend_of(self.lib.flavor()));
        key.member(global_rank, n, &serves)
    }

    /// The options of the communicator of `global_rank`: its device hook, and non-blocking
    /// with the terminate timeout when asked for.
    fn options(&self, global_rank: usize) -> CommOptions {
        let bind = self.bind.clone();
        let base = if self.nonblocking {
            CommOptions::nonblocking(Some(self.timeouts.terminate_after))
        } else {
            CommOptions::default()
        };
        base.with_bind_device(move || bind(global_rank))
    }

    /// The rendezvous of `key` and the cached communicator of `rank` in it, if any (creating
    /// the clique's entry on first use).
    fn entry(
        &self,
        key: &CliqueKey,
        rank: usize,
    ) -> (Arc<CliqueRendezvous>, Option<Arc<NcclCommunicator>>) {
        self.cliques.with(|map| {
            let e = map
                .entry(key.clone())
                .or_insert_with(|| Entry::new(self.lib.flavor(), key, self.timeouts));
            (e.rv.clone(), e.comms.get(rank).cloned().flatten())
        })
    }

    /// Caches `comm` as rank `rank` of `key` (unless the clique was evicted meanwhile, which
    /// only a misuse of [`CliqueProvider::evict_aborted`] can do: then it is returned
    /// uncached).
    fn store(
        &self,
        key: &CliqueKey,
        rank: usize,
        rv: &Arc<CliqueRendezvous>,
        comm: &Arc<NcclCommunicator>,
    ) {
        self.cliques.with(|map| match map.get_mut(key) {
            Some(e) if Arc::ptr_eq(&e.rv, rv) => {
                if let Some(slot) = e.comms.get_mut(rank) {
                    *slot = Some(comm.clone());
                }
            }
            _ => tracing::warn!(
                %key,
                rank,
                "the clique was evicted while its communicator was being made: not cached"
            ),
        });
    }

    /// A failure of `global_rank` while making or splitting `key`'s communicators: the
    /// clique's rendezvous is poisoned with it, so that every peer still waiting there fails
    /// at once (and `evict_aborted` forgets the clique), and the error names the clique.
    fn fail(
        &self,
        rv: &CliqueRendezvous,
        call: &str,
        key: &CliqueKey,
        global_rank: usize,
        e: &Error,
    ) -> Error {
        let msg = format!("{key}, rank {global_rank}: {}", error_message(e));
        rv.poison(&msg);
        Error::backend(self.name(), call, msg)
    }

    /// As [`CliqueProvider::acquire`], typed.
    pub fn communicator(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<Arc<NcclCommunicator>> {
        Ok(self.acquire_in(key, global_rank)?.0)
    }

    /// The communicator of `global_rank` in `key`, and the clique's rendezvous.
    fn acquire_in(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<(Arc<NcclCommunicator>, Arc<CliqueRendezvous>)> {
        const CALL: &str = "communicator init";
        let member = self.member(key, global_rank)?;
        let rank = member.rank();
        let (rv, cached) = self.entry(key, rank);
        if let Some(c) = cached {
            return Ok((c, rv));
        }
        let begun = std::time::Instant::now();
        // Everything that can fail before the library is entered, first: a rank that cannot
        // init tells its peers so at the rendezvous, instead of leaving them inside
        // ncclCommInitRank waiting for it.
        let roots = roots_for(
            key.size(),
            self.ranks_per_root,
            self.lib.supports_scalable_init(),
        );
        let ready = (self.bind)(global_rank)
            .and_then(|()| {
                if is_root(rank, key.size(), roots) {
                    self.lib.unique_id().map(Some)
                } else {
                    Ok(None)
                }
            })
            .map_err(|e| error_message(&e));
        let all = rv
            .arrive(Round::Init, key.ranks(), global_rank, Arrival::Init(ready))
            .map_err(|e| Error::backend(self.name(), CALL, error_message(&e)))?;
        let mut ids: Vec<UniqueId> = vec![];
        for (g, a) in key.ranks().iter().zip(all.iter()) {
            match a {
                Arrival::Init(Err(why)) => {
                    let e = Error::backend(
                        self.name(),
                        CALL,
                        format!("rank {g} could not take part: {why}"),
                    );
                    return Err(self.fail(&rv, CALL, key, global_rank, &e));
                }
                Arrival::Init(Ok(Some(u))) => ids.push(*u),
                Arrival::Init(Ok(None)) => {}
                Arrival::Split { .. } => {
                    let e = Error::InvalidArgument(format!(
                        "rank {g} arrived for a split where a communicator init was expected"
                    ));
                    return Err(self.fail(&rv, CALL, key, global_rank, &e));
                }
            }
        }
        let Some(&id) = ids.first().filter(|_| ids.len() == roots) else {
            let e = Error::InvalidArgument(format!(
                "the clique's {roots} root(s) brought {} unique id(s)",
                ids.len()
            ));
            return Err(self.fail(&rv, CALL, key, global_rank, &e));
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
        let comm = self
            .lib
            .init_rank_roots(key.size(), &ids, rank, &self.options(global_rank))
            .map_err(|e| self.fail(&rv, CALL, key, global_rank, &e))?;
        let comm = Arc::new(comm.in_clique(member, rv.clone()));
        self.store(key, rank, &rv, &comm);
        log_ready(
            &self.lib,
            key,
            (rank, global_rank),
            self.devices.get(global_rank),
            &id,
            begun,
        );
        Ok((comm, rv))
    }

    /// As [`CliqueProvider::split`], typed.
    pub fn split_communicator(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<NcclCommunicator>>> {
        const CALL: &str = "communicator split";
        let (pcomm, prv) = self.acquire_in(parent, global_rank)?;
        let prank = pcomm.rank();
        if let Some(c) = color.filter(|c| *c > i32::MAX as u64) {
            // Peers waiting for this rank at the split fail at once too.
            let e = Error::InvalidArgument(format!(
                "split color {c} does not fit a non-negative C int (see split_color)"
            ));
            return Err(self.fail(&prv, CALL, parent, global_rank, &e));
        }
        // The split's number on this rank (every rank splits a clique in the same order).
        let n = self.cliques.with(|map| {
            match map.get_mut(parent).and_then(|e| e.splits.get_mut(prank)) {
                Some(s) => {
                    *s += 1;
                    *s - 1
                }
                None => 0,
            }
        });
        // The cliques (made by a split, inside this parent) this rank already has: after the
        // meeting every rank can tell, alike, whether every new clique already exists on all
        // its members (then nobody calls the library: ncclCommSplit is collective over the
        // whole parent, so all ranks must agree on whether to call it).
        let cached: Vec<CliqueKey> = self.cliques.with(|map| {
            map.iter()
                .filter(|(k, e)| {
                    k.color().is_some()
                        && k.ranks().iter().all(|g| parent.rank_of(*g).is_some())
                        && k.rank_of(global_rank)
                            .and_then(|r| e.comms.get(r))
                            .is_some_and(Option::is_some)
                })
                .map(|(k, _)| k.clone())
                .collect()
        });
        let all = prv
            .arrive(
                Round::Split(n),
                parent.ranks(),
                global_rank,
                Arrival::Split { color, cached },
            )
            .map_err(|e| Error::backend(self.name(), CALL, error_message(&e)))?;
        let mut colors: Vec<Option<u64>> = Vec::with_capacity(all.len());
        let mut held: Vec<&[CliqueKey]> = Vec::with_capacity(all.len());
        for (g, a) in parent.ranks().iter().zip(all.iter()) {
            match a {
                Arrival::Split { color, cached } => {
                    colors.push(*color);
                    held.push(cached);
                }
                Arrival::Init(_) => {
                    let e = Error::InvalidArgument(format!(
                        "rank {g} arrived for a communicator init where split #{n} was expected"
                    ));
                    return Err(self.fail(&prv, CALL, parent, global_rank, &e));
                }
            }
        }
        let key_of = |c: u64| -> Result<CliqueKey> {
            let members = parent
                .ranks()
                .iter()
                .zip(&colors)
                .filter(|(_, x)| **x == Some(c))
                .map(|(g, _)| *g);
            Ok(CliqueKey::new(members, parent.stream_kind())?.with_color(c))
        };
        let mut all_cached = true;
        for (c, h) in colors.iter().zip(&held) {
            if let Some(c) = c {
                let k = key_of(*c)?;
                all_cached &= h.contains(&k);
            }
        }
        let Some(c) = color else {
            if !all_cached && self.lib.supports_split() {
                // A rank without a color still takes part in the library's split.
                pcomm
                    .split(None, prank)
                    .map_err(|e| self.fail(&prv, CALL, parent, global_rank, &e))?;
            }
            return Ok(None);
        };
        let key = key_of(c)?;
        if all_cached || !self.lib.supports_split() {
            // Cached everywhere, or no ncclCommSplit: each new clique is made (or found) by
            // its own ranks, as by `acquire`.
            return self.communicator(&key, global_rank).map(Some);
        }
        let member = self.member(&key, global_rank)?;
        let rank = member.rank();
        let child = pcomm
            .split(Some(c), prank)
            .map_err(|e| self.fail(&prv, CALL, parent, global_rank, &e))?;
        let Some(child) = child else {
            let e = Error::backend(
                self.name(),
                "ncclCommSplit",
                format!("returned no communicator for color {c}"),
            );
            return Err(self.fail(&prv, CALL, parent, global_rank, &e));
        };
        if child.rank() != rank || child.size() != key.size() {
            let e = Error::backend(
                self.name(),
                "ncclCommSplit",
                format!(
                    "made rank {} of {} where {key} expects rank {rank} of {}",
                    child.rank(),
                    child.size(),
                    key.size()
                ),
            );
            return Err(self.fail(&prv, CALL, parent, global_rank, &e));
        }
        let (rv, _) = self.entry(&key, rank);
        let comm = Arc::new(child.in_clique(member, rv.clone()));
        self.store(&key, rank, &rv, &comm);
        tracing::debug!(
            library = self.name(),
            %parent,
            %key,
            rank,
            global_rank,
            "split communicator"
        );
        Ok(Some(comm))
    }
}

impl CliqueProvider for NcclCliqueProvider {
    fn num_ranks(&self) -> usize {
        self.devices.len()
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

    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        Ok(self
            .split_communicator(parent, global_rank, color)?
            .map(|c| c as Arc<dyn Communicator>))
    }

    fn abort_all(&self, reason: &str) {
        NcclCliqueProvider::abort_all(self, reason);
    }

    fn failure(&self) -> Option<String> {
        self.cliques
            .with(|map| map.values().find_map(Entry::failure))
    }

    /// Forgets every clique whose rendezvous failed or one of whose communicators was
    /// aborted or reports an asynchronous error; the communicators of all its ranks are
    /// aborted (never destroyed: a destroy may wait for peers that are gone).
    fn evict_aborted(&self) -> Vec<CliqueKey> {
        let dead = self.cliques.evict_failed(Entry::failure);
        for (k, e, why) in &dead {
            tracing::warn!(library = self.name(), key = %k, reason = %why, "evicting a failed clique");
            let reason = format!("{k} evicted: {why}");
            e.rv.poison(&reason);
            for c in e.comms.iter().flatten() {
                c.abort(&reason);
            }
        }
        dead.into_iter().map(|(k, ..)| k).collect()
    }

    /// NCCL and RCCL do not compare the operations ranks issue: ranks that issue different
    /// collectives may hang or complete with wrong data. A missing rank is detected — not by
    /// the library, which waits forever, but by the executor's
    /// [completion timeout](CliqueProvider::completion_timeout).
    fn undetected(&self) -> Undetected {
        Undetected {
            mismatch: Some(
                "NCCL/RCCL do not detect mismatched collectives (they hang, or complete with \
                 wrong data)",
            ),
            missing_rank: None,
        }
    }

    /// The terminate timeout: NCCL/RCCL wait for a missing or stuck peer forever, so the
    /// executor fails a collective that waited that long once its stream reached it.
    fn completion_timeout(&self) -> Option<std::time::Duration> {
        Some(self.timeouts.terminate_after)
    }
}

/// A communicator of an [`NcclCliqueProvider`]'s clique: an [`NcclCommunicator`] that knows
/// its place in the clique ([`NcclCommunicator::member`]), names it in its messages, and
/// fails the clique's rendezvous when aborted.
pub type NcclCliqueCommunicator = NcclCommunicator;
