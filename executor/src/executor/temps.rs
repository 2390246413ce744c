//! Temp memory planning: at load, temps whose live ranges cannot overlap share memory, as a
//! compiler's buffer assignment does.
//!
//! Two temps may share bytes only when every use of one is ordered before every use of the
//! other in the schedule that runs them: program order on one stream, or the stream order and
//! cross-stream event waits of a concurrent schedule (the scheduler's per-node vector clocks
//! say exactly which earlier nodes a node is ordered after). Two temps used by one node, or by
//! nodes that may run concurrently, interfere. Each temp then gets an offset in one arena per
//! memory space: first fit among the placed temps it interferes with, larger temps first,
//! each offset a multiple of its temp's alignment (the arena is aligned to the largest).
//!
//! The work is bounded: past [`PAIR_BUDGET`] interference checks the remaining temps are
//! placed after everything already placed (never sharing, always safe). With planning off
//! ([`ExecutorConfig::plan_temps`](super::ExecutorConfig::plan_temps)), every temp gets an
//! arena of its own, which is the allocation one buffer per temp gives.
//!
//! A temp's contents at the start of an execution are undefined either way (a pooled state
//! keeps the previous execution's values); with sharing they may be another temp's.

use super::arrange::{Arrangement, arrange, node_uses};
use super::config::ExecutorConfig;
use super::graph::NodeUses;
use super::plan::for_each_step;
use crate::error::{Error, Result};
use crate::ir::{AllocationKind, Executable, MemorySpace, ThunkPath};

/// Interference checks the planner may make before it stops sharing.
pub const PAIR_BUDGET: u64 = 1 << 24;

/// One block of memory the temps of one memory space are placed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TempArena {
    pub memory_space: MemorySpace,
    pub size: u64,
    /// The largest alignment of its temps.
    pub alignment: u64,
}

/// Where one temp lives: `offset` bytes into arena `arena`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TempPlacement {
    pub allocation: u32,
    pub arena: usize,
    pub offset: u64,
}

/// The temp memory plan of a loaded program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TempPlan {
    /// Whether temps share memory (false: one arena per temp, because planning is off or
    /// would save nothing).
    pub shared: bool,
    pub arenas: Vec<TempArena>,
    /// One per temp, in allocation order.
    pub placements: Vec<TempPlacement>,
    /// The bytes one buffer per temp would take (the sum of their sizes).
    pub sum_bytes: u64,
    /// The bytes the arenas take (the peak temp memory of an execution).
    pub planned_bytes: u64,
    /// Temps placed without sharing because the planner's budget was spent.
    pub unplanned: usize,
}

impl TempPlan {
    /// One line: `12 temps: 4.2 MB planned of 9.8 MB (57% saved) in 1 arena`.
    pub fn summary(&self) -> String {
        let saved = if self.sum_bytes == 0 {
            0.0
        } else {
            100.0 * (self.sum_bytes - self.planned_bytes.min(self.sum_bytes)) as f64
                / self.sum_bytes as f64
        };
        let mut s = format!(
            "{} temps: {} bytes planned of {} bytes ({saved:.0}% saved) in {} arena{}",
            self.placements.len(),
            self.planned_bytes,
            self.sum_bytes,
            self.arenas.len(),
            if self.arenas.len() == 1 { "" } else { "s" }
        );
        if !self.shared {
            s.push_str(", one buffer per temp");
        }
        if self.unplanned > 0 {
            s.push_str(&format!(
                ", {} placed unshared (budget spent)",
                self.unplanned
            ));
        }
        s
    }
}

/// The temp plan `exe` gets when loaded with `config` (what `xthunk inspect` reports),
/// without a device: the same flattening, stream assignment and planning as at load.
pub fn plan_temps(exe: &Executable, config: &ExecutorConfig) -> Result<TempPlan> {
    crate::verify(exe)?;
    let mut uses = vec![];
    let mut classes = vec![];
    for (i, t) in exe.entry.iter().enumerate() {
        for_each_step(t, &ThunkPath::entry(i), None, &mut |t, _, class| {
            uses.push(node_uses(t));
            classes.push(class);
            Ok(())
        })?;
    }
    super::alias::add_resources(exe, &mut uses);
    let arranged = arrange(&uses, &classes, config);
    plan_arranged(exe, &uses, &arranged, config)
}

