//! `while`, `case` and `if`: loops with carried tensors and counters (a value passed through
//! unchanged), branches chosen by an i32 index (out of range: the last) or a pred, against
//! the reference.

use crate::check_exact as check;
use crate::data::{Arr, random};
use crate::reduce::body;
use xthunk_core::ir::{DType, Thunk};
use xthunk_tensor::graph::{BinaryOp, CompareDirection, CompareType, Graph, UnaryOp, Value};

fn c32(g: &mut Graph, v: i32) -> Value {
    g.constant(DType::I32, &[], v.to_le_bytes().to_vec())
        .unwrap()
}

fn f32c(g: &mut Graph, v: f32) -> Value {
    g.constant(DType::F32, &[], v.to_le_bytes().to_vec())
        .unwrap()
}

/// `while i < limit { x = x * 1.5 + sum(x) / 8; i += 1 }` with `limit` carried unchanged.
fn loop_graph() -> Graph {
    let types = [
        (DType::I32, vec![]),
        (DType::I32, vec![]),
        (DType::F32, vec![8u64]),
    ];
    let params = |g: &mut Graph| -> Vec<Value> {
        types
            .iter()
            .enumerate()
            .map(|(i, (d, dims))| g.parameter(&format!("c{i}"), *d, dims).unwrap())
            .collect()
    };
    let mut cond = Graph::new("cond");
    let p = params(&mut cond);
    let lt = cond
        .compare(CompareDirection::Lt, CompareType::Signed, p[0], p[1])
        .unwrap();
    cond.result("go", lt).unwrap();

    let mut b = Graph::new("body");
    let p = params(&mut b);
    let one = c32(&mut b, 1);
    let i1 = b.binary(BinaryOp::Add, p[0], one).unwrap();
    let k = f32c(&mut b, 1.5);
    let kb = b.broadcast_in_dim(k, &[8], &[]).unwrap();
    let scaled = b.binary(BinaryOp::Multiply, p[2], kb).unwrap();
    let zero = f32c(&mut b, 0.0);
    let s = b
        .reduce(&[p[2]], &[zero], &[0], body(BinaryOp::Add, DType::F32))
        .unwrap();
    let eighth = f32c(&mut b, 0.125);
    let m = b.binary(BinaryOp::Multiply, s[0], eighth).unwrap();
    let mb = b.broadcast_in_dim(m, &[8], &[]).unwrap();
    let x1 = b.binary(BinaryOp::Add, scaled, mb).unwrap();
    b.result("i", i1).unwrap();
    b.result("limit", p[1]).unwrap();
    b.result("x", x1).unwrap();

    let mut g = Graph::new("loop");
    let limit = g.parameter("limit", DType::I32, &[]).unwrap();
    let x = g.parameter("x", DType::F32, &[8]).unwrap();
    let zero = c32(&mut g, 0);
    let r = g.while_loop(&[zero, limit, x], cond, b).unwrap();
    g.result("trips", r[0]).unwrap();
    g.result("x", r[2]).unwrap();
    g
}

#[test]
fn while_loop_runs_to_its_condition() {
    let g = loop_graph();
    for limit in [0, 1, 7] {
        let x = Arr::floats(DType::F32, &[8], (0..8).map(|k| k as f64 - 3.0).collect());
        let low = check(&g, &[Arr::ints(DType::I32, &[], vec![limit]), x]);
        let whiles: Vec<_> = low
            .executable
            .entry
            .iter()
            .filter(|t| matches!(t, Thunk::While(_)))
            .collect();
        assert_eq!(whiles.len(), 1);
        if let Thunk::While(w) = whiles[0] {
            // The limit is a parameter: the condition runs every trip.
            assert_eq!(w.trip_count, None);
            // Two values change (the counter and x): two copies back; `limit` passes through.
            let copies = w
                .body
                .iter()
                .filter(|t| matches!(t, Thunk::Copy(_)))
                .count();
            assert_eq!(copies, 2);
        }
    }
}

fn branch(name: &str, op: BinaryOp) -> Graph {
    let mut b = Graph::new(name);
    let x = b.parameter("x", DType::F32, &[5]).unwrap();
    let y = b.parameter("y", DType::F32, &[5]).unwrap();
    let r = b.binary(op, x, y).unwrap();
    b.result("r", r).unwrap();
    b.result("y", y).unwrap();
    b
}

