//! The dependency graph of a thunk sequence.
//!
//! Edges come from buffer uses — read-after-write, write-after-read and write-after-write on
//! overlapping byte ranges of the same allocation (two reads never conflict) — and from
//! resource uses (e.g. collectives on one communicator keep program order). Each allocation
//! keeps a map of disjoint byte segments, each remembering its last writer and the readers
//! since; a use only visits the segments it overlaps. Edges always point forward in program
//! order, so program order is a topological order.
//!
//! Construction and reduction are bounded ([`GraphLimits`]), so that a small program cannot
//! stall the loader: an allocation whose segments cost more than its budget (many disjoint
//! writes, then many wide reads) is tracked as one range instead (its uses conflict whenever
//! one writes: more ordering, never less), and the transitive reduction stops reducing once
//! its budget is spent (the remaining nodes keep edges that are implied, which the
//! scheduler's per-stream clocks drop). Both are linear in the number of uses and edges, times
//! a logarithm for the segment maps.

use crate::ir::{Access, BufferUse};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One node's inputs to graph construction.
#[derive(Clone, Debug, Default)]
pub struct NodeUses {
    pub buffers: Vec<BufferUse>,
    /// Opaque resource ids; nodes sharing a resource keep program order.
    pub resources: Vec<u64>,
}

/// The work graph construction may do before it coarsens (see the module documentation).
/// Work counts segments visited, split or created and reader entries collected or copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphLimits {
    /// Work allowed on one allocation's segments: `alloc_base + alloc_per_use × its uses`;
    /// past it, the allocation is tracked as one range.
    pub alloc_base: u64,
    pub alloc_per_use: u64,
    /// Work allowed for the transitive reduction: `reduce_base + reduce_per_edge × edges`;
    /// past it, the remaining nodes keep their edges as built.
    pub reduce_base: u64,
    pub reduce_per_edge: u64,
}

impl Default for GraphLimits {
    fn default() -> Self {
        GraphLimits {
            alloc_base: 1 << 14,
            alloc_per_use: 64,
            reduce_base: 1 << 22,
            reduce_per_edge: 16,
        }
    }
}

/// A dependency graph over nodes `0..n` (program order).
#[derive(Clone, Debug, Default)]
pub struct DependencyGraph {
    /// `preds[i]`: nodes `i` must wait for, sorted ascending, without duplicates.
    pub preds: Vec<Vec<usize>>,
    /// `succs[i]`: nodes waiting for `i`, sorted ascending.
    pub succs: Vec<Vec<usize>>,
    /// Number of nodes reachable from each node (its descendants): a scheduling priority.
    pub priority: Vec<usize>,
    /// Allocations tracked as one range because their segments went over budget.
    pub coarse: Vec<u32>,
    /// Nodes left unreduced because the reduction's budget was spent.
    pub unreduced: usize,
}

#[derive(Clone, Debug, Default)]
struct Segment {
    end: u64,
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// Disjoint segments of one allocation, keyed by start offset.
#[derive(Default)]
struct Segments {
    map: BTreeMap<u64, Segment>,
}

impl Segments {
    /// Makes `at` a segment boundary if it falls inside a segment; returns the work done.
    fn split(&mut self, at: u64) -> u64 {
        let Some((&start, seg)) = self.map.range(..at).next_back() else {
            return 1;
        };
        if seg.end <= at {
            return 1;
        }
        let right = seg.clone();
        let work = 1 + right.readers.len() as u64;
        if let Some(s) = self.map.get_mut(&start) {
            s.end = at;
        }
        self.map.insert(at, right);
        work
    }

