//! This process's rank in one shared memory clique ([`ShmRank`], the transport of a
//! [`ShmCommunicator`]): what it counts as operations run, how it waits for the others
//! (polling poison, the coordinator's failures and the timeouts), and its failure state.

use super::super::comm::HostComm;
use super::super::ops::OpDesc;
use super::super::transport::Transport;
use super::super::transport::{P2pOp, RawBuf};
use super::segment::Segment;
use super::{BACKEND, shm_error};
use crate::collectives::{Member, Timeouts, error_message, may_spin};
use crate::distributed::{Coordinator, list_ranks};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// This process's rank in one clique of a [`super::ShmCliqueProvider`].
pub type ShmCommunicator = HostComm<ShmRank>;

/// What a rank counts as operations run (on the stream, so command-buffer replays count).
pub(super) struct RunState {
    /// Phases published so far (the next phase is `phase + 1`).
    pub(super) phase: u64,
    /// Collectives run so far.
    pub(super) seq: u64,
    /// Per peer (clique rank): messages sent to it and received from it so far.
    pub(super) sent: Vec<u64>,
    pub(super) received: Vec<u64>,
}

/// This process's rank in one shared memory clique: the [`Transport`] of a
/// [`ShmCommunicator`].
pub struct ShmRank {
    pub(super) seg: Segment,
    pub(super) member: Member,
    pub(super) coordinator: Arc<dyn Coordinator>,
    pub(super) timeouts: Timeouts,
    pub(super) run: Mutex<RunState>,
}

/// How a wait checks the world while it is not satisfied: poison, dead ranks, timeouts.
pub(super) struct Waiter {
    start: Instant,
    next_warn: Instant,
    next_poll: Instant,
    idle: u32,
    spin: bool,
}

/// How often a waiting rank asks the coordinator about failures.
const FAILURE_POLL: Duration = Duration::from_millis(20);

impl Waiter {
    pub(super) fn new(st: &ShmRank) -> Waiter {
        let now = Instant::now();
        Waiter {
            start: now,
            next_warn: now + st.timeouts.warn_after,
            next_poll: now,
            idle: 0,
            spin: may_spin(st.seg.n()),
        }
    }

    /// Progress was made: the timeouts count from now.
    pub(super) fn progressed(&mut self, st: &ShmRank) {
        let now = Instant::now();
        self.start = now;
        self.next_warn = now + st.timeouts.warn_after;
        self.idle = 0;
    }

    /// Called each time the awaited condition does not hold: fails on poison, on a failure the
    /// coordinator knows, or after the terminate timeout (naming `missing()`: the global ranks
    /// waited for, and those that arrived); warns after the warn timeout; then backs off.
    pub(super) fn idle(
        &mut self,
        st: &ShmRank,
        what: &dyn Fn() -> String,
        missing: &dyn Fn() -> (Vec<usize>, Vec<usize>),
    ) -> Result<()> {
        if let Some(msg) = st.seg.poisoned() {
            return Err(shm_error("collective", msg));
        }
        let now = Instant::now();
        if now >= self.next_poll {
            self.next_poll = now + FAILURE_POLL;
            if let Some(f) = st.coordinator.failures().into_iter().next() {
                return Err(shm_error(
                    "collective",
                    format!(
                        "{}: {f} (reported by the {} coordinator of job `{}`)",
                        what(),
                        st.coordinator.backend(),
                        st.coordinator.job_id()
                    ),
                ));
            }
        }
        let waited = now.duration_since(self.start);
        if waited >= st.timeouts.terminate_after {
            let (waiting, arrived) = missing();
            return Err(shm_error(
                "collective",
                format!(
                    "{}: {} did not arrive within {:?} (arrived: {}); it never reached this \
                     operation, or is stuck before it",
                    what(),
                    list_ranks(&waiting),
                    st.timeouts.terminate_after,
                    if arrived.is_empty() {
                        "none".to_string()
                    } else {
                        list_ranks(&arrived)
                    }
                ),
            ));
        }
        if now >= self.next_warn {
            self.next_warn = now + st.timeouts.warn_after;
            let (waiting, _) = missing();
            tracing::warn!(
                "{} (rank {} of job `{}`): waiting {waited:.1?} for {}",
                what(),
                st.member.global_rank(),
                st.coordinator.job_id(),
                list_ranks(&waiting)
            );
        }
        self.idle = self.idle.saturating_add(1);
        match self.idle {
            0..64 if self.spin => {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
            0..128 => std::thread::yield_now(),
            i => {
                let us = 1u64 << ((i - 128) / 8).min(10);
                std::thread::sleep(Duration::from_micros(us.min(1000)));
            }
        }
        Ok(())
    }
}

impl ShmRank {
    /// Poisons the clique with `what` failed because of `e`, and returns the error.
    pub(super) fn fail(&self, what: &str, e: Error) -> Error {
        let msg = format!("{what} on {}: {}", self.describe(), error_message(&e));
        self.seg.poison(&msg);
        shm_error("collective", msg)
    }

