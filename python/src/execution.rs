//! `xthunk.Execution`: a run started by `Executable.execute_async`, on a thread of its own —
//! `result(timeout=None)`, `done()`, `cancel()`, and `await` (through `xthunk/_aio.py`, woken
//! by the run's thread) — and what the blocking run shares with it: the deadline argument, and
//! the cancel token whose probe turns a pending `KeyboardInterrupt` into a cancel.

use crate::errors::{XResult, invalid};
use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use xthunk::CancelToken;
use xthunk::core::executor::Execution;

/// How often a run checks for signals (and a waiting `result` wakes up to).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The longest deadline or timeout, in seconds (a day).
const MAX_SECONDS: f64 = 86_400.0;

/// A `deadline=` argument in seconds as a duration (`None`: none).
pub(crate) fn deadline(seconds: Option<f64>) -> XResult<Option<Duration>> {
    seconds.map(|s| checked_seconds(s, "deadline")).transpose()
}

fn checked_seconds(s: f64, what: &str) -> XResult<Duration> {
    if !(s.is_finite() && (0.0..=MAX_SECONDS).contains(&s)) {
        return Err(invalid(format!(
            "{what} must be in [0, {MAX_SECONDS}] seconds, got {s}"
        ))
        .into());
    }
    Ok(Duration::from_secs_f64(s))
}

/// The exception a signal handler raised during a run, kept for the caller.
pub(crate) struct Caught(Arc<Mutex<Option<PyErr>>>);

impl Caught {
    pub(crate) fn take(&self) -> Option<PyErr> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// A cancel token for a blocking run: once the run has taken 50 ms, every 50 ms at its check
/// points it takes the GIL and runs Python's pending signal handlers; an exception from one
/// (`KeyboardInterrupt`) cancels the run and is kept in the returned slot. Signal handlers run
/// on the main thread only: a run called from another thread checks once, and no more.
pub(crate) fn interruptible() -> (CancelToken, Caught) {
    let slot = Arc::new(Mutex::new(None));
    let theirs = slot.clone();
    let other_thread = AtomicBool::new(false);
    let probe = move || {
        if other_thread.load(Ordering::Relaxed) {
            return false;
        }
        Python::attach(|py| {
            // Signals first; then whether later checks can see any (that check runs Python
            // code, which may raise a `KeyboardInterrupt` arriving meanwhile: kept the same).
            let checked = py.check_signals().and_then(|()| on_main_thread(py));
            match checked {
                Ok(main) => {
                    other_thread.store(!main, Ordering::Relaxed);
                    false
                }
                Err(e) => {
                    *theirs.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    true
                }
            }
        })
    };
    (
        CancelToken::with_probe(Box::new(probe), SIGNAL_CHECK),
        Caught(slot),
    )
}

/// Whether this is Python's main thread (where signal handlers run).
fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import("threading")?;
    let current = threading.call_method0("current_thread")?;
    let main = threading.call_method0("main_thread")?;
    Ok(current.is(&main))
}

/// A finished run's outputs, made into `run`'s dict with the GIL (by `executable.rs`, which
/// knows the outputs).
pub(crate) trait Outputs: Send + 'static {
    fn into_dict(self: Box<Self>, py: Python<'_>) -> XResult<Py<PyDict>>;
}

/// A run started by `Executable.execute_async`.
#[pyclass(module = "xthunk", frozen, name = "Execution")]
pub struct PyExecution {
    exec: Execution<Box<dyn Outputs>>,
    /// The result once collected: `run`'s dict, or the run's error.
    outcome: Mutex<Option<Result<Py<PyDict>, PyErr>>>,
}

impl PyExecution {
    pub(crate) fn new(exec: Execution<Box<dyn Outputs>>) -> Self {
        PyExecution {
            exec,
            outcome: Mutex::new(None),
        }
    }

    /// The collected outcome, collecting it when the run has finished.
    fn collect(&self, py: Python<'_>) -> Option<PyResult<Py<PyDict>>> {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        if outcome.is_none() {
            let taken = self.exec.try_take()?;
            let r = match taken {
                Ok(outputs) => outputs.into_dict(py).map_err(PyErr::from),
                Err(e) => Err(PyErr::from(crate::errors::XErr::from(e))),
            };
            *outcome = Some(r);
        }
        outcome.as_ref().map(|r| match r {
            Ok(d) => Ok(d.clone_ref(py)),
            Err(e) => Err(e.clone_ref(py)),
        })
    }
}

#[pymethods]
impl PyExecution {
    /// Whether the run has finished (successfully or not). Never blocks.
    fn done(&self) -> bool {
        self.exec.is_done()
    }

    /// Asks the run to stop at its next check point (before the next thunk or loop trip);
    /// its result is then a `CancelledError`. Returns whether it was still running.
    fn cancel(&self) -> bool {
        self.exec.cancel();
        !self.exec.is_done()
    }

    /// Waits for the run (at most `timeout` seconds: `TimeoutError` after) and returns what
    /// `run` returns, or raises its error. A `KeyboardInterrupt` while waiting cancels the run
    /// and is raised.
    #[pyo3(signature = (timeout = None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> XResult<Py<PyDict>> {
        let limit = timeout.map(|t| checked_seconds(t, "timeout")).transpose()?;
        let until = limit.map(|l| Instant::now() + l);
        loop {
            if let Some(r) = self.collect(py) {
                return Ok(r?);
            }
            let slice = until.map_or(SIGNAL_CHECK, |u| {
                u.saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK)
            });
            let exec = &self.exec;
            let finished = py.detach(|| exec.wait_timeout(slice));
            if finished {
                continue;
            }
            if let Err(e) = py.check_signals() {
                self.exec.cancel();
                return Err(e.into());
            }
            if let (Some(u), Some(l)) = (until, limit)
                && Instant::now() >= u
            {
                return Err(PyTimeoutError::new_err(format!(
                    "the execution has not finished after {l:?}"
                ))
                .into());
            }
        }
    }

    /// Calls `callback()` once the run has finished: from the run's thread (with the GIL), or
    /// at once when it already has. Used by `__await__`.
    fn _on_done(&self, callback: Py<PyAny>) {
        self.exec.on_done(move |_| {
            Python::attach(|py| {
                if let Err(e) = callback.call0(py) {
                    e.print(py);
                }
            })
        });
    }

    /// `await execution`: the result, without blocking the event loop; cancelling the
    /// awaiting task cancels the run.
    fn __await__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let co = py.import("xthunk._aio")?.call_method1("wait", (slf,))?;
        Ok(co.call_method0("__await__")?.unbind())
    }

    fn __repr__(&self) -> String {
        let state = if self.exec.is_done() {
            "done"
        } else if self.exec.cancel_token().is_cancelled() {
            "cancelling"
        } else {
            "running"
        };
        format!("xthunk.Execution({state})")
    }
}