    /// Records a use of `[start, end)` by `node`, pushing the nodes it depends on; returns
    /// the work done.
    fn use_range(
        &mut self,
        start: u64,
        end: u64,
        node: usize,
        access: Access,
        deps: &mut Vec<usize>,
    ) -> u64 {
        if start >= end {
            return 1;
        }
        let mut work = self.split(start) + self.split(end);
        // Visit the segments inside [start, end) in one pass (a read also joins their
        // readers), noting the gaps not yet covered.
        let writes = access.writes();
        let mut gaps = vec![];
        let mut cursor = start;
        let mut visited = 0u64;
        for (&k, seg) in self.map.range_mut(start..end) {
            visited += 1;
            if k > cursor {
                gaps.push((cursor, k));
            }
            cursor = seg.end;
            // Every use (read or write) is ordered after the last writer.
            if let Some(w) = seg.writer {
                deps.push(w);
            }
            if writes {
                deps.extend(seg.readers.iter().copied());
                work += seg.readers.len() as u64;
            } else if seg.readers.last() != Some(&node) {
                seg.readers.push(node);
            }
        }
        if cursor < end {
            gaps.push((cursor, end));
        }
        work += visited + gaps.len() as u64;
        if writes {
            // The whole range now has one writer and no readers: merge into one segment.
            let keys: Vec<u64> = self.map.range(start..end).map(|(k, _)| *k).collect();
            for k in keys {
                self.map.remove(&k);
            }
            self.map.insert(
                start,
                Segment {
                    end,
                    writer: Some(node),
                    readers: vec![],
                },
            );
        } else {
            for (s, e) in gaps {
                self.map.insert(
                    s,
                    Segment {
                        end: e,
                        writer: None,
                        readers: vec![node],
                    },
                );
            }
        }
        work
    }
}

/// One allocation's uses so far.
struct Tracked {
    segments: Segments,
    /// Work left before the allocation goes over budget; `None` when tracked as one range.
    left: Option<u64>,
}

impl DependencyGraph {
    /// Builds the graph of `nodes` (in program order) with the default [`GraphLimits`].
    pub fn build(nodes: &[NodeUses]) -> Self {
        Self::build_with(nodes, &GraphLimits::default())
    }

    /// Builds the graph of `nodes` (in program order) within `limits`.
    pub fn build_with(nodes: &[NodeUses], limits: &GraphLimits) -> Self {
        let mut uses_of: HashMap<u32, u64> = HashMap::new();
        for u in nodes.iter().flat_map(|n| &n.buffers) {
            *uses_of.entry(u.slice.allocation).or_default() += 1;
        }
        // An allocation goes over budget only through its own uses, so a second pass with
        // the first pass's over-budget allocations as one range each goes over no more.
        let mut coarse = BTreeSet::new();
        let preds = loop {
            let (preds, over) = Self::edges(nodes, limits, &uses_of, &coarse);
            if over.is_empty() {
                break preds;
            }
            tracing::debug!(
                allocations = ?over,
                "dependency graph: allocations over budget, tracked as one range"
            );
            coarse.extend(over);
        };
        let edges = preds.iter().map(|p| p.len() as u64).sum::<u64>();
        let mut g = DependencyGraph {
            preds,
            succs: vec![],
            priority: vec![],
            coarse: coarse.into_iter().collect(),
            unreduced: 0,
        };
        let budget = limits
            .reduce_base
            .saturating_add(limits.reduce_per_edge.saturating_mul(edges));
        g.unreduced = g.reduce(budget);
        g.finish();
        g
    }

    /// Every node's predecessors, with the allocations in `coarse` tracked as one range;
    /// also the allocations that went over budget in this pass (whose edges are then
    /// incomplete: the caller builds again).
    fn edges(
        nodes: &[NodeUses],
        limits: &GraphLimits,
        uses_of: &HashMap<u32, u64>,
        coarse: &BTreeSet<u32>,
    ) -> (Vec<Vec<usize>>, BTreeSet<u32>) {
        let mut allocs: HashMap<u32, Tracked> = HashMap::new();
        let mut over = BTreeSet::new();
        let mut last_on_resource: HashMap<u64, usize> = HashMap::new();
        let mut preds: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
        let mut deps = vec![];
        let mut uses = vec![];
        for (i, node) in nodes.iter().enumerate() {
            deps.clear();
            // A node that both reads and writes a range (through two uses) must see each use:
            // process reads first so a later write in the same node does not hide them.
            uses.clear();
            uses.extend_from_slice(&node.buffers);
            uses.sort_by_key(|u: &BufferUse| u.access.writes());
            for u in &uses {
                let a = u.slice.allocation;
                if over.contains(&a) {
                    continue;
                }
                let t = allocs.entry(a).or_insert_with(|| Tracked {
                    segments: Segments::default(),
                    left: (!coarse.contains(&a)).then(|| {
                        let n = uses_of.get(&a).copied().unwrap_or(0);
                        limits
                            .alloc_base
                            .saturating_add(limits.alloc_per_use.saturating_mul(n))
                    }),
                });
                let (start, end) = match t.left {
                    Some(_) => (u.slice.offset, u.slice.offset.saturating_add(u.slice.size)),
                    // One range: every use overlaps every other.
                    None => (0, 1),
                };
                let work = t.segments.use_range(start, end, i, u.access, &mut deps);
                if let Some(left) = &mut t.left {
                    match left.checked_sub(work) {
                        Some(l) => *left = l,
                        None => {
                            over.insert(a);
                            allocs.remove(&a);
                        }
                    }
                }
            }
            for r in &node.resources {
                if let Some(prev) = last_on_resource.insert(*r, i) {
                    deps.push(prev);
                }
            }
            if !over.is_empty() {
                // This pass's edges will be built again: only its budgets still matter.
                deps.clear();
                continue;
            }
            deps.retain(|&d| d != i);
            deps.sort_unstable();
            deps.dedup();
            preds.push(deps.clone());
        }
        (preds, over)
    }

