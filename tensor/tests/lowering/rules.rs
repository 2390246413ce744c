//! The graph's op rules (errors naming the op when an op is added with operands its rule
//! refuses) and edge cases of the lowering: results that are parameters or repeated, empty
//! tensors, scalars, non-scalar constants.

use crate::data::{Arr, agree, random};
use crate::reference::eval;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::GraphError;
use xthunk_tensor::graph::{BinaryOp, CompareDirection, CompareType, DotDims, Graph, UnaryOp};

fn op_of(e: GraphError) -> &'static str {
    match e {
        GraphError::Invalid { op, .. }
        | GraphError::Unsupported { op, .. }
        | GraphError::UnknownValue { op, .. } => op,
    }
}

#[test]
fn rules_refuse_and_name_the_op() {
    let mut g = Graph::new("rules");
    let f = g.parameter("f", DType::F32, &[2, 3]).unwrap();
    let i = g.parameter("i", DType::I32, &[2, 3]).unwrap();
    let s = g.parameter("s", DType::F32, &[]).unwrap();
    let foreign = xthunk_tensor::graph::Value(999);
    assert_eq!(op_of(g.binary(BinaryOp::Add, f, i).unwrap_err()), "add");
    assert_eq!(
        op_of(g.binary(BinaryOp::ShiftLeft, f, f).unwrap_err()),
        "shift_left"
    );
    assert_eq!(op_of(g.unary(UnaryOp::Sqrt, i).unwrap_err()), "sqrt");
    assert_eq!(op_of(g.unary(UnaryOp::Popcnt, f).unwrap_err()), "popcnt");
    assert_eq!(
        op_of(
            g.compare(CompareDirection::Lt, CompareType::Signed, f, f)
                .unwrap_err()
        ),
        "compare"
    );
    assert_eq!(op_of(g.reshape(f, &[7]).unwrap_err()), "reshape");
    assert_eq!(op_of(g.transpose(f, &[0, 0]).unwrap_err()), "transpose");
    assert_eq!(
        op_of(g.broadcast_in_dim(f, &[2, 4], &[0, 1]).unwrap_err()),
        "broadcast_in_dim"
    );
    assert_eq!(
        op_of(g.slice(f, &[0, 2], &[2, 4], &[1, 1]).unwrap_err()),
        "slice"
    );
    assert_eq!(
        op_of(g.pad(f, s, &[-3, 0], &[0, 0], &[0, 0]).unwrap_err()),
        "pad"
    );
    assert_eq!(op_of(g.concatenate(&[f, i], 0).unwrap_err()), "concatenate");
    assert_eq!(
        op_of(g.dynamic_slice(f, &[s, s], &[1, 1]).unwrap_err()),
        "dynamic_slice"
    );
    assert_eq!(
        op_of(g.bitcast_convert(f, DType::F64).unwrap_err()),
        "bitcast_convert"
    );
    assert_eq!(op_of(g.select(f, f, f).unwrap_err()), "select");
    let d = DotDims {
        lhs_contracting: vec![1],
        rhs_contracting: vec![1],
        ..Default::default()
    };
    assert_eq!(
        op_of(g.dot_general(f, s, d, DType::F32).unwrap_err()),
        "dot_general"
    );
    let body = crate::reduce::body(BinaryOp::Add, DType::I32);
    assert_eq!(
        op_of(g.reduce(&[f], &[s], &[0], body).unwrap_err()),
        "reduce"
    );
    assert_eq!(
        op_of(g.unary(UnaryOp::Negate, foreign).unwrap_err()),
        "negate"
    );
    let huge = 1u64 << 40;
    assert_eq!(
        op_of(g.parameter("huge", DType::F32, &[huge, huge]).unwrap_err()),
        "parameter"
    );
    assert_eq!(
        op_of(g.iota(DType::I64, &[0, huge, huge], 0).unwrap_err()),
        "iota"
    );
    let msg = g.reshape(f, &[7]).unwrap_err().to_string();
    assert!(
        msg.starts_with("reshape: ") && msg.contains("tensor<2x3xf32>"),
        "{msg}"
    );
}

