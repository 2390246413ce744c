//! Where the spec leaves a choice, the lowering follows XLA: these are the values XLA:CPU
//! (jaxlib 0.10.2: through `jax.jit` with x64 enabled, or its compiler given StableHLO text)
//! gave for the same operations, written out by hand — float → integer saturation, signed
//! zeros of maximum/minimum/clamp, integer division by zero, shifts past the width,
//! conversions to f16/bf16 through f32, a scatter window partly outside its input, integer
//! powers with negative exponents.

use crate::data::Arr;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, Graph, ScatterDims};

fn outputs(g: &Graph, inputs: &[Arr]) -> Vec<Arr> {
    let (_, outs) = run(g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    g.results()
        .iter()
        .zip(outs)
        .map(|((_, v), b)| Arr::from_bytes(g.ty(*v).dtype, &g.ty(*v).dims, &b))
        .collect()
}

#[test]
fn float_to_integer_saturates_as_xla() {
    let f = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        3e9,
        -3e9,
        2.7,
        -2.7,
        255.5,
        -0.5,
        127.9,
        -128.9,
        1e20,
    ];
    let mut g = Graph::new("xla_f2i");
    let x = g.parameter("x", DType::F32, &[12]).unwrap();
    for t in [DType::I8, DType::U8, DType::I32, DType::I64] {
        let c = g.convert(x, t).unwrap();
        g.result(t.name(), c).unwrap();
    }
    let o = outputs(&g, &[Arr::floats(DType::F32, &[12], f.to_vec())]);
    assert_eq!(
        o[0].i,
        vec![0, 127, -128, 127, -128, 2, -2, 127, 0, 127, -128, 127]
    );
    assert_eq!(o[1].i, vec![0, 255, 0, 255, 0, 2, 0, 255, 0, 127, 0, 255]);
    let (imin, imax) = (i32::MIN as i128, i32::MAX as i128);
    assert_eq!(
        o[2].i,
        vec![0, imax, imin, imax, imin, 2, -2, 255, 0, 127, -128, imax]
    );
    let (lmin, lmax) = (i64::MIN as i128, i64::MAX as i128);
    assert_eq!(
        o[3].i,
        vec![
            0,
            lmax,
            lmin,
            3_000_000_000,
            -3_000_000_000,
            2,
            -2,
            255,
            0,
            127,
            -128,
            lmax
        ]
    );
}

#[test]
fn signed_zeros_division_and_shifts_as_xla() {
    let mut g = Graph::new("xla_misc");
    let a = g.parameter("a", DType::F32, &[4]).unwrap();
    let b = g.parameter("b", DType::F32, &[4]).unwrap();
    let mx = g.binary(BinaryOp::Maximum, a, b).unwrap();
    let mn = g.binary(BinaryOp::Minimum, a, b).unwrap();
    g.result("max", mx).unwrap();
    g.result("min", mn).unwrap();
    let p = g.parameter("p", DType::I32, &[5]).unwrap();
    let q = g.parameter("q", DType::I32, &[5]).unwrap();
    let dv = g.binary(BinaryOp::Divide, p, q).unwrap();
    let rm = g.binary(BinaryOp::Remainder, p, q).unwrap();
    g.result("div", dv).unwrap();
    g.result("rem", rm).unwrap();
    let x = g.parameter("x", DType::I32, &[4]).unwrap();
    let s = g.parameter("s", DType::I32, &[4]).unwrap();
    for op in [
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRightArithmetic,
        BinaryOp::ShiftRightLogical,
    ] {
        let v = g.binary(op, x, s).unwrap();
        g.result(op.name(), v).unwrap();
    }
    let u = g.parameter("u", DType::U8, &[2]).unwrap();
    let us = g.parameter("us", DType::U8, &[2]).unwrap();
    let ua = g.binary(BinaryOp::ShiftRightArithmetic, u, us).unwrap();
    g.result("u8_sra", ua).unwrap();
    let lo = g
        .constant(DType::F32, &[], (-0.0f32).to_le_bytes().to_vec())
        .unwrap();
    let hi = g
        .constant(DType::F32, &[], 0.0f32.to_le_bytes().to_vec())
        .unwrap();
    let c = g.parameter("c", DType::F32, &[3]).unwrap();
    let cl = g.clamp(lo, c, hi).unwrap();
    g.result("clamp", cl).unwrap();
    let i32s = |v: Vec<i128>| Arr::ints(DType::I32, &[v.len() as u64], v);
    let o = outputs(
        &g,
        &[
            Arr::floats(DType::F32, &[4], vec![-0.0, 0.0, f64::NAN, 1.0]),
            Arr::floats(DType::F32, &[4], vec![0.0, -0.0, 1.0, f64::NAN]),
            i32s(vec![7, -7, i32::MIN as i128, 5, i32::MIN as i128]),
            i32s(vec![0, 0, -1, 0, 0]),
            i32s(vec![1, -8, -8, 5]),
            i32s(vec![32, 40, -1, 31]),
            Arr::ints(DType::U8, &[2], vec![0x80, 0xF0]),
            Arr::ints(DType::U8, &[2], vec![1, 9]),
            Arr::floats(DType::F32, &[3], vec![0.0, f64::NAN, -1.0]),
        ],
    );
    let bits = |a: &Arr| {
        a.f.iter()
            .map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bits(&o[0]),
        bits(&Arr::floats(
            DType::F32,
            &[4],
            vec![0.0, 0.0, f64::NAN, f64::NAN]
        ))
    );
    assert_eq!(
        bits(&o[1]),
        bits(&Arr::floats(
            DType::F32,
            &[4],
            vec![-0.0, -0.0, f64::NAN, f64::NAN]
        ))
    );
    let min = i32::MIN as i128;
    assert_eq!(o[2].i, vec![-1, -1, min, -1, -1]);
    assert_eq!(o[3].i, vec![7, -7, 0, 5, min]);
    assert_eq!(o[4].i, vec![0, 0, 0, min]);
    assert_eq!(o[5].i, vec![0, -1, -1, 0]);
    assert_eq!(o[6].i, vec![0, 0, 0, 0]);
    assert_eq!(o[7].i, vec![192, 255]);
    assert_eq!(
        bits(&o[8]),
        bits(&Arr::floats(DType::F32, &[3], vec![0.0, f64::NAN, -0.0]))
    );
}

