//! Asynchronous execution: [`Execution`], the handle of work running on a thread of its own
//! (wait, poll, wait with a timeout, cancel, a completion callback, and `Future` with no async
//! runtime), and [`LoadedExecutable::execute_async`], one execution of a loaded program on
//! buffers the handle owns until it completes.
//!
//! What overlaps: every execution started with `execute_async` runs on its own thread (an idle
//! worker of `workers`, else a new one: no execution waits for another's thread), and
//! draws its own per-execution state (streams, events, temps) from the executable's pool, so
//! executions of one executable on different buffers overlap on the device, as do executions
//! started from several threads with the blocking `execute`. Programs with collective memory
//! are the exception: their executions share it and run one at a time. Executions that write
//! the same buffers are the caller's to order (wait for one before starting the next).

use super::cancel::CancelToken;
use super::config::ExecuteOptions;
use super::loaded::LoadedExecutable;
use crate::backend::{Buffer, DeviceMemory};
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Called with an execution's result on its thread as it completes (see [`Execution::on_done`]).
pub type DoneCallback<T> = Box<dyn FnOnce(&Result<T>) + Send>;

enum Slot<T> {
    Running {
        waker: Option<Waker>,
        callbacks: Vec<DoneCallback<T>>,
    },
    Done(Result<T>),
    Taken,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    changed: Condvar,
    done: AtomicBool,
}

impl<T> Shared<T> {
    /// Runs the callbacks with `result`, then stores it, wakes the future and the waiters.
    fn finish(&self, result: Result<T>) {
        let callbacks = match &mut *self.slot.lock() {
            Slot::Running { callbacks, .. } => std::mem::take(callbacks),
            _ => vec![],
        };
        for c in callbacks {
            c(&result);
        }
        let waker = {
            let mut slot = self.slot.lock();
            let waker = match &mut *slot {
                Slot::Running { waker, .. } => waker.take(),
                _ => None,
            };
            *slot = Slot::Done(result);
            self.done.store(true, Ordering::Release);
            self.changed.notify_all();
            waker
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The handle of work running on its own thread (an execution from
/// [`LoadedExecutable::execute_async`], or any job given to [`Execution::spawn`]).
///
/// Its result is taken once: by [`Execution::wait`], [`Execution::try_take`], or by awaiting
/// it (it is a `Future` whose output is the result; no async runtime is needed: the thread
/// wakes the task). Dropping the handle does not stop the work: cancel it first if it should
/// stop. Errors of the work (a kernel's, a deadline's as `DeadlineExceeded`, a cancel's as
/// `Cancelled`) come back as its result.
pub struct Execution<T> {
    shared: Arc<Shared<T>>,
    cancel: CancelToken,
}

impl<T> std::fmt::Debug for Execution<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("done", &self.is_done())
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}

impl<T: Send + 'static> Execution<T> {
    /// Runs `job` on a thread of its own (an idle worker's, else a new one); `cancel` is the token [`Execution::cancel`] cancels (the job
    /// is expected to watch it). A panic in the job becomes an error result.
    pub fn spawn(
        cancel: CancelToken,
        job: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::Running {
                waker: None,
                callbacks: vec![],
            }),
            changed: Condvar::new(),
            done: AtomicBool::new(false),
        });
        let theirs = shared.clone();
        super::workers::run(Box::new(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                .unwrap_or_else(|p| {
                    let what = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    Err(Error::backend("executor", "execution thread", what))
                });
            theirs.finish(result);
        }))
        .map_err(|e| Error::backend("executor", "spawn an execution thread", e.to_string()))?;
        Ok(Execution { shared, cancel })
    }
}

impl<T> Execution<T> {
    /// Asks the work to stop (at the run's next check point; see [`CancelToken`]). The
    /// result is then `Cancelled`, unless the work finished first.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The token [`Self::cancel`] cancels.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Whether the work has finished (its result stored). Never blocks.
    pub fn is_done(&self) -> bool {
        self.shared.done.load(Ordering::Acquire)
    }

