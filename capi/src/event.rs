//! Asynchronous runs from C: `xthunk_executable_run_async` starts a run on a thread of its own
//! and returns an `XthunkEvent` at once; the event is waited for (with or without a timeout),
//! polled, cancelled, and calls an optional completion callback. A run may have a deadline.
//! Errors of the run (a kernel's, `XTHUNK_STATUS_CANCELLED`, `XTHUNK_STATUS_DEADLINE_EXCEEDED`)
//! come back from the event (docs/c-api.md).

use crate::donate::resolve;
use crate::error::{Result, XthunkError, arg, guard, guard_value};
use crate::executable::XthunkExecutable;
use crate::handles::XthunkBuffer;
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use xthunk::core::executor::Execution;
use xthunk::{CancelToken, DeviceMemory, ExecuteOptions};

/// Called once when an asynchronous run finishes, on the run's thread, before its event
/// reports done: `error` is NULL on success, else the run's error (borrowed: valid during the
/// call only). It must not wait for the event (`xthunk_event_wait`) nor free it.
pub type XthunkCallback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, error: *const XthunkError)>;

/// Options of `xthunk_executable_run_async` (NULL for none: no deadline, no callback).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XthunkRunOptions {
    /// The run fails with `XTHUNK_STATUS_DEADLINE_EXCEEDED` when it has not finished this many
    /// milliseconds after it started; 0: no deadline.
    pub deadline_ms: u64,
    /// Called when the run finishes (NULL: none).
    pub callback: XthunkCallback,
    /// Passed to `callback` as is.
    pub user_data: *mut c_void,
}

/// An asynchronous run in progress or finished (`xthunk_executable_run_async`). Freed with
/// `xthunk_event_free`, which waits for the run first.
pub struct XthunkEvent {
    exec: Execution<()>,
    /// The run's outcome once it was collected: `None` for success.
    outcome: OnceLock<Option<XthunkError>>,
    /// Set once no work of the run uses the caller's buffers any more.
    released: Arc<Released>,
}

/// Whether the caller's buffers are free of the run's work.
#[derive(Default)]
struct Released {
    yes: Mutex<bool>,
    changed: Condvar,
}

