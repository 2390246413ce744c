//! The threads asynchronous executions run on: a job goes to an idle worker when there is one,
//! else to a new thread (so that executions never queue behind each other: each one started
//! runs at once). A worker idle for [`IDLE_EXIT`] ends.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a worker waits for a job before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: VecDeque<Job>,
    /// Workers waiting for a job.
    idle: usize,
}

struct Workers {
    queue: Mutex<Queue>,
    wake: Condvar,
}

fn workers() -> &'static Workers {
    static WORKERS: OnceLock<Workers> = OnceLock::new();
    WORKERS.get_or_init(|| Workers {
        queue: Mutex::new(Queue {
            jobs: VecDeque::new(),
            idle: 0,
        }),
        wake: Condvar::new(),
    })
}

/// Runs `job` on an idle worker, or on a new one; fails only when no thread can be spawned.
pub(super) fn run(job: Job) -> std::io::Result<()> {
    let w = workers();
    {
        let mut q = w.queue.lock();
        // Every queued job has an idle worker of its own.
        if q.idle > q.jobs.len() {
            q.jobs.push_back(job);
            w.wake.notify_one();
            return Ok(());
        }
    }
    std::thread::Builder::new()
        .name("xthunk-execution".into())
        .spawn(move || {
            job();
            serve(w);
        })
        .map(drop)
}

/// A worker's life after its first job: jobs until it has been idle for [`IDLE_EXIT`].
fn serve(w: &Workers) {
    let mut q = w.queue.lock();
    loop {
        q.idle += 1;
        let job = loop {
            if let Some(j) = q.jobs.pop_front() {
                break Some(j);
            }
            if w.wake.wait_for(&mut q, IDLE_EXIT).timed_out() && q.jobs.is_empty() {
                break None;
            }
        };
        q.idle -= 1;
        let Some(job) = job else {
            return;
        };
        drop(q);
        job();
        q = w.queue.lock();
    }
}
