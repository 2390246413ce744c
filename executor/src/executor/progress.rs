//! The progress record of an SPMD run ([`Progress`]): for every rank, the communication steps
//! (collectives, permutes, sends, receives) it issued, numbered in issue order (`#0`, `#1`, …
//! across executions, as a clique numbers its collectives when all go through one clique), each bracketed by two events on its stream, so that whoever formats a
//! hang can tell where every rank is *on the device*: waiting in a collective (its stream
//! reached the latest step any rank reached) or busy before it (its stream has not reached
//! that step). A rank that is late to a collective but alive is thus named as stuck, with
//! its position, apart from the ranks that wait for it.
//!
//! The record is frozen at the first failure ([`Progress::freeze`]), before the ranks that
//! fail because of it end their executions. Only the events before the steps count for the
//! positions: a step's event after it also fires when the step fails.

use crate::backend::{Device, Event, Stream};
use crate::error::Result;
use crate::ir::ThunkPath;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One communication step a rank issued.
struct Entry {
    seq: u64,
    at: String,
    /// Recorded on the step's stream just before the step: fired once the stream reached it.
    before: Arc<dyn Event>,
    /// Recorded just after the step: fired once the step completed.
    after: Arc<dyn Event>,
    /// When the issuing rank first saw `before` fired and `after` not ([`Progress::stalled`]).
    reached_at: Option<Instant>,
}

/// Where a rank's execution is, as the executor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No execution yet, or between executions.
    Idle,
    Running,
    Failed,
}

struct Rank {
    phase: Phase,
    next_seq: u64,
    /// The last step known completed (retired from `open`): its number and place.
    completed: Option<(u64, String)>,
    /// Issued steps not yet known completed, in issue order.
    open: VecDeque<Entry>,
    /// Events of retired steps, for reuse.
    free: Vec<Arc<dyn Event>>,
}

/// Every rank's communication progress in one SPMD run (shared by the ranks' executions).
pub struct Progress {
    ranks: Vec<Mutex<Rank>>,
    frozen: OnceLock<Vec<RankPosition>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("ranks", &self.ranks.len())
            .finish_non_exhaustive()
    }
}

impl Progress {
    /// A record for ranks `0..world`.
    pub fn new(world: usize) -> Self {
        Progress {
            ranks: (0..world)
                .map(|_| {
                    Mutex::new(Rank {
                        phase: Phase::Idle,
                        next_seq: 0,
                        completed: None,
                        open: VecDeque::new(),
                        free: vec![],
                    })
                })
                .collect(),
            frozen: OnceLock::new(),
        }
    }

    /// An execution of `rank` starts.
    pub(super) fn start(&self, rank: u32) {
        if let Some(r) = self.ranks.get(rank as usize) {
            r.lock().phase = Phase::Running;
        }
    }

    /// An execution of `rank` ended (`ok`: without error).
    pub(super) fn end(&self, rank: u32, ok: bool) {
        if let Some(r) = self.ranks.get(rank as usize) {
            r.lock().phase = if ok { Phase::Idle } else { Phase::Failed };
        }
    }

    /// `rank` issues a communication step at `path` (`label` says what it is) on `stream`:
    /// records the event before it. [`Progress::issued`] records the one after.
    pub(super) fn issue(
        &self,
        rank: u32,
        device: &dyn Device,
        stream: &dyn Stream,
        path: &ThunkPath,
        label: &str,
    ) -> Result<()> {
        let Some(r) = self.ranks.get(rank as usize) else {
            return Ok(());
        };
        let mut r = r.lock();
        // Retire the steps that completed, oldest first, keeping their events for reuse.
        while r
            .open
            .front()
            .is_some_and(|e| e.after.query().unwrap_or(false))
        {
            let Some(e) = r.open.pop_front() else { break };
            r.completed = Some((e.seq, e.at));
            r.free.push(e.before);
            r.free.push(e.after);
        }
        let before = match r.free.pop() {
            Some(e) => e,
            None => device.create_event()?,
        };
        let after = match r.free.pop() {
            Some(e) => e,
            None => match device.create_event() {
                Ok(e) => e,
                Err(err) => {
                    r.free.push(before);
                    return Err(err);
                }
            },
        };
        if let Err(err) = stream.record(before.as_ref()) {
            // Both events stay reusable.
            r.free.push(before);
            r.free.push(after);
            return Err(err);
        }
        let seq = r.next_seq;
        r.next_seq += 1;
        r.open.push_back(Entry {
            seq,
            at: format!("{path} {label}"),
            before,
            after,
            reached_at: None,
        });
        Ok(())
    }

