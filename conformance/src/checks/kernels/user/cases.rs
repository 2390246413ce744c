//! The cases of the `kernels/user/` checks: random inputs, the launch, and f64 references with
//! their tolerances (see the parent module).

use super::types::{Arg, Case, Expect};
use crate::reference::{self, AdamW};
use crate::util::{
    CheckResult, CheckRng, Tol, Values, compute_eps, encode, f16_bits, round_to, uniform,
};
use rand::Rng;
use xthunk_core::ir::{DType, Scalar};

pub(super) fn floats(dtype: DType, v: &[f64]) -> CheckResult<Arg> {
    Ok(Arg::Buf(encode(dtype, &Values::F(v.to_vec()))?))
}
pub(super) fn ints(dtype: DType, v: &[i64]) -> CheckResult<Arg> {
    Ok(Arg::Buf(encode(dtype, &Values::I(v.to_vec()))?))
}
pub(super) fn poison(dtype: DType, n: usize) -> Arg {
    Arg::Buf(vec![0xFF; n * dtype.size()])
}
pub(super) fn i64s(n: usize) -> Arg {
    Arg::S(Scalar::I64(n as i64))
}
pub(super) fn i32s(n: usize) -> Arg {
    Arg::S(Scalar::I32(n as i32))
}
pub(super) fn f32_out(arg: usize, values: Vec<f64>, tol: Vec<f64>, cols: usize) -> Expect {
    Expect::Floats {
        arg,
        dtype: DType::F32,
        values,
        tol,
        cols,
    }
}

pub(super) const F32: DType = DType::F32;

pub(super) fn eps() -> f64 {
    compute_eps(F32)
}

pub(super) fn elementwise(
    name: &'static str,
    grid: u32,
    block: u32,
    f: fn(f64) -> f64,
    rng: &mut CheckRng,
) -> CheckResult<Vec<Case>> {
    let n = 3001;
    let x = uniform(rng, F32, n, -5.0, 5.0);
    let values: Vec<f64> = x.iter().map(|&v| f(v)).collect();
    let base = Tol::transcendental(F32);
    let tol = values
        .iter()
        .zip(&x)
        .map(|(e, xi)| base.bound(*e) + 4.0 * eps() * xi.abs())
        .collect();
    Ok(vec![Case {
        what: format!("{name} n={n}"),
        kernel: name,
        grid,
        block,
        shared: 0,
        args: vec![floats(F32, &x)?, poison(F32, n), i64s(n)],
        expect: vec![f32_out(1, values, tol, 0)],
    }])
}

pub(super) fn gelu_erf(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    elementwise("gelu_erf", 7, 96, reference::gelu_erf, rng)
}

pub(super) fn gelu_tanh(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    elementwise("gelu_tanh", 5, 128, reference::gelu, rng)
}

pub(super) fn residual(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let n = 3001;
    let (a, b) = (
        uniform(rng, F32, n, -3.0, 3.0),
        uniform(rng, F32, n, -3.0, 3.0),
    );
    let values: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let tol = values.iter().map(|&e| Tol::of(F32).bound(e)).collect();
    Ok(vec![Case {
        what: format!("residual n={n}"),
        kernel: "residual",
        grid: 3,
        block: 64,
        shared: 0,
        args: vec![poison(F32, n), floats(F32, &a)?, floats(F32, &b)?, i64s(n)],
        expect: vec![f32_out(0, values, tol, 0)],
    }])
}

