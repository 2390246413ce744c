//! `cholesky` (lower and upper, StableHLO's and LAPACK's contract, batched, a matrix that is
//! not positive definite) and `triangular_solve` (every combination of side, triangle,
//! transpose and unit diagonal, batched) against the reference, within a tolerance (the
//! reference factors in another order).

use crate::data::{Arr, agree};
use crate::reference::eval;
use crate::run;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::Graph;

fn tol(d: DType) -> f64 {
    if d == DType::F64 { 1e-10 } else { 2e-4 }
}

/// Values uniform in [-1, 1] (no specials: these ops' results on them are the
/// arithmetic's), rounded to the type.
fn random(d: DType, dims: &[u64], seed: u64) -> Arr {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let n: u64 = dims.iter().product();
    let f = (0..n).map(|_| r.random_range(-1.0..1.0)).collect();
    Arr::from_bytes(d, dims, &Arr::floats(d, dims, f).to_bytes())
}

/// Symmetric positive definite matrices: M M^T + n I, M random in [-1, 1].
fn spd(d: DType, batch: u64, n: u64, seed: u64) -> Arr {
    let m = random(DType::F64, &[batch, n, n], seed);
    let nn = n as usize;
    let mut f = vec![0.0; (batch * n * n) as usize];
    for b in 0..batch as usize {
        let mm = &m.f[b * nn * nn..(b + 1) * nn * nn];
        for i in 0..nn {
            for j in 0..nn {
                let s: f64 = (0..nn).map(|k| mm[i * nn + k] * mm[j * nn + k]).sum();
                f[b * nn * nn + i * nn + j] = s + if i == j { n as f64 } else { 0.0 };
            }
        }
    }
    let a = Arr::floats(d, &[batch, n, n], f);
    // Through the type's bytes, so that the reference sees the rounded values.
    Arr::from_bytes(d, &[batch, n, n], &a.to_bytes())
}

/// Runs `g` and compares every result with the reference's. `skip`: elements of result 0
/// not compared (LAPACK leaves a matrix it could not factor unspecified).
fn check_skipping(g: &Graph, inputs: &[Arr], what: &str, d: DType, skip: std::ops::Range<usize>) {
    let bytes: Vec<Vec<u8>> = inputs.iter().map(Arr::to_bytes).collect();
    let (_, outs) = run(g, &bytes);
    let mut want = eval(g, inputs);
    for (k, w) in want.iter_mut().enumerate() {
        let t = g.ty(g.results()[k].1);
        let mut got = Arr::from_bytes(t.dtype, &t.dims, &outs[k]);
        if k == 0 {
            for e in skip.clone() {
                (w.f[e], got.f[e]) = (0.0, 0.0);
            }
        }
        if let Err(e) = agree(w, &got, tol(d)) {
            panic!("{what}: result {k}: {e}");
        }
    }
}

fn check(g: &Graph, inputs: &[Arr], what: &str, d: DType) {
    check_skipping(g, inputs, what, d, 0..0);
}

#[test]
fn cholesky_lower_upper_lapack() {
    for d in [DType::F32, DType::F64] {
        for n in [1u64, 2, 5, 8] {
            for lower in [true, false] {
                for lapack in [false, true] {
                    let mut g = Graph::new("cholesky");
                    let a = g.parameter("a", d, &[3, n, n]).unwrap();
                    let r = g.cholesky(a, lower, lapack).unwrap();
                    for (i, v) in r.iter().enumerate() {
                        g.result(&format!("r{i}"), *v).unwrap();
                    }
                    let mut x = spd(d, 3, n, n * 7 + u64::from(lower));
                    if n > 1 {
                        // The second matrix is not positive definite at column 2.
                        let base = (n * n) as usize;
                        x.f[base + n as usize + 1] = -1.0;
                    }
                    let nn = (n * n) as usize;
                    let skip = if lapack && n > 1 { nn..2 * nn } else { 0..0 };
                    let what = format!("{d} n={n} lower={lower} lapack={lapack}");
                    check_skipping(&g, &[x], &what, d, skip);
                }
            }
        }
    }
}

#[test]
fn triangular_solve_every_variant() {
    for d in [DType::F32, DType::F64] {
        for bits in 0..16u32 {
            let (left, lower) = (bits & 1 != 0, bits & 2 != 0);
            let (unit, transpose) = (bits & 4 != 0, bits & 8 != 0);
            let (m, k) = (5u64, 3u64);
            let bd = if left { [2, m, k] } else { [2, k, m] };
            let mut g = Graph::new("triangular_solve");
            let a = g.parameter("a", d, &[2, m, m]).unwrap();
            let b = g.parameter("b", d, &bd).unwrap();
            let x = g
                .triangular_solve(a, b, left, lower, unit, transpose)
                .unwrap();
            g.result("x", x).unwrap();
            // A well-conditioned a: random off the diagonal, 4 + |random| on it (and random
            // values in the triangle that must not be read).
            let mut av = random(DType::F64, &[2, m, m], 11 + u64::from(bits));
            for bi in 0..2 {
                for i in 0..m as usize {
                    let at = bi * (m * m) as usize + i * m as usize + i;
                    av.f[at] = 4.0 + av.f[at].abs();
                }
            }
            let av = Arr::from_bytes(d, &[2, m, m], &Arr::floats(d, &[2, m, m], av.f).to_bytes());
            let bv = random(d, &bd, 23 + u64::from(bits));
            check(
                &g,
                &[av, bv],
                &format!("{d} left={left} lower={lower} unit={unit} transpose={transpose}"),
                d,
            );
        }
    }
}
