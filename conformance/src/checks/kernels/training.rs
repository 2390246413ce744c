//! Cases of the training kernels (fused bias + GELU, cross-entropy, AdamW, embedding gather):
//! random inputs, f64 references from `reference`, explicit tolerances.

use super::case::{Case, Shape, no_reference, unary_tol};
use crate::reference::{self, KernelId, Op};
use crate::util::{CheckResult, CheckRng, Tol, Values, compute_eps, round_to, uniform};
use rand::Rng;
use xthunk_core::ir::{DType, Scalar};

/// Builds the inputs and expected outputs of a training kernel at `shape`.
pub(super) fn make_case(rng: &mut CheckRng, id: &KernelId, shape: Shape) -> CheckResult<Case> {
    let t = id.dtype;
    if !t.is_float() {
        return Err(no_reference(id));
    }
    let mut c = Case::new(shape);
    let (n, rows, cols) = match shape {
        Shape::N(n) => (n, 1, n),
        Shape::Rows(r, cl) => (r * cl, r, cl),
    };
    let eps = compute_eps(t);
    match id.op {
        Op::BiasUnary(op) => {
            let a = uniform(rng, t, n, -4.0, 4.0);
            let b = uniform(rng, t, cols, -1.0, 1.0);
            let x: Vec<f64> = (0..n).map(|i| a[i] + b[i % cols.max(1)]).collect();
            let exp: Vec<f64> = x.iter().map(|&v| reference::unary_f(op, v)).collect();
            // The sum is rounded to the compute type before the GELU (slope at most ~1.13).
            let tol = unary_tol(op, t, &x, &exp)
                .into_iter()
                .zip(&x)
                .map(|(tl, xi)| tl + 2.0 * eps * xi.abs())
                .collect();
            c.inputs.push(("a", Values::F(a)));
            c.inputs.push(("b", Values::F(b)));
            c.floats("out", exp, tol, cols);
        }
        Op::CrossEntropy => {
            let x = uniform(rng, t, n, -5.0, 5.0);
            // Mostly valid labels; some ignored (-1), some out of range (cols: NaN).
            let labels: Vec<i64> = (0..rows)
                .map(|_| match rng.random_range(0..10) {
                    0 => -1,
                    1 => cols as i64,
                    _ => rng.random_range(0..cols.max(1)) as i64,
                })
                .collect();
            let exp: Vec<f64> = (0..rows)
                .map(|r| reference::cross_entropy(&x[r * cols..(r + 1) * cols], labels[r]))
                .collect();
            let base = Tol::transcendental(t);
            let tol = exp
                .iter()
                .map(|&e| base.bound(e) + (cols as f64 + 8.0) * eps * (e.abs() + 10.0))
                .collect();
            c.inputs.push(("logits", Values::F(x)));
            c.inputs.push(("labels", Values::I(labels)));
            c.floats("loss", exp, tol, 0);
        }
        Op::AdamW => {
            let state = if t == DType::F64 {
                DType::F64
            } else {
                DType::F32
            };
            let f = |v: f32| v as f64;
            let hp = reference::AdamW {
                lr: f(1e-2),
                beta1: f(0.9),
                beta2: f(0.999),
                eps: f(1e-8),
                weight_decay: f(0.01),
                step: rng.random_range(1..20),
            };
            let p = uniform(rng, t, n, -1.0, 1.0);
            let g = uniform(rng, t, n, -1.0, 1.0);
            let m = uniform(rng, state, n, -0.1, 0.1);
            let v = uniform(rng, state, n, 0.0, 0.01);
            let mut ep = vec![];
            let (mut em, mut ev) = (vec![], vec![]);
            let (mut tp, mut tm, mut tv) = (vec![], vec![], vec![]);
            let (bp, bs) = (Tol::of(t), Tol::of(state));
            for i in 0..n {
                let (np, nm, nv) = hp.apply(p[i], g[i], m[i], v[i]);
                let upd = p[i] * (1.0 - hp.lr * hp.weight_decay) - np;
                ep.push(np);
                em.push(nm);
                ev.push(nv);
                tp.push(bp.bound(np) + 4.0 * eps * p[i].abs() + 16.0 * eps * upd.abs());
                tm.push(bs.bound(nm) + 4.0 * eps * (m[i].abs() + g[i].abs()));
                tv.push(bs.bound(nv) + 4.0 * eps * (v[i].abs() + g[i] * g[i]));
            }
            for (name, val) in [
                ("lr", hp.lr),
                ("beta1", hp.beta1),
                ("beta2", hp.beta2),
                ("eps", hp.eps),
                ("weight_decay", hp.weight_decay),
            ] {
                c.scalars.push((name, Scalar::F32(val as f32)));
            }
            c.scalars.push(("step", Scalar::I64(hp.step)));
            c.inputs.push(("param", Values::F(p)));
            c.inputs.push(("grad", Values::F(g)));
            c.inputs.push(("m", Values::F(m)));
            c.inputs.push(("v", Values::F(v)));
            c.floats("param", ep, tp, 0);
            c.floats("m", em, tm, 0);
            c.floats("v", ev, tv, 0);
        }
        Op::Embedding => {
            let (vocab, dim) = (7usize, 3usize);
            let table = uniform(rng, t, vocab * dim, -10.0, 10.0);
            let ids: Vec<i64> = (0..n)
                .map(|_| rng.random_range(-1..vocab as i64 + 1))
                .collect();
            let exp: Vec<f64> = ids
                .iter()
                .flat_map(|&id| {
                    (0..dim).map(move |d| match usize::try_from(id) {
                        Ok(r) if r < vocab => Some((r, d)),
                        _ => None,
                    })
                })
                .map(|rd| rd.map_or(f64::NAN, |(r, d)| round_to(t, table[r * dim + d])))
                .collect();
            c.scalars.push(("vocab", Scalar::I64(vocab as i64)));
            c.scalars.push(("dim", Scalar::I64(dim as i64)));
            c.inputs.push(("table", Values::F(table)));
            c.inputs.push(("ids", Values::I(ids)));
            c.exact("out", Values::F(exp), dim);
        }
        _ => return Err(no_reference(id)),
    }
    Ok(c)
}