#[test]
fn case_and_if_pick_their_branch() {
    let mut g = Graph::new("case");
    let i = g.parameter("i", DType::I32, &[]).unwrap();
    let x = g.parameter("x", DType::F32, &[5]).unwrap();
    let y = g.parameter("y", DType::F32, &[5]).unwrap();
    let branches = vec![
        branch("add", BinaryOp::Add),
        branch("mul", BinaryOp::Multiply),
        branch("sub", BinaryOp::Subtract),
    ];
    let r = g.case(i, &[x, y], branches).unwrap();
    g.result("r", r[0]).unwrap();
    g.result("y", r[1]).unwrap();
    let (xs, ys) = (random(DType::F32, &[5], 21), random(DType::F32, &[5], 22));
    for index in [0, 1, 2, 3, -1, i32::MAX] {
        check(
            &g,
            &[
                Arr::ints(DType::I32, &[], vec![index as i128]),
                xs.clone(),
                ys.clone(),
            ],
        );
    }

    let mut g = Graph::new("if");
    let x = g.parameter("x", DType::F32, &[5]).unwrap();
    let y = g.parameter("y", DType::F32, &[5]).unwrap();
    let zero = f32c(&mut g, 0.0);
    let s = g
        .reduce(&[x], &[zero], &[0], body(BinaryOp::Add, DType::F32))
        .unwrap();
    let p = g
        .compare(CompareDirection::Gt, CompareType::Float, s[0], zero)
        .unwrap();
    let r = g
        .if_(
            p,
            &[x, y],
            branch("max", BinaryOp::Maximum),
            branch("min", BinaryOp::Minimum),
        )
        .unwrap();
    g.result("r", r[0]).unwrap();
    for seed in [31, 32, 33] {
        check(
            &g,
            &[
                random(DType::F32, &[5], seed),
                random(DType::F32, &[5], seed + 100),
            ],
        );
    }
}

/// The `lax.scan` pattern: a loop writing row `i` of a carried array by
/// `dynamic_update_slice` each trip.
#[test]
fn scan_writes_rows_by_dynamic_update_slice() {
    let params = |g: &mut Graph| {
        let i = g.parameter("i", DType::I32, &[]).unwrap();
        let ys = g.parameter("ys", DType::F32, &[5, 3]).unwrap();
        let x = g.parameter("x", DType::F32, &[3]).unwrap();
        (i, ys, x)
    };
    let mut cond = Graph::new("cond");
    let (i, _, _) = params(&mut cond);
    let five = c32(&mut cond, 5);
    let go = cond
        .compare(CompareDirection::Lt, CompareType::Signed, i, five)
        .unwrap();
    cond.result("go", go).unwrap();

    let mut b = Graph::new("body");
    let (i, ys, x) = params(&mut b);
    let fi = b.convert(i, DType::F32).unwrap();
    let fb = b.broadcast_in_dim(fi, &[3], &[]).unwrap();
    let row = b.binary(BinaryOp::Multiply, x, fb).unwrap();
    let row2 = b.reshape(row, &[1, 3]).unwrap();
    let zero = c32(&mut b, 0);
    let ys1 = b.dynamic_update_slice(ys, row2, &[i, zero]).unwrap();
    let one = c32(&mut b, 1);
    let i1 = b.binary(BinaryOp::Add, i, one).unwrap();
    b.result("i", i1).unwrap();
    b.result("ys", ys1).unwrap();
    b.result("x", x).unwrap();

    let mut g = Graph::new("scan");
    let x = g.parameter("x", DType::F32, &[3]).unwrap();
    let zero = c32(&mut g, 0);
    let init = g.constant(DType::F32, &[5, 3], vec![0; 60]).unwrap();
    let r = g.while_loop(&[zero, init, x], cond, b).unwrap();
    g.result("ys", r[1]).unwrap();
    let low = check(&g, &[random(DType::F32, &[3], 71)]);
    // A counted loop: the trip count is known, the host does not wait on the condition.
    let trips: Vec<Option<u64>> = low
        .executable
        .entry
        .iter()
        .filter_map(|t| match t {
            Thunk::While(w) => Some(w.trip_count),
            _ => None,
        })
        .collect();
    assert_eq!(trips, vec![Some(5)]);
    // `ys` is updated in place (its window alone written): the body copies back only the
    // counter; `x` passes through.
    for t in &low.executable.entry {
        if let Thunk::While(w) = t {
            let copies = w
                .body
                .iter()
                .filter(|t| matches!(t, Thunk::Copy(_)))
                .count();
            assert_eq!(copies, 1);
        }
    }
}

