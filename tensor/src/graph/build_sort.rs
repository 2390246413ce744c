//! Adding `sort` (operands of one shape sorted together along a dimension by a comparator
//! region) and `top_k` (built from a stable descending sort with an index operand, then
//! slices) to a [`Graph`].

use super::build::R;
use super::ops::{CompareDirection, CompareType, Op, is_signed_int};
use super::{Graph, TensorType, Value};
use crate::error::invalid;
use xthunk_core::ir::DType;

impl Graph {
    /// `sort` of `inputs` (one shape) along `dimension` by `comparator`, which maps
    /// `(lhs_0, rhs_0, lhs_1, rhs_1, …)` scalars of the inputs' element types to a pred
    /// scalar.
    pub fn sort(
        &mut self,
        inputs: &[Value],
        dimension: usize,
        is_stable: bool,
        comparator: Graph,
    ) -> R<Vec<Value>> {
        let op = "sort";
        if inputs.is_empty() {
            return Err(invalid(op, "no inputs"));
        }
        let shape = self.check(op, inputs[0])?.dims.clone();
        if dimension >= shape.len() {
            return Err(invalid(
                op,
                format!("dimension {dimension} of rank {}", shape.len()),
            ));
        }
        let mut results = vec![];
        let mut sig = vec![];
        for v in inputs {
            let t = self.check(op, *v)?.clone();
            if t.dims != shape {
                return Err(invalid(
                    op,
                    format!("input shapes differ: {t} and {}", self.ty(inputs[0])),
                ));
            }
            sig.push(TensorType::new(t.dtype, &[]));
            sig.push(TensorType::new(t.dtype, &[]));
            results.push(t);
        }
        if comparator.param_types() != sig
            || comparator.result_types() != [TensorType::new(DType::Pred, &[])]
        {
            return Err(invalid(
                op,
                format!(
                    "comparator `{}` must map {} scalars (a pair per input) to one pred",
                    comparator.name(),
                    sig.len()
                ),
            ));
        }
        self.add(
            Op::Sort {
                dimension,
                is_stable,
                comparator: Box::new(comparator),
            },
            inputs.to_vec(),
            results,
        )
    }

    /// `chlo.top_k`: the `k` largest elements along the last dimension of `x`, largest first
    /// (a total order for floats: +NaN above +inf, -NaN below -inf, +0 above -0), equal
    /// elements by lower index first, and their indices (i32). A stable sort of `x` with an
    /// iota by a descending comparator, then slices.
    pub fn top_k(&mut self, x: Value, k: u64) -> R<[Value; 2]> {
        let op = "top_k";
        let t = self.check(op, x)?.clone();
        let Some(&last) = t.dims.last() else {
            return Err(invalid(op, "a scalar operand"));
        };
        if k > last {
            return Err(invalid(
                op,
                format!("k = {k} of a last dimension of {last}"),
            ));
        }
        if t.dtype == DType::Pred {
            return Err(invalid(op, "pred elements"));
        }
        if last > i32::MAX as u64 {
            return Err(invalid(op, format!("{last} elements: indices are i32")));
        }
        let kind = if t.dtype.is_float() {
            CompareType::TotalOrder
        } else if is_signed_int(t.dtype) {
            CompareType::Signed
        } else {
            CompareType::Unsigned
        };
        let mut c = Graph::new("top_k_comparator");
        let a = c.parameter("a", t.dtype, &[])?;
        let b = c.parameter("b", t.dtype, &[])?;
        c.parameter("ia", DType::I32, &[])?;
        c.parameter("ib", DType::I32, &[])?;
        let gt = c.compare(CompareDirection::Gt, kind, a, b)?;
        c.result("r0", gt)?;
        let rank = t.rank();
        let iota = self.iota(DType::I32, &t.dims, rank - 1)?;
        let sorted = self.sort(&[x, iota], rank - 1, true, c)?;
        let start = vec![0; rank];
        let mut limit = t.dims.clone();
        limit[rank - 1] = k;
        let strides = vec![1; rank];
        let values = self.slice(sorted[0], &start, &limit, &strides)?;
        let indices = self.slice(sorted[1], &start, &limit, &strides)?;
        Ok([values, indices])
    }
}
