//! `custom_call` → the IR's `CustomCall` thunk: each operand in a buffer of its own layout
//! (a fused operand computed into a temp first), each result written into its destination;
//! a result that aliases an operand starts as a copy of it.

use super::Lowerer;
use super::emit::Scope;
use crate::error::LowerError;
use crate::graph::{CustomCall, Node};
use xthunk_core::ir::{CopyThunk, CustomCallBuffer, CustomCallThunk, Slice, Thunk};

impl Lowerer {
    pub(super) fn custom_call(
        &mut self,
        s: &Scope,
        node: &Node,
        call: &CustomCall,
        dests: &[Slice],
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let mut thunk = CustomCallThunk::new(call.target.clone());
        thunk.attributes = call.attributes.clone();
        thunk.side_effect = call.side_effect;
        let mut operands = vec![];
        for v in &node.operands {
            let b = self.buffer_of(s, *v, out)?;
            let t = s.graph.ty(*v);
            operands.push(b);
            thunk = thunk.operand(CustomCallBuffer::new(b, t.dtype, &t.dims));
        }
        for &(r, o) in &call.aliases {
            if let (Some(&src), Some(&dst)) = (operands.get(o), dests.get(r))
                && src != dst
                && dst.size > 0
            {
                out.push(CopyThunk { src, dst }.into());
            }
        }
        for (v, d) in node.results.iter().zip(dests) {
            let t = s.graph.ty(*v);
            thunk = thunk.result(CustomCallBuffer::new(*d, t.dtype, &t.dims));
        }
        out.push(thunk.into());
        Ok(())
    }
}