/// Plans the temps of `exe`, whose nodes have `uses`, in the schedule `arranged`.
pub(super) fn plan_arranged(
    exe: &Executable,
    uses: &[NodeUses],
    arranged: &Arrangement,
    config: &ExecutorConfig,
) -> Result<TempPlan> {
    let node_allocs: Vec<Vec<u32>> = uses
        .iter()
        .map(|u| {
            let mut a: Vec<u32> = u.buffers.iter().map(|b| b.slice.allocation).collect();
            a.sort_unstable();
            a.dedup();
            a
        })
        .collect();
    let order = Ordering {
        stream_of: &arranged.stream_of,
        clocks: &arranged.clocks,
        streams: arranged.streams,
    };
    plan(exe, &node_allocs, &order, config.plan_temps)
}

/// The order the schedule imposes, as [`plan`] reads it.
pub(super) struct Ordering<'a> {
    /// The stream of each node.
    pub(super) stream_of: &'a [usize],
    /// `clocks[v][t]`: the last node of stream `t` that node `v` is ordered after (on `v`'s
    /// own stream: `v` itself).
    pub(super) clocks: &'a [Vec<i64>],
    pub(super) streams: usize,
}

/// What one temp's uses say about its live range.
struct Live {
    allocation: u32,
    size: u64,
    alignment: u64,
    space: MemorySpace,
    first: usize,
    /// Per stream: the last node using it (-1: none).
    last: Vec<i64>,
    /// Per stream: the last node every use is ordered after (`i64::MAX`: no uses).
    meet: Vec<i64>,
    used: bool,
}

impl Live {
    /// Every use of `self` is ordered before every use of `other`.
    fn before(&self, other: &Live) -> bool {
        self.last.iter().zip(&other.meet).all(|(l, m)| l <= m)
    }

    fn interferes(&self, other: &Live) -> bool {
        self.used && other.used && !self.before(other) && !other.before(self)
    }
}