impl Released {
    fn wait(&self) {
        let mut yes = self.yes.lock().unwrap_or_else(PoisonError::into_inner);
        while !*yes {
            yes = self
                .changed
                .wait(yes)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Kept by the run (and, after a deadline, by the work it abandoned) until it is done with
/// the caller's buffers; dropping the last one releases them.
struct Releaser(Arc<Released>);

impl Drop for Releaser {
    fn drop(&mut self) {
        *self.0.yes.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.0.changed.notify_all();
    }
}

/// The caller's buffers, held by the run's thread.
struct Held {
    params: Vec<*const dyn DeviceMemory>,
    outputs: Vec<*const dyn DeviceMemory>,
    callback: XthunkCallback,
    user_data: *mut c_void,
}

// SAFETY: the buffers are `Send + Sync` device memory the caller keeps alive until the event
// has completed (the ABI's contract for `xthunk_executable_run_async`; `xthunk_event_free`
// waits), and `user_data` is the caller's, handed back on the run's thread as documented.
unsafe impl Send for Held {}

impl XthunkEvent {
    /// The run's outcome, once it has finished (waits without limit).
    fn outcome(&self) -> Option<XthunkError> {
        self.exec.wait_timeout(Duration::MAX);
        self.outcome
            .get_or_init(|| match self.exec.try_take() {
                Some(Ok(())) => None,
                Some(Err(e)) => Some(e.into()),
                None => Some(XthunkError::invalid("the run has not finished")),
            })
            .clone()
    }
}

fn into_ptr(e: Option<XthunkError>) -> *mut XthunkError {
    e.map_or(std::ptr::null_mut(), |e| Box::into_raw(Box::new(e)))
}

/// Starts a run on device buffers and returns at once with its event: the buffers and the
/// donation flags as for `xthunk_executable_run_donated` (`donate` may be NULL). Every buffer
/// must stay alive, and no other run may write them, until the event has completed
/// (`xthunk_event_wait` returned, `xthunk_event_poll` said true, or the callback ran). Runs of
/// one executable on different buffers overlap. `options` may be NULL. After a deadline, free
/// the buffers only after `xthunk_event_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_run_async(
    exe: *const XthunkExecutable,
    params: *const *const XthunkBuffer,
    param_count: usize,
    donate: *const bool,
    outputs: *const *const XthunkBuffer,
    output_count: usize,
    options: *const XthunkRunOptions,
    out: *mut *mut XthunkEvent,
) -> *mut XthunkError {
    guard(|| {
        if out.is_null() {
            return Err(XthunkError::invalid("out is NULL"));
        }
        // SAFETY: the caller's handles, arrays of the counts given and options (the ABI's
        // contract).
        let (e, (p, o), options) = unsafe {
            let e = arg(exe, "executable")?;
            let bufs = resolve(e, params, param_count, donate, outputs, output_count)?;
            (e, bufs, options.as_ref().copied())
        };
        let held = Held {
            params: p
                .into_iter()
                .map(|b| b as *const dyn DeviceMemory)
                .collect(),
            outputs: o
                .into_iter()
                .map(|b| b as *const dyn DeviceMemory)
                .collect(),
            callback: options.and_then(|o| o.callback),
            user_data: options.map_or(std::ptr::null_mut(), |o| o.user_data),
        };
        let cancel = CancelToken::new();
        let released = Arc::new(Released::default());
        let opts = ExecuteOptions {
            keep_alive: Some(Arc::new(Releaser(released.clone()))),
            deadline: options
                .map(|o| o.deadline_ms)
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            cancel: Some(cancel.clone()),
            ..Default::default()
        };
        let loaded = e.loaded.clone();
        let exec = Execution::spawn(cancel, move || {
            let held = held;
            let result = {
                // SAFETY: the caller keeps every buffer alive until the event completes, which
                // is after this closure returns (see `Held`).
                let (p, o): (Vec<&dyn DeviceMemory>, Vec<&dyn DeviceMemory>) = unsafe {
                    (
                        held.params.iter().map(|b| &**b).collect(),
                        held.outputs.iter().map(|b| &**b).collect(),
                    )
                };
                loaded.execute(&p, &o, &opts)
            };
            if let Some(cb) = held.callback {
                let err = result.as_ref().err().map(XthunkError::from_ref);
                let ptr = err.as_ref().map_or(std::ptr::null(), |e| e as *const _);
                // SAFETY: the caller's callback and user data; the error lives for the call.
                // A panic (an unwinding C++ callback) is caught by `Execution`'s thread.
                unsafe { cb(held.user_data, ptr) };
            }
            result
        })?;
        let event = Box::new(XthunkEvent {
            exec,
            outcome: OnceLock::new(),
            released,
        });
        // SAFETY: `out` is non-NULL and valid for a write (the ABI's contract).
        unsafe { out.write(Box::into_raw(event)) };
        Ok(())
    })
}

fn event<'a>(ev: *const XthunkEvent) -> Result<&'a XthunkEvent> {
    // SAFETY: NULL or a live event (the ABI's contract).
    unsafe { arg(ev, "event") }
}

/// Waits for the run; returns its error (NULL on success; a new error object each call).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_event_wait(ev: *const XthunkEvent) -> *mut XthunkError {
    match guard_value(Err(XthunkError::invalid("a panic")), || {
        event(ev).map(XthunkEvent::outcome)
    }) {
        Ok(outcome) => into_ptr(outcome),
        Err(e) => into_ptr(Some(e)),
    }
}

/// Waits for the run at most `timeout_ms` milliseconds: `*done` says whether it finished;
/// when it did, returns its error (NULL on success), else NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_event_wait_timeout(
    ev: *const XthunkEvent,
    timeout_ms: u64,
    done: *mut bool,
) -> *mut XthunkError {
    let r = guard_value(Err(XthunkError::invalid("a panic")), || {
        let e = event(ev)?;
        if done.is_null() {
            return Err(XthunkError::invalid("done is NULL"));
        }
        let finished = e.exec.wait_timeout(Duration::from_millis(timeout_ms));
        // SAFETY: non-NULL and valid for a write (the ABI's contract).
        unsafe { done.write(finished) };
        Ok(if finished { e.outcome() } else { None })
    });
    match r {
        Ok(outcome) => into_ptr(outcome),
        Err(e) => into_ptr(Some(e)),
    }
}

/// Whether the run has finished (false for NULL). Never blocks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_event_poll(ev: *const XthunkEvent) -> bool {
    guard_value(false, || event(ev).is_ok_and(|e| e.exec.is_done()))
}

/// Asks the run to stop: it stops issuing at its next check point (before the next thunk or
/// loop trip; a kernel already running finishes), and fails with `XTHUNK_STATUS_CANCELLED`,
/// unless it finished first. Returns at once; NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_event_cancel(ev: *const XthunkEvent) {
    guard_value((), || {
        if let Ok(e) = event(ev) {
            e.exec.cancel();
        }
    })
}

/// Waits for the run and for every piece of work it issued (so that its buffers may be freed
/// after: after `XTHUNK_STATUS_DEADLINE_EXCEEDED`, work the run abandoned may still use them
/// until then), then frees the event. NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_event_free(ev: *mut XthunkEvent) {
    guard_value((), || {
        if !ev.is_null() {
            // SAFETY: a live event from this library, freed once (the ABI's contract).
            let e = unsafe { Box::from_raw(ev) };
            e.exec.wait_timeout(Duration::MAX);
            e.released.wait();
            drop(e);
        }
    })
}
