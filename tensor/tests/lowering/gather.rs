//! `gather` in the forms JAX emits (an embedding lookup, `x[i]`, a point gather with a
//! two-element index vector, batched gathers), fused with its producers, against the
//! reference and against values written out by hand.

use crate::data::{Arr, agree, random};
use crate::reference::eval;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, GatherDims, Graph, UnaryOp};

fn dims(offset: &[usize], collapsed: &[usize], map: &[usize], ivd: usize) -> GatherDims {
    GatherDims {
        offset_dims: offset.to_vec(),
        collapsed_slice_dims: collapsed.to_vec(),
        start_index_map: map.to_vec(),
        index_vector_dim: ivd,
        ..Default::default()
    }
}

#[test]
fn gathers_as_jax_emits_them() {
    let d = DType::F32;
    let mut g = Graph::new("gathers");
    let table = g.parameter("table", d, &[10, 4]).unwrap();
    let ids = g.parameter("ids", DType::I32, &[6]).unwrap();
    let pts = g.parameter("points", DType::I64, &[5, 2]).unwrap();
    let i = g.parameter("i", DType::I32, &[]).unwrap();
    let bx = g.parameter("batched", d, &[3, 7, 2]).unwrap();
    let bi = g.parameter("batched_ids", DType::I32, &[3, 4]).unwrap();
    // Embedding lookup: table[ids] (rows), the table scaled first (fused).
    let scaled = g.binary(BinaryOp::Multiply, table, table).unwrap();
    let rows = g
        .gather(scaled, ids, dims(&[1], &[0], &[0], 1), &[1, 4])
        .unwrap();
    g.result("embedding", rows).unwrap();
    // x[i] on a scalar index: index_vector_dim past the indices' rank.
    let row = g
        .gather(table, i, dims(&[0], &[0], &[0], 0), &[1, 4])
        .unwrap();
    g.result("row", row).unwrap();
    // Points: table[p0, p1] with a two-element index vector.
    let elems = g
        .gather(table, pts, dims(&[], &[0, 1], &[0, 1], 1), &[1, 1])
        .unwrap();
    g.result("points", elems).unwrap();
    // Windows of 3 rows (clamped at the end), not collapsed.
    let windows = g
        .gather(table, ids, dims(&[1, 2], &[], &[0], 1), &[3, 2])
        .unwrap();
    g.result("windows", windows).unwrap();
    // Batched (vmap of a lookup): operand batch dim 0 against index batch dim 0.
    let bd = GatherDims {
        offset_dims: vec![2],
        collapsed_slice_dims: vec![1],
        operand_batching_dims: vec![0],
        start_indices_batching_dims: vec![0],
        start_index_map: vec![1],
        index_vector_dim: 2,
    };
    let bg = g.gather(bx, bi, bd, &[1, 1, 2]).unwrap();
    let bn = g.unary(UnaryOp::Negate, bg).unwrap();
    g.result("batched", bn).unwrap();

    let ints = |dt: DType, dims: &[u64], v: Vec<i128>| Arr::ints(dt, dims, v);
    let inputs = vec![
        random(d, &[10, 4], 81),
        ints(DType::I32, &[6], vec![0, 9, 3, -5, 12, 8]),
        ints(DType::I64, &[5, 2], vec![0, 0, 9, 3, 4, 2, -1, 7, 11, 1]),
        ints(DType::I32, &[], vec![7]),
        random(d, &[3, 7, 2], 82),
        ints(
            DType::I32,
            &[3, 4],
            vec![0, 6, 3, 9, -2, 1, 5, 5, 2, 2, 0, 6],
        ),
    ];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    let want = eval(&g, &inputs);
    for (k, (name, v)) in g.results().iter().enumerate() {
        let t = g.ty(*v);
        agree(&want[k], &Arr::from_bytes(t.dtype, &t.dims, &outs[k]), 0.0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(low.launches, g.results().len());
    // By hand: row 7; the points (0,0), (9,3), (4,2), (0,3) clamped, (9,1) clamped.
    let t = &inputs[0].f;
    assert_eq!(Arr::from_bytes(d, &[4], &outs[1]).f, t[28..32].to_vec());
    let want_points: Vec<f64> = [0, 39, 18, 3, 37].iter().map(|&k| t[k]).collect();
    let got_points = Arr::from_bytes(d, &[5], &outs[2]).f;
    for (w, g) in want_points.iter().zip(&got_points) {
        assert!(
            w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
            "{want_points:?} {got_points:?}"
        );
    }
}

#[test]
fn gather_rules_refuse() {
    let mut g = Graph::new("gather_rules");
    let t = g.parameter("t", DType::F32, &[10, 4]).unwrap();
    let f = g.parameter("f", DType::F32, &[6]).unwrap();
    let ids = g.parameter("ids", DType::I32, &[6]).unwrap();
    let err = |e: xthunk_tensor::GraphError| e.to_string();
    assert!(
        err(g
            .gather(t, f, dims(&[1], &[0], &[0], 1), &[1, 4])
            .unwrap_err())
        .starts_with("gather: ")
    );
    assert!(
        g.gather(t, ids, dims(&[1], &[0], &[0], 1), &[2, 4])
            .is_err(),
        "collapsed slice of 2"
    );
    assert!(
        g.gather(t, ids, dims(&[1], &[0], &[0, 1], 1), &[1, 4])
            .is_err(),
        "index vector of 1"
    );
    assert!(
        g.gather(t, ids, dims(&[1], &[0], &[0], 1), &[1, 5])
            .is_err(),
        "slice past the operand"
    );
}