    /// The step of `rank` that has been in progress for at least `limit` since its stream
    /// reached it (polled: the time counts from the first call that saw it reached), in words
    /// (`#41 entry[7] all_gather … for 5.0s`); `None` while every step completes in time. For
    /// libraries that wait for peers without a timeout (NCCL/RCCL): the executor calls it
    /// while it waits for its streams.
    pub(super) fn stalled(&self, rank: u32, limit: Duration) -> Option<String> {
        let mut r = self.ranks.get(rank as usize)?.lock();
        let now = Instant::now();
        for e in r.open.iter_mut() {
            if e.after.query().unwrap_or(false) {
                continue;
            }
            if !e.before.query().unwrap_or(false) {
                // Not reached yet: nothing after it is either.
                return None;
            }
            let since = *e.reached_at.get_or_insert(now);
            let waited = now.saturating_duration_since(since);
            return (waited >= limit).then(|| format!("#{} {} for {waited:.1?}", e.seq, e.at));
        }
        None
    }

    /// `rank` issued the step of its last [`Progress::issue`] on `stream`: records the event
    /// after it.
    pub(super) fn issued(&self, rank: u32, stream: &dyn Stream) -> Result<()> {
        let Some(r) = self.ranks.get(rank as usize) else {
            return Ok(());
        };
        let r = r.lock();
        match r.open.back() {
            Some(e) => stream.record(e.after.as_ref()),
            None => Ok(()),
        }
    }

    /// The last step `r`'s stream reached, and the first issued one it has not reached.
    fn position_of(r: &Rank) -> RankPosition {
        let mut reached = r.completed.clone();
        for e in &r.open {
            if e.before.query().unwrap_or(false) {
                reached = Some((e.seq, e.at.clone()));
            } else {
                return RankPosition {
                    phase: r.phase,
                    reached,
                    next: Some((e.seq, e.at.clone())),
                };
            }
        }
        RankPosition {
            phase: r.phase,
            reached,
            next: None,
        }
    }

    /// Where `rank` is now (`None` if it is not a rank of this record).
    pub fn position(&self, rank: usize) -> Option<RankPosition> {
        self.ranks.get(rank).map(|r| Self::position_of(&r.lock()))
    }

    /// Every rank's position now.
    pub fn positions(&self) -> Vec<RankPosition> {
        self.ranks
            .iter()
            .map(|r| Self::position_of(&r.lock()))
            .collect()
    }

    /// Every rank's position now, in words (see [`describe_positions`]).
    pub fn describe(&self) -> String {
        describe_positions(&self.positions().into_iter().map(Some).collect::<Vec<_>>())
    }

    /// Freezes the record at a failure: the first call keeps every rank's position now;
    /// every call returns those positions.
    pub fn freeze(&self) -> &[RankPosition] {
        self.frozen.get_or_init(|| self.positions())
    }

    /// The positions kept by [`Progress::freeze`] in words, if a failure froze the record.
    pub fn frozen(&self) -> Option<String> {
        self.frozen
            .get()
            .map(|p| describe_positions(&p.iter().cloned().map(Some).collect::<Vec<_>>()))
    }

    /// `rank`'s position kept by [`Progress::freeze`], if a failure froze the record.
    pub fn frozen_position(&self, rank: usize) -> Option<RankPosition> {
        self.frozen.get().and_then(|p| p.get(rank).cloned())
    }
}

/// One rank's place in its communication steps: whether an execution is running, the last
/// step its stream reached and the first issued one it has not reached, each as its number
/// and place (`entry[3] all_reduce f32 …`). Travels between processes as three lines
/// ([`RankPosition::encode`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPosition {
    phase: Phase,
    reached: Option<(u64, String)>,
    next: Option<(u64, String)>,
}

impl RankPosition {
    /// Three lines: the phase, the step reached, the next step (`-` for none).
    pub fn encode(&self) -> String {
        let step = |s: &Option<(u64, String)>| match s {
            Some((n, at)) => format!("{n} {}", at.replace('\n', " ")),
            None => "-".into(),
        };
        let phase = match self.phase {
            Phase::Idle => "idle",
            Phase::Running => "running",
            Phase::Failed => "failed",
        };
        format!("{phase}\n{}\n{}", step(&self.reached), step(&self.next))
    }

    /// The inverse of [`RankPosition::encode`]; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let phase = match lines.next()? {
            "idle" => Phase::Idle,
            "running" => Phase::Running,
            "failed" => Phase::Failed,
            _ => return None,
        };
        let step = |l: &str| -> Option<Option<(u64, String)>> {
            if l == "-" {
                return Some(None);
            }
            let (n, at) = l.split_once(' ')?;
            Some(Some((n.parse().ok()?, at.to_string())))
        };
        let reached = step(lines.next()?)?;
        let next = step(lines.next()?)?;
        Some(RankPosition {
            phase,
            reached,
            next,
        })
    }
}

/// Every rank's position in words, one `; `-separated clause per rank (by index). The ranks
/// whose streams reached the latest step of all wait in it (`rank 0 waits in #1 entry[3]
/// all_reduce …`); a running rank behind them is stuck (`rank 3 is stuck (alive, busy) after
/// #0 entry[1] all_reduce …, has not reached #1 entry[3] all_reduce …`); the others finished
/// or failed (`rank 1 finished its execution after #0 …`), are behind between executions
/// (`rank 1 is behind, between executions, after #0 …`), have not begun (`rank 2 has not
/// started an execution with a collective`), or told nothing (`None`: `rank 2:
/// no position known`).
pub fn describe_positions(positions: &[Option<RankPosition>]) -> String {
    describe_positions_gone(positions, &[])
}