    /// Removes edges implied by two-step paths: `u -> v` is dropped when another predecessor
    /// `w` of `v` already depends on `u`. This catches the common redundancies (chains and
    /// diamonds); the scheduler's per-stream clocks drop any remaining redundant waits. Each
    /// node costs the sum of its predecessors' in-degrees; once `budget` is spent, the
    /// nodes that would cost more keep their edges. Returns how many did.
    fn reduce(&mut self, budget: u64) -> usize {
        let n = self.preds.len();
        // `mark[u] == v`: `u` is a predecessor of a predecessor of `v`.
        let mut mark = vec![usize::MAX; n];
        let mut spent = 0u64;
        let mut skipped = 0;
        for v in 0..n {
            if self.preds[v].len() < 2 {
                continue;
            }
            let cost: u64 = self.preds[v]
                .iter()
                .map(|&w| self.preds[w].len() as u64)
                .sum();
            if spent.saturating_add(cost) > budget {
                skipped += 1;
                continue;
            }
            spent += cost;
            for &w in &self.preds[v] {
                for &u in &self.preds[w] {
                    mark[u] = v;
                }
            }
            self.preds[v].retain(|&u| mark[u] != v);
        }
        skipped
    }

    fn finish(&mut self) {
        let n = self.preds.len();
        let mut succs = vec![vec![]; n];
        for (v, ps) in self.preds.iter().enumerate() {
            for &u in ps {
                succs[u].push(v);
            }
        }
        // Descendant counts, approximated from the reduced graph by summing over successors
        // with a cap (exact counts need reachability sets).
        let mut priority = vec![0usize; n];
        for u in (0..n).rev() {
            let mut p = 0usize;
            for &v in &succs[u] {
                p = p.saturating_add(1 + priority[v]);
            }
            priority[u] = p.min(n);
        }
        self.succs = succs;
        self.priority = priority;
    }

    pub fn len(&self) -> usize {
        self.preds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.preds.is_empty()
    }

    /// Number of edges.
    pub fn edge_count(&self) -> usize {
        self.preds.iter().map(Vec::len).sum()
    }

