//! In-process rendezvous: a set of participants meet on a key, each contributing a value, and
//! each leaves with all the values — or with an error, never a silent hang.
//!
//! - **Warn after** [`Timeouts::warn_after`]: a waiting participant logs a `tracing` warning
//!   naming the participants that have not arrived, and repeats it every `warn_after`.
//! - **Terminate after** [`Timeouts::terminate_after`]: a participant that waited that long
//!   fails with an error naming the key and the missing participants, and **poisons** the
//!   rendezvous: every other waiter (on any key) wakes and fails with the same message, and
//!   every later arrival fails at once. A rendezvous belongs to one clique; once it missed a
//!   meeting its ranks are out of step and nothing it does later can be trusted.
//! - [`Rendezvous::poison`] does the same on demand (communicator abort).
//!
//! Participants are named by ids (the host collectives use global ranks), given with each
//! arrival as the full participant list, which every participant of a key must agree on.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a participant waits for the others before warning, and before giving up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Warn (and repeat the warning at this interval) while participants are missing.
    pub warn_after: Duration,
    /// Fail, naming the missing participants, and poison the rendezvous.
    pub terminate_after: Duration,
}

impl Timeouts {
    pub const fn new(warn_after: Duration, terminate_after: Duration) -> Self {
        Timeouts {
            warn_after,
            terminate_after,
        }
    }
}

impl Default for Timeouts {
    /// Warn after 10 s, terminate after 60 s: a rank that is 60 s late to a collective is
    /// stuck, not slow (XLA uses the same orders of magnitude).
    fn default() -> Self {
        Timeouts::new(Duration::from_secs(10), Duration::from_secs(60))
    }
}

/// A rendezvous in progress, for "who is missing" messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRound<K> {
    pub key: K,
    /// Participants that arrived, in participant-list order.
    pub arrived: Vec<usize>,
    /// Participants that have not arrived yet.
    pub missing: Vec<usize>,
    /// Since the first participant arrived.
    pub waiting_for: Duration,
}

impl<K: fmt::Display> fmt::Display for PendingRound<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} waiting {:.3?} for rank(s) {} (arrived: {})",
            self.key,
            self.waiting_for,
            list(&self.missing),
            list(&self.arrived)
        )
    }
}

