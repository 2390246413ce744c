//! Broadcasts, transposes, slices, pads (negative and interior), concatenations, reverses,
//! reshapes, iotas, dynamic slices and updates, fused with elementwise ops, against the
//! reference; reshape and bitcast_convert of a buffer alias it.

use crate::check_exact as check;
use crate::data::{Arr, random};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, CompareDirection, CompareType, Graph, UnaryOp, Value};

fn int_const(g: &mut Graph, v: i32) -> Value {
    g.constant(DType::I32, &[], v.to_le_bytes().to_vec())
        .unwrap()
}

#[test]
fn movement_fusions() {
    for d in [DType::F32, DType::I32, DType::BF16] {
        let mut g = Graph::new(format!("movement_{d}"));
        let x = g.parameter("x", d, &[3, 4, 5]).unwrap();
        let y = g.parameter("y", d, &[4]).unwrap();
        let s = g.parameter("s", d, &[]).unwrap();
        // transpose + broadcast + add, sliced with strides, reversed.
        let t = g.transpose(x, &[2, 0, 1]).unwrap(); // [5,3,4]
        let yb = g.broadcast_in_dim(y, &[5, 3, 4], &[2]).unwrap();
        let sum = g.binary(BinaryOp::Add, t, yb).unwrap();
        let sl = g.slice(sum, &[1, 0, 1], &[5, 3, 4], &[2, 1, 2]).unwrap(); // [2,3,2]
        let rv = g.reverse(sl, &[0, 2]).unwrap();
        g.result("slice_reverse", rv).unwrap();
        // pad: negative low, interior, positive high, with a scalar pad value.
        let p = g.pad(x, s, &[-1, 2, 0], &[1, -1, 3], &[1, 0, 2]).unwrap();
        g.result("pad", p).unwrap();
        // concatenate of a fused op, a parameter and a broadcast scalar.
        let n = g.unary(UnaryOp::Negate, x).unwrap();
        let sb = g.broadcast_in_dim(s, &[3, 2, 5], &[]).unwrap();
        let c = g.concatenate(&[n, x, sb], 1).unwrap(); // [3,10,5]
        g.result("concatenate", c).unwrap();
        // reshape of a fused value (not a buffer): linear index through.
        let m = g.binary(BinaryOp::Multiply, x, x).unwrap();
        let r = g.reshape(m, &[15, 4]).unwrap();
        let rt = g.transpose(r, &[1, 0]).unwrap();
        g.result("reshape_transpose", rt).unwrap();
        // iota (as the type), dynamic slice with clamped starts, dynamic update slice.
        let io = g.iota(d, &[3, 4, 5], 2).unwrap();
        let xi = g.binary(BinaryOp::Maximum, x, io).unwrap();
        let (i0, i1, i2) = (
            int_const(&mut g, 1),
            int_const(&mut g, -3),
            int_const(&mut g, 4),
        );
        let ds = g.dynamic_slice(xi, &[i0, i1, i2], &[2, 2, 3]).unwrap();
        g.result("dynamic_slice", ds).unwrap();
        let up = g.parameter("u", d, &[2, 2, 3]).unwrap();
        let j0 = int_const(&mut g, 2);
        let dus = g.dynamic_update_slice(x, up, &[j0, i0, i1]).unwrap();
        g.result("dynamic_update_slice", dus).unwrap();
        let inputs = vec![
            random(d, &[3, 4, 5], 1),
            random(d, &[4], 2),
            random(d, &[], 3),
            random(d, &[2, 2, 3], 4),
        ];
        let low = check(&g, &inputs);
        // One kernel per result, the producers fused.
        assert_eq!(low.launches, g.results().len(), "{d}");
    }
}

#[test]
fn reshape_and_bitcast_alias_buffers() {
    let mut g = Graph::new("alias");
    let x = g.parameter("x", DType::F32, &[2, 6]).unwrap();
    let r = g.reshape(x, &[3, 4]).unwrap();
    let b = g.bitcast_convert(r, DType::I32).unwrap();
    let n = g.unary(UnaryOp::Not, b).unwrap();
    g.result("not_bits", n).unwrap();
    // A wider element from two narrower ones: the operand materialized, then reinterpreted.
    let y = g.parameter("y", DType::I32, &[3, 2]).unwrap();
    let y2 = g.binary(BinaryOp::Add, y, y).unwrap();
    let f = g.bitcast_convert(y2, DType::F64).unwrap();
    g.result("wide", f).unwrap();
    let narrow = g.bitcast_convert(x, DType::U8).unwrap();
    g.result("narrow", narrow).unwrap();
    let inputs = vec![
        random(DType::F32, &[2, 6], 5),
        random(DType::I32, &[3, 2], 6),
    ];
    let low = check(&g, &inputs);
    // `not` reads x's bytes through the aliases; `wide` is y+y's kernel then a copy into the
    // output; `narrow` a copy of x's bytes.
    assert_eq!(low.launches, 2);
}

