//! `reduce_window`, `convolution` and `select_and_scatter` (built from pad, gather, reduce,
//! dot and scatter nodes) against direct loops over the spec's definitions written here:
//! random inputs, results compared exactly (integer arithmetic wraps in both; the float
//! convolution's inputs are small integers, so every sum is exact).

use crate::data::{Arr, random, wrap};
use crate::reduce::body;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, ConvDims, Graph, WindowDims};

/// Row-major flat index of `c` in `dims`.
fn flat(c: &[u64], dims: &[u64]) -> usize {
    c.iter()
        .zip(dims)
        .fold(0, |a, (x, n)| a * *n as usize + *x as usize)
}

/// Every index of `dims`, row-major.
fn indices(dims: &[u64]) -> Vec<Vec<u64>> {
    let mut out = vec![vec![]];
    for &n in dims {
        out = out
            .into_iter()
            .flat_map(|p| {
                (0..n).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    out
}

/// The element of the input at coordinate `p` of its padded, dilated form (`None`: padding
/// or a dilation hole).
fn source(p: i64, n: u64, low: i64, dil: u64) -> Option<u64> {
    let q = p - low;
    if q < 0 || n == 0 || q > ((n - 1) * dil) as i64 || q % dil as i64 != 0 {
        return None;
    }
    Some(q as u64 / dil)
}

fn small_ints(d: DType, dims: &[u64], seed: u64) -> Arr {
    let r = random(DType::I8, dims, seed);
    let v: Vec<i128> = r.i.iter().map(|x| x.rem_euclid(7) - 3).collect();
    if d.is_float() {
        Arr::floats(d, dims, v.iter().map(|x| *x as f64).collect())
    } else {
        Arr::ints(d, dims, v)
    }
}

fn got(g: &Graph, outs: &[Vec<u8>], k: usize) -> Arr {
    let t = g.ty(g.results()[k].1);
    Arr::from_bytes(t.dtype, &t.dims, &outs[k])
}

#[test]
fn reduce_window_matches_a_direct_loop() {
    let d = DType::I32;
    let dims = [5u64, 6, 3];
    let w = WindowDims {
        dimensions: vec![2, 3, 1],
        strides: vec![2, 1, 2],
        base_dilations: vec![2, 1, 1],
        window_dilations: vec![1, 2, 1],
        padding: vec![(1, -1), (2, 1), (0, 1)],
    };
    let init = 7i128;
    let mut g = Graph::new("reduce_window_i32");
    let x = g.parameter("x", d, &dims).unwrap();
    let c = g
        .constant(d, &[], (init as i32).to_le_bytes().to_vec())
        .unwrap();
    let s = g
        .reduce_window(&[x], &[c], &w, body(BinaryOp::Add, d))
        .unwrap();
    g.result("sum", s[0]).unwrap();
    let m = g
        .reduce_window(&[x], &[c], &w, body(BinaryOp::Maximum, d))
        .unwrap();
    g.result("max", m[0]).unwrap();
    let input = random(d, &dims, 31);
    let (low, outs) = run(&g, &[input.to_bytes()]);
    // One kernel per reduce_window: the pad and the window gather fuse into the reduction.
    assert_eq!(low.launches, 2);
    let out_dims = g.ty(s[0]).dims.clone();
    let (mut sums, mut maxes) = (vec![], vec![]);
    for o in indices(&out_dims) {
        let (mut sum, mut max) = (init, init);
        for e in indices(&w.dimensions) {
            let mut at = vec![];
            for i in 0..3 {
                let p = (o[i] * w.strides[i] + e[i] * w.window_dilations[i]) as i64;
                at.push(source(p, dims[i], w.padding[i].0, w.base_dilations[i]));
            }
            let v = match at.iter().copied().collect::<Option<Vec<u64>>>() {
                Some(c) => input.i[flat(&c, &dims)],
                None => init,
            };
            sum = wrap(d, sum + v);
            max = max.max(v);
        }
        sums.push(sum);
        maxes.push(max);
    }
    assert_eq!(got(&g, &outs, 0), Arr::ints(d, &out_dims, sums));
    assert_eq!(got(&g, &outs, 1), Arr::ints(d, &out_dims, maxes));
}

/// A direct convolution: `dims` as the spec's, elements as f64 or wrapped integers.
fn conv_reference(lhs: &Arr, rhs: &Arr, c: &ConvDims, out_dims: &[u64]) -> Arr {
    let d = lhs.dtype;
    let ns = c.input_spatial.len();
    let (g, bg) = (c.feature_group_count, c.batch_group_count);
    let kout = rhs.dims[c.kernel_output_feature];
    let kin = rhs.dims[c.kernel_input_feature];
    let nb = out_dims[c.output_batch];
    let ksp: Vec<u64> = c.kernel_spatial.iter().map(|&k| rhs.dims[k]).collect();
    let mut fv = vec![];
    let mut iv = vec![];
    for o in indices(out_dims) {
        let f = o[c.output_feature];
        let (fg, bgi) = (f / (kout / g), f / (kout / bg));
        let n = bgi * nb + o[c.output_batch];
        let (mut accf, mut acci) = (0f64, 0i128);
        for ch in 0..kin {
            for k in indices(&ksp) {
                let mut li = vec![0u64; ns + 2];
                li[c.input_batch] = n;
                li[c.input_feature] = fg * kin + ch;
                let mut inside = true;
                for j in 0..ns {
                    let p = (o[c.output_spatial[j]] * c.window_strides[j]
                        + k[j] * c.rhs_dilation[j]) as i64;
                    let dim = c.input_spatial[j];
                    match source(p, lhs.dims[dim], c.padding[j].0, c.lhs_dilation[j]) {
                        Some(q) => li[dim] = q,
                        None => inside = false,
                    }
                }
                if !inside {
                    continue;
                }
                let mut ki = vec![0u64; ns + 2];
                ki[c.kernel_output_feature] = f;
                ki[c.kernel_input_feature] = ch;
                for j in 0..ns {
                    let kk = if c.window_reversal[j] {
                        ksp[j] - 1 - k[j]
                    } else {
                        k[j]
                    };
                    ki[c.kernel_spatial[j]] = kk;
                }
                let (a, b) = (flat(&li, &lhs.dims), flat(&ki, &rhs.dims));
                if d.is_float() {
                    accf += lhs.f[a] * rhs.f[b];
                } else {
                    acci = wrap(d, acci + wrap(d, lhs.i[a] * rhs.i[b]));
                }
            }
        }
        fv.push(accf);
        iv.push(acci);
    }
    if d.is_float() {
        Arr::floats(d, out_dims, fv)
    } else {
        Arr::ints(d, out_dims, iv)
    }
}

#[test]
fn convolution_matches_a_direct_loop() {
    // (lhs dims, rhs dims, dimension numbers and window): a permuted 2-D layout with both
    // dilations, negative padding and a reversed window; feature groups; batch groups.
    let base = ConvDims {
        input_batch: 2,
        input_feature: 0,
        input_spatial: vec![3, 1],
        kernel_input_feature: 3,
        kernel_output_feature: 0,
        kernel_spatial: vec![1, 2],
        output_batch: 1,
        output_feature: 3,
        output_spatial: vec![2, 0],
        window_strides: vec![2, 1],
        padding: vec![(1, -1), (2, 0)],
        lhs_dilation: vec![1, 2],
        rhs_dilation: vec![2, 1],
        window_reversal: vec![true, false],
        feature_group_count: 1,
        batch_group_count: 1,
    };
    let cases = [
        // lhs [C, S1, N, S0], rhs [O, K0, K1, I]
        (vec![3u64, 5, 2, 7], vec![4u64, 2, 3, 3], base.clone()),
        (
            vec![6, 4, 2, 5],
            vec![4, 3, 2, 3],
            ConvDims {
                feature_group_count: 2,
                ..base.clone()
            },
        ),
        (
            vec![3, 4, 4, 5],
            vec![6, 3, 2, 3],
            ConvDims {
                batch_group_count: 2,
                window_reversal: vec![false, false],
                ..base.clone()
            },
        ),
    ];
    for (i, (ld, rd, c)) in cases.iter().enumerate() {
        for d in [DType::F32, DType::I32] {
            let mut g = Graph::new(format!("conv{i}_{d}"));
            let l = g.parameter("lhs", d, ld).unwrap();
            let r = g.parameter("rhs", d, rd).unwrap();
            let v = g.convolution(l, r, c, d).unwrap();
            g.result("out", v).unwrap();
            let (a, b) = if d.is_float() {
                (
                    small_ints(d, ld, 40 + i as u64),
                    small_ints(d, rd, 50 + i as u64),
                )
            } else {
                (random(d, ld, 40 + i as u64), random(d, rd, 50 + i as u64))
            };
            let (low, outs) = run(&g, &[a.to_bytes(), b.to_bytes()]);
            if d == DType::F32 {
                assert_eq!(low.gemms, 1, "{}: im2col and one Gemm", g.name());
            }
            let out_dims = g.ty(v).dims.clone();
            let want = conv_reference(&a, &b, c, &out_dims);
            assert_eq!(got(&g, &outs, 0), want, "{}", g.name());
        }
    }
}