    /// Every rank of the clique, as global ranks, split by `pred` (true: arrived).
    pub(super) fn split_ranks(&self, pred: impl Fn(usize) -> bool) -> (Vec<usize>, Vec<usize>) {
        let mut missing = vec![];
        let mut arrived = vec![];
        for q in 0..self.seg.n() {
            let g = self.member.key().global_rank(q).unwrap_or(q);
            if pred(q) {
                arrived.push(g);
            } else {
                missing.push(g);
            }
        }
        (missing, arrived)
    }

    /// Waits until every rank published phase `target`.
    pub(super) fn wait_phase(&self, target: u64, what: &dyn Fn() -> String) -> Result<()> {
        let n = self.seg.n();
        let all = || (0..n).all(|q| self.seg.phase(q).load(Ordering::Acquire) >= target);
        let mut w = Waiter::new(self);
        while !all() {
            w.idle(self, what, &|| {
                self.split_ranks(|q| self.seg.phase(q).load(Ordering::Acquire) >= target)
            })?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The transport and its communicator.

impl ShmCommunicator {
    /// The bytes of one staging slot (the chunk size of collectives) and of one mailbox chunk.
    pub fn chunk_bytes(&self) -> (usize, usize) {
        let l = &self.transport().seg.layout;
        (l.slot, l.mbox)
    }
}

impl Transport for ShmRank {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn member(&self) -> &Member {
        &self.member
    }

    fn describe(&self) -> String {
        format!("{} over shared memory", self.member)
    }

    unsafe fn run_collective(&self, desc: OpDesc, src: RawBuf, dst: RawBuf) -> Result<()> {
        let mut run = self.run.lock();
        let seq = run.seq;
        run.seq += 1;
        if let Some(msg) = self.seg.poisoned() {
            return Err(shm_error("collective", msg));
        }
        let what = format!("{desc} (collective #{seq})");
        // SAFETY: forwarded.
        unsafe { self.collective(&mut run, seq, desc, src, dst) }.map_err(|e| self.fail(&what, e))
    }

    unsafe fn run_group(&self, ops: &[P2pOp]) -> Result<()> {
        let mut run = self.run.lock();
        if let Some(msg) = self.seg.poisoned() {
            return Err(shm_error("send/recv", msg));
        }
        // SAFETY: forwarded.
        unsafe { self.p2p_group(&mut run, ops) }.map_err(|e| self.fail("send/recv group", e))
    }

    /// The clique's poison, or a failure the coordinator knows of.
    fn async_error(&self) -> Result<()> {
        if let Some(msg) = self.seg.poisoned() {
            return Err(shm_error(
                "collective",
                format!("{}: {msg}", self.describe()),
            ));
        }
        if let Some(f) = self.coordinator.failures().into_iter().next() {
            return Err(shm_error("collective", format!("{}: {f}", self.describe())));
        }
        Ok(())
    }

    fn abort(&self, reason: &str) {
        let first = self.seg.poison(&format!(
            "{} aborted by rank {}: {reason}",
            self.member.key(),
            self.member.global_rank()
        ));
        if first {
            tracing::warn!(communicator = %self.describe(), reason, "aborted shared memory communicator");
        } else {
            tracing::debug!(communicator = %self.describe(), reason, "abort of a failed shared memory communicator");
        }
    }

    /// The ranks that have not reached the latest phase any rank published, if any.
    fn pending(&self) -> Option<String> {
        let seg = &self.seg;
        let phases: Vec<u64> = (0..seg.n())
            .map(|q| seg.phase(q).load(Ordering::Acquire))
            .collect();
        let top = phases.iter().copied().max().unwrap_or(0);
        let (missing, arrived) = self.split_ranks(|q| phases[q] >= top);
        (!missing.is_empty()).then(|| {
            format!(
                "{}: phase {top} waiting for {} (arrived: {})",
                self.member.key(),
                list_ranks(&missing),
                list_ranks(&arrived)
            )
        })
    }
}
