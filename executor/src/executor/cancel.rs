//! [`CancelToken`]: how a caller stops an execution in progress. A flag that the run reads
//! (one relaxed atomic load) before every top-level node it issues and before every trip of a
//! host-driven loop; optionally a probe, a function the
//! run calls at those points at most once per [`CancelToken::with_probe`]'s interval once the
//! execution has run that long (Python's bindings check for a pending `KeyboardInterrupt`
//! there). A cancelled run stops issuing, waits for the work already issued, and fails with
//! [`Error::Cancelled`](crate::error::Error::Cancelled).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A probe: called by the run now and then; `true` cancels the execution.
pub type CancelProbe = Box<dyn Fn() -> bool + Send + Sync>;

struct Inner {
    cancelled: AtomicBool,
    probe: Option<(CancelProbe, Duration)>,
}

/// A shared cancellation flag (clones share it); see the module's description.
#[derive(Clone)]
pub struct CancelToken(Arc<Inner>);

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .field("probe", &self.0.probe.as_ref().map(|(_, every)| every))
            .finish()
    }
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> Self {
        CancelToken(Arc::new(Inner {
            cancelled: AtomicBool::new(false),
            probe: None,
        }))
    }

    /// A token that also calls `probe` at the run's check points, at most once per `every`
    /// (the first time after `every`); `probe` returning true cancels it.
    pub fn with_probe(probe: CancelProbe, every: Duration) -> Self {
        CancelToken(Arc::new(Inner {
            cancelled: AtomicBool::new(false),
            probe: Some((probe, every)),
        }))
    }

    /// Asks every execution given this token to stop at its next check point.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether [`Self::cancel`] was called (or the probe said so).
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Relaxed)
    }

    /// The probe's interval, when the token has one.
    pub(super) fn probe_interval(&self) -> Option<Duration> {
        self.0.probe.as_ref().map(|(_, every)| *every)
    }

    /// Calls the probe (if any); cancels the token when it says so. Returns whether the token
    /// is cancelled.
    pub(super) fn probe(&self) -> bool {
        if let Some((probe, _)) = &self.0.probe
            && probe()
        {
            self.cancel();
        }
        self.is_cancelled()
    }
}