    /// True when every node depends on the one before it (a chain: nothing to overlap).
    pub fn is_chain(&self) -> bool {
        self.preds
            .iter()
            .enumerate()
            .skip(1)
            .all(|(i, p)| p.binary_search(&(i - 1)).is_ok())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::ir::Slice;
    use proptest::prelude::*;

    fn conflict(a: &NodeUses, b: &NodeUses) -> bool {
        a.buffers.iter().any(|x| {
            b.buffers
                .iter()
                .any(|y| x.slice.overlaps(&y.slice) && (x.access.writes() || y.access.writes()))
        }) || a.resources.iter().any(|r| b.resources.contains(r))
    }

    fn reachable(g: &DependencyGraph, from: usize, to: usize) -> bool {
        // Is `from` an ancestor of `to`?
        let mut stack = vec![to];
        let mut seen = vec![false; g.len()];
        while let Some(v) = stack.pop() {
            for &p in &g.preds[v] {
                if p == from {
                    return true;
                }
                if p > from && !seen[p] {
                    seen[p] = true;
                    stack.push(p);
                }
            }
        }
        false
    }

    fn arb_nodes() -> impl Strategy<Value = Vec<NodeUses>> {
        let access = prop_oneof![
            Just(Access::Read),
            Just(Access::Write),
            Just(Access::ReadWrite)
        ];
        let use_ =
            (0u32..3, 0u64..64, 0u64..24, access).prop_map(|(a, off, size, access)| BufferUse {
                slice: Slice::new(a, off, size),
                access,
            });
        let node = (
            proptest::collection::vec(use_, 0..4),
            proptest::collection::vec(0u64..3, 0..2),
        )
            .prop_map(|(buffers, resources)| NodeUses { buffers, resources });
        proptest::collection::vec(node, 0..40)
    }

    /// `conflict`, with the allocations in `coarse` as one range each.
    fn coarse_conflict(a: &NodeUses, b: &NodeUses, coarse: &[u32]) -> bool {
        conflict(a, b)
            || a.buffers.iter().any(|x| {
                b.buffers.iter().any(|y| {
                    x.slice.allocation == y.slice.allocation
                        && coarse.contains(&x.slice.allocation)
                        && (x.access.writes() || y.access.writes())
                })
            })
    }

    fn arb_limits() -> impl Strategy<Value = GraphLimits> {
        (0u64..40, 0u64..3, 0u64..40, 0u64..2).prop_map(|(ab, apu, rb, rpe)| GraphLimits {
            alloc_base: ab,
            alloc_per_use: apu,
            reduce_base: rb,
            reduce_per_edge: rpe,
        })
    }

    proptest! {
        /// Within tight limits (allocations tracked as one range, reductions skipped) every
        /// conflicting pair is still ordered, and every edge joins a pair that conflicts once
        /// the coarse allocations are one range.
        #[test]
        fn tight_limits_keep_every_hazard(nodes in arb_nodes(), limits in arb_limits()) {
            let g = DependencyGraph::build_with(&nodes, &limits);
            for j in 0..nodes.len() {
                for i in 0..j {
                    if conflict(&nodes[i], &nodes[j]) {
                        prop_assert!(reachable(&g, i, j), "{i} -> {j} missing");
                    }
                }
                for &p in &g.preds[j] {
                    prop_assert!(p < j);
                    prop_assert!(
                        coarse_conflict(&nodes[p], &nodes[j], &g.coarse),
                        "spurious edge {p} -> {j}"
                    );
                }
            }
        }

        /// Every conflicting pair (found by the O(n²) scan) is ordered by a path, and every
        /// edge joins a conflicting pair.
        #[test]
        fn matches_pairwise_scan(nodes in arb_nodes()) {
            let g = DependencyGraph::build(&nodes);
            for j in 0..nodes.len() {
                for i in 0..j {
                    if conflict(&nodes[i], &nodes[j]) {
                        prop_assert!(reachable(&g, i, j), "{i} -> {j} missing");
                    }
                }
                for &p in &g.preds[j] {
                    prop_assert!(p < j);
                    prop_assert!(conflict(&nodes[p], &nodes[j]), "spurious edge {p} -> {j}");
                }
            }
        }
    }

    #[test]
    fn read_read_is_free() {
        let r = |a| NodeUses {
            buffers: vec![BufferUse {
                slice: Slice::new(a, 0, 16),
                access: Access::Read,
            }],
            resources: vec![],
        };
        let g = DependencyGraph::build(&[r(0), r(0), r(0)]);
        assert_eq!(g.edge_count(), 0);
    }

    #[test]
    fn chain_is_reduced() {
        let rw = NodeUses {
            buffers: vec![BufferUse {
                slice: Slice::new(0, 0, 16),
                access: Access::ReadWrite,
            }],
            resources: vec![],
        };
        let g = DependencyGraph::build(&vec![rw; 100]);
        assert_eq!(g.edge_count(), 99);
        assert!(g.is_chain());
        assert_eq!(g.priority[0], 99);
    }

    /// `n` writes of 4 bytes each to distinct offsets of allocation 0, then `n` nodes that
    /// read all of it and write all of allocation 1 (the executor's memsets then copies).
    fn memsets_then_copies(n: u64) -> Vec<NodeUses> {
        let one = |a, off, size, access| BufferUse {
            slice: Slice::new(a, off, size),
            access,
        };
        let memsets = (0..n).map(|i| NodeUses {
            buffers: vec![one(0, 4 * i, 4, Access::Write)],
            resources: vec![],
        });
        let copies = (0..n).map(|_| NodeUses {
            buffers: vec![
                one(0, 0, 4 * n, Access::Read),
                one(1, 0, 4 * n, Access::Write),
            ],
            resources: vec![],
        });
        memsets.chain(copies).collect()
    }

    #[test]
    fn wide_reads_of_many_writes_stay_linear() {
        // Naively 10^8 segment visits and edges, and a cubic reduction: minutes. Bounded, a
        // fraction of a second (seconds in a debug build); generous bounds for a busy machine.
        let n = 10_000u64;
        let nodes = memsets_then_copies(n);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let g = DependencyGraph::build(&nodes);
            let _ = tx.send((g, start.elapsed()));
        });
        let (g, took) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the graph of 10,000 memsets and 10,000 copies takes over a minute");
        assert!(took.as_secs() < 20, "{took:?}");
        let n = n as usize;
        assert!(g.edge_count() <= 3 * 2 * n, "{} edges", g.edge_count());
        assert_eq!(g.coarse, vec![0]);
        // Every hazard is ordered: each memset before the first copy, each copy before the
        // next (which orders every memset before every copy).
        let first = n;
        let mut before_first = vec![false; 2 * n];
        let mut stack = vec![first];
        while let Some(v) = stack.pop() {
            for &p in &g.preds[v] {
                if !before_first[p] {
                    before_first[p] = true;
                    stack.push(p);
                }
            }
        }
        assert!(before_first[..n].iter().all(|&b| b));
        for c in n..2 * n - 1 {
            assert!(reachable(&g, c, c + 1), "copy {c} -> {}", c + 1);
        }
    }