pub(super) fn encoder(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (b, t, c, vocab) = (3usize, 5usize, 24usize, 11i64);
    let tokens: Vec<i64> = (0..b * t).map(|_| rng.random_range(0..vocab)).collect();
    let wte = uniform(rng, F32, vocab as usize * c, -1.0, 1.0);
    let wpe = uniform(rng, F32, t * c, -1.0, 1.0);
    let mut values = Vec::with_capacity(b * t * c);
    for (bt, &tok) in tokens.iter().enumerate() {
        for ci in 0..c {
            values.push(wte[tok as usize * c + ci] + wpe[(bt % t) * c + ci]);
        }
    }
    let tol = values.iter().map(|&e| Tol::of(F32).bound(e)).collect();
    Ok(vec![Case {
        what: format!("encoder B={b} T={t} C={c}"),
        kernel: "encoder",
        grid: 4,
        block: 32,
        shared: 0,
        args: vec![
            poison(F32, b * t * c),
            ints(DType::I32, &tokens)?,
            floats(F32, &wte)?,
            floats(F32, &wpe)?,
            i32s(b),
            i32s(t),
            i32s(c),
        ],
        expect: vec![f32_out(0, values, tol, c)],
    }])
}

pub(super) fn adamw(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let n = 3001;
    let p = uniform(rng, F32, n, -1.0, 1.0);
    let g = uniform(rng, F32, n, -1.0, 1.0);
    let m = uniform(rng, F32, n, -0.1, 0.1);
    let v = uniform(rng, F32, n, 0.0, 0.1);
    let step = rng.random_range(1..20);
    let opt = AdamW {
        lr: reference_f32(1e-3),
        beta1: reference_f32(0.9),
        beta2: reference_f32(0.999),
        eps: reference_f32(1e-8),
        weight_decay: reference_f32(0.01),
        step,
    };
    let (mut wp, mut wm, mut wv) = (vec![], vec![], vec![]);
    for i in 0..n {
        let (pi, mi, vi) = opt.apply(p[i], g[i], m[i], v[i]);
        wp.push(pi);
        wm.push(mi);
        wv.push(vi);
    }
    // `m` is a sum of two terms that may cancel: bounded by their magnitudes.
    let mtol = (0..n)
        .map(|i| 4.0 * eps() * (opt.beta1 * m[i].abs() + (1.0 - opt.beta1) * g[i].abs()))
        .collect();
    let rel =
        |w: &[f64], r: f64, a: f64| -> Vec<f64> { w.iter().map(|e| a + r * e.abs()).collect() };
    let f = |x: f64| Arg::S(Scalar::F32(x as f32));
    Ok(vec![Case {
        what: format!("adamw n={n} step {step}"),
        kernel: "adamw",
        grid: 4,
        block: 64,
        shared: 0,
        args: vec![
            floats(F32, &p)?,
            floats(F32, &g)?,
            floats(F32, &m)?,
            floats(F32, &v)?,
            i64s(n),
            f(opt.lr),
            f(opt.beta1),
            f(opt.beta2),
            f(opt.eps),
            f(opt.weight_decay),
            Arg::S(Scalar::I32(step as i32)),
        ],
        expect: vec![
            f32_out(0, wp.clone(), rel(&wp, 1e-6, 1e-7), 0),
            f32_out(2, wm, mtol, 0),
            f32_out(3, wv.clone(), rel(&wv, 4.0 * eps(), 0.0), 0),
        ],
    }])
}

/// `x` as the f32 the kernel receives, widened back.
pub(super) fn reference_f32(x: f64) -> f64 {
    x as f32 as f64
}

pub(super) fn layernorm(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (rows, cols) = (13usize, 333usize);
    let x = uniform(rng, F32, rows * cols, -6.0, 6.0);
    let w = uniform(rng, F32, cols, 0.5, 1.5);
    let b = uniform(rng, F32, cols, -0.5, 0.5);
    let (values, zmax) = reference::layer_norm(&x, &w, &b, reference_f32(1e-5), rows, cols);
    let tol = (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            4.0 * (cols + 2) as f64 * eps() * (w[c].abs() * zmax[r] + b[c].abs())
        })
        .collect();
    // A block of 100 threads: a partial last warp.
    Ok(vec![Case {
        what: format!("layernorm {rows}x{cols}"),
        kernel: "layernorm",
        grid: 4,
        block: 100,
        shared: 0,
        args: vec![
            poison(F32, rows * cols),
            floats(F32, &x)?,
            floats(F32, &w)?,
            floats(F32, &b)?,
            i32s(rows),
            i32s(cols),
        ],
        expect: vec![f32_out(0, values, tol, cols)],
    }])
}

