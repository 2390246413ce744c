//! The multi-device context of collective checks ([`Collectives`]): the devices of the backend
//! under test in rank order and the clique providers over them, made by the [`CliqueFactory`]
//! the harness was given (the `xthunk` facade registers one with each backend).

use crate::failure::CheckFailure;
use crate::report::Outcome;
use std::sync::Arc;
use std::time::Duration;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::collectives::{CliqueFactory, CliqueProvider, Timeouts, Undetected};

/// The most devices (ranks) a collective check uses.
pub const MAX_RANKS: usize = 8;

/// Rendezvous timeouts of the communicators of ordinary collective checks: generous, so that a
/// loaded machine never fails a correct run (a hang still fails, after `terminate_after`).
pub const CHECK_TIMEOUTS: Timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(30));

/// Rendezvous timeouts of the communicators of the checks that make collectives fail on
/// purpose (mismatched operations, a rank that never arrives).
pub const FAILURE_TIMEOUTS: Timeouts =
    Timeouts::new(Duration::from_millis(300), Duration::from_secs(2));

/// The clique provider `factory` makes for collectives among `devices` of `backend` (global
/// rank = index in `devices`), with `timeouts` on every rendezvous; or why there is none (no
/// factory, or its error: a missing library, an old version). The backend's collective checks
/// are then reported as unsupported, with that reason.
pub fn cliques_for(
    backend: &dyn Backend,
    factory: Option<&dyn CliqueFactory>,
    devices: &[Arc<dyn Device>],
    timeouts: Timeouts,
) -> Result<Arc<dyn CliqueProvider>, String> {
    let Some(factory) = factory else {
        return Err(format!(
            "collectives: the conformance harness was given no clique provider for backend `{}`",
            backend.name()
        ));
    };
    factory
        .create(devices, timeouts)
        .map_err(|e| format!("collectives: no {} clique provider: {e}", backend.name()))
}

/// What collective checks run on: up to [`MAX_RANKS`] devices of one backend, in rank order
/// (the device under test first, then the others by ordinal), and clique providers over all of
/// them from [`cliques_for`]: one with [`CHECK_TIMEOUTS`], one with [`FAILURE_TIMEOUTS`].
pub struct Collectives {
    backend: String,
    devices: Vec<Arc<dyn Device>>,
    /// Devices the backend reported.
    available: usize,
    /// Why some reported devices are not in `devices`, if any failed to open.
    open_error: Option<String>,
    cliques: Result<Arc<dyn CliqueProvider>, String>,
    failure_cliques: Result<Arc<dyn CliqueProvider>, String>,
}

impl Collectives {
    /// The context for `backend`, whose device `ordinal` (`first`) is under test and which
    /// reported `available` devices, with cliques from `factory`.
    pub fn new(
        backend: &dyn Backend,
        factory: Option<&dyn CliqueFactory>,
        ordinal: usize,
        first: Arc<dyn Device>,
        available: usize,
    ) -> Self {
        let mut devices = vec![first];
        let mut open_error = None;
        for i in (0..available).filter(|&i| i != ordinal) {
            if devices.len() == MAX_RANKS {
                break;
            }
            match backend.device(i) {
                Ok(d) => devices.push(d),
                Err(e) => {
                    open_error.get_or_insert_with(|| format!("device {i}: {e}"));
                }
            }
        }
        let cliques = cliques_for(backend, factory, &devices, CHECK_TIMEOUTS);
        let failure_cliques = cliques_for(backend, factory, &devices, FAILURE_TIMEOUTS);
        Collectives {
            backend: backend.name().into(),
            devices,
            available,
            open_error,
            cliques,
            failure_cliques,
        }
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The devices, in rank order.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// The provider of ordinary checks ([`CHECK_TIMEOUTS`]).
    pub fn cliques(&self) -> Result<Arc<dyn CliqueProvider>, CheckFailure> {
        self.cliques.clone().map_err(CheckFailure::Unsupported)
    }

    /// The provider of checks that fail collectives on purpose ([`FAILURE_TIMEOUTS`]).
    pub fn failure_cliques(&self) -> Result<Arc<dyn CliqueProvider>, CheckFailure> {
        self.failure_cliques
            .clone()
            .map_err(CheckFailure::Unsupported)
    }

    /// Why a check on `ranks` devices cannot run here (skipped: too few devices; unsupported:
    /// no clique provider), or `None` when it can.
    pub(crate) fn unavailable(&self, ranks: usize) -> Option<Outcome> {
        if ranks > self.devices.len() {
            let why = match &self.open_error {
                Some(e) => format!(", {} usable (could not open {e})", self.devices.len()),
                None => String::new(),
            };
            return Some(Outcome::Skipped(format!(
                "needs {ranks} devices; backend {} has {}{why}",
                self.backend, self.available
            )));
        }
        match (&self.cliques, &self.failure_cliques) {
            (Err(why), _) | (_, Err(why)) => Some(Outcome::Unsupported(why.clone())),
            _ => None,
        }
    }

    /// What the provider of checks that fail collectives on purpose does not detect (`None`
    /// without a provider).
    pub fn undetected(&self) -> Option<Undetected> {
        self.failure_cliques.as_ref().ok().map(|p| p.undetected())
    }

    /// Forgets failed cliques, so that a failing check cannot fail the next one.
    pub(crate) fn evict_aborted(&self) {
        for p in [&self.cliques, &self.failure_cliques].into_iter().flatten() {
            let gone = p.evict_aborted();
            if !gone.is_empty() {
                tracing::debug!(cliques = gone.len(), "conformance: evicted failed cliques");
            }
        }
    }

    /// Devices the backend reported (at least [`Collectives::devices`]).
    pub fn available(&self) -> usize {
        self.available
    }
}

/// The [`Collectives`] context of `backend`, whose device `ordinal` is `device`.
pub(crate) fn collectives_context(
    backend: &dyn Backend,
    factory: Option<&dyn CliqueFactory>,
    ordinal: usize,
    device: &Arc<dyn Device>,
) -> Collectives {
    let available = backend
        .probe()
        .map(|info| info.devices.len())
        .unwrap_or(1)
        .max(1);
    Collectives::new(backend, factory, ordinal, device.clone(), available)
}
