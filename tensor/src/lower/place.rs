//! Where a fusible value goes: aliased, fused into its readers, or computed by a kernel of its
//! own into a temp or the result buffer it claims (the fusion plan itself is `fusion.rs`).

use super::Lowerer;
use super::emit::{Home, Scope};
use crate::error::LowerError;
use crate::graph::{Node, Op};
use xthunk_core::ir::{Slice, Thunk};

impl Lowerer {
    /// Where the value of the fusible `node` goes (`root`: from [`super::fusion::roots`];
    /// `claim`: the result buffer it is written to when it is one); emits its kernel when it
    /// is a root.
    pub(super) fn place(
        &mut self,
        s: &Scope,
        node: &Node,
        root: bool,
        claim: Option<Slice>,
        out: &mut Vec<Thunk>,
    ) -> Result<Home, LowerError> {
        let v = node.results[0];
        let t = s.graph.ty(v).clone();
        match &node.op {
            Op::Constant { bytes } if t.elements() != 1 => {
                let slice = self.b.constant(t.dtype, &t.dims, bytes.clone()).slice;
                return Ok(Home::Buf(slice));
            }
            Op::Reshape | Op::BitcastConvert => {
                if let Home::Buf(b) = &s.homes[node.operands[0].0 as usize] {
                    return Ok(Home::Buf(*b));
                }
                let from = s.graph.ty(node.operands[0]).dtype;
                if from.size() != t.dtype.size() {
                    // Different widths: the operand's bytes, in a buffer, reinterpreted.
                    let b = self.buffer_of(s, node.operands[0], out)?;
                    return Ok(Home::Buf(b));
                }
            }
            _ => {}
        }
        if !root && claim.is_none() {
            return Ok(Home::Fused);
        }
        let dest = match claim {
            Some(d) => d,
            None => self.temp(&t),
        };
        out.extend(self.fused_kernel(s, v, dest)?);
        Ok(Home::Buf(dest))
    }
}
