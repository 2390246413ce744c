//! Collectives → the IR's collective thunks: the operand in a buffer (a fused operand
//! computed into a temp first), the result written into its destination; `rank_id` → a
//! `RankId` thunk.

use super::Lowerer;
use super::emit::Scope;
use crate::error::LowerError;
use crate::graph::{Collective, CollectiveKind, Node};
use xthunk_core::ir::{
    CollectiveOp, CollectivePermuteThunk, CollectiveThunk, RankIdThunk, Slice, Thunk,
};

impl Lowerer {
    pub(super) fn collective(
        &mut self,
        s: &Scope,
        node: &Node,
        c: &Collective,
        dest: Slice,
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let Some(&v) = node.operands.first() else {
            // `rank_id`, the only collective without an operand.
            out.push(RankIdThunk { dst: dest }.into());
            return Ok(());
        };
        let src = self.buffer_of(s, v, out)?;
        let dtype = s.graph.ty(v).dtype;
        let groups = c.groups.clone();
        let op = match &c.kind {
            CollectiveKind::AllReduce(op) => CollectiveOp::AllReduce { op: *op },
            CollectiveKind::AllGather => CollectiveOp::AllGather,
            CollectiveKind::ReduceScatter(op) => CollectiveOp::ReduceScatter { op: *op },
            CollectiveKind::AllToAll => CollectiveOp::AllToAll,
            CollectiveKind::Broadcast { root } => CollectiveOp::Broadcast { root: *root },
            CollectiveKind::Permute { pairs } => {
                out.push(
                    CollectivePermuteThunk {
                        src,
                        dst: dest,
                        dtype,
                        pairs: pairs.clone(),
                    }
                    .into(),
                );
                return Ok(());
            }
            CollectiveKind::RankId => {
                out.push(RankIdThunk { dst: dest }.into());
                return Ok(());
            }
        };
        out.push(
            CollectiveThunk {
                op,
                src,
                dst: dest,
                dtype,
                groups,
            }
            .into(),
        );
        Ok(())
    }
}
