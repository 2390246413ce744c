//! `stablehlo.sort` (any number of operands, a negative `dimension` counted from the end, the
//! comparator region as a closed graph: any compare type, the `select`/`and`/`or` chains JAX
//! emits for float canonicalization and multi-key sorts) and `chlo.top_k` (xthunk-tensor's
//! `top_k`: a stable descending sort with an index operand, then slices).

use super::ops::{R, result, tensors};
use super::{Env, ImportError, Importer, Item, check_attrs};
use crate::ast::{Attr, Op};
use xthunk_tensor::graph::Graph;

impl Importer<'_> {
    pub(super) fn sort(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(op, &["dimension", "is_stable"])?;
        let x = tensors(env, op)?;
        let Some(first) = x.first() else {
            return Err(ImportError::invalid(op, "no operand"));
        };
        let rank = g.ty(*first).rank() as i128;
        // The spec's defaults: the last dimension, not stable.
        let d = match op.attr("dimension") {
            None => -1,
            Some(a) => a
                .as_int()
                .ok_or_else(|| ImportError::invalid(op, "`dimension`: an integer expected"))?,
        };
        if d < -rank || d >= rank {
            return Err(ImportError::invalid(
                op,
                format!("`dimension` {d} of rank {rank}"),
            ));
        }
        let dim = if d < 0 { d + rank } else { d } as usize;
        let stable = match op.attr("is_stable") {
            None => false,
            Some(a) => a
                .as_bool()
                .ok_or_else(|| ImportError::invalid(op, "`is_stable`: a boolean expected"))?,
        };
        let comparator = self.closed_body(g, env, op)?;
        let vs = g
            .sort(&x, dim, stable, comparator)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(vs.into_iter().map(Item::Tensor).collect())
    }

    pub(super) fn top_k(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(op, &["k"])?;
        let x = tensors(env, op)?;
        let [x] = x.as_slice() else {
            return Err(ImportError::invalid(op, "one operand expected"));
        };
        let k = op
            .attr("k")
            .and_then(Attr::as_int)
            .and_then(|k| u64::try_from(k).ok())
            .ok_or_else(|| ImportError::invalid(op, "`k`: a non-negative integer expected"))?;
        let vs = g.top_k(*x, k).map_err(|e| ImportError::graph(op, e))?;
        for (i, v) in vs.iter().enumerate() {
            let want = result(op, i)?;
            if *g.ty(*v) != want {
                return Err(ImportError::invalid(
                    op,
                    format!("result {i} is {want}, top_k gives {}", g.ty(*v)),
                ));
            }
        }
        Ok(vs.into_iter().map(Item::Tensor).collect())
    }
}
