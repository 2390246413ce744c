//! Collectives over replica groups: `all_reduce`, `all_gather`, `reduce_scatter`,
//! `all_to_all` and `broadcast` (one thunk type, the operation a field).

use super::kind::{Checker, Nested, ThunkKind, TraceCost, read, uses_line};
use crate::ir::error::{ValidationError, err};
use crate::ir::{Access, BufferUse, DType, Slice, ThunkPath};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::fmt;

/// Reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A collective operation's kind and its kind-specific parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    /// `dst = op over the group of src` (equal sizes; in place allowed).
    AllReduce { op: ReduceOp },
    /// `dst = concatenation over the group (in group order) of src`; `dst` is group-size times
    /// `src`.
    AllGather,
    /// `dst = op over the group of this rank's block of src`; `src` is group-size times `dst`.
    ReduceScatter { op: ReduceOp },
    /// Block `j` of `dst` is block `i` (this rank's position) of member `j`'s `src`; both
    /// hold group-size equal blocks.
    AllToAll,
    /// `dst = src of the member at position `root` in the group` (equal sizes).
    Broadcast { root: u32 },
}

impl CollectiveOp {
    pub const fn name(&self) -> &'static str {
        match self {
            CollectiveOp::AllReduce { .. } => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter { .. } => "reduce_scatter",
            CollectiveOp::AllToAll => "all_to_all",
            CollectiveOp::Broadcast { .. } => "broadcast",
        }
    }
}

/// A collective over replica groups. `groups` lists global ranks; an empty list means one
/// group of every rank. A rank that belongs to no group skips the operation (its `dst` is left
/// as it was). Every rank of a group must run the same collectives in the same order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CollectiveThunk {
    pub op: CollectiveOp,
    pub src: Slice,
    pub dst: Slice,
    pub dtype: DType,
    pub groups: Vec<Vec<u32>>,
}

/// Element types the collectives support: NCCL's and RCCL's data types (they have no 16-bit
/// integers, so i16 and u16 are not collective types).
pub const COLLECTIVE_DTYPES: [DType; 10] = [
    DType::I8,
    DType::U8,
    DType::I32,
    DType::I64,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

impl ThunkKind for CollectiveThunk {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            read(self.src),
            BufferUse {
                slice: self.dst,
                access: if self.src.overlaps(&self.dst) {
                    Access::ReadWrite
                } else {
                    Access::Write
                },
            },
        ]
    }

    fn communicates(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let c = self;
        cx.no_control_flow(path, c.op.name())?;
        cx.typed_slice(&c.src, c.dtype, path, "src", false)?;
        cx.typed_slice(&c.dst, c.dtype, path, "dst", true)?;
        let in_place = c.src == c.dst;
        if c.src.overlaps(&c.dst) && !(in_place && matches!(c.op, CollectiveOp::AllReduce { .. })) {
            return Err(err(
                path,
                "dst",
                "overlaps src (only an all_reduce may work in place, on the identical slice)",
            ));
        }
        let size = check_groups(&c.groups, path)?;
        // With explicit groups, sizes can be checked now; otherwise at run time.
        if let Some(n) = size {
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            check_collective_sizes(c, n).map_err(|(f, m)| err(path, f, m))?;
        }
        Ok(())
    }

    fn label(&self) -> String {
        format!("{} {} {}", self.op.name(), self.dtype, self.src)
    }

    fn describe(&self) -> String {
        uses_line(self)
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        args.insert("dtype".into(), json!(self.dtype.to_string()));
        args.insert("op".into(), json!(self.op.name()));
        let peers = if self.groups.is_empty() {
            json!("all ranks")
        } else {
            json!(self.groups)
        };
        args.insert("peers".into(), peers);
        TraceCost {
            bytes: self.src.size,
            flops: 0,
            communicates: true,
        }
    }
}

impl<T> Nested<T> for CollectiveThunk {}

/// Checks replica groups (none empty, disjoint, equal sizes); their common size, if any.
pub(crate) fn check_groups(
    groups: &[Vec<u32>],
    path: &ThunkPath,
) -> Result<Option<usize>, ValidationError> {
    let mut seen = BTreeSet::new();
    let mut size = None;
    for (i, g) in groups.iter().enumerate() {
        if g.is_empty() {
            return Err(err(path, format!("groups[{i}]"), "empty replica group"));
        }
        for r in g {
            if !seen.insert(*r) {
                return Err(err(
                    path,
                    format!("groups[{i}]"),
                    format!("rank {r} is in two groups or twice in one"),
                ));
            }
        }
        if *size.get_or_insert(g.len()) != g.len() {
            return Err(err(
                path,
                format!("groups[{i}]"),
                "replica groups must all have the same size",
            ));
        }
    }
    Ok(size)
}

/// Checks the size relations of a collective for a group of `n` ranks; returns the field and
/// the message on failure. Every product is checked: a size that would overflow fails like any
/// other mismatch.
pub fn check_collective_sizes(c: &CollectiveThunk, n: u64) -> Result<(), (&'static str, String)> {
    if n == 0 {
        return Err(("groups", "a group of 0 ranks".to_string()));
    }
    let es = c.dtype.size() as u64;
    // `what` over `n` ranks: `times` · n bytes, or a message when that overflows.
    let times_n = |times: u64| {
        times
            .checked_mul(n)
            .ok_or_else(|| format!("{times} bytes times {n} ranks overflows"))
    };
    match &c.op {
        CollectiveOp::AllReduce { .. } | CollectiveOp::Broadcast { .. } => {
            if c.src.size != c.dst.size {
                return Err((
                    "dst",
                    format!("{} bytes, src has {}", c.dst.size, c.src.size),
                ));
            }
        }
        CollectiveOp::AllGather => {
            let need = times_n(c.src.size).map_err(|m| ("dst", m))?;
            if c.dst.size != need {
                return Err((
                    "dst",
                    format!(
                        "all_gather over {n} ranks needs {need} bytes, dst has {}",
                        c.dst.size
                    ),
                ));
            }
        }
        CollectiveOp::ReduceScatter { .. } => {
            let need = times_n(c.dst.size).map_err(|m| ("src", m))?;
            if c.src.size != need {
                return Err((
                    "src",
                    format!(
                        "reduce_scatter over {n} ranks needs {need} bytes, src has {}",
                        c.src.size
                    ),
                ));
            }
        }
        CollectiveOp::AllToAll => {
            // n blocks of whole elements: n · es bytes must divide the size (a block size that
            // overflows cannot).
            let divides = n
                .checked_mul(es)
                .is_some_and(|unit| c.src.size.is_multiple_of(unit));
            if c.src.size != c.dst.size || !divides {
                return Err((
                    "src",
                    format!(
                        "all_to_all over {n} ranks needs equal src and dst sizes divisible into {n} blocks of {}",
                        c.dtype
                    ),
                ));
            }
        }
    }
    if let CollectiveOp::Broadcast { root } = c.op
        && u64::from(root) >= n
    {
        return Err((
            "root",
            format!("root position {root} is outside a group of {n}"),
        ));
    }
    Ok(())
}
