//! `reduce`: sums, maxima, an argmax (two operands), a sum of a fused product, integer sums
//! that wrap, against the reference; the reduction fuses its elementwise producers.

use crate::check_exact as check;
use crate::data::{Arr, random};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, CompareDirection, CompareType, Graph, Value};

/// The body `(acc, x) -> op(acc, x)` over scalars of `d`.
pub fn body(op: BinaryOp, d: DType) -> Graph {
    let mut b = Graph::new(format!("{}_{d}", op.name()));
    let acc = b.parameter("acc", d, &[]).unwrap();
    let x = b.parameter("x", d, &[]).unwrap();
    let r = b.binary(op, acc, x).unwrap();
    b.result("r", r).unwrap();
    b
}

fn constant(g: &mut Graph, a: Arr) -> Value {
    g.constant(a.dtype, &a.dims.clone(), a.to_bytes()).unwrap()
}

#[test]
fn sums_and_maxima() {
    for d in [DType::F32, DType::F16, DType::F64] {
        let mut g = Graph::new(format!("reduce_{d}"));
        let x = g.parameter("x", d, &[4, 6, 5]).unwrap();
        let zero = constant(&mut g, Arr::floats(d, &[], vec![0.0]));
        let ninf = constant(&mut g, Arr::floats(d, &[], vec![f64::NEG_INFINITY]));
        let s = g
            .reduce(&[x], &[zero], &[1], body(BinaryOp::Add, d))
            .unwrap();
        g.result("sum_1", s[0]).unwrap();
        let m = g
            .reduce(&[x], &[ninf], &[2, 0], body(BinaryOp::Maximum, d))
            .unwrap();
        g.result("max_0_2", m[0]).unwrap();
        let all = g
            .reduce(&[x], &[zero], &[0, 1, 2], body(BinaryOp::Add, d))
            .unwrap();
        g.result("sum_all", all[0]).unwrap();
        let low = check(&g, &[random(d, &[4, 6, 5], 11)]);
        assert_eq!(low.launches, 3);
    }
}

#[test]
fn integer_sums_wrap() {
    for d in [DType::I8, DType::I32, DType::I64, DType::U8] {
        let mut g = Graph::new(format!("isum_{d}"));
        let x = g.parameter("x", d, &[7, 9]).unwrap();
        let zero = constant(&mut g, Arr::ints(d, &[], vec![0]));
        let s = g
            .reduce(&[x], &[zero], &[0], body(BinaryOp::Add, d))
            .unwrap();
        g.result("sum", s[0]).unwrap();
        let m = g
            .reduce(&[x], &[zero], &[1], body(BinaryOp::Multiply, d))
            .unwrap();
        g.result("product", m[0]).unwrap();
        check(&g, &[random(d, &[7, 9], 12)]);
    }
}

/// Argmax as JAX emits it: values and their indices reduced together, the first maximum
/// kept, NaN winning.
#[test]
fn argmax_two_operands() {
    let d = DType::F32;
    let mut b = Graph::new("argmax_body");
    let av = b.parameter("acc_v", d, &[]).unwrap();
    let ai = b.parameter("acc_i", DType::I32, &[]).unwrap();
    let xv = b.parameter("x_v", d, &[]).unwrap();
    let xi = b.parameter("x_i", DType::I32, &[]).unwrap();
    let gt = b
        .compare(CompareDirection::Gt, CompareType::Float, xv, av)
        .unwrap();
    let x_nan = b
        .compare(CompareDirection::Ne, CompareType::Float, xv, xv)
        .unwrap();
    let a_nan = b
        .compare(CompareDirection::Ne, CompareType::Float, av, av)
        .unwrap();
    let not_a_nan = b.unary(xthunk_tensor::graph::UnaryOp::Not, a_nan).unwrap();
    let nan_wins = b.binary(BinaryOp::And, x_nan, not_a_nan).unwrap();
    let take = b.binary(BinaryOp::Or, gt, nan_wins).unwrap();
    let v = b.select(take, xv, av).unwrap();
    let i = b.select(take, xi, ai).unwrap();
    b.result("v", v).unwrap();
    b.result("i", i).unwrap();

    let mut g = Graph::new("argmax");
    let x = g.parameter("x", d, &[5, 9]).unwrap();
    let io = g.iota(DType::I32, &[5, 9], 1).unwrap();
    let ninf = constant(&mut g, Arr::floats(d, &[], vec![f64::NEG_INFINITY]));
    let zero = constant(&mut g, Arr::ints(DType::I32, &[], vec![0]));
    let r = g.reduce(&[x, io], &[ninf, zero], &[1], b).unwrap();
    g.result("max", r[0]).unwrap();
    g.result("argmax", r[1]).unwrap();
    let low = check(&g, &[random(d, &[5, 9], 13)]);
    // One kernel writes both results; the iota is computed inside it.
    assert_eq!((low.kernels, low.launches), (1, 1));
}

#[test]
fn reduction_fuses_its_producers() {
    let d = DType::F32;
    let mut g = Graph::new("sum_of_squares");
    let x = g.parameter("x", d, &[6, 8]).unwrap();
    let y = g.parameter("y", d, &[8]).unwrap();
    let yb = g.broadcast_in_dim(y, &[6, 8], &[1]).unwrap();
    let diff = g.binary(BinaryOp::Subtract, x, yb).unwrap();
    let sq = g.binary(BinaryOp::Multiply, diff, diff).unwrap();
    let zero = constant(&mut g, Arr::floats(d, &[], vec![0.0]));
    let s = g
        .reduce(&[sq], &[zero], &[1], body(BinaryOp::Add, d))
        .unwrap();
    g.result("s", s[0]).unwrap();
    let low = check(&g, &[random(d, &[6, 8], 14), random(d, &[8], 15)]);
    // The broadcast, the difference (read twice by the square, computed once) and the square
    // all fuse into the reduction's kernel.
    assert_eq!(low.launches, 1);
}