#[test]
fn edge_cases_lower_and_run() {
    let mut g = Graph::new("edges");
    let x = g.parameter("x", DType::F32, &[3, 2]).unwrap();
    let empty = g.parameter("empty", DType::I32, &[0, 4]).unwrap();
    let s = g.parameter("s", DType::I64, &[]).unwrap();
    let table: Vec<u8> = (0..6)
        .flat_map(|k| (k as f32 * 0.5).to_le_bytes())
        .collect();
    let c = g.constant(DType::F32, &[3, 2], table).unwrap();
    let y = g.binary(BinaryOp::Multiply, x, c).unwrap();
    g.result("x_again", x).unwrap();
    g.result("y", y).unwrap();
    g.result("y_twice", y).unwrap();
    let e2 = g.unary(UnaryOp::Negate, empty).unwrap();
    g.result("empty", e2).unwrap();
    let s2 = g.binary(BinaryOp::Multiply, s, s).unwrap();
    g.result("s2", s2).unwrap();
    let inputs = vec![
        random(DType::F32, &[3, 2], 41),
        Arr::ints(DType::I32, &[0, 4], vec![]),
        random(DType::I64, &[], 42),
    ];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    let want = eval(&g, &inputs);
    for (k, (name, v)) in g.results().iter().enumerate() {
        let t = g.ty(*v);
        agree(&want[k], &Arr::from_bytes(t.dtype, &t.dims, &outs[k]), 0.0)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // y and s2 are kernels; the empty negation launches nothing; copies for the rest.
    assert_eq!(low.launches, 2);
}

/// Reductions over no elements give the init value; dots contracting over nothing give zeros.
#[test]
fn empty_reductions_and_contractions() {
    let d = DType::F32;
    let mut g = Graph::new("empty_reduce");
    let x = g.parameter("x", d, &[3, 0]).unwrap();
    let y = g.parameter("y", d, &[0, 2]).unwrap();
    let init = g.constant(d, &[], 7f32.to_le_bytes().to_vec()).unwrap();
    let r = g
        .reduce(&[x], &[init], &[1], crate::reduce::body(BinaryOp::Add, d))
        .unwrap();
    g.result("sum", r[0]).unwrap();
    let dims = DotDims {
        lhs_contracting: vec![1],
        rhs_contracting: vec![0],
        ..Default::default()
    };
    let p = g.dot_general(x, y, dims, d).unwrap();
    g.result("product", p).unwrap();
    let inputs = [
        Arr::floats(d, &[3, 0], vec![]),
        Arr::floats(d, &[0, 2], vec![]),
    ];
    let (_, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    assert_eq!(Arr::from_bytes(d, &[3], &outs[0]).f, vec![7.0; 3]);
    assert_eq!(Arr::from_bytes(d, &[3, 2], &outs[1]).f, vec![0.0; 6]);
}

#[test]
fn complex_f8_and_fft_rules() {
    use xthunk_tensor::graph::FftType;
    let mut g = Graph::new("rules_complex");
    let c = g.parameter("c", DType::C64, &[2, 8]).unwrap();
    let f = g.parameter("f", DType::F32, &[2, 8]).unwrap();
    let d = g.parameter("d", DType::F64, &[2, 8]).unwrap();
    let h = g.parameter("h", DType::C128, &[2, 5]).unwrap();
    let e4 = g.parameter("e4", DType::F8E4M3FN, &[3]).unwrap();
    // Parts and their types.
    let re = g.unary(UnaryOp::Real, c).unwrap();
    assert_eq!(g.ty(re).dtype, DType::F32);
    let ab = g.unary(UnaryOp::Abs, h).unwrap();
    assert_eq!(g.ty(ab).dtype, DType::F64);
    let z = g.binary(BinaryOp::Complex, d, d).unwrap();
    assert_eq!(g.ty(z).dtype, DType::C128);
    assert_eq!(
        op_of(g.binary(BinaryOp::Complex, c, c).unwrap_err()),
        "complex"
    );
    assert_eq!(
        op_of(g.binary(BinaryOp::Complex, f, d).unwrap_err()),
        "complex"
    );
    // What complex values do not take.
    assert_eq!(op_of(g.unary(UnaryOp::Cbrt, c).unwrap_err()), "cbrt");
    assert_eq!(
        op_of(g.binary(BinaryOp::Maximum, c, c).unwrap_err()),
        "maximum"
    );
    assert_eq!(
        op_of(
            g.compare(CompareDirection::Lt, CompareType::Float, c, c)
                .unwrap_err()
        ),
        "compare"
    );
    assert!(
        g.compare(CompareDirection::Ne, CompareType::Float, c, c)
            .is_ok()
    );
    assert_eq!(op_of(g.clamp(c, c, c).unwrap_err()), "clamp");
    // The 8-bit floats take the float ops, not the ones on their bits.
    assert!(g.unary(UnaryOp::Exponential, e4).is_ok());
    assert!(g.binary(BinaryOp::Add, e4, e4).is_ok());
    assert_eq!(
        op_of(g.binary(BinaryOp::NextAfter, e4, e4).unwrap_err()),
        "next_after"
    );
    assert_eq!(
        op_of(g.reduce_precision(e4, 4, 3).unwrap_err()),
        "reduce_precision"
    );
    // fft: the spec's shapes.
    let x = g.fft(c, FftType::Fft, &[8]).unwrap();
    assert_eq!(
        (g.ty(x).dtype, g.ty(x).dims.clone()),
        (DType::C64, vec![2, 8])
    );
    let r = g.fft(f, FftType::Rfft, &[2, 8]).unwrap();
    assert_eq!(
        (g.ty(r).dtype, g.ty(r).dims.clone()),
        (DType::C64, vec![2, 5])
    );
    let back = g.fft(h, FftType::Irfft, &[2, 8]).unwrap();
    assert_eq!(
        (g.ty(back).dtype, g.ty(back).dims.clone()),
        (DType::F64, vec![2, 8])
    );
    let bad = [
        g.fft(c, FftType::Fft, &[4]),
        g.fft(c, FftType::Fft, &[]),
        g.fft(c, FftType::Fft, &[1, 2, 2, 8]),
        g.fft(c, FftType::Rfft, &[8]),
        g.fft(f, FftType::Fft, &[8]),
        g.fft(h, FftType::Irfft, &[5]),
        g.fft(c, FftType::Fft, &[0]),
    ];
    for e in bad {
        assert_eq!(op_of(e.unwrap_err()), "fft");
    }
}
