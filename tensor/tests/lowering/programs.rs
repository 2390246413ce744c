//! Programs as an importer hands them over: a dense layer with softmax (a gemm, fused bias and
//! ReLU, the reductions and the normalization), its kernel count, against the reference.

use crate::data::{Arr, agree, random};
use crate::reduce::body;
use crate::reference::eval;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, DotDims, Graph, UnaryOp};

#[test]
fn dense_layer_with_softmax() {
    let d = DType::F32;
    let (batch, inp, out) = (6u64, 16u64, 10u64);
    let mut g = Graph::new("dense_softmax");
    let x = g.parameter("x", d, &[batch, inp]).unwrap();
    let w = g.parameter("w", d, &[inp, out]).unwrap();
    let b = g.parameter("b", d, &[out]).unwrap();
    let dims = DotDims {
        lhs_contracting: vec![1],
        rhs_contracting: vec![0],
        ..Default::default()
    };
    let h = g.dot_general(x, w, dims, d).unwrap();
    let bb = g.broadcast_in_dim(b, &[batch, out], &[1]).unwrap();
    let z = g.binary(BinaryOp::Add, h, bb).unwrap();
    let zero = g.constant(d, &[], 0f32.to_le_bytes().to_vec()).unwrap();
    let zb = g.broadcast_in_dim(zero, &[batch, out], &[]).unwrap();
    let relu = g.binary(BinaryOp::Maximum, z, zb).unwrap();
    let ninf = g
        .constant(d, &[], f32::NEG_INFINITY.to_le_bytes().to_vec())
        .unwrap();
    let m = g
        .reduce(&[relu], &[ninf], &[1], body(BinaryOp::Maximum, d))
        .unwrap();
    let mb = g.broadcast_in_dim(m[0], &[batch, out], &[0]).unwrap();
    let shifted = g.binary(BinaryOp::Subtract, relu, mb).unwrap();
    let e = g.unary(UnaryOp::Exponential, shifted).unwrap();
    let s = g
        .reduce(&[e], &[zero], &[1], body(BinaryOp::Add, d))
        .unwrap();
    let sb = g.broadcast_in_dim(s[0], &[batch, out], &[0]).unwrap();
    let p = g.binary(BinaryOp::Divide, e, sb).unwrap();
    g.result("probabilities", p).unwrap();
    let inputs = vec![
        random(d, &[batch, inp], 61),
        random(d, &[inp, out], 62),
        random(d, &[out], 63),
    ];
    // Finite inputs in a moderate range (the specials are the elementwise tests' business).
    let finite = |a: Arr| {
        let f =
            a.f.iter()
                .map(|v| {
                    if v.is_finite() && v.abs() < 10.0 {
                        *v
                    } else {
                        0.25
                    }
                })
                .collect();
        Arr::floats(a.dtype, &a.dims, f)
    };
    let inputs: Vec<Arr> = inputs.into_iter().map(finite).collect();
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    agree(
        &eval(&g, &inputs)[0],
        &Arr::from_bytes(d, &[batch, out], &outs[0]),
        // The gemm sums in f32 in its own order, the reference in f64; exp magnifies that.
        1e-4,
    )
    .unwrap();
    // The gemm; ReLU(h + b) once (read by two kernels); the max; exp(relu - max) once (read
    // by two kernels); the sum; the division.
    assert_eq!((low.gemms, low.launches), (1, 5));
}