/// Plans the temps of `exe`, whose node `v` uses the allocations `node_allocs[v]`, in the
/// schedule `order`.
pub(super) fn plan(
    exe: &Executable,
    node_allocs: &[Vec<u32>],
    order: &Ordering<'_>,
    share: bool,
) -> Result<TempPlan> {
    let mut lives: Vec<Live> = vec![];
    let mut slot = vec![usize::MAX; exe.allocations.len()];
    for a in &exe.allocations {
        if a.kind == AllocationKind::Temp {
            slot[a.index as usize] = lives.len();
            lives.push(Live {
                allocation: a.index,
                size: a.size,
                alignment: a.alignment.max(1),
                space: a.memory_space,
                first: usize::MAX,
                last: vec![-1; order.streams],
                meet: vec![i64::MAX; order.streams],
                used: false,
            });
        }
    }
    let sum_bytes = lives
        .iter()
        .try_fold(0u64, |s, l| s.checked_add(l.size))
        .ok_or_else(too_large)?;
    if !share {
        return Ok(unshared(lives, sum_bytes));
    }
    for (v, allocs) in node_allocs.iter().enumerate() {
        let s = order.stream_of.get(v).copied().unwrap_or(0);
        let clock = order.clocks.get(v);
        for &a in allocs {
            let Some(l) = slot.get(a as usize).and_then(|&i| lives.get_mut(i)) else {
                continue;
            };
            l.used = true;
            l.first = l.first.min(v);
            if let Some(x) = l.last.get_mut(s) {
                *x = (*x).max(v as i64);
            }
            for (t, m) in l.meet.iter_mut().enumerate() {
                // Ordered strictly before `v`: on its own stream, the nodes before it.
                let seen = if t == s {
                    v as i64 - 1
                } else {
                    clock.and_then(|c| c.get(t)).copied().unwrap_or(-1)
                };
                *m = (*m).min(seen);
            }
        }
    }
    // Larger temps first (they fragment the arena least), then by first use.
    let mut by_size: Vec<usize> = (0..lives.len()).collect();
    by_size.sort_by_key(|&i| (std::cmp::Reverse(lives[i].size), lives[i].first, i));
    let mut spaces: Vec<MemorySpace> = vec![];
    let mut arena_of = vec![0usize; lives.len()];
    let mut offset = vec![0u64; lives.len()];
    let mut placed: Vec<Vec<usize>> = vec![];
    let mut ends: Vec<u64> = vec![];
    let mut budget = PAIR_BUDGET;
    let mut unplanned = 0;
    for &i in &by_size {
        let l = &lives[i];
        let arena = match spaces.iter().position(|s| *s == l.space) {
            Some(p) => p,
            None => {
                spaces.push(l.space);
                placed.push(vec![]);
                ends.push(0);
                spaces.len() - 1
            }
        };
        let others = &placed[arena];
        let cost = others.len() as u64;
        let at = if cost <= budget {
            budget -= cost;
            let mut busy: Vec<(u64, u64)> = others
                .iter()
                .filter(|&&j| lives[j].interferes(l))
                .map(|&j| (offset[j], offset[j].saturating_add(lives[j].size)))
                .collect();
            busy.sort_unstable();
            first_fit(&busy, l.size, l.alignment).ok_or_else(too_large)?
        } else {
            unplanned += 1;
            align_up(ends[arena], l.alignment).ok_or_else(too_large)?
        };
        let end = at.checked_add(l.size).ok_or_else(too_large)?;
        ends[arena] = ends[arena].max(end);
        arena_of[i] = arena;
        offset[i] = at;
        placed[arena].push(i);
    }
    let arenas: Vec<TempArena> = spaces
        .iter()
        .zip(&ends)
        .enumerate()
        .map(|(k, (&memory_space, &size))| TempArena {
            memory_space,
            size,
            alignment: (0..lives.len())
                .filter(|&i| arena_of[i] == k)
                .map(|i| lives[i].alignment)
                .max()
                .unwrap_or(1),
        })
        .collect();
    let planned_bytes = ends
        .iter()
        .try_fold(0u64, |s, e| s.checked_add(*e))
        .ok_or_else(too_large)?;
    if planned_bytes >= sum_bytes {
        // Nothing shared (alignment padding may even cost more): one buffer per temp.
        return Ok(unshared(lives, sum_bytes));
    }
    Ok(TempPlan {
        shared: true,
        arenas,
        placements: lives
            .iter()
            .enumerate()
            .map(|(i, l)| TempPlacement {
                allocation: l.allocation,
                arena: arena_of[i],
                offset: offset[i],
            })
            .collect(),
        sum_bytes,
        planned_bytes,
        unplanned,
    })
}

/// One arena per temp: the memory one buffer per temp takes.
fn unshared(lives: Vec<Live>, sum_bytes: u64) -> TempPlan {
    TempPlan {
        shared: false,
        arenas: lives
            .iter()
            .map(|l| TempArena {
                memory_space: l.space,
                size: l.size,
                alignment: l.alignment,
            })
            .collect(),
        placements: lives
            .iter()
            .enumerate()
            .map(|(i, l)| TempPlacement {
                allocation: l.allocation,
                arena: i,
                offset: 0,
            })
            .collect(),
        sum_bytes,
        planned_bytes: sum_bytes,
        unplanned: 0,
    }
}

/// The lowest offset, a multiple of `align`, where `size` bytes fit between the `busy`
/// ranges (sorted by start; they may overlap each other).
fn first_fit(busy: &[(u64, u64)], size: u64, align: u64) -> Option<u64> {
    let mut at = 0u64;
    for &(start, end) in busy {
        if at.checked_add(size)? <= start {
            return Some(at);
        }
        if end > at {
            at = align_up(end, align)?;
        }
    }
    Some(at)
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    let r = x % align;
    if r == 0 {
        Some(x)
    } else {
        x.checked_add(align - r)
    }
}

fn too_large() -> Error {
    Error::InvalidArgument("the program's temps together exceed the address space".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_aligned_gaps() {
        assert_eq!(first_fit(&[], 10, 8), Some(0));
        assert_eq!(first_fit(&[(0, 10)], 4, 8), Some(16));
        assert_eq!(first_fit(&[(8, 16)], 8, 8), Some(0));
        assert_eq!(first_fit(&[(4, 16)], 8, 8), Some(16));
        assert_eq!(first_fit(&[(0, 8), (4, 20), (32, 40)], 8, 4), Some(20));
        assert_eq!(first_fit(&[(0, u64::MAX)], 8, 4), None);
    }
}