#[test]
fn conversions_to_halves_round_through_f32_as_xla() {
    let mut g = Graph::new("xla_halves");
    let i = g.parameter("i", DType::I32, &[1]).unwrap();
    let d = g.parameter("d", DType::F64, &[2]).unwrap();
    let ib = g.convert(i, DType::BF16).unwrap();
    let db = g.convert(d, DType::BF16).unwrap();
    let dh = g.convert(d, DType::F16).unwrap();
    g.result("i32_bf16", ib).unwrap();
    g.result("f64_bf16", db).unwrap();
    g.result("f64_f16", dh).unwrap();
    let o = outputs(
        &g,
        &[
            Arr::ints(DType::I32, &[1], vec![(1 << 24) + (1 << 16) + 1]),
            Arr::floats(
                DType::F64,
                &[2],
                vec![
                    1.0 + 2f64.powi(-8) + 2f64.powi(-30),
                    1.0 + 2f64.powi(-11) + 2f64.powi(-30),
                ],
            ),
        ],
    );
    // Rounded once these would be 16908288, 1.0078125 and 1.0009765625.
    assert_eq!(o[0].f, vec![16777216.0]);
    assert_eq!(o[1].f[0], 1.0);
    assert_eq!(o[2].f[1], 1.0);
}

#[test]
fn scatter_skips_windows_partly_outside_as_xla() {
    let mut g = Graph::new("xla_scatter");
    let x = g.parameter("x", DType::I32, &[10]).unwrap();
    let idx = g.parameter("idx", DType::I32, &[3, 1]).unwrap();
    let up = g.parameter("up", DType::I32, &[3, 3]).unwrap();
    let d = ScatterDims {
        update_window_dims: vec![1],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
        ..Default::default()
    };
    let r = g
        .scatter(
            &[x],
            idx,
            &[up],
            d,
            crate::reduce::body(BinaryOp::Add, DType::I32),
            false,
        )
        .unwrap();
    g.result("r", r[0]).unwrap();
    let o = outputs(
        &g,
        &[
            Arr::ints(DType::I32, &[10], vec![0; 10]),
            Arr::ints(DType::I32, &[3, 1], vec![8, -1, 2]),
            Arr::ints(
                DType::I32,
                &[3, 3],
                vec![1, 2, 3, 10, 20, 30, 100, 200, 300],
            ),
        ],
    );
    assert_eq!(o[0].i, vec![0, 0, 100, 200, 300, 0, 0, 0, 0, 0]);
}

/// Integer `power` (XLA through raw StableHLO): negative exponents as XLA; 3^40 wrapped.
/// (XLA gives 1 for 3^64: it uses the exponent's low 6 bits; here 3^64 wraps to 2038349057.)
#[test]
fn integer_power_as_xla() {
    let mut g = Graph::new("xla_ipow");
    let a = g.parameter("a", DType::I32, &[7]).unwrap();
    let b = g.parameter("b", DType::I32, &[7]).unwrap();
    let p = g.binary(BinaryOp::Power, a, b).unwrap();
    g.result("p", p).unwrap();
    let o = outputs(
        &g,
        &[
            Arr::ints(DType::I32, &[7], vec![-1, 1, 2, 0, -1, 3, 3]),
            Arr::ints(DType::I32, &[7], vec![-1, -2, -1, -1, -2, 64, 40]),
        ],
    );
    assert_eq!(o[0].i, vec![-1, 1, 0, 0, 1, 2038349057, 689956897]);
}
