//! One execution's per-node issue starts, packed ([`Marks`]): four bytes a node (the clock
//! ticks since the previous mark; nodes are numbered on from the previous one), with the rare
//! exceptions (a node out of sequence, a gap of 2^32 ticks or more) in side lists. A kept
//! trace's memory is what it costs to record (every new page is a fault), so the marks are
//! as small as a clock delta; [`Marks::iter`] unpacks them when the trace is read.

/// A top-level node's issue start in one execution, in ticks of the tracer's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// Index into the execution's nodes.
    pub node: u32,
    pub at: u64,
}

/// The marks of one execution, in issue order.
#[derive(Clone, Debug, Default)]
pub struct Marks {
    /// The tick the first delta counts from.
    base: u64,
    /// Ticks since the previous mark (the first: since `base`); `u32::MAX`: in `long`.
    deltas: Vec<u32>,
    /// (mark, ticks) of the deltas of `u32::MAX` ticks or more.
    long: Vec<(u32, u64)>,
    /// (mark, node) where a mark's node is not the previous one's plus one (the first's: 0).
    jumps: Vec<(u32, u32)>,
    /// The node a mark is expected to have, and the last mark's tick.
    next_node: u32,
    last: u64,
}

impl Marks {
    /// Room for `n` marks, counting from tick `base` (a tick before the first).
    pub fn with_capacity(n: usize, base: u64) -> Self {
        Marks {
            base,
            deltas: Vec::with_capacity(n),
            last: base,
            ..Default::default()
        }
    }

    /// Node `node`'s issue started at tick `at` (a tick before the previous mark's counts as
    /// that one's: the marks stay in order).
    #[inline(always)]
    pub fn push(&mut self, node: usize, at: u64) {
        let node = u32::try_from(node).unwrap_or(u32::MAX);
        if node != self.next_node {
            self.jump(node);
        }
        self.next_node = node.wrapping_add(1);
        // Below `u32::MAX` (and not a tick before the last, which wraps to a huge delta): the
        // common case.
        let delta = at.wrapping_sub(self.last);
        if delta < u64::from(u32::MAX) {
            self.last = at;
            self.deltas.push(delta as u32);
        } else {
            self.long(at);
        }
    }

    #[cold]
    fn jump(&mut self, node: u32) {
        let mark = u32::try_from(self.deltas.len()).unwrap_or(u32::MAX);
        self.jumps.push((mark, node));
    }

    /// A mark `u32::MAX` ticks or more after the last, or before it (then at the last's tick).
    #[cold]
    fn long(&mut self, at: u64) {
        if at < self.last {
            self.deltas.push(0);
            return;
        }
        let mark = u32::try_from(self.deltas.len()).unwrap_or(u32::MAX);
        self.long.push((mark, at - self.last));
        self.last = at;
        self.deltas.push(u32::MAX);
    }

    pub fn len(&self) -> usize {
        self.deltas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deltas.is_empty()
    }

    /// The last mark's tick (`base` when there is none).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The marks, unpacked.
    pub fn iter(&self) -> impl Iterator<Item = Mark> + '_ {
        let mut long = self.long.iter().peekable();
        let mut jumps = self.jumps.iter().peekable();
        let mut at = self.base;
        let mut node = 0u32;
        self.deltas.iter().enumerate().map(move |(i, d)| {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let delta = match long.next_if(|(m, _)| *m == i) {
                Some((_, l)) => *l,
                None => u64::from(*d),
            };
            at = at.saturating_add(delta);
            if let Some((_, n)) = jumps.next_if(|(m, _)| *m == i) {
                node = *n;
            }
            let mark = Mark { node, at };
            node = node.wrapping_add(1);
            mark
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_unpack_as_pushed() {
        let pushed = [
            Mark { node: 0, at: 110 },
            Mark { node: 1, at: 150 },
            Mark { node: 2, at: 150 },
            // A gap of more than 2^32 ticks.
            Mark {
                node: 3,
                at: 150 + (1 << 33),
            },
            // Out of sequence.
            Mark {
                node: 9,
                at: 151 + (1 << 33),
            },
            Mark {
                node: 10,
                at: 160 + (1 << 33),
            },
            Mark {
                node: 4,
                at: 161 + (1 << 33),
            },
        ];
        let mut m = Marks::with_capacity(2, 100);
        for p in &pushed {
            m.push(p.node as usize, p.at);
        }
        assert_eq!(m.len(), pushed.len());
        assert_eq!(m.iter().collect::<Vec<_>>(), pushed);
        assert_eq!(m.last(), 161 + (1 << 33));
        // The fused command buffer: one mark past the nodes.
        let mut one = Marks::with_capacity(1, 5);
        one.push(64, 7);
        assert_eq!(one.iter().collect::<Vec<_>>(), [Mark { node: 64, at: 7 }]);
    }

    #[test]
    fn a_tick_going_back_keeps_the_marks_in_order() {
        let mut m = Marks::with_capacity(3, 100);
        m.push(0, 200);
        m.push(1, 190);
        m.push(2, 90);
        m.push(3, 250);
        let at: Vec<u64> = m.iter().map(|x| x.at).collect();
        assert_eq!(at, [200, 200, 200, 250]);
    }
}
