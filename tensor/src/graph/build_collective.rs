//! Adding collectives to a [`Graph`]: the ops of an SPMD program that talk to the other
//! ranks (lowered to the IR's collective thunks) and `rank_id`.

use super::build::R;
use super::ops::{Collective, CollectiveKind, Op};
use super::{Graph, TensorType, Value};
use crate::error::invalid;
use std::collections::BTreeSet;
use xthunk_core::ir::{COLLECTIVE_DTYPES, DType};

impl Graph {
    /// A collective of `kind` over `groups` (global ranks: at least one group, none empty,
    /// disjoint, all of one size) on `operand`. The result's type: see [`CollectiveKind`].
    pub fn collective(
        &mut self,
        kind: CollectiveKind,
        groups: Vec<Vec<u32>>,
        operand: Value,
    ) -> R<Value> {
        let name = kind.name();
        let t = self.check(name, operand)?.clone();
        if !COLLECTIVE_DTYPES.contains(&t.dtype) {
            return Err(invalid(
                name,
                format!(
                    "{} is not a collective element type (those are {})",
                    t.dtype,
                    COLLECTIVE_DTYPES.map(|d| d.to_string()).join(", ")
                ),
            ));
        }
        let n = check_groups(name, &groups)?;
        let lead = t.dims.first().copied();
        let mut dims = t.dims.clone();
        match &kind {
            CollectiveKind::AllGather => {
                let Some(d0) = lead.and_then(|d| d.checked_mul(n)) else {
                    return Err(invalid(name, format!("gathers a {t}: a rank-0 value")));
                };
                dims[0] = d0;
            }
            CollectiveKind::ReduceScatter(_) | CollectiveKind::AllToAll => {
                let Some(d0) = lead.filter(|d| d % n == 0) else {
                    return Err(invalid(
                        name,
                        format!("the leading dimension of {t} is not a multiple of {n} ranks"),
                    ));
                };
                if matches!(kind, CollectiveKind::ReduceScatter(_)) {
                    dims[0] = d0 / n;
                }
            }
            CollectiveKind::Permute { pairs } => {
                let (mut s, mut d) = (BTreeSet::new(), BTreeSet::new());
                for (a, b) in pairs {
                    if !s.insert(*a) || !d.insert(*b) {
                        return Err(invalid(
                            name,
                            format!("pair ({a}, {b}): a rank sends or receives twice"),
                        ));
                    }
                }
            }
            CollectiveKind::Broadcast { root } => {
                if u64::from(*root) >= n {
                    return Err(invalid(name, format!("root {root} in groups of {n}")));
                }
            }
            CollectiveKind::AllReduce(_) => {}
            CollectiveKind::RankId => {
                return Err(invalid(name, "takes no operand (use `rank_id`)"));
            }
        }
        let ty = TensorType::new(t.dtype, &dims);
        let c = Collective { kind, groups };
        Ok(self.add(Op::Collective(Box::new(c)), vec![operand], vec![ty])?[0])
    }

    /// This device's global rank in an SPMD program, an i32 scalar.
    pub fn rank_id(&mut self) -> R<Value> {
        let c = Collective {
            kind: CollectiveKind::RankId,
            groups: vec![],
        };
        let ty = TensorType::new(DType::I32, &[]);
        Ok(self.add(Op::Collective(Box::new(c)), vec![], vec![ty])?[0])
    }
}

/// Checks replica groups: at least one, none empty, disjoint, one size; that size.
fn check_groups(name: &'static str, groups: &[Vec<u32>]) -> R<u64> {
    let mut seen = BTreeSet::new();
    let Some(first) = groups.first() else {
        return Err(invalid(name, "no replica group"));
    };
    for g in groups {
        if g.is_empty() || g.len() != first.len() {
            return Err(invalid(
                name,
                "replica groups must be non-empty and of one size",
            ));
        }
        for r in g {
            if !seen.insert(*r) {
                return Err(invalid(name, format!("rank {r} is in two replica groups")));
            }
        }
    }
    Ok(first.len() as u64)
}
