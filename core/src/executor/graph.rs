//! The dependency graph of a thunk sequence.
//!
//! Edges come from buffer uses — read-after-write, write-after-read and write-after-write on
//! overlapping byte ranges of the same allocation (two reads never conflict) — and from
//! resource uses (e.g. collectives on one communicator keep program order). Construction is
//! O(n log n) in the number of uses: each allocation keeps a map of disjoint byte segments,
//! each remembering its last writer and the readers since; a use only visits the segments it
//! overlaps. Edges always point forward in program order, so program order is a topological
//! order.

use crate::ir::{Access, BufferUse};
use std::collections::{BTreeMap, HashMap};

/// One node's inputs to graph construction.
#[derive(Clone, Debug, Default)]
pub struct NodeUses {
    pub buffers: Vec<BufferUse>,
    /// Opaque resource ids; nodes sharing a resource keep program order.
    pub resources: Vec<u64>,
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
    /// Makes `at` a segment boundary if it falls inside a segment.
    fn split(&mut self, at: u64) {
        let Some((&start, seg)) = self.map.range(..at).next_back() else {
            return;
        };
        if seg.end > at {
            let mut right = seg.clone();
            let end = seg.end;
            right.end = end;
            if let Some(s) = self.map.get_mut(&start) {
                s.end = at;
            }
            self.map.insert(at, right);
        }
    }

    /// Records a use of `[start, end)` by `node`, pushing the nodes it depends on.
    fn use_range(
        &mut self,
        start: u64,
        end: u64,
        node: usize,
        access: Access,
        deps: &mut Vec<usize>,
    ) {
        if start >= end {
            return;
        }
        self.split(start);
        self.split(end);
        // Visit existing segments inside [start, end), noting gaps not yet covered.
        let keys: Vec<u64> = self.map.range(start..end).map(|(k, _)| *k).collect();
        let mut gaps = vec![];
        let mut cursor = start;
        for k in &keys {
            if *k > cursor {
                gaps.push((cursor, *k));
            }
            if let Some(seg) = self.map.get(k) {
                cursor = seg.end;
                // Every use (read or write) is ordered after the last writer.
                if let Some(w) = seg.writer {
                    deps.push(w);
                }
                if access.writes() {
                    deps.extend(seg.readers.iter().copied());
                }
            }
        }
        if cursor < end {
            gaps.push((cursor, end));
        }
        if access.writes() {
            // The whole range now has one writer and no readers: merge into one segment.
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
            for k in keys {
                if let Some(seg) = self.map.get_mut(&k) {
                    if seg.readers.last() != Some(&node) {
                        seg.readers.push(node);
                    }
                }
            }
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
    }
}

impl DependencyGraph {
    /// Builds the graph of `nodes` (in program order).
    pub fn build(nodes: &[NodeUses]) -> Self {
        let n = nodes.len();
        let mut allocs: HashMap<u32, Segments> = HashMap::new();
        let mut last_on_resource: HashMap<u64, usize> = HashMap::new();
        let mut preds: Vec<Vec<usize>> = vec![vec![]; n];
        let mut deps = vec![];
        for (i, node) in nodes.iter().enumerate() {
            deps.clear();
            // A node that both reads and writes a range (through two uses) must see each use:
            // process reads first so a later write in the same node does not hide them.
            let mut uses = node.buffers.clone();
            uses.sort_by_key(|u| u.access.writes());
            for u in &uses {
                let segs = allocs.entry(u.slice.allocation).or_default();
                let end = u.slice.offset.saturating_add(u.slice.size);
                segs.use_range(u.slice.offset, end, i, u.access, &mut deps);
            }
            for r in &node.resources {
                if let Some(prev) = last_on_resource.insert(*r, i) {
                    deps.push(prev);
                }
            }
            deps.retain(|&d| d != i);
            deps.sort_unstable();
            deps.dedup();
            preds[i] = deps.clone();
        }
        let mut g = DependencyGraph {
            preds,
            succs: vec![],
            priority: vec![],
        };
        g.reduce();
        g.finish();
        g
    }

    /// Removes edges implied by two-step paths: `u -> v` is dropped when another predecessor
    /// `w` of `v` already depends on `u`. This catches the common redundancies (chains and
    /// diamonds) in time proportional to the sum of squared in-degrees; the scheduler's
    /// per-stream clocks drop any remaining redundant waits.
    fn reduce(&mut self) {
        for v in 0..self.preds.len() {
            if self.preds[v].len() < 2 {
                continue;
            }
            let pv = self.preds[v].clone();
            let keep: Vec<usize> = pv
                .iter()
                .copied()
                .filter(|&u| {
                    !pv.iter()
                        .any(|&w| w != u && w > u && self.preds[w].binary_search(&u).is_ok())
                })
                .collect();
            self.preds[v] = keep;
        }
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
            .all(|(i, p)| p.contains(&(i - 1)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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

    proptest! {
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
}
