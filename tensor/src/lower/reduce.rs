//! `reduce` as one generated kernel: a thread per result element folds the reduced elements
//! in row-major order through the body (emitted inline over scalar variables), the inputs'
//! elementwise producers fused into the loop.

use super::emit::{Home, KernelText, Scope};
use super::{LowerError, Lowerer, scalar};
use crate::graph::{Graph, Node};
use xthunk_core::ir::{Slice, Thunk};

impl Lowerer {
    /// The kernel of the reduce `node` over `dims` with `body`, writing result `j` to `dests[j]`.
    pub(super) fn reduce(
        &mut self,
        s: &Scope,
        node: &Node,
        dims: &[usize],
        body: &Graph,
        dests: &[Slice],
    ) -> Result<Option<Thunk>, LowerError> {
        if let Some(bad) = body.nodes().iter().find(|b| {
            !super::fusion::fusible(body, b) && !matches!(b.op, crate::graph::Op::Parameter { .. })
        }) {
            return Err(LowerError::Unsupported {
                op: "reduce",
                reason: format!(
                    "`{}` in the body `{}` (only elementwise ops are fused)",
                    bad.op.name(),
                    body.name()
                ),
            });
        }
        let n = dests.len();
        let shape = s.graph.ty(node.operands[0]).dims.clone();
        let mut red: Vec<usize> = dims.to_vec();
        red.sort_unstable();
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !red.contains(d)).collect();
        let kept_dims: Vec<u64> = kept.iter().map(|&d| shape[d]).collect();
        let red_dims: Vec<u64> = red.iter().map(|&d| shape[d]).collect();
        let count: u64 = red_dims.iter().product();
        let mut k = KernelText::new();
        let outs: Vec<String> = (0..n)
            .map(|j| k.output(dests[j], s.graph.ty(node.results[j]).dtype))
            .collect();
        k.open("XT_FOR(i, n) {");
        let oidx = k.delinearize("i", &kept_dims);
        let mut accs = vec![];
        for j in 0..n {
            let d = s.graph.ty(node.results[j]).dtype;
            let init = k.value_at(s, node.operands[n + j], &[])?;
            accs.push(k.mut_var(scalar::compute(d), init));
        }
        k.open(format!("for (long long r = 0; r < {count}LL; ++r) {{"));
        let ridx = k.delinearize("r", &red_dims);
        let mut idx = vec![String::new(); shape.len()];
        for (i, &d) in kept.iter().enumerate() {
            idx[d] = oidx[i].clone();
        }
        for (i, &d) in red.iter().enumerate() {
            idx[d] = ridx[i].clone();
        }
        let mut xs = vec![];
        for j in 0..n {
            xs.push(k.value_at(s, node.operands[j], &idx)?);
        }
        let mut homes = vec![Home::Fused; body.values().len()];
        for (j, p) in body.params().iter().enumerate() {
            let name = if j < n {
                accs[j].clone()
            } else {
                xs[j - n].clone()
            };
            homes[p.0 as usize] = Home::Var(name);
        }
        let bs = Scope {
            graph: body,
            homes: &homes,
        };
        let mut res = vec![];
        for (_, r) in body.results() {
            res.push(k.value_at(&bs, *r, &[])?);
        }
        for j in 0..n {
            k.line(format!("{} = {};", accs[j], res[j]));
        }
        k.close("}");
        for j in 0..n {
            let d = s.graph.ty(node.results[j]).dtype;
            k.line(format!("{}[i] = {};", outs[j], scalar::store(d, &accs[j])));
        }
        k.close("}");
        let elements = kept_dims.iter().product();
        Ok(self.launch(k, elements))
    }
}