/// [`describe_positions`], the ranks marked in `gone` (by index; missing: alive) being dead
/// rather than stuck or waiting: their process is gone (`rank 2 is dead (its process is gone),
/// last seen after #4 entry[3] all_reduce …`). Only a rank whose process lives is stuck.
pub fn describe_positions_gone(positions: &[Option<RankPosition>], gone: &[bool]) -> String {
    let frontier = positions
        .iter()
        .flatten()
        .filter_map(|p| p.reached.as_ref().map(|(s, _)| *s))
        .max();
    let mut out = String::new();
    for (i, pos) in positions.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        if gone.get(i).copied().unwrap_or(false) {
            let _ = write!(out, "rank {i} is dead (its process is gone)");
            if let Some((s, at)) = pos.as_ref().and_then(|p| p.reached.as_ref()) {
                let _ = write!(out, ", last seen after #{s} {at}");
            }
            continue;
        }
        let Some(RankPosition {
            phase,
            reached,
            next,
        }) = pos
        else {
            let _ = write!(out, "rank {i}: no position known");
            continue;
        };
        let _ = write!(out, "rank {i} ");
        let after = match reached {
            Some((s, at)) => format!("after #{s} {at}"),
            None => "before its first collective".into(),
        };
        let seq = reached.as_ref().map(|(s, _)| *s);
        match phase {
            Phase::Failed => {
                let _ = write!(out, "failed {after}");
            }
            Phase::Idle if reached.is_none() => {
                out.push_str("has not started an execution with a collective");
            }
            // Between executions, behind the others: they wait for it.
            Phase::Idle if frontier.is_some() && seq != frontier => {
                let _ = write!(out, "is behind, between executions, {after}");
            }
            Phase::Idle => {
                let _ = write!(out, "finished its execution {after}");
            }
            Phase::Running if seq.is_some() && seq == frontier => {
                if let Some((s, at)) = reached {
                    let _ = write!(out, "waits in #{s} {at}");
                }
            }
            Phase::Running if frontier.is_none() => {
                let _ = write!(out, "is running, {after}");
            }
            Phase::Running => {
                let _ = write!(out, "is stuck (alive, busy) {after}");
                match next {
                    Some((s, at)) => {
                        let _ = write!(out, ", has not reached #{s} {at}");
                    }
                    None => out.push_str(", has not issued its next collective"),
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn at(seq: u64, place: &str) -> Option<(u64, String)> {
        Some((seq, place.to_string()))
    }

    #[test]
    fn a_rank_behind_the_others_is_stuck_and_the_others_wait() {
        let waiting = RankPosition {
            phase: Phase::Running,
            reached: at(1, "entry[3] all_reduce"),
            next: None,
        };
        let stuck = RankPosition {
            phase: Phase::Running,
            reached: at(0, "entry[1] all_gather"),
            next: at(1, "entry[3] all_reduce"),
        };
        let done = RankPosition {
            phase: Phase::Idle,
            reached: None,
            next: None,
        };
        let text = describe_positions(&[
            Some(waiting.clone()),
            Some(stuck.clone()),
            Some(done.clone()),
            None,
        ]);
        assert_eq!(
            text,
            "rank 0 waits in #1 entry[3] all_reduce; rank 1 is stuck (alive, busy) after #0 \
             entry[1] all_gather, has not reached #1 entry[3] all_reduce; rank 2 has not \
             started an execution with a collective; rank 3: no position known"
        );
        for p in [waiting, stuck, done] {
            assert_eq!(RankPosition::decode(&p.encode()), Some(p));
        }
        assert_eq!(RankPosition::decode("running\nx y\n-"), None);
        assert_eq!(RankPosition::decode(""), None);
    }

    #[test]
    fn a_rank_whose_process_is_gone_is_dead_not_stuck() {
        let stuck = RankPosition {
            phase: Phase::Running,
            reached: at(0, "entry[1] all_gather"),
            next: at(1, "entry[3] all_reduce"),
        };
        let waiting = RankPosition {
            phase: Phase::Running,
            reached: at(1, "entry[3] all_reduce"),
            next: None,
        };
        let text =
            describe_positions_gone(&[Some(waiting), Some(stuck), None], &[false, true, true]);
        assert_eq!(
            text,
            "rank 0 waits in #1 entry[3] all_reduce; rank 1 is dead (its process is gone), last \
             seen after #0 entry[1] all_gather; rank 2 is dead (its process is gone)"
        );
    }

    #[test]
    fn a_fresh_record_has_every_rank_idle_and_nothing_frozen() {
        let p = Progress::new(2);
        assert_eq!(p.frozen(), None);
        assert_eq!(p.freeze().len(), 2);
        assert_eq!(
            p.frozen().unwrap(),
            "rank 0 has not started an execution with a collective; rank 1 has not started an \
             execution with a collective"
        );
        assert!(p.frozen_position(1).is_some());
        assert!(p.position(2).is_none());
    }
}
