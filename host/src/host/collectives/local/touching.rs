//! How a rank shares its buffers with its peers for one operation: once the operation's
//! rendezvous round completed, every rank's buffers ([`RawBuf`](super::super::kernel::RawBuf))
//! are exposed to every other rank, and a rank leaves the operation only when every peer that
//! may touch its buffers said it is done ([`Touching`], [`Hold`]). The algorithms give every
//! byte of every output to exactly one writer and never write bytes that anyone reads at the
//! same time.

use crate::collectives::{may_spin, spin_while};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Counts the ranks still touching the buffers of one operation, once its rendezvous exposed
/// them. Not subject to timeouts or aborts: every rank that saw the round complete releases
/// its count within the bounded time of its memory copies, whatever else fails, so waiting
/// for zero cannot hang — and leaving earlier could let a peer write into memory that the
/// stream has already released or reused.
pub(super) struct Touching {
    pub(super) threads: usize,
    pub(super) left: AtomicUsize,
    pub(super) failed: AtomicBool,
    pub(super) lock: Mutex<()>,
    pub(super) cv: Condvar,
}

impl Touching {
    /// `n` ranks to count down, among `threads` running at once (for the spin decision).
    pub(super) fn new(n: usize, threads: usize) -> Arc<Self> {
        Arc::new(Touching {
            threads,
            left: AtomicUsize::new(n),
            failed: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        })
    }

    /// This rank is done with its peers' buffers (`ok`: and did its whole share).
    pub(super) fn release(&self, ok: bool) {
        if !ok {
            self.failed.store(true, Ordering::Release);
        }
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    /// Waits until every rank released; true if all did their share.
    pub(super) fn wait(&self) -> bool {
        if may_spin(self.threads) {
            spin_while(|| self.left.load(Ordering::Acquire) > 0);
        }
        let mut g = self.lock.lock();
        while self.left.load(Ordering::Acquire) > 0 {
            self.cv.wait(&mut g);
        }
        !self.failed.load(Ordering::Acquire)
    }
}

/// One rank's share of a [`Touching`] count: released (as failed, unless
/// [`Hold::done`] said otherwise) and waited for when dropped, on every path.
pub(super) struct Hold<'a> {
    pub(super) t: &'a Touching,
    pub(super) released: bool,
}

impl Hold<'_> {
    pub(super) fn release(&mut self, ok: bool) {
        if !self.released {
            self.released = true;
            self.t.release(ok);
        }
    }

    /// Releases as successful and waits for everyone: true if every rank did its share.
    pub(super) fn done(mut self) -> bool {
        self.release(true);
        self.t.wait()
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.release(false);
        self.t.wait();
    }
}