fn list(ids: &[usize]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A participant's place in a round: returned by [`Rendezvous::post`], redeemed by
/// [`Rendezvous::wait`].
#[derive(Debug)]
#[must_use = "a posted arrival must be waited for"]
pub struct Ticket<K> {
    key: K,
    me: usize,
    posted: Instant,
}

struct Round<V> {
    ranks: Vec<usize>,
    values: Vec<Option<V>>,
    arrived: usize,
    result: Option<Arc<Vec<V>>>,
    collected: usize,
    first: Instant,
}

impl<V> Round<V> {
    fn split_arrivals(&self) -> (Vec<usize>, Vec<usize>) {
        let mut arrived = vec![];
        let mut missing = vec![];
        for (r, v) in self.ranks.iter().zip(&self.values) {
            if v.is_some() || self.result.is_some() {
                arrived.push(*r);
            } else {
                missing.push(*r);
            }
        }
        (arrived, missing)
    }
}

struct State<K, V> {
    rounds: BTreeMap<K, Round<V>>,
    poisoned: Option<Arc<str>>,
}

/// A rendezvous point for many rounds (one per key) among fixed participant lists.
pub struct Rendezvous<K, V> {
    name: String,
    timeouts: Timeouts,
    state: Mutex<State<K, V>>,
    cv: Condvar,
    /// Bumped (under the lock) whenever a round completes or the rendezvous is poisoned: what
    /// a waiter spins on briefly before it blocks.
    epoch: AtomicU64,
}

impl<K, V> fmt::Debug for Rendezvous<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rendezvous")
            .field("name", &self.name)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// Spins while `cond` holds, for a few microseconds at most: a sleep and a wake-up cost more
/// when the peer is about to arrive.
pub fn spin_while(cond: impl Fn() -> bool) {
    for _ in 0..SPINS {
        if !cond() {
            return;
        }
        std::hint::spin_loop();
    }
}

const SPINS: u32 = 1000;

/// Whether spinning can pay: only if every participant can run at once. On an oversubscribed
/// machine the spinning thread would take the CPU from the very peer it waits for.
pub fn may_spin(participants: usize) -> bool {
    static CPUS: OnceLock<usize> = OnceLock::new();
    participants
        <= *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn rv_error(message: &str) -> Error {
    Error::backend("host", "rendezvous", message)
}

impl<K: Ord + Clone + fmt::Display, V> Rendezvous<K, V> {
    /// `name` says what meets here, for messages (e.g. the clique).
    pub fn new(name: impl Into<String>, timeouts: Timeouts) -> Self {
        Rendezvous {
            name: name.into(),
            timeouts,
            state: Mutex::new(State {
                rounds: BTreeMap::new(),
                poisoned: None,
            }),
            cv: Condvar::new(),
            epoch: AtomicU64::new(0),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Arrives at round `key` as participant `me` of `ranks` with `value`, and waits for the
    /// others: returns every participant's value, in the order of `ranks`.
    pub fn arrive(&self, key: K, ranks: &[usize], me: usize, value: V) -> Result<Arc<Vec<V>>> {
        let t = self.post(key, ranks, me, value)?;
        self.wait(t)
    }

    /// Arrives without waiting (so that one participant can be in several rounds at once, as
    /// in a group of sends and receives); [`Rendezvous::wait`] completes it. The terminate
    /// timeout counts from here.
    pub fn post(&self, key: K, ranks: &[usize], me: usize, value: V) -> Result<Ticket<K>> {
        let mut st = self.state.lock();
        if let Some(p) = &st.poisoned {
            return Err(rv_error(p));
        }
        let Some(pos) = ranks.iter().position(|&r| r == me) else {
            return Err(Error::InvalidArgument(format!(
                "rendezvous `{key}` of {}: rank {me} is not one of the participants [{}]",
                self.name,
                list(ranks)
            )));
        };
        let now = Instant::now();
        let round = st.rounds.entry(key.clone()).or_insert_with(|| Round {
            ranks: ranks.to_vec(),
            values: ranks.iter().map(|_| None).collect(),
            arrived: 0,
            result: None,
            collected: 0,
            first: now,
        });
        let problem = if round.ranks != ranks {
            Some(format!(
                "rendezvous `{key}` of {}: rank {me} arrived for participants [{}] but the round \
                 was opened for [{}]",
                self.name,
                list(ranks),
                list(&round.ranks)
            ))
        } else if round.result.is_some() || round.values[pos].is_some() {
            Some(format!(
                "rendezvous `{key}` of {}: rank {me} arrived twice",
                self.name
            ))
        } else {
            None
        };
        if let Some(msg) = problem {
            self.poison_locked(&mut st, &msg);
            return Err(rv_error(&msg));
        }
        round.values[pos] = Some(value);
        round.arrived += 1;
        if round.arrived == round.ranks.len() {
            let values: Vec<V> = round.values.iter_mut().filter_map(Option::take).collect();
            round.result = Some(Arc::new(values));
            self.epoch.fetch_add(1, Ordering::Release);
            self.cv.notify_all();
        }
        Ok(Ticket {
            key,
            me,
            posted: now,
        })
    }

    /// Waits until every participant of the ticket's round arrived (returns their values),
    /// the terminate timeout passes (poisons the rendezvous and fails) or the rendezvous is
    /// poisoned (fails).
    pub fn wait(&self, ticket: Ticket<K>) -> Result<Arc<Vec<V>>> {
        let Ticket { key, me, posted } = ticket;
        let mut next_warn = posted + self.timeouts.warn_after;
        let deadline = posted + self.timeouts.terminate_after;
        let mut st = self.state.lock();
        let mut spun = false;
        loop {
            let state = &mut *st;
            let Some(round) = state.rounds.get_mut(&key) else {
                let msg = state.poisoned.clone().unwrap_or_else(|| {
                    Arc::from(format!(
                        "rendezvous `{key}` of {}: the round of rank {me} vanished",
                        self.name
                    ))
                });
                return Err(rv_error(&msg));
            };
            if let Some(result) = &round.result {
                let result = result.clone();
                round.collected += 1;
                if round.collected == round.ranks.len() {
                    state.rounds.remove(&key);
                }
                return Ok(result);
            }
            if let Some(p) = &state.poisoned {
                return Err(rv_error(p));
            }
            let (arrived, missing) = round.split_arrivals();
            let now = Instant::now();
            if now >= deadline {
                let others = self.others_locked(state, &key);
                let msg = format!(
                    "rendezvous `{key}` of {} terminated after {:?}: rank(s) {} did not arrive \
                     (arrived: {}){others}",
                    self.name,
                    self.timeouts.terminate_after,
                    list(&missing),
                    list(&arrived)
                );
                tracing::error!(rendezvous = %self.name, %key, rank = me, "{msg}");
                self.poison_locked(state, &msg);
                return Err(rv_error(&msg));
            }
            if now >= next_warn {
                tracing::warn!(
                    rendezvous = %self.name,
                    %key,
                    rank = me,
                    "rank {me} has waited {:.1?} at `{key}` of {} for rank(s) {} (arrived: {}); \
                     terminating after {:?}",
                    now - posted,
                    self.name,
                    list(&missing),
                    list(&arrived),
                    self.timeouts.terminate_after
                );
                while next_warn <= now {
                    next_warn += self.timeouts.warn_after.max(Duration::from_millis(1));
                }
            }
            if !spun && may_spin(round.ranks.len()) {
                // Peers usually arrive within microseconds: spin a little before paying for
                // a sleep and a wake-up.
                spun = true;
                let seen = self.epoch.load(Ordering::Acquire);
                MutexGuard::unlocked(&mut st, || {
                    spin_while(|| self.epoch.load(Ordering::Acquire) == seen)
                });
                continue;
            }
            let until = next_warn.min(deadline);
            self.cv.wait_until(&mut st, until);
        }
    }

    /// Poisons the rendezvous: every waiter wakes and fails with `message`, and so does every
    /// later arrival. The first poisoning wins (later messages are ignored).
    pub fn poison(&self, message: &str) {
        let mut st = self.state.lock();
        self.poison_locked(&mut st, message);
    }

    fn poison_locked(&self, st: &mut State<K, V>, message: &str) {
        if st.poisoned.is_none() {
            st.poisoned = Some(Arc::from(message));
        }
        self.epoch.fetch_add(1, Ordering::Release);
        self.cv.notify_all();
    }

    /// The poisoning message, if poisoned.
    pub fn poisoned(&self) -> Option<Arc<str>> {
        self.state.lock().poisoned.clone()
    }

    /// The rounds in progress (some participant arrived, not all).
    pub fn pending(&self) -> Vec<PendingRound<K>> {
        let st = self.state.lock();
        Self::pending_locked(&st)
    }

    fn pending_locked(st: &State<K, V>) -> Vec<PendingRound<K>> {
        let now = Instant::now();
        st.rounds
            .iter()
            .filter(|(_, r)| r.result.is_none())
            .map(|(k, r)| {
                let (arrived, missing) = r.split_arrivals();
                PendingRound {
                    key: k.clone(),
                    arrived,
                    missing,
                    waiting_for: now.saturating_duration_since(r.first),
                }
            })
            .collect()
    }

    /// The rounds in progress in words, `None` if there are none.
    pub fn describe_pending(&self) -> Option<String> {
        let p = self.pending();
        if p.is_empty() {
            return None;
        }
        Some(format!(
            "{}: {}",
            self.name,
            p.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    }

    /// The other rounds in progress, as a suffix for a timeout message: what the missing
    /// ranks may be waiting on instead.
    fn others_locked(&self, st: &State<K, V>, key: &K) -> String {
        let others: Vec<String> = Self::pending_locked(st)
            .into_iter()
            .filter(|r| &r.key != key)
            .map(|r| r.to_string())
            .collect();
        if others.is_empty() {
            String::new()
        } else {
            format!("; meanwhile: {}", others.join("; "))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn short() -> Timeouts {
        Timeouts::new(Duration::from_millis(20), Duration::from_millis(150))
    }

    #[test]
    fn all_get_all_values() {
        let rv = Arc::new(Rendezvous::<u64, usize>::new("test", Timeouts::default()));
        let ranks = [3, 5, 7];
        let hs: Vec<_> = ranks
            .iter()
            .map(|&r| {
                let rv = rv.clone();
                std::thread::spawn(move || {
                    (0..50u64)
                        .map(|k| rv.arrive(k, &ranks, r, r * 100 + k as usize).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            for (k, v) in h.join().unwrap().into_iter().enumerate() {
                assert_eq!(*v, vec![300 + k, 500 + k, 700 + k]);
            }
        }
        assert!(rv.pending().is_empty());
        assert!(rv.state.lock().rounds.is_empty());
    }

    #[test]
    fn terminate_names_missing_and_poisons() {
        let rv = Arc::new(Rendezvous::<u64, ()>::new("clique x", short()));
        let ranks = [0, 1, 2];
        let start = Instant::now();
        let hs: Vec<_> = [0, 1]
            .into_iter()
            .map(|r| {
                let rv = rv.clone();
                std::thread::spawn(move || rv.arrive(9, &ranks, r, ()))
            })
            .collect();
        for h in hs {
            let e = h.join().unwrap().unwrap_err().to_string();
            assert!(e.contains("rank(s) 2 did not arrive"), "{e}");
            assert!(e.contains("`9`"), "{e}");
        }
        assert!(start.elapsed() >= Duration::from_millis(150));
        // A late arrival fails at once.
        let t = Instant::now();
        let e = rv.arrive(9, &ranks, 2, ()).unwrap_err().to_string();
        assert!(e.contains("did not arrive"), "{e}");
        assert!(t.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn mismatched_participants_fail_everyone() {
        let rv = Arc::new(Rendezvous::<u64, ()>::new("x", Timeouts::default()));
        let h = {
            let rv = rv.clone();
            std::thread::spawn(move || rv.arrive(1, &[0, 1], 0, ()))
        };
        std::thread::sleep(Duration::from_millis(20));
        let e = rv.arrive(1, &[0, 1, 2], 1, ()).unwrap_err().to_string();
        assert!(e.contains("opened for"), "{e}");
        let e0 = h.join().unwrap().unwrap_err().to_string();
        assert_eq!(e, e0);
    }

    #[test]
    fn post_many_then_wait() {
        // Each of 3 participants is in two pairwise rounds at once: posted first, then
        // waited, so no order of waiting deadlocks.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        struct Pair(usize, usize);
        impl fmt::Display for Pair {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}->{}", self.0, self.1)
            }
        }
        let rv = Arc::new(Rendezvous::<Pair, usize>::new("p2p", short()));
        let hs: Vec<_> = (0..3usize)
            .map(|r| {
                let rv = rv.clone();
                std::thread::spawn(move || {
                    let next = (r + 1) % 3;
                    let prev = (r + 2) % 3;
                    let a = rv.post(Pair(r, next), &[r, next], r, r).unwrap();
                    let b = rv.post(Pair(prev, r), &[prev, r], r, r).unwrap();
                    let x = rv.wait(a).unwrap();
                    let y = rv.wait(b).unwrap();
                    (x[1], y[0])
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), ((r + 1) % 3, (r + 2) % 3));
        }
    }

    #[test]
    fn poison_wakes_waiters() {
        let rv = Arc::new(Rendezvous::<u64, ()>::new("x", Timeouts::default()));
        let h = {
            let rv = rv.clone();
            std::thread::spawn(move || rv.arrive(0, &[0, 1], 0, ()))
        };
        while rv.pending().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let d = rv.describe_pending().unwrap();
        assert!(d.contains("for rank(s) 1 (arrived: 0)"), "{d}");
        rv.poison("aborted by test");
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("aborted by test"), "{e}");
    }
}
