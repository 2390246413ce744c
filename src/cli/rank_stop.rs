//! A rank's stop signals (SIGTERM, SIGINT, SIGHUP: `xthunk launch` forwards its own, a
//! scheduler or a user may send one to a rank): the rank publishes why it stops, aborts its
//! communicators (peers waiting in a collective with it fail at once), removes the job's
//! shared memory segments, prints `xthunk: job J: rank R stopping: SIGTERM received`, leaves
//! its coordinator and exits 128 + the signal — never a panic's 101.
//!
//! signal-hook's thread reads the signals (no hand-written handler). The handler is installed
//! before the rank connects; until its communicators exist, stopping is only the line and the
//! exit. Like the failure handler (`cli::job`), it ends the process unless the main thread is
//! already failing ([`ExitClaim`]); further signals while it stops are ignored (a Ctrl-C at a
//! terminal reaches a rank both directly and through its launcher).

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use xthunk::core::collectives::CliqueProvider;
use xthunk::core::distributed::Coordinator;
use xthunk::core::host::remove_job_segments;

/// How long a stopping rank waits for its main thread to let go of the job's devices.
const STOP_RELEASE_WAIT: Duration = Duration::from_secs(1);

/// How long a stopping rank spends publishing why, and leaving its coordinator (each).
const STOP_COORDINATOR_WAIT: Duration = Duration::from_secs(1);

/// What a stopping rank cleans up, once the rank has it.
pub struct StopTargets {
    pub provider: Weak<dyn CliqueProvider>,
    pub coordinator: Weak<dyn Coordinator>,
}

/// The stop handler of a rank: [`StopHandler::arm`] gives it the communicators once they
/// exist.
pub struct StopHandler {
    targets: Arc<OnceLock<StopTargets>>,
}

impl StopHandler {
    /// Installs the handler of the process's ranks `which` (`rank 2`, `ranks 2..=3`) of job
    /// `job`.
    pub fn install(which: String, job: String, exit: Arc<ExitClaim>) -> std::io::Result<Self> {
        let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
        let targets: Arc<OnceLock<StopTargets>> = Arc::new(OnceLock::new());
        let t = targets.clone();
        std::thread::Builder::new()
            .name("xthunk-stop".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    stop(signal, &which, &job, &exit, t.get());
                }
                // The main thread is failing and exits by itself: later signals wait here
                // unheard (the launcher kills a rank that outstays its grace).
                for _ in signals.forever() {}
            })?;
        Ok(StopHandler { targets })
    }

    /// From now on a stop aborts these communicators and leaves this coordinator.
    pub fn arm(&self, targets: StopTargets) {
        let _ = self.targets.set(targets);
    }
}

fn stop(signal: i32, which: &str, job: &str, exit: &ExitClaim, targets: Option<&StopTargets>) {
    if !exit.claim() {
        return;
    }
    let name = signal_hook::low_level::signal_name(signal).unwrap_or("a stop signal");
    let why = format!("{which} stopped: {name} received");
    let coordinator = targets.and_then(|t| t.coordinator.upgrade());
    // Why, for the ranks that did not get the signal (and report it as their cause); never
    // waited for long.
    if let Some(c) = &coordinator {
        let (c, why) = (c.clone(), why.clone());
        bounded(move || {
            let _ = c.publish_cause(&why);
        });
    }
    if let Some(p) = targets.and_then(|t| t.provider.upgrade()) {
        p.abort_all(&why);
    }
    remove_job_segments(job);
    super::logging::note(format_args!(
        "xthunk: job {job}: {which} stopping: {name} received"
    ));
    if targets.is_some() {
        exit.wait_released(STOP_RELEASE_WAIT);
    }
    // Leave the coordinator (revoking this rank's lease), briefly.
    if let Some(c) = coordinator {
        bounded(move || {
            let _ = c.shutdown(STOP_COORDINATOR_WAIT);
        });
    }
    std::process::exit(128 + signal);
}

/// Runs `f` on a thread and waits for it at most [`STOP_COORDINATOR_WAIT`] (plus a little).
fn bounded(f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().spawn(move || {
        f();
        let _ = tx.send(());
    });
    if spawned.is_ok() {
        let _ = rx.recv_timeout(STOP_COORDINATOR_WAIT + Duration::from_millis(200));
    }
}

/// Who ends the process after a failure: the failure handler or the main thread, whichever
/// claims it first; and whether the main thread has let go of the job's device resources
/// (its run returned), which the failure handler waits for, briefly, before it exits.
#[derive(Default)]
pub struct ExitClaim {
    claimed: AtomicBool,
    released: AtomicBool,
}

impl ExitClaim {
    pub fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::SeqCst)
    }

    /// The main thread's run has returned: its buffers, streams and modules are freed.
    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// Waits at most `limit` for [`ExitClaim::release`]: the communicators are aborted by
    /// then, so a main thread inside a collective returns at once; one stuck elsewhere is
    /// not waited for longer.
    pub fn wait_released(&self, limit: Duration) {
        let since = Instant::now();
        while !self.released.load(Ordering::SeqCst) && since.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
