//! The programs of collective checks: one or several collectives (`Coll`) of one dtype at every
//! size in one program, and their names.

use crate::util::{CheckResult, fail};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::ir::{CollectiveOp, CollectiveThunk, DType, Executable};

/// Element counts of every operation: one, odd, and 64 KiB.
pub(super) fn counts(dtype: DType) -> [usize; 3] {
    [1, 1001, (64 << 10) / dtype.size()]
}

pub(super) fn op_name(op: &CollectiveOp) -> String {
    match op {
        CollectiveOp::AllReduce { op } => format!("all_reduce_{op}"),
        CollectiveOp::ReduceScatter { op } => format!("reduce_scatter_{op}"),
        other => other.name().to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Collectives, programs and references.

/// One collective thunk of a program.
#[derive(Clone, Debug)]
pub(super) struct Coll {
    pub(super) op: CollectiveOp,
    pub(super) dtype: DType,
    /// Elements per block: all-reduce and broadcast move `count`; all-gather sends `count` and
    /// receives `g·count` (`g` the group size); reduce-scatter sends `g·count` and receives
    /// `count`; all-to-all sends and receives `g` blocks of `count`.
    pub(super) count: usize,
    pub(super) groups: Vec<Vec<u32>>,
    /// `src == dst` (all-reduce only): the output starts with the input, no parameter.
    pub(super) in_place: bool,
}

impl Coll {
    pub(super) fn new(op: CollectiveOp, dtype: DType, count: usize, groups: Vec<Vec<u32>>) -> Self {
        Coll {
            op,
            dtype,
            count,
            groups,
            in_place: false,
        }
    }

    pub(super) fn group_size(&self, world: usize) -> usize {
        self.groups.first().map_or(world, Vec::len)
    }

    /// Elements of `src` and `dst`.
    pub(super) fn elems(&self, world: usize) -> (usize, usize) {
        let (g, c) = (self.group_size(world), self.count);
        match self.op {
            CollectiveOp::AllReduce { .. } | CollectiveOp::Broadcast { .. } => (c, c),
            CollectiveOp::AllGather => (c, g * c),
            CollectiveOp::ReduceScatter { .. } => (g * c, c),
            CollectiveOp::AllToAll => (g * c, g * c),
        }
    }

    /// The group (global ranks) of `rank` and its position there; `None` in no group.
    pub(super) fn group_of(&self, world: usize, rank: usize) -> Option<(Vec<usize>, usize)> {
        let group: Vec<usize> = if self.groups.is_empty() {
            (0..world).collect()
        } else {
            self.groups
                .iter()
                .find(|g| g.contains(&(rank as u32)))?
                .iter()
                .map(|&r| r as usize)
                .collect()
        };
        let pos = group.iter().position(|&r| r == rank)?;
        Some((group, pos))
    }

    pub(super) fn describe(&self) -> String {
        let op = match self.op {
            CollectiveOp::AllReduce { op } => format!("all_reduce({op})"),
            CollectiveOp::ReduceScatter { op } => format!("reduce_scatter({op})"),
            CollectiveOp::Broadcast { root } => format!("broadcast(root {root})"),
            ref other => other.name().to_string(),
        };
        let groups = if self.groups.is_empty() {
            "every rank".to_string()
        } else {
            format!("groups {:?}", self.groups)
        };
        format!(
            "{op}{} {} × {} over {groups}",
            if self.in_place { " in place" } else { "" },
            self.dtype,
            self.count
        )
    }
}

/// A program of collectives: parameter `x{i}` and output `y{i}` for the `i`-th (an in-place
/// one has only `y{i}`); output `i` belongs to collective `i`.
pub(super) fn program(name: &str, colls: &[Coll], world: usize) -> CheckResult<Executable> {
    let mut b = ExecutableBuilder::new(name);
    for (i, c) in colls.iter().enumerate() {
        let (se, de) = c.elems(world);
        let (src, dst) = if c.in_place {
            let y = b.output(&format!("y{i}"), c.dtype, &[de as u64]);
            (y.slice(), y.slice())
        } else {
            let x = b.parameter(&format!("x{i}"), c.dtype, &[se as u64]);
            let y = b.output(&format!("y{i}"), c.dtype, &[de as u64]);
            (x.slice(), y.slice())
        };
        b.push(
            CollectiveThunk {
                op: c.op.clone(),
                src,
                dst,
                dtype: c.dtype,
                groups: c.groups.clone(),
            }
            .into(),
        );
    }
    b.build()
        .map_err(|e| fail(format!("building `{name}`: {e}")))
}
