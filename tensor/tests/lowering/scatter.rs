//! `scatter` in the forms JAX emits (`x.at[i].set`, `x.at[ids].add` as an embedding's
//! gradient with repeated and out-of-range ids, point updates), against the reference.

use crate::data::{Arr, agree, random};
use crate::reduce::body;
use crate::reference::eval;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, Graph, ScatterDims, UnaryOp};

fn rows(ivd: usize) -> ScatterDims {
    ScatterDims {
        update_window_dims: vec![1],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: ivd,
        ..Default::default()
    }
}

/// The body that keeps the update (`set`).
fn set(d: DType) -> Graph {
    let mut b = Graph::new("set");
    b.parameter("old", d, &[]).unwrap();
    let new = b.parameter("new", d, &[]).unwrap();
    b.result("r", new).unwrap();
    b
}

#[test]
fn scatters_as_jax_emits_them() {
    let d = DType::F32;
    let mut g = Graph::new("scatters");
    let x = g.parameter("x", d, &[10, 4]).unwrap();
    let ids = g.parameter("ids", DType::I32, &[7]).unwrap();
    let grads = g.parameter("grads", d, &[7, 4]).unwrap();
    let i = g.parameter("i", DType::I64, &[1]).unwrap();
    let row = g.parameter("row", d, &[1, 4]).unwrap();
    let pts = g.parameter("points", DType::I32, &[3, 2]).unwrap();
    let vals = g.parameter("values", DType::I32, &[3]).unwrap();
    let counts = g.parameter("counts", DType::I32, &[5, 6]).unwrap();
    // Embedding gradient: zeros, then the rows of ids added (repeats add up, -1 and 10 skipped).
    let zero = g.constant(d, &[], 0f32.to_le_bytes().to_vec()).unwrap();
    let zeros = g.broadcast_in_dim(zero, &[10, 4], &[]).unwrap();
    let neg = g.unary(UnaryOp::Negate, grads).unwrap();
    let gsum = g
        .scatter(
            &[zeros],
            ids,
            &[neg],
            rows(1),
            body(BinaryOp::Add, d),
            false,
        )
        .unwrap();
    g.result("embedding_grad", gsum[0]).unwrap();
    // x.at[i].set(row), unique.
    let set_row = g.scatter(&[x], i, &[row], rows(1), set(d), true).unwrap();
    g.result("set_row", set_row[0]).unwrap();
    // Point updates with a two-element index vector: counts.at[p0, p1].max(v).
    let pd = ScatterDims {
        inserted_window_dims: vec![0, 1],
        scatter_dims_to_operand_dims: vec![0, 1],
        index_vector_dim: 1,
        ..Default::default()
    };
    let mx = g
        .scatter(
            &[counts],
            pts,
            &[vals],
            pd,
            body(BinaryOp::Maximum, DType::I32),
            false,
        )
        .unwrap();
    g.result("point_max", mx[0]).unwrap();
    // Overlapping windows of three along the indexed dimension (one thread, in order).
    let line = g.parameter("line", DType::I32, &[10]).unwrap();
    let starts = g.parameter("starts", DType::I32, &[4, 1]).unwrap();
    let tri = g.parameter("windows", DType::I32, &[4, 3]).unwrap();
    let od = ScatterDims {
        update_window_dims: vec![1],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
        ..Default::default()
    };
    let ov = g
        .scatter(
            &[line],
            starts,
            &[tri],
            od,
            body(BinaryOp::Add, DType::I32),
            false,
        )
        .unwrap();
    g.result("overlapping", ov[0]).unwrap();
    let small = |dims: &[u64], seed: u64| {
        let a = random(d, dims, seed);
        Arr::floats(
            d,
            dims,
            a.f.iter()
                .map(|v| {
                    if v.is_finite() {
                        v.round().clamp(-8.0, 8.0)
                    } else {
                        1.0
                    }
                })
                .collect(),
        )
    };
    let inputs = vec![
        random(d, &[10, 4], 91),
        Arr::ints(DType::I32, &[7], vec![3, 0, 3, -1, 9, 10, 3]),
        small(&[7, 4], 92),
        Arr::ints(DType::I64, &[1], vec![6]),
        random(d, &[1, 4], 93),
        Arr::ints(DType::I32, &[3, 2], vec![0, 5, 4, 0, 0, 5]),
        random(DType::I32, &[3], 94),
        random(DType::I32, &[5, 6], 95),
        random(DType::I32, &[10], 96),
        Arr::ints(DType::I32, &[4, 1], vec![2, 3, 8, -1]),
        random(DType::I32, &[4, 3], 97),
    ];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    let want = eval(&g, &inputs);
    for (k, (name, v)) in g.results().iter().enumerate() {
        let t = g.ty(*v);
        agree(&want[k], &Arr::from_bytes(t.dtype, &t.dims, &outs[k]), 0.0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // Row 3 of the gradient is minus the sum of the three updates of id 3.
    let gr = Arr::from_bytes(d, &[10, 4], &outs[0]);
    let up = &inputs[2].f;
    assert_eq!(gr.f[12], -(up[0] + up[8] + up[24]));
    // Each scatter: its input written (a kernel for the zeros, copies otherwise), one kernel.
    assert_eq!(low.launches, 5);
    // The gradient's rows in parallel (a thread per window element), the overlapping windows
    // by one thread.
    let src = crate::source_of(&low);
    assert!(src.contains("XT_FOR_EACH(w, n)") && src.contains("xt_global_id() == 0"));
    // The window kernel is one loop of independent iterations: marked for the CPU's
    // contiguous runs; the one-thread kernel is not.
    assert!(src.contains("XT_EACH_KERNEL("));
}

#[test]
fn scatter_rules_refuse() {
    let d = DType::F32;
    let mut g = Graph::new("scatter_rules");
    let x = g.parameter("x", d, &[10, 4]).unwrap();
    let ids = g.parameter("ids", DType::I32, &[7]).unwrap();
    let up = g.parameter("up", d, &[7, 4]).unwrap();
    let wide = g.parameter("wide", d, &[7, 5]).unwrap();
    let fids = g.parameter("fids", d, &[7]).unwrap();
    let add = || body(BinaryOp::Add, d);
    assert!(
        g.scatter(&[x], ids, &[wide], rows(1), add(), false)
            .unwrap_err()
            .to_string()
            .starts_with("scatter: ")
    );
    assert!(
        g.scatter(&[x], fids, &[up], rows(1), add(), false).is_err(),
        "float indices"
    );
    assert!(
        g.scatter(
            &[x],
            ids,
            &[up],
            rows(1),
            body(BinaryOp::Add, DType::I32),
            false
        )
        .is_err(),
        "body type"
    );
    assert!(g.scatter(&[x], ids, &[up], rows(1), add(), false).is_ok());
}

/// Two inputs scattered together (values and their counts), combined by one body.
#[test]
fn multi_operand_scatter() {
    let d = DType::F32;
    let mut b = Graph::new("sum_and_count");
    let s0 = b.parameter("s", d, &[]).unwrap();
    let c0 = b.parameter("c", DType::I32, &[]).unwrap();
    let s1 = b.parameter("us", d, &[]).unwrap();
    let c1 = b.parameter("uc", DType::I32, &[]).unwrap();
    let s = b.binary(BinaryOp::Add, s0, s1).unwrap();
    let c = b.binary(BinaryOp::Add, c0, c1).unwrap();
    b.result("s", s).unwrap();
    b.result("c", c).unwrap();

    let mut g = Graph::new("segment_sums");
    let sums = g.parameter("sums", d, &[5]).unwrap();
    let counts = g.parameter("counts", DType::I32, &[5]).unwrap();
    let seg = g.parameter("segments", DType::I32, &[9, 1]).unwrap();
    let vals = g.parameter("values", d, &[9]).unwrap();
    let ones = g.parameter("ones", DType::I32, &[9]).unwrap();
    let pd = ScatterDims {
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
        ..Default::default()
    };
    let r = g
        .scatter(&[sums, counts], seg, &[vals, ones], pd, b, false)
        .unwrap();
    g.result("sums", r[0]).unwrap();
    g.result("counts", r[1]).unwrap();
    let inputs = vec![
        Arr::floats(d, &[5], vec![0.0; 5]),
        Arr::ints(DType::I32, &[5], vec![0; 5]),
        Arr::ints(DType::I32, &[9, 1], vec![0, 4, 4, 1, 0, 7, 2, 4, -3]),
        Arr::floats(d, &[9], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
        Arr::ints(DType::I32, &[9], vec![1; 9]),
    ];
    let (_, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    let want = eval(&g, &inputs);
    agree(&want[0], &Arr::from_bytes(d, &[5], &outs[0]), 0.0).unwrap();
    agree(&want[1], &Arr::from_bytes(DType::I32, &[5], &outs[1]), 0.0).unwrap();
    assert_eq!(
        Arr::from_bytes(d, &[5], &outs[0]).f,
        vec![6.0, 4.0, 7.0, 0.0, 13.0]
    );
    assert_eq!(
        Arr::from_bytes(DType::I32, &[5], &outs[1]).i,
        vec![2, 1, 1, 0, 3]
    );
}
