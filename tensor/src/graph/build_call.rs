//! Adding a `custom_call` to a [`Graph`]: a call of a handler registered under a target name,
//! reading whole operand tensors and writing whole result tensors (row-major), lowered to the
//! IR's `CustomCall` thunk.

use super::build::R;
use super::ops::{CustomCall, Op};
use super::{Graph, TensorType, Value};
use crate::error::invalid;

impl Graph {
    /// `custom_call` of `call.target` on `operands`, giving values of `results`. Each of
    /// `call.aliases`' `(result, operand)` pairs must have one type: that result starts as a
    /// copy of that operand (the handler may update it in place).
    pub fn custom_call(
        &mut self,
        call: CustomCall,
        operands: &[Value],
        results: Vec<TensorType>,
    ) -> R<Vec<Value>> {
        let op = "custom_call";
        if call.target.is_empty() {
            return Err(invalid(op, "an empty target name"));
        }
        let mut types = vec![];
        for v in operands {
            types.push(self.check(op, *v)?.clone());
        }
        let mut seen = vec![false; results.len()];
        for &(r, o) in &call.aliases {
            let (Some(rt), Some(ot)) = (results.get(r), types.get(o)) else {
                return Err(invalid(
                    op,
                    format!(
                        "@{}: result {r} aliases operand {o} ({} results, {} operands)",
                        call.target,
                        results.len(),
                        operands.len()
                    ),
                ));
            };
            if rt != ot || std::mem::replace(&mut seen[r], true) {
                return Err(invalid(
                    op,
                    format!(
                        "@{}: result {r} ({rt}) aliases operand {o} ({ot}): one type, one operand each",
                        call.target
                    ),
                ));
            }
        }
        self.add(Op::CustomCall(Box::new(call)), operands.to_vec(), results)
    }
}