    #[test]
    fn a_few_wide_reads_stay_exact() {
        // 64 writes of slices, then 8 independent full reads (each writing its own output):
        // well within budget, so the reads depend on the writes and not on each other.
        let mut nodes: Vec<NodeUses> = (0..64)
            .map(|i| NodeUses {
                buffers: vec![BufferUse {
                    slice: Slice::new(0, 16 * i, 16),
                    access: Access::Write,
                }],
                resources: vec![],
            })
            .collect();
        for r in 0..8 {
            nodes.push(NodeUses {
                buffers: vec![
                    BufferUse {
                        slice: Slice::new(0, 0, 16 * 64),
                        access: Access::Read,
                    },
                    BufferUse {
                        slice: Slice::new(1 + r, 0, 16),
                        access: Access::Write,
                    },
                ],
                resources: vec![],
            });
        }
        let g = DependencyGraph::build(&nodes);
        assert!(g.coarse.is_empty());
        for r in 64..72 {
            assert_eq!(g.preds[r], (0..64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn kernel_like_programs_stay_exact() {
        // Core's graph_build bench shape at its 100,000-node density per allocation (about
        // 4,700 uses of each 1 MiB allocation, random slices of 256 B .. 64 KiB): well within
        // budget, so nothing is coarsened.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut slice = |access| {
            let alloc = rng.random_range(0..8u32);
            let size = rng.random_range(1..=256u64) * 256;
            let offset = rng.random_range(0..=(1 << 20) - size) / 256 * 256;
            BufferUse {
                slice: Slice::new(alloc, offset, size),
                access,
            }
        };
        let nodes: Vec<NodeUses> = (0..12_500)
            .map(|_| NodeUses {
                buffers: vec![
                    slice(Access::Read),
                    slice(Access::Read),
                    slice(Access::Write),
                ],
                resources: vec![],
            })
            .collect();
        let g = DependencyGraph::build(&nodes);
        assert!(g.coarse.is_empty(), "{:?}", g.coarse);
        assert_eq!(g.unreduced, 0);
    }
}