/// Argmax whose body breaks ties by the smaller index (as JAX's), so any schedule gives the
/// first maximum; NaN wins.
fn argmax_body() -> Graph {
    let d = DType::F32;
    let mut b = Graph::new("argmax_tie_break");
    let av = b.parameter("acc_v", d, &[]).unwrap();
    let ai = b.parameter("acc_i", DType::I32, &[]).unwrap();
    let xv = b.parameter("x_v", d, &[]).unwrap();
    let xi = b.parameter("x_i", DType::I32, &[]).unwrap();
    let gt = b
        .compare(CompareDirection::Gt, CompareType::Float, xv, av)
        .unwrap();
    let x_nan = b
        .compare(CompareDirection::Ne, CompareType::Float, xv, xv)
        .unwrap();
    let a_nan = b
        .compare(CompareDirection::Ne, CompareType::Float, av, av)
        .unwrap();
    let not_a_nan = b.unary(xthunk_tensor::graph::UnaryOp::Not, a_nan).unwrap();
    let nan_wins = b.binary(BinaryOp::And, x_nan, not_a_nan).unwrap();
    let eq = b
        .compare(CompareDirection::Eq, CompareType::Float, xv, av)
        .unwrap();
    let both_nan = b.binary(BinaryOp::And, x_nan, a_nan).unwrap();
    let same = b.binary(BinaryOp::Or, eq, both_nan).unwrap();
    let earlier = b
        .compare(CompareDirection::Lt, CompareType::Signed, xi, ai)
        .unwrap();
    let tie = b.binary(BinaryOp::And, same, earlier).unwrap();
    let take1 = b.binary(BinaryOp::Or, gt, nan_wins).unwrap();
    let take = b.binary(BinaryOp::Or, take1, tie).unwrap();
    let v = b.select(take, xv, av).unwrap();
    let i = b.select(take, xi, ai).unwrap();
    b.result("v", v).unwrap();
    b.result("i", i).unwrap();
    b
}

/// Many reduced elements per result: a block per result, a tree through shared memory; exact
/// where the body is associative (integer-valued float sums, maxima, wrapping integer sums,
/// argmax with its tie-break).
#[test]
fn large_reductions_use_a_block_per_result() {
    use rand::{Rng, SeedableRng};
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let d = DType::F32;
    let mut g = Graph::new("large_reduce");
    let x = g.parameter("x", d, &[3, 1200]).unwrap();
    let sp = g.parameter("specials", d, &[2, 1100]).unwrap();
    let i = g.parameter("i", DType::I32, &[2, 3000]).unwrap();
    let zero = constant(&mut g, Arr::floats(d, &[], vec![0.0]));
    let ninf = constant(&mut g, Arr::floats(d, &[], vec![f64::NEG_INFINITY]));
    let izero = constant(&mut g, Arr::ints(DType::I32, &[], vec![0]));
    let s = g
        .reduce(&[x], &[zero], &[1], body(BinaryOp::Add, d))
        .unwrap();
    g.result("sum_rows", s[0]).unwrap();
    let all = g
        .reduce(&[x], &[zero], &[0, 1], body(BinaryOp::Add, d))
        .unwrap();
    g.result("sum_all", all[0]).unwrap();
    let m = g
        .reduce(&[sp], &[ninf], &[1], body(BinaryOp::Maximum, d))
        .unwrap();
    g.result("max_specials", m[0]).unwrap();
    let is = g
        .reduce(&[i], &[izero], &[1], body(BinaryOp::Add, DType::I32))
        .unwrap();
    g.result("wrapping_sum", is[0]).unwrap();
    let io = g.iota(DType::I32, &[3, 1200], 1).unwrap();
    let am = g
        .reduce(&[x, io], &[ninf, izero], &[1], argmax_body())
        .unwrap();
    g.result("max", am[0]).unwrap();
    g.result("argmax", am[1]).unwrap();
    let ints: Vec<f64> = (0..3600).map(|_| r.random_range(-3i32..4) as f64).collect();
    let inputs = vec![
        Arr::floats(d, &[3, 1200], ints),
        random(d, &[2, 1100], 51),
        random(DType::I32, &[2, 3000], 52),
    ];
    let low = check(&g, &inputs);
    let src = crate::source_of(&low);
    assert!(src.contains("XT_BLOCK_SYNC()") && src.contains("XT_BLOCK_PHASE(xt_t)"));
    assert_eq!(low.launches, 5);
    // The block reductions, with their barriers, are not marked as loops of independent
    // iterations (the CPU would run them on one-thread blocks).
    for k in src.split("__global__ void ").skip(1) {
        let name = &k[..k.find('(').unwrap_or(0)];
        let mark = format!("XT_EACH_KERNEL({name})");
        if k.contains("XT_BLOCK_SYNC") {
            assert!(!src.contains(&mark), "{name} has barriers but is marked");
        } else if src.contains(&mark) {
            assert!(k.contains("XT_FOR_EACH("), "{name}");
        }
    }
}