pub(super) fn softmax_warp(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let mut v = Vec::new();
    for (rows, cols) in [(13usize, 333usize), (5, 1), (3, 64)] {
        let x = uniform(rng, F32, rows * cols, -6.0, 6.0);
        let values = reference::softmax(&x, rows, cols);
        let base = Tol::transcendental(F32);
        let tol = values
            .iter()
            .map(|&e| base.bound(e) + cols as f64 * eps() * e)
            .collect();
        v.push(Case {
            what: format!("softmax_warp {rows}x{cols}"),
            kernel: "softmax_warp",
            grid: 2,
            block: 128,
            shared: 0,
            args: vec![
                poison(F32, rows * cols),
                floats(F32, &x)?,
                i32s(rows),
                i32s(cols),
            ],
            expect: vec![f32_out(0, values, tol, cols)],
        });
    }
    Ok(v)
}

pub(super) fn cross_entropy(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (rows, cols) = (13usize, 333usize);
    let x = uniform(rng, F32, rows * cols, -6.0, 6.0);
    let targets: Vec<i64> = (0..rows)
        .map(|_| rng.random_range(0..cols as i64))
        .collect();
    let mut values = Vec::new();
    let mut tol = Vec::new();
    for (r, &t) in targets.iter().enumerate() {
        let row = &x[r * cols..(r + 1) * cols];
        let e = reference::cross_entropy(row, t);
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v));
        values.push(e);
        tol.push(Tol::transcendental(F32).bound(e) + cols as f64 * eps() * (1.0 + m.abs()));
    }
    Ok(vec![Case {
        what: format!("cross_entropy {rows}x{cols}"),
        kernel: "cross_entropy",
        grid: 3,
        block: 96,
        shared: 0,
        args: vec![
            poison(F32, rows),
            floats(F32, &x)?,
            ints(DType::I32, &targets)?,
            i32s(rows),
            i32s(cols),
        ],
        expect: vec![f32_out(0, values, tol, 0)],
    }])
}

pub(super) fn ballots(rng: &mut CheckRng, lanes: u32) -> CheckResult<Vec<Case>> {
    let ws = lanes as usize;
    let mut v = Vec::new();
    // Whole warps, and blocks whose last warp is partial (of a size that is not a power of two).
    for (grid, block) in [(4usize, 128usize), (3, 44), (2, 100)] {
        let n = grid * block;
        let mut x = uniform(rng, F32, n, -1.0, 1.0);
        // One warp all positive, one all negative.
        for v in x.iter_mut().skip(ws).take(ws) {
            *v = v.abs() + 0.5;
        }
        for v in x.iter_mut().skip(2 * ws).take(ws) {
            *v = -v.abs() - 0.5;
        }
        let per_block = block.div_ceil(ws);
        let warps = grid * per_block;
        let mut values = Vec::new();
        for b in 0..grid {
            for k in 0..per_block {
                let lo = b * block + k * ws;
                let hi = (lo + ws).min((b + 1) * block);
                let pos = x[lo..hi].iter().filter(|&&v| v > 0.0).count() as i64;
                let live = (hi - lo) as i64;
                values.extend([pos, (pos > 0) as i64, (pos == live) as i64, live, 7]);
            }
        }
        v.push(Case {
            what: format!("ballots, {grid} blocks of {block}, {ws}-lane warps"),
            kernel: "ballots",
            grid: grid as u32,
            block: block as u32,
            shared: 0,
            args: vec![
                ints(DType::I32, &[-7, -7, -7, -7, 7].repeat(warps))?,
                floats(F32, &x)?,
            ],
            expect: vec![Expect::Ints {
                arg: 0,
                dtype: DType::I32,
                values,
            }],
        });
    }
    Ok(v)
}