/// Random chains of movement and elementwise ops (seeded), all in one graph: each chain one
/// kernel, every element against the reference.
#[test]
fn random_movement_chains() {
    use rand::{Rng, SeedableRng};
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    let d = DType::F32;
    let mut g = Graph::new("random_chains");
    let x = g.parameter("x", d, &[3, 4, 5]).unwrap();
    let s = g.parameter("s", d, &[]).unwrap();
    let mut chains = 0;
    while chains < 24 {
        let mut v = x;
        for _ in 0..4 {
            let t = g.ty(v).clone();
            let rank = t.rank();
            let next = match r.random_range(0..8) {
                0 => {
                    let mut perm: Vec<usize> = (0..rank).collect();
                    for i in (1..rank).rev() {
                        perm.swap(i, r.random_range(0..=i));
                    }
                    g.transpose(v, &perm)
                }
                1 => {
                    let start: Vec<u64> =
                        t.dims.iter().map(|&n| r.random_range(0..=n / 2)).collect();
                    let limit: Vec<u64> = t
                        .dims
                        .iter()
                        .zip(&start)
                        .map(|(&n, &s)| r.random_range(s..=n))
                        .collect();
                    let strides: Vec<u64> = (0..rank).map(|_| r.random_range(1..3)).collect();
                    g.slice(v, &start, &limit, &strides)
                }
                2 => {
                    let dims: Vec<usize> =
                        (0..rank).filter(|_| r.random_range(0..2) == 0).collect();
                    g.reverse(v, &dims)
                }
                3 => {
                    let low: Vec<i64> = (0..rank).map(|_| r.random_range(-1..3)).collect();
                    let high: Vec<i64> = (0..rank).map(|_| r.random_range(-1..3)).collect();
                    let interior: Vec<u64> = (0..rank).map(|_| r.random_range(0..2)).collect();
                    g.pad(v, s, &low, &high, &interior)
                }
                4 if rank < 4 => {
                    let at = r.random_range(0..=rank);
                    let mut dims = t.dims.clone();
                    dims.insert(at, 2);
                    let map: Vec<usize> =
                        (0..rank).map(|i| if i < at { i } else { i + 1 }).collect();
                    g.broadcast_in_dim(v, &dims, &map)
                }
                5 => {
                    let n = t.elements();
                    g.reshape(v, &[n])
                }
                6 if rank > 0 => {
                    let dim = r.random_range(0..rank);
                    let neg = g.unary(UnaryOp::Negate, v).unwrap();
                    g.concatenate(&[v, neg], dim)
                }
                _ => g.binary(BinaryOp::Multiply, v, v),
            };
            if let Ok(n) = next
                && g.ty(n).elements() > 0
                && g.ty(n).elements() < 4000
            {
                v = n;
            }
        }
        if v != x {
            g.result(&format!("chain{chains}"), v).unwrap();
            chains += 1;
        }
    }
    let low = check(&g, &[random(d, &[3, 4, 5], 77), random(d, &[], 78)]);
    assert_eq!(low.launches, chains);
}

/// `bitcast_convert` of a fused value between types of one width: the bits reinterpreted in
/// the kernel.
#[test]
fn fused_bitcasts_reinterpret_bits() {
    let mut g = Graph::new("fused_bitcasts");
    for (k, (from, to)) in [
        (DType::F16, DType::BF16),
        (DType::BF16, DType::F16),
        (DType::I8, DType::U8),
        (DType::U8, DType::I8),
        (DType::F32, DType::I32),
        (DType::I32, DType::F32),
        (DType::F64, DType::I64),
        (DType::I64, DType::F64),
    ]
    .into_iter()
    .enumerate()
    {
        let x = g.parameter(&format!("x{k}"), from, &[33]).unwrap();
        let y = g.unary(UnaryOp::Negate, x).unwrap();
        let b = g.bitcast_convert(y, to).unwrap();
        g.result(&format!("{from}_to_{to}"), b).unwrap();
    }
    let inputs: Vec<Arr> = g
        .params()
        .iter()
        .enumerate()
        .map(|(k, p)| random(g.ty(*p).dtype, &[33], 100 + k as u64))
        .collect();
    let low = check(&g, &inputs);
    assert_eq!(low.launches, 8);
}

/// A parameter read both as itself and through `bitcast_convert` in one fused kernel: the
/// bitcast shares the parameter's buffer, and the kernel reads it once per type (a buffer
/// read as the other type converted the value instead of its bits; found by a
/// `chlo.next_after` decomposition in a jax.export artifact).
#[test]
fn a_buffer_read_as_two_types_in_one_kernel() {
    let mut g = Graph::new("two_types");
    for (k, (from, to)) in [
        (DType::F32, DType::I32),
        (DType::F64, DType::U64),
        (DType::F16, DType::I16),
        (DType::U8, DType::I8),
    ]
    .into_iter()
    .enumerate()
    {
        let x = g.parameter(&format!("x{k}"), from, &[29]).unwrap();
        let bits = g.bitcast_convert(x, to).unwrap();
        // The value itself in the same kernel: select(x == x, bits, bits ^ bits).
        let kind = match from {
            DType::U8 => CompareType::Unsigned,
            _ => CompareType::Float,
        };
        let eq = g.compare(CompareDirection::Eq, kind, x, x).unwrap();
        let zero = g.binary(BinaryOp::Xor, bits, bits).unwrap();
        let r = g.select(eq, bits, zero).unwrap();
        g.result(&format!("{from}_as_{to}"), r).unwrap();
    }
    let inputs: Vec<Arr> = g
        .params()
        .iter()
        .enumerate()
        .map(|(k, p)| random(g.ty(*p).dtype, &[29], 300 + k as u64))
        .collect();
    let low = check(&g, &inputs);
    assert_eq!(low.launches, 4);
}