    /// Waits until the work has finished or `timeout` has passed; returns whether it finished.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = Instant::now().checked_add(timeout);
        let mut slot = self.shared.slot.lock();
        while matches!(*slot, Slot::Running { .. }) {
            match until {
                Some(at) => {
                    if self.shared.changed.wait_until(&mut slot, at).timed_out() {
                        return !matches!(*slot, Slot::Running { .. });
                    }
                }
                None => self.shared.changed.wait(&mut slot),
            }
        }
        true
    }

    /// Waits for the work and returns its result.
    pub fn wait(self) -> Result<T> {
        let mut slot = self.shared.slot.lock();
        while matches!(*slot, Slot::Running { .. }) {
            self.shared.changed.wait(&mut slot);
        }
        take(&mut slot)
    }

    /// The result if the work has finished (and the result was not taken yet), else `None`.
    pub fn try_take(&self) -> Option<Result<T>> {
        let mut slot = self.shared.slot.lock();
        match *slot {
            Slot::Running { .. } => None,
            _ => Some(take(&mut slot)),
        }
    }

    /// Calls `f` with the result on the work's thread as the work completes, just before the
    /// result is stored (so `f` must not wait for this execution); at once, on this thread,
    /// when it has already completed (with its result, or an error if it was taken).
    pub fn on_done(&self, f: impl FnOnce(&Result<T>) + Send + 'static) {
        let mut slot = self.shared.slot.lock();
        match &mut *slot {
            Slot::Running { callbacks, .. } => callbacks.push(Box::new(f)),
            Slot::Done(r) => {
                let r: &Result<T> = r;
                f(r);
            }
            Slot::Taken => f(&Err(taken())),
        }
    }
}

fn taken() -> Error {
    Error::InvalidArgument("the execution's result was already taken".into())
}

fn take<T>(slot: &mut Slot<T>) -> Result<T> {
    match std::mem::replace(slot, Slot::Taken) {
        Slot::Done(r) => r,
        Slot::Running { waker, callbacks } => {
            *slot = Slot::Running { waker, callbacks };
            Err(Error::InvalidArgument(
                "the execution has not finished".into(),
            ))
        }
        Slot::Taken => Err(taken()),
    }
}

impl<T> Future for Execution<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut slot = self.shared.slot.lock();
        match &mut *slot {
            Slot::Running { waker, .. } => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(take(&mut slot)),
        }
    }
}

/// The parameter and output buffers of one asynchronous execution, owned by it until it
/// completes (and handed back by it; after a deadline, kept until the work it abandoned has
/// finished).
pub trait RunBuffers: Send + Sync + 'static {
    /// The parameters' and the outputs' memory, in signature order.
    fn buffers(&self) -> (Vec<&dyn DeviceMemory>, Vec<&dyn DeviceMemory>);
}

impl RunBuffers for (Vec<Buffer>, Vec<Buffer>) {
    fn buffers(&self) -> (Vec<&dyn DeviceMemory>, Vec<&dyn DeviceMemory>) {
        let p = self.0.iter().map(|b| b.as_ref() as &dyn DeviceMemory);
        let o = self.1.iter().map(|b| b.as_ref() as &dyn DeviceMemory);
        (p.collect(), o.collect())
    }
}

impl LoadedExecutable {
    /// [`Self::execute`] on a thread of its own: returns at once with the handle, whose result
    /// is `buffers` back once the execution completed. `opts.cancel` is the handle's token
    /// (a new one when `None`); the deadline counts from the start on that thread. See the
    /// module's description for what overlaps.
    pub fn execute_async<B: RunBuffers>(
        self: &Arc<Self>,
        buffers: B,
        opts: ExecuteOptions,
    ) -> Result<Execution<B>> {
        let cancel = opts.cancel.clone().unwrap_or_default();
        let exe = self.clone();
        let token = cancel.clone();
        Execution::spawn(cancel, move || {
            exe.execute_owned(
                buffers,
                ExecuteOptions {
                    cancel: Some(token),
                    ..opts
                },
            )
        })
    }

    /// [`Self::execute`] on buffers it owns, handed back after a success; after an error they
    /// are dropped once the work issued is finished (a deadline's abandoned work included).
    pub fn execute_owned<B: RunBuffers>(&self, buffers: B, opts: ExecuteOptions) -> Result<B> {
        let buffers = Arc::new(buffers);
        let opts = ExecuteOptions {
            keep_alive: Some(buffers.clone()),
            ..opts
        };
        {
            let (p, o) = buffers.buffers();
            self.execute(&p, &o, &opts)?;
        }
        drop(opts);
        Arc::try_unwrap(buffers).map_err(|_| {
            Error::backend(
                "executor",
                "execute",
                "a finished execution still holds its buffers",
            )
        })
    }
}