pub(super) fn shuffles(rng: &mut CheckRng, lanes: u32) -> CheckResult<Vec<Case>> {
    let ws = lanes as usize;
    let n = 512;
    let mut v = Vec::new();
    for width in [8usize, 16, ws] {
        let x = uniform(rng, F32, n, -4.0, 4.0);
        let (mut f, mut tol, mut ii) = (vec![], vec![], vec![]);
        for i in 0..n {
            let (wbase, lane) = (i - i % ws, i % ws);
            let (seg, within) = (wbase + lane - lane % width, lane % width);
            let warp = &x[wbase..wbase + ws];
            let sum: f64 = warp.iter().sum();
            let abs: f64 = warp.iter().map(|a| a.abs()).sum();
            let max = warp.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let min_i = warp.iter().map(|&a| (a as f32 * 1000.0) as i64).min();
            f.extend([
                x[seg + 3 % width],
                if within >= 2 { x[i - 2] } else { x[i] },
                if within + 5 < width { x[i + 5] } else { x[i] },
                x[seg + (within ^ 1)],
                sum,
                max,
            ]);
            tol.extend([0.0, 0.0, 0.0, 0.0, ws as f64 * eps() * abs, 0.0]);
            ii.extend([(i ^ (width / 2)) as i64, min_i.unwrap_or(0)]);
        }
        v.push(Case {
            what: format!("shuffles width {width}, {ws}-lane warps"),
            kernel: "shuffles",
            grid: 4,
            block: 128,
            shared: 0,
            args: vec![
                poison(F32, 6 * n),
                ints(DType::I32, &vec![-7; 2 * n])?,
                floats(F32, &x)?,
                i32s(width),
            ],
            expect: vec![
                f32_out(0, f, tol, 6),
                Expect::Ints {
                    arg: 1,
                    dtype: DType::I32,
                    values: ii,
                },
            ],
        });
    }
    Ok(v)
}

pub(super) fn axpb_f16(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let n = 1000;
    let x = uniform(rng, DType::F16, n, -8.0, 8.0);
    let a = round_to(DType::F16, rng.random_range(-2.0..2.0));
    let values: Vec<f64> = x
        .iter()
        .map(|&v| round_to(DType::F16, round_to(DType::F16, v * a) + 1.0))
        .collect();
    Ok(vec![Case {
        what: format!("axpb_f16 n={n}"),
        kernel: "axpb_f16",
        grid: 3,
        block: 64,
        shared: 0,
        args: vec![
            poison(DType::F16, n),
            floats(DType::F16, &x)?,
            Arg::S(Scalar::F16(f16_bits(a))),
            i64s(n),
        ],
        expect: vec![Expect::Floats {
            arg: 0,
            dtype: DType::F16,
            tol: vec![0.0; n],
            values,
            cols: 0,
        }],
    }])
}

pub(super) fn rowsum_bf16(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (rows, cols) = (9usize, 77usize);
    let x = uniform(rng, DType::BF16, rows * cols, -4.0, 4.0);
    let mut values = Vec::new();
    let mut tol = Vec::new();
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let s: f64 = row.iter().sum();
        let abs: f64 = row.iter().map(|v| v.abs()).sum();
        values.push(s);
        // One bf16 rounding of the f32 sum, after `cols` f32 additions.
        tol.push(2f64.powi(-8) * s.abs() + cols as f64 * eps() * abs * 2.0);
    }
    Ok(vec![Case {
        what: format!("rowsum_bf16 {rows}x{cols}"),
        kernel: "rowsum_bf16",
        grid: 4,
        block: 50,
        shared: 0,
        args: vec![
            poison(DType::BF16, rows),
            floats(DType::BF16, &x)?,
            i32s(rows),
            i32s(cols),
        ],
        expect: vec![Expect::Floats {
            arg: 0,
            dtype: DType::BF16,
            values,
            tol,
            cols: 0,
        }],
    }])
}

