//! Making communicators: [`Nccl::init_rank`] (blocking or not), [`NcclCommunicator::split`]
//! and [`NcclCommunicator::finalize`].

use super::{CommOptions, NcclCommunicator, to_c_int};
use crate::loader::Nccl;
use crate::sys;
use std::ffi::{c_char, c_int};
use std::sync::Arc;
use xthunk_core::{Error, Result};

impl Nccl {
    /// `ncclCommInitRank`: joins rank `rank` of `nranks` to the clique of `id` (from
    /// [`Nccl::unique_id`] on one rank, passed to all), as a blocking communicator. Every rank
    /// must call it (from its own thread or process); it returns when all have. The device
    /// must be current on the calling thread (see the [module documentation](super)).
    pub fn init_rank(
        self: &Arc<Self>,
        nranks: usize,
        id: &[u8; sys::NCCL_UNIQUE_ID_BYTES],
        rank: usize,
    ) -> Result<NcclCommunicator> {
        self.init_rank_with(nranks, id, rank, &CommOptions::default())
    }

    /// [`Nccl::init_rank`] with options: non-blocking (`ncclCommInitRankConfig` with the
    /// smallest `ncclConfig_t`, needs 2.14), a timeout, a device hook.
    pub fn init_rank_with(
        self: &Arc<Self>,
        nranks: usize,
        id: &[u8; sys::NCCL_UNIQUE_ID_BYTES],
        rank: usize,
        options: &CommOptions,
    ) -> Result<NcclCommunicator> {
        self.init_rank_roots(nranks, std::slice::from_ref(id), rank, options)
    }

    /// As [`Nccl::init_rank_with`], through the unique ids of several roots (`ids`, the same
    /// on every rank, in the same order) with `ncclCommInitRankScalable` (2.23) when there are
    /// more than one; `Unsupported` on a library without it.
    pub fn init_rank_roots(
        self: &Arc<Self>,
        nranks: usize,
        ids: &[[u8; sys::NCCL_UNIQUE_ID_BYTES]],
        rank: usize,
        options: &CommOptions,
    ) -> Result<NcclCommunicator> {
        let lib = self.flavor().name();
        let Some(id) = ids.first() else {
            return Err(Error::InvalidArgument(format!("{lib}: no unique id")));
        };
        let scalable = if ids.len() > 1 {
            match self.api.ncclCommInitRankScalable {
                Some(f) => Some(f),
                None => {
                    return Err(Error::Unsupported {
                        backend: lib.into(),
                        feature: format!(
                            "init through {} roots ({} {} has no ncclCommInitRankScalable; 2.23 or later has)",
                            ids.len(),
                            self.flavor(),
                            self.version()
                        ),
                    });
                }
            }
        } else {
            None
        };
        if nranks == 0 || rank >= nranks {
            return Err(Error::InvalidArgument(format!(
                "{lib}: rank {rank} of a clique of {nranks}"
            )));
        }
        let n = to_c_int(nranks, "clique size")?;
        let r = to_c_int(rank, "rank")?;
        let init_config = if options.nonblocking {
            match self.api.ncclCommInitRankConfig {
                Some(f) if self.supports_config() => Some(f),
                _ => {
                    return Err(Error::Unsupported {
                        backend: lib.into(),
                        feature: format!(
                            "non-blocking communicators ({} {} has no ncclCommInitRankConfig; 2.14 or later has)",
                            self.flavor(),
                            self.version()
                        ),
                    });
                }
            }
        } else {
            None
        };
        if let Some(bind) = &options.bind_device {
            bind()?;
        }
        let uid = sys::ncclUniqueId {
            internal: id.map(|b| b as c_char),
        };
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        let (call, rc) = match (scalable, init_config) {
            (Some(f), _) => {
                let mut all: Vec<sys::ncclUniqueId> = ids
                    .iter()
                    .map(|i| sys::ncclUniqueId {
                        internal: i.map(|b| b as c_char),
                    })
                    .collect();
                let n_id = to_c_int(all.len(), "unique ids")?;
                let mut config = sys::ncclConfig_v21400::new(!options.nonblocking);
                // SAFETY: `comm` is valid for a write; `all` holds `n_id` ids and `config` is
                // readable for the call (NCCL copies both before returning).
                let rc = unsafe { f(&mut comm, n, r, n_id, all.as_mut_ptr(), &mut config) };
                ("ncclCommInitRankScalable", rc)
            }
            (None, init_config) => match init_config {
                Some(f) => {
                    let mut config = sys::ncclConfig_v21400::new(false);
                    // SAFETY: `comm` and `config` are valid for writes/reads for the call; the id
                    // is passed by value as the header declares; NCCL copies the config (at most
                    // `config.size` bytes) before returning.
                    let rc = unsafe { f(&mut comm, n, uid, r, &mut config) };
                    ("ncclCommInitRankConfig", rc)
                }
                None => {
                    // SAFETY: `comm` is valid for a write; the id is passed by value.
                    let rc = unsafe { (self.api.ncclCommInitRank)(&mut comm, n, uid, r) };
                    ("ncclCommInitRank", rc)
                }
            },
        };
        if rc != sys::ncclSuccess && rc != sys::ncclInProgress {
            if !comm.is_null() {
                // A synchronous failure frees what NCCL made; a handle it still returned is
                // not trusted (freeing it twice would be worse than leaking it).
                tracing::warn!(
                    library = lib,
                    call,
                    "a failed init returned a handle: leaked"
                );
            }
            return Err(self.error(call, rc));
        }
        if comm.is_null() {
            return Err(Error::backend(lib, call, "returned no communicator"));
        }
        let mut c = NcclCommunicator::adopt(self.clone(), comm, options.clone());
        if rc == sys::ncclInProgress {
            c.wait_ready(call)?;
        }
        c.query_shape()?;
        if c.rank != rank || c.size != nranks {
            return Err(Error::backend(
                lib,
                call,
                format!(
                    "asked for rank {rank} of {nranks}, got rank {} of {}",
                    c.rank, c.size
                ),
            ));
        }
        tracing::debug!(
            library = lib,
            rank,
            nranks,
            nonblocking = options.nonblocking,
            "communicator ready"
        );
        Ok(c)
    }
}

