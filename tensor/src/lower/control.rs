//! `while` and `case`/`if` as the IR's `While` and `Conditional` thunks. A loop's carried
//! values live in temps the condition and the body read; the body writes its new values into
//! temps of their own and copies them back at its end (a value passed through unchanged is
//! neither written nor copied). Every branch of a `case` writes the op's result temps.

use super::emit::Scope;
use super::{LowerError, Lowerer};
use crate::graph::{Graph, Node};
use xthunk_core::ir::{ConditionalThunk, CopyThunk, DType, Slice, Thunk, WhileThunk};

impl Lowerer {
    /// Lowers the while `node`; returns the buffers holding its results.
    pub(super) fn while_loop(
        &mut self,
        s: &Scope,
        node: &Node,
        cond: &Graph,
        body: &Graph,
        out: &mut Vec<Thunk>,
    ) -> Result<Vec<Slice>, LowerError> {
        let mut carried = vec![];
        for v in &node.operands {
            let c = self.temp(s.graph.ty(*v));
            self.write_into(s, *v, c, out)?;
            carried.push(c);
        }
        let pred = self.b.temp(DType::Pred, &[]).slice;
        let cond_thunks = self.region(cond, &carried, &[Some(pred)])?;
        let mut dests = vec![];
        let mut copies = vec![];
        for (i, (_, r)) in body.results().iter().enumerate() {
            if *r == body.params()[i] {
                dests.push(None);
            } else {
                let n = self.temp(body.ty(*r));
                dests.push(Some(n));
                if n.size > 0 {
                    copies.push(Thunk::from(CopyThunk {
                        src: n,
                        dst: carried[i],
                    }));
                }
            }
        }
        let mut body_thunks = self.region(body, &carried, &dests)?;
        body_thunks.extend(copies);
        out.push(
            WhileThunk {
                cond: cond_thunks,
                pred,
                body: body_thunks,
                trip_count: None,
            }
            .into(),
        );
        Ok(carried)
    }

    /// Lowers the case `node`; returns the buffers holding its results.
    pub(super) fn case(
        &mut self,
        s: &Scope,
        node: &Node,
        branches: &[Graph],
        out: &mut Vec<Thunk>,
    ) -> Result<Vec<Slice>, LowerError> {
        let index = self.buffer_of(s, node.operands[0], out)?;
        let mut params = vec![];
        for v in &node.operands[1..] {
            params.push(self.buffer_of(s, *v, out)?);
        }
        let results: Vec<Slice> = node
            .results
            .iter()
            .map(|r| self.temp(s.graph.ty(*r)))
            .collect();
        let dests: Vec<Option<Slice>> = results.iter().map(|r| Some(*r)).collect();
        let mut lists = vec![];
        for b in branches {
            lists.push(self.region(b, &params, &dests)?);
        }
        out.push(
            ConditionalThunk {
                index,
                index_type: s.graph.ty(node.operands[0]).dtype,
                branches: lists,
            }
            .into(),
        );
        Ok(results)
    }
}
