//! `scatter`: the inputs written into the result buffers (a copy, or their fused kernel), then
//! one kernel applying every update element through the body to the element its index names,
//! the indices' and updates' producers fused. A window not wholly inside the inputs is
//! skipped whole, as XLA does (and so JAX gives); the spec skips only its elements outside. With
//! `unique_indices` a thread per update element; when no window dimension takes a start from
//! the indices (an embedding's gradient: whole rows at row ids) a thread per window element,
//! applying its updates in order; otherwise one thread applies them all in row-major order.
//! Colliding updates combine in order, deterministically, in every case.

use super::emit::{KernelText, Scope, offset};
use super::reduce::{apply, check_body};
use super::{LowerError, Lowerer, scalar};
use crate::graph::{Graph, Node, ScatterDims};
use xthunk_core::ir::{Slice, Thunk};

impl Lowerer {
    /// Lowers the scatter `node` into `dests` (one per input).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scatter(
        &mut self,
        s: &Scope,
        node: &Node,
        d: &ScatterDims,
        body: &Graph,
        unique: bool,
        dests: &[Slice],
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        check_body("scatter", body)?;
        let n = dests.len();
        for (x, dest) in node.operands[..n].iter().zip(dests) {
            self.write_into(s, *x, *dest, out)?;
        }
        let si = node.operands[n];
        let updates = &node.operands[n + 1..];
        let (t, st, ut) = (
            s.graph.ty(node.operands[0]).clone(),
            s.graph.ty(si).clone(),
            s.graph.ty(updates[0]).clone(),
        );
        let count = ut.elements();
        let ivd = d.index_vector_dim;
        let mut k = KernelText::new();
        let outs: Vec<String> = (0..n)
            .map(|j| k.inout(dests[j], s.graph.ty(node.results[j]).dtype))
            .collect();
        // Windows cannot collide when no window dimension takes a start from the indices: each
        // window element then has targets of its own, one thread applies its updates in order.
        let windowed = !unique
            && d.scatter_dims_to_operand_dims
                .iter()
                .all(|o| d.inserted_window_dims.contains(o));
        let (wdims, sdims): (Vec<u64>, Vec<u64>) = {
            let w = d.update_window_dims.iter().map(|&k| ut.dims[k]).collect();
            let s = (0..ut.rank())
                .filter(|k| !d.update_window_dims.contains(k))
                .map(|k| ut.dims[k])
                .collect();
            (w, s)
        };
        let uidx = if unique {
            k.open("XT_FOR(u, n) {");
            k.delinearize("u", &ut.dims)
        } else if windowed {
            k.open("XT_FOR(w, n) {");
            let widx = k.delinearize("w", &wdims);
            let q: u64 = sdims.iter().product();
            k.open(format!("for (long long q = 0; q < {q}LL; ++q) {{"));
            let qidx = k.delinearize("q", &sdims);
            let (mut wi, mut qi) = (widx.into_iter(), qidx.into_iter());
            (0..ut.rank())
                .map(|j| {
                    if d.update_window_dims.contains(&j) {
                        wi.next()
                    } else {
                        qi.next()
                    }
                    .unwrap_or_default()
                })
                .collect()
        } else {
            k.open("if (xt_global_id() == 0) {");
            k.open("for (long long u = 0; u < n; ++u) {");
            k.delinearize("u", &ut.dims)
        };
        let scatter_index: Vec<String> = (0..ut.rank())
            .filter(|k| !d.update_window_dims.contains(k))
            .map(|k| uidx[k].clone())
            .collect();
        let mut full = vec!["0".to_string(); t.rank()];
        for (j, &dop) in d.scatter_dims_to_operand_dims.iter().enumerate() {
            let mut sub = scatter_index.clone();
            if ivd < st.rank() {
                sub.insert(ivd, format!("{j}LL"));
            }
            let v = k.value_at(s, si, &sub)?;
            full[dop] = format!("(long long){v}");
        }
        for (&dop, &dst) in d
            .input_batching_dims
            .iter()
            .zip(&d.scatter_indices_batching_dims)
        {
            full[dop] = scatter_index[if dst < ivd { dst } else { dst - 1 }].clone();
        }
        // XLA's rule (what JAX gives): an update window not wholly inside the inputs is
        // skipped whole (the spec skips only its elements outside).
        let mut window = d
            .update_window_dims
            .iter()
            .map(|&w| (uidx[w].clone(), ut.dims[w]));
        let mut rid = vec![];
        let mut conds = vec![];
        for (dop, f) in full.iter().enumerate() {
            let (w, size) =
                if d.inserted_window_dims.contains(&dop) || d.input_batching_dims.contains(&dop) {
                    ("0".to_string(), 1)
                } else {
                    window.next().unwrap_or_else(|| ("0".into(), 1))
                };
            let start = k.var("long long", f);
            conds.push(format!(
                "{start} >= 0 && {start} <= {}LL",
                t.dims[dop] as i64 - size as i64
            ));
            rid.push(format!("({start} + {w})"));
        }
        let cond = if conds.is_empty() {
            "true".to_string()
        } else {
            conds.join(" && ")
        };
        k.open(format!("if ({cond}) {{"));
        let lin = k.var("long long", offset(&rid, &t.dims));
        let mut cur = vec![];
        for (j, o) in outs.iter().enumerate() {
            let dt = s.graph.ty(node.results[j]).dtype;
            cur.push(k.mut_var(
                scalar::compute(dt),
                scalar::load(dt, &format!("{o}[{lin}]")),
            ));
        }
        let mut ups = vec![];
        for u in updates {
            ups.push(k.value_at(s, *u, &uidx)?);
        }
        apply(&mut k, body, &cur, &ups)?;
        for (j, o) in outs.iter().enumerate() {
            let dt = s.graph.ty(node.results[j]).dtype;
            k.line(format!("{o}[{lin}] = {};", scalar::store(dt, &cur[j])));
        }
        k.close("}");
        k.close("}");
        if !unique {
            k.close("}");
        }
        let launch = if unique {
            self.launch(k, count)
        } else if windowed {
            self.launch(k, wdims.iter().product())
        } else {
            self.launch_grid(k, count, 1)
        };
        out.extend(launch);
        Ok(())
    }
}
