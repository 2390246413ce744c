//! `reduce` as one generated kernel, the inputs' elementwise producers fused into its loop and
//! the body emitted inline over scalar variables. Few reduced elements per result, or more
//! results than elements per result: a thread per result folds them in row-major order. Many
//! (at least [`BLOCK_FOLD`], and at least as many as there are results): a block per result,
//! each thread folding a contiguous chunk from the init value, then an in-order tree through
//! shared memory (the spec's schedule: a tree whose in-order traversal is the elements in
//! order, init values interspersed), so an associative body gives the sequential result.

use super::emit::{Home, KernelText, Scope};
use super::{BLOCK, LowerError, Lowerer, scalar};
use crate::graph::{Graph, Node, Op};
use xthunk_core::ir::{Slice, Thunk};

/// Reduced elements per result from which a block, not a thread, computes a result.
pub(crate) const BLOCK_FOLD: u64 = 1024;

/// Refuses a body (of `op`) with ops that cannot be fused.
pub(super) fn check_body(op: &'static str, body: &Graph) -> Result<(), LowerError> {
    match body
        .nodes()
        .iter()
        .find(|b| !super::fusion::fusible(body, b) && !matches!(b.op, Op::Parameter { .. }))
    {
        Some(bad) => Err(LowerError::Unsupported {
            op,
            reason: format!(
                "`{}` in the body `{}` (only elementwise ops are fused)",
                bad.op.name(),
                body.name()
            ),
        }),
        None => Ok(()),
    }
}

/// Emits `accs = body(accs, xs)` (all new values computed before any is assigned).
pub(super) fn apply(
    k: &mut KernelText,
    body: &Graph,
    accs: &[String],
    xs: &[String],
) -> Result<(), LowerError> {
    let n = accs.len();
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
    Ok(())
}

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
        check_body("reduce", body)?;
        let n = dests.len();
        let shape = s.graph.ty(node.operands[0]).dims.clone();
        let mut red: Vec<usize> = dims.to_vec();
        red.sort_unstable();
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !red.contains(d)).collect();
        let kept_dims: Vec<u64> = kept.iter().map(|&d| shape[d]).collect();
        let red_dims: Vec<u64> = red.iter().map(|&d| shape[d]).collect();
        let count: u64 = red_dims.iter().product();
        let types: Vec<&str> = node
            .results
            .iter()
            .map(|r| scalar::compute(s.graph.ty(*r).dtype))
            .collect();
        let elements: u64 = kept_dims.iter().product();
        // A block per result only when each result is long and results are no more than the
        // elements each folds: otherwise a thread per result. (As blocks, the transformer
        // step's 256 and 1,024 results of 256 elements each took 40 to 170 ms per reduction on
        // the CPU execution, where each of a block's 9 barriers switches its 256 fibers.)
        let block = count >= BLOCK_FOLD && count >= elements;
        let mut k = KernelText::new();
        let outs: Vec<String> = (0..n)
            .map(|j| k.output(dests[j], s.graph.ty(node.results[j]).dtype))
            .collect();
        let shared: Vec<String> = (0..n).map(|j| format!("sh{j}")).collect();
        if block {
            for j in 0..n {
                k.line(format!("__shared__ {} {}[{BLOCK}];", types[j], shared[j]));
            }
            k.open("for (long long o = xt_block_id(); o < n; o += xt_num_blocks()) {");
        } else {
            k.open("XT_FOR(o, n) {");
        }
        let oidx = k.delinearize("o", &kept_dims);
        let mut inits = vec![];
        for init in &node.operands[n..] {
            inits.push(k.value_at(s, *init, &[])?);
        }
        if block {
            // Phase 1 of the block form: each thread folds its chunk into its slot.
            k.open("XT_BLOCK_PHASE(xt_t) {");
        }
        let mut accs = vec![];
        for (init, ty) in inits.into_iter().zip(&types) {
            accs.push(k.mut_var(ty, init));
        }
        let t = if block {
            let t = k.var("long long", "xt_t");
            let chunk = count.div_ceil(u64::from(BLOCK));
            k.open(format!(
                "for (long long r = {t} * {chunk}LL; r < ({t} + 1) * {chunk}LL && r < {count}LL; ++r) {{"
            ));
            t
        } else {
            k.open(format!("for (long long r = 0; r < {count}LL; ++r) {{"));
            String::new()
        };
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
        apply(&mut k, body, &accs, &xs)?;
        k.close("}");
        if !block {
            for j in 0..n {
                let d = s.graph.ty(node.results[j]).dtype;
                k.line(format!("{}[o] = {};", outs[j], scalar::store(d, &accs[j])));
            }
            k.close("}");
            return Ok(self.launch(k, elements));
        }
        // The in-order tree: at stride `st`, thread t (a multiple of 2·st) takes t + st. The
        // phases between barriers (`XT_BLOCK_PHASE`, `XT_BLOCK_SYNC`: each thread reads only
        // slots written before the phase or its own) run on the CPU as loops over the
        // threads on the block's first one, in the same order of operations.
        for j in 0..n {
            k.line(format!("{}[{t}] = {};", shared[j], accs[j]));
        }
        k.close("}");
        k.line("XT_BLOCK_SYNC();");
        k.open(format!(
            "for (long long st = 1; st < {BLOCK}LL; st *= 2) {{"
        ));
        k.open("XT_BLOCK_PHASE(xt_t) {");
        let t = "xt_t";
        k.open(format!("if ({t} % (2 * st) == 0) {{"));
        let left: Vec<String> = (0..n).map(|j| format!("{}[{t}]", shared[j])).collect();
        let right: Vec<String> = (0..n).map(|j| format!("{}[{t} + st]", shared[j])).collect();
        let mut tmp = vec![];
        for j in 0..n {
            tmp.push(k.mut_var(types[j], &left[j]));
        }
        apply(&mut k, body, &tmp, &right)?;
        for j in 0..n {
            k.line(format!("{} = {};", left[j], tmp[j]));
        }
        k.close("}");
        k.close("}");
        k.line("XT_BLOCK_SYNC();");
        k.close("}");
        k.open("XT_BLOCK_PHASE(xt_t) {");
        k.open(format!("if ({t} == 0) {{"));
        for j in 0..n {
            let d = s.graph.ty(node.results[j]).dtype;
            k.line(format!(
                "{}[o] = {};",
                outs[j],
                scalar::store(d, &format!("{}[0]", shared[j]))
            ));
        }
        k.close("}");
        k.close("}");
        k.line("XT_BLOCK_SYNC();");
        k.close("}");
        let blocks = elements.clamp(1, 65535) as u32;
        Ok(self.launch_grid(k, elements, blocks))
    }
}