pub(super) fn atomics(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (n, bins) = (20_000usize, 7i64);
    let x: Vec<i64> = (0..n).map(|_| rng.random_range(-1000..1000)).collect();
    let mut hist = vec![0i64; bins as usize];
    for &v in &x {
        hist[v.rem_euclid(bins) as usize] += 1;
    }
    // Every partial sum is an integer below 2^24 in magnitude: exact in any order.
    let total: f64 = x.iter().map(|&v| v as f64).sum();
    let max = x.iter().copied().max().unwrap_or(i64::MIN);
    Ok(vec![Case {
        what: format!("atomics n={n}"),
        kernel: "atomics",
        grid: 16,
        block: 128,
        shared: 0,
        args: vec![
            Arg::Buf(vec![0; 4 * bins as usize]),
            floats(F32, &[0.0])?,
            ints(DType::I32, &[i32::MIN as i64])?,
            Arg::Buf(vec![0; 8]),
            ints(DType::I32, &x)?,
            i64s(n),
            i32s(bins as usize),
        ],
        expect: vec![
            Expect::Ints {
                arg: 0,
                dtype: DType::I32,
                values: hist,
            },
            f32_out(1, vec![total], vec![0.0], 0),
            Expect::Ints {
                arg: 2,
                dtype: DType::I32,
                values: vec![max],
            },
            Expect::Ints {
                arg: 3,
                dtype: DType::I64,
                values: vec![n as i64],
            },
        ],
    }])
}

pub(super) fn cas_exch(_: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (n, nslots) = (5000usize, 6usize);
    let permutation = move |slots: &[u8], all: &[Vec<u8>]| -> Result<(), String> {
        let slots = le_i32s(slots);
        let seen = le_i32s(all.get(2).map_or(&[][..], |v| v));
        if seen.len() != n || slots.len() != nslots {
            return Err("wrong sizes".into());
        }
        // Per slot: the values threads saw, and the final value, are -1 and every index of
        // the slot, each exactly once.
        for (s, &last) in slots.iter().enumerate() {
            let mut got: Vec<i32> = (s..n).step_by(nslots).map(|i| seen[i]).collect();
            got.push(last);
            got.sort_unstable();
            let mut want: Vec<i32> = (s..n).step_by(nslots).map(|i| i as i32).collect();
            want.insert(0, -1);
            if got != want {
                return Err(format!(
                    "slot {s}: the exchanged values are not -1 and the slot's indices once each"
                ));
            }
        }
        Ok(())
    };
    Ok(vec![Case {
        what: format!("cas_exch n={n}"),
        kernel: "cas_exch",
        grid: 8,
        block: 96,
        shared: 0,
        args: vec![
            Arg::Buf(vec![0; 4]),
            ints(DType::I32, &vec![-1; nslots])?,
            ints(DType::I32, &vec![-7; n])?,
            i64s(n),
            i32s(nslots),
        ],
        expect: vec![
            Expect::Ints {
                arg: 0,
                dtype: DType::I32,
                values: vec![n as i64],
            },
            Expect::Holds {
                arg: 1,
                check: Box::new(permutation),
            },
        ],
    }])
}

pub(super) fn le_i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(super) fn reverse_blocks(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (blocks, nt) = (5usize, 96usize);
    let x = uniform(rng, F32, blocks * nt, -1.0, 1.0);
    let values: Vec<f64> = (0..blocks * nt)
        .map(|i| x[i - i % nt + nt - 1 - i % nt])
        .collect();
    Ok(vec![Case {
        what: format!("reverse_blocks {blocks} blocks of {nt}"),
        kernel: "reverse_blocks",
        grid: blocks as u32,
        block: nt as u32,
        shared: (nt * 4) as u32,
        args: vec![poison(F32, blocks * nt), floats(F32, &x)?],
        expect: vec![f32_out(0, values, vec![0.0; blocks * nt], nt)],
    }])
}