impl NcclCommunicator {
    /// `ncclCommSplit` (2.18): every rank of this communicator calls it; ranks with the same
    /// `color` (a non-negative C `int`: at most 2^31 - 1, as `split_color` of
    /// `xthunk_core::collectives` makes them) form a new communicator, ordered by `key` (ties
    /// by rank). `color: None` joins none (`NCCL_SPLIT_NOCOLOR`) and returns `None`. The new
    /// communicator inherits this one's configuration (blocking or not) and options.
    pub fn split(&self, color: Option<u64>, key: usize) -> Result<Option<NcclCommunicator>> {
        const CALL: &str = "ncclCommSplit";
        let f = match self.lib.api.ncclCommSplit {
            Some(f) if self.lib.supports_split() => f,
            _ => {
                return Err(Error::Unsupported {
                    backend: self.name().into(),
                    feature: format!(
                        "communicator split ({} {} has no ncclCommSplit; 2.18 or later has)",
                        self.lib.flavor(),
                        self.lib.version()
                    ),
                });
            }
        };
        let color = match color {
            Some(c) => c_int::try_from(c).map_err(|_| {
                Error::InvalidArgument(format!("split color {c} does not fit a C int"))
            })?,
            None => sys::NCCL_SPLIT_NOCOLOR,
        };
        let key = to_c_int(key, "split key")?;
        if let Some(bind) = &self.options.bind_device {
            bind()?;
        }
        let mut newcomm: sys::ncclComm_t = std::ptr::null_mut();
        let mut inner = self.inner.lock();
        let comm = self.live(&mut inner, CALL)?;
        // SAFETY: `comm` is live and we hold its lock; `newcomm` is valid for a write; a null
        // config makes the child inherit this communicator's configuration.
        let rc = unsafe { f(comm, color, key, &mut newcomm, std::ptr::null_mut()) };
        // Owned (freed on every path below) as soon as it exists.
        let child = (!newcomm.is_null())
            .then(|| NcclCommunicator::adopt(self.lib.clone(), newcomm, self.options.clone()));
        // On a non-blocking communicator the parent is in progress too.
        self.finish(&mut inner, CALL, rc)?;
        drop(inner);
        let Some(mut child) = child else {
            return Ok(None);
        };
        if rc == sys::ncclInProgress {
            child.wait_ready(CALL)?;
        }
        child.query_shape()?;
        Ok(Some(child))
    }

    /// `ncclCommFinalize` (2.14): flushes this rank's operations and waits (non-blocking: up to
    /// the timeout) until the clique is quiescent, so that dropping the communicator then
    /// frees it without blocking. On older libraries there is nothing to do.
    pub fn finalize(&self) -> Result<()> {
        let Some(f) = self
            .lib
            .api
            .ncclCommFinalize
            .filter(|_| self.lib.supports_finalize())
        else {
            return Ok(());
        };
        // SAFETY: `comm` is live and we hold its lock for the call.
        self.call("ncclCommFinalize", |comm| unsafe { f(comm) })
    }
}