/// A counted loop whose counter starts past its limit runs no trip.
#[test]
fn counted_loop_of_no_trips() {
    let mut cond = Graph::new("cond");
    let i = cond.parameter("i", DType::I64, &[]).unwrap();
    cond.parameter("x", DType::F32, &[4]).unwrap();
    let limit = cond
        .constant(DType::I64, &[], 5i64.to_le_bytes().to_vec())
        .unwrap();
    let go = cond
        .compare(CompareDirection::Lt, CompareType::Signed, i, limit)
        .unwrap();
    cond.result("go", go).unwrap();
    let mut b = Graph::new("body");
    let i = b.parameter("i", DType::I64, &[]).unwrap();
    let x = b.parameter("x", DType::F32, &[4]).unwrap();
    let one = b
        .constant(DType::I64, &[], 1i64.to_le_bytes().to_vec())
        .unwrap();
    let i1 = b.binary(BinaryOp::Add, one, i).unwrap();
    let x1 = b.binary(BinaryOp::Add, x, x).unwrap();
    b.result("i", i1).unwrap();
    b.result("x", x1).unwrap();
    for start in [7i64, 5, 4, -2] {
        let mut g = Graph::new("no_trips");
        let x = g.parameter("x", DType::F32, &[4]).unwrap();
        let s = g
            .constant(DType::I64, &[], start.to_le_bytes().to_vec())
            .unwrap();
        let r = g.while_loop(&[s, x], cond.clone(), b.clone()).unwrap();
        g.result("i", r[0]).unwrap();
        g.result("x", r[1]).unwrap();
        let low = check(&g, &[random(DType::F32, &[4], 72)]);
        let want = (5 - start).max(0) as u64;
        assert!(
            low.executable
                .entry
                .iter()
                .any(|t| matches!(t, Thunk::While(w) if w.trip_count == Some(want))),
            "start {start}"
        );
    }
}

/// Regions inside regions: a loop whose body branches (`if` on a scalar pred selecting by a
/// scalar `select`) and reduces inside a branch.
#[test]
fn nested_regions() {
    let f = DType::F32;
    let carried = |g: &mut Graph| {
        let i = g.parameter("i", DType::I32, &[]).unwrap();
        let x = g.parameter("x", f, &[6]).unwrap();
        (i, x)
    };
    let mut cond = Graph::new("cond");
    let (i, _) = carried(&mut cond);
    let four = c32(&mut cond, 4);
    let go = cond
        .compare(CompareDirection::Lt, CompareType::Signed, i, four)
        .unwrap();
    cond.result("go", go).unwrap();

    let branch = |name: &str, reduce: bool| {
        let mut b = Graph::new(name);
        let x = b.parameter("x", f, &[6]).unwrap();
        let y = if reduce {
            let zero = f32c(&mut b, 0.0);
            let s = b
                .reduce(&[x], &[zero], &[0], body(BinaryOp::Add, f))
                .unwrap();
            let sb = b.broadcast_in_dim(s[0], &[6], &[]).unwrap();
            b.binary(BinaryOp::Subtract, x, sb).unwrap()
        } else {
            let two = f32c(&mut b, 2.0);
            let tb = b.broadcast_in_dim(two, &[6], &[]).unwrap();
            b.binary(BinaryOp::Multiply, x, tb).unwrap()
        };
        b.result("y", y).unwrap();
        b
    };
    let mut b = Graph::new("body");
    let (i, x) = carried(&mut b);
    let one = c32(&mut b, 1);
    let two = c32(&mut b, 2);
    let rem = b.binary(BinaryOp::Remainder, i, two).unwrap();
    let zero = c32(&mut b, 0);
    let even = b
        .compare(CompareDirection::Eq, CompareType::Signed, rem, zero)
        .unwrap();
    let y = b
        .if_(even, &[x], branch("center", true), branch("double", false))
        .unwrap();
    let neg = b.unary(UnaryOp::Negate, y[0]).unwrap();
    let picked = b.select(even, y[0], neg).unwrap();
    let i1 = b.binary(BinaryOp::Add, i, one).unwrap();
    b.result("i", i1).unwrap();
    b.result("x", picked).unwrap();

    let mut g = Graph::new("nested");
    let x = g.parameter("x", f, &[6]).unwrap();
    let zero = c32(&mut g, 0);
    let r = g.while_loop(&[zero, x], cond, b).unwrap();
    g.result("x", r[1]).unwrap();
    let x0 = Arr::floats(f, &[6], vec![1.0, -2.0, 3.5, 0.25, 8.0, -1.5]);
    check(&g, &[x0]);
}
