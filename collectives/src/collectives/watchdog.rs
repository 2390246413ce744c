//! Hang watchdog pieces: poll communicators for asynchronous errors and abort them all on the
//! first, so that a failure on one clique (a timeout, a mismatch, a dead peer) stops every
//! rank's collectives promptly instead of leaving them to their own timeouts.

use super::Communicator;
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The first asynchronous error of `comms`, if any (`Communicator::async_error` of each).
pub fn first_async_error(comms: &[Arc<dyn Communicator>]) -> Result<()> {
    comms.iter().try_for_each(|c| c.async_error())
}

/// What each of `comms` is waiting on, one line per communicator that is waiting; `None`
/// if none is. For deadline and watchdog messages ("who is missing").
pub fn describe_pending(comms: &[Arc<dyn Communicator>]) -> Option<String> {
    let mut lines: Vec<String> = comms
        .iter()
        .filter_map(|c| c.pending().map(|p| format!("{}: {p}", c.describe())))
        .collect();
    lines.dedup();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[derive(Default)]
struct Shared {
    stop: Mutex<bool>,
    cv: Condvar,
    first_error: Mutex<Option<String>>,
}

/// A background thread polling communicators' `async_error` every `interval`. On the first
/// error it aborts every watched communicator (the reason names the failing one and its
/// error), logs it, remembers it and stops polling. Dropping the watchdog (or [`Watchdog::stop`])
/// stops and joins the thread.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog").finish_non_exhaustive()
    }
}

impl Watchdog {
    pub fn spawn(comms: Vec<Arc<dyn Communicator>>, interval: Duration) -> Result<Self> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let interval = interval.max(Duration::from_millis(1));
        let thread = std::thread::Builder::new()
            .name("xthunk-collectives-watchdog".into())
            .spawn(move || {
                let mut stop = s.stop.lock();
                loop {
                    if *stop {
                        return;
                    }
                    if let Some((c, e)) = comms
                        .iter()
                        .find_map(|c| c.async_error().err().map(|e| (c, e)))
                    {
                        let reason = format!("watchdog: {} failed: {e}", c.describe());
                        tracing::error!("{reason}; aborting {} communicators", comms.len());
                        for other in &comms {
                            other.abort(&reason);
                        }
                        *s.first_error.lock() = Some(reason);
                        return;
                    }
                    let until = Instant::now() + interval;
                    s.cv.wait_until(&mut stop, until);
                }
            })
            .map_err(|e| Error::backend("host", "spawn watchdog thread", e.to_string()))?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }

    /// The error that made the watchdog abort, if it did.
    pub fn error(&self) -> Option<String> {
        self.shared.first_error.lock().clone()
    }

    /// Stops and joins the thread; returns the error that made it abort, if any.
    pub fn stop(mut self) -> Option<String> {
        self.halt();
        self.error()
    }

    fn halt(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.halt();
    }
}
