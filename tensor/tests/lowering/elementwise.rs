//! Every elementwise op of the spec on every element type it takes, with special values,
//! against the reference; converts between every pair of types; and the fusion of a chain.

use crate::data::{Arr, agree, random};
use crate::reference::eval;
use crate::run;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, CompareDirection, CompareType, Graph, UnaryOp, Value};

/// Relative tolerance of an op's results: 0 (bit-exact) where the spec is exact.
fn tolerance(name: &str, d: DType) -> f64 {
    let approx = [
        "cbrt",
        "cosine",
        "exponential",
        "exponential_minus_one",
        "log",
        "log_plus_one",
        "logistic",
        "rsqrt",
        "sine",
        "tan",
        "tanh",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "cosh",
        "sinh",
        "atan2",
        "power",
    ];
    if !approx.contains(&name) || !d.is_float() {
        return 0.0;
    }
    match d {
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        DType::F32 => 1e-6,
        _ => 1e-14,
    }
}

fn scalar(g: &mut Graph, d: DType, v: f64) -> Value {
    let a = if d.is_float() {
        Arr::floats(d, &[], vec![v])
    } else {
        Arr::ints(d, &[], vec![v as i128])
    };
    g.constant(d, &[], a.to_bytes()).unwrap()
}

fn check_dtype(d: DType) {
    let n = 61u64;
    let mut g = Graph::new(format!("elementwise_{d}"));
    let a = g.parameter("a", d, &[n]).unwrap();
    let b = g.parameter("b", d, &[n]).unwrap();
    let p = g.parameter("p", DType::Pred, &[n]).unwrap();
    let mut names = vec![];
    let mut add = |g: &mut Graph, name: String, v: Value| {
        g.result(&name, v).unwrap();
        names.push(name);
    };
    // CHLO's special functions (erf, lgamma, zeta, ...) have no reference here: Rust's std
    // lacks them. They are checked against JAX and scipy by stablehlo/jax/cases_chlo.py.
    let special = |name: &str| {
        [
            "erf",
            "erfc",
            "erf_inv",
            "lgamma",
            "digamma",
            "bessel_i1e",
            "next_after",
            "polygamma",
            "zeta",
        ]
        .contains(&name)
    };
    for op in UnaryOp::ALL {
        if op.accepts(d) && !special(op.name()) {
            let v = g.unary(*op, a).unwrap();
            add(&mut g, op.name().into(), v);
        }
    }
    // (`complex` makes a complex result: checked against XLA in stablehlo/jax/cases_complex.py.)
    for op in BinaryOp::ALL {
        if op.accepts(d) && !special(op.name()) && op.result(d) == d {
            let v = g.binary(*op, a, b).unwrap();
            add(&mut g, op.name().into(), v);
        }
    }
    for kind in CompareType::ALL {
        if kind.accepts(d) {
            for dir in CompareDirection::ALL {
                let v = g.compare(*dir, *kind, a, b).unwrap();
                add(&mut g, format!("compare_{}_{}", dir.name(), kind.name()), v);
            }
        }
    }
    let v = g.select(p, a, b).unwrap();
    add(&mut g, "select".into(), v);
    if d != DType::Pred {
        let lo = scalar(&mut g, d, -2.0);
        let hi = scalar(&mut g, d, 3.0);
        let v = g.clamp(lo, a, hi).unwrap();
        add(&mut g, "clamp_scalar".into(), v);
        let v = g.clamp(b, a, b).unwrap();
        add(&mut g, "clamp_tensor".into(), v);
    }
    if d.is_float() {
        // Formats narrower and wider than every source, no mantissa bit, one exponent bit.
        for (e, m) in [
            (5, 10),
            (8, 7),
            (4, 3),
            (5, 2),
            (2, 0),
            (1, 4),
            (8, 23),
            (11, 52),
            (3, 60),
        ] {
            let v = g.reduce_precision(a, e, m).unwrap();
            add(&mut g, format!("reduce_precision_e{e}m{m}"), v);
        }
    }
    // Complex and 8-bit float results are outside this reference's value model: they are
    // checked against XLA in stablehlo/jax/cases_complex.py.
    for to in DType::ALL
        .into_iter()
        .filter(|t| !t.is_complex() && !t.is_f8())
    {
        let v = g.convert(a, to).unwrap();
        add(&mut g, format!("convert_{to}"), v);
    }
    let inputs = vec![
        random(d, &[n], 1),
        random(d, &[n], 2),
        random(DType::Pred, &[n], 3),
    ];
    let bytes: Vec<Vec<u8>> = inputs.iter().map(Arr::to_bytes).collect();
    let (low, outs) = run(&g, &bytes);
    dump_case(&g, &bytes, &outs);
    let want = eval(&g, &inputs);
    let mut failures = vec![];
    for (k, name) in names.iter().enumerate() {
        let t = g.ty(g.results()[k].1);
        let got = Arr::from_bytes(t.dtype, &t.dims, &outs[k]);
        if let Err(e) = agree(&want[k], &got, tolerance(name, t.dtype.max(d))) {
            failures.push(format!("{d} {name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} results differ:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
    // Every result is a root of its own; nothing else is launched.
    assert_eq!(low.launches, names.len(), "{d}");
    println!("{d}: {} results agree", names.len());
}

/// With `XTHUNK_TENSOR_DUMP=DIR`, writes the inputs and every result's bytes to
/// `DIR/<graph>/` (for comparing with another implementation of StableHLO by hand).
fn dump_case(g: &Graph, inputs: &[Vec<u8>], outs: &[Vec<u8>]) {
    let Some(dir) = std::env::var_os("XTHUNK_TENSOR_DUMP") else {
        return;
    };
    let dir = std::path::Path::new(&dir).join(g.name());
    std::fs::create_dir_all(&dir).unwrap();
    for (k, b) in inputs.iter().enumerate() {
        std::fs::write(dir.join(format!("in{k}.bin")), b).unwrap();
    }
    for ((name, _), b) in g.results().iter().zip(outs) {
        std::fs::write(dir.join(format!("{name}.bin")), b).unwrap();
    }
}

#[test]
fn elementwise_f32() {
    check_dtype(DType::F32);
}

#[test]
fn elementwise_f64() {
    check_dtype(DType::F64);
}

#[test]
fn elementwise_f16() {
    check_dtype(DType::F16);
}

#[test]
fn elementwise_bf16() {
    check_dtype(DType::BF16);
}

#[test]
fn elementwise_i8() {
    check_dtype(DType::I8);
}

#[test]
fn elementwise_u8() {
    check_dtype(DType::U8);
}

#[test]
fn elementwise_i32() {
    check_dtype(DType::I32);
}

#[test]
fn elementwise_i64() {
    check_dtype(DType::I64);
}

#[test]
fn elementwise_i16() {
    check_dtype(DType::I16);
}

#[test]
fn elementwise_u16() {
    check_dtype(DType::U16);
}

#[test]
fn elementwise_u32() {
    check_dtype(DType::U32);
}

#[test]
fn elementwise_u64() {
    check_dtype(DType::U64);
}

#[test]
fn elementwise_pred() {
    check_dtype(DType::Pred);
}

/// A chain of elementwise ops, a broadcast and converts is one kernel; a value read twice
/// (not cheap) is a kernel of its own.
#[test]
fn chain_fuses_into_one_kernel() {
    let mut g = Graph::new("chain");
    let x = g.parameter("x", DType::F32, &[4, 5]).unwrap();
    let y = g.parameter("y", DType::F32, &[5]).unwrap();
    let yb = g.broadcast_in_dim(y, &[4, 5], &[1]).unwrap();
    let m = g.binary(BinaryOp::Multiply, x, yb).unwrap();
    let e = g.unary(UnaryOp::Exponential, m).unwrap();
    let h = g.convert(e, DType::F16).unwrap();
    let t = g.unary(UnaryOp::Tanh, h).unwrap();
    let back = g.convert(t, DType::F64).unwrap();
    g.result("z", back).unwrap();
    let inputs = vec![random(DType::F32, &[4, 5], 7), random(DType::F32, &[5], 8)];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    assert_eq!((low.kernels, low.launches), (1, 1));
    let want = eval(&g, &inputs);
    agree(
        &want[0],
        &Arr::from_bytes(DType::F64, &[4, 5], &outs[0]),
        2e-3,
    )
    .unwrap();

    // `e` read twice inside one kernel: computed once there (no kernel of its own).
    let mut g = Graph::new("shared");
    let x = g.parameter("x", DType::F32, &[64]).unwrap();
    let e = g.unary(UnaryOp::Exponential, x).unwrap();
    let s = g.unary(UnaryOp::Sine, e).unwrap();
    let c = g.unary(UnaryOp::Cosine, e).unwrap();
    let z = g.binary(BinaryOp::Add, s, c).unwrap();
    g.result("z", z).unwrap();
    let inputs = vec![random(DType::F32, &[64], 9)];
    let (low, outs) = run(&g, &[inputs[0].to_bytes()]);
    assert_eq!((low.kernels, low.launches), (1, 1));
    agree(
        &eval(&g, &inputs)[0],
        &Arr::from_bytes(DType::F32, &[64], &outs[0]),
        1e-6,
    )
    .unwrap();
}

/// Two identical fused computations on different buffers share one kernel.
#[test]
fn identical_kernels_generated_once() {
    let mut g = Graph::new("twice");
    let x = g.parameter("x", DType::F32, &[8]).unwrap();
    let y = g.parameter("y", DType::F32, &[8]).unwrap();
    let a = g.unary(UnaryOp::Negate, x).unwrap();
    let b = g.unary(UnaryOp::Negate, y).unwrap();
    g.result("a", a).unwrap();
    g.result("b", b).unwrap();
    let inputs = vec![random(DType::F32, &[8], 1), random(DType::F32, &[8], 2)];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    assert_eq!((low.kernels, low.launches), (1, 2));
    let want = eval(&g, &inputs);
    for k in 0..2 {
        agree(&want[k], &Arr::from_bytes(DType::F32, &[8], &outs[k]), 0.0).unwrap();
    }
}

/// A value whose readers are in different kernels is computed once into a temp; so is one a
/// kernel would compute at more than four indices.
#[test]
fn values_read_by_several_kernels_are_roots() {
    let mut g = Graph::new("two_kernels");
    let x = g.parameter("x", DType::F32, &[64]).unwrap();
    let e = g.unary(UnaryOp::Exponential, x).unwrap();
    let s = g.unary(UnaryOp::Sine, e).unwrap();
    let c = g.unary(UnaryOp::Cosine, e).unwrap();
    g.result("s", s).unwrap();
    g.result("c", c).unwrap();
    let inputs = vec![random(DType::F32, &[64], 10)];
    let (low, outs) = run(&g, &[inputs[0].to_bytes()]);
    assert_eq!(low.launches, 3);
    let want = eval(&g, &inputs);
    for k in 0..2 {
        agree(
            &want[k],
            &Arr::from_bytes(DType::F32, &[64], &outs[k]),
            1e-6,
        )
        .unwrap();
    }

    // A five-point stencil of exp(x): exp read at five indices per element.
    for (points, launches) in [(4u64, 1), (5, 2)] {
        let mut g = Graph::new(format!("stencil_{points}"));
        let x = g.parameter("x", DType::F32, &[40]).unwrap();
        let e = g.unary(UnaryOp::Exponential, x).unwrap();
        let mut acc = None;
        for p in 0..points {
            let sl = g.slice(e, &[p], &[30 + p], &[1]).unwrap();
            acc = Some(match acc {
                None => sl,
                Some(a) => g.binary(BinaryOp::Add, a, sl).unwrap(),
            });
        }
        g.result("y", acc.unwrap()).unwrap();
        let inputs = vec![random(DType::F32, &[40], 11)];
        let (low, outs) = run(&g, &[inputs[0].to_bytes()]);
        assert_eq!(low.launches, launches, "{points} points");
        agree(
            &eval(&g, &inputs)[0],
            &Arr::from_bytes(DType::F32, &[30], &outs[0]),
            1e-6,
        )
        .unwrap();
    }
}

/// A chain of 3000 fused elementwise ops (what a long unrolled JAX loop gives): lowered from
/// a thread with a 1 MiB stack without overflowing it (fused chains are cut every
/// `MAX_FUSED_DEPTH` values, and the lowering runs on a stack of its own), the right values,
/// and one kernel per cut (not one per op).
#[test]
fn a_long_fused_chain_is_cut_into_kernels() {
    let n = 3000usize;
    let mut g = Graph::new("long_chain");
    let x = g.parameter("x", DType::F32, &[16]).unwrap();
    let c = scalar(&mut g, DType::F32, 0.999);
    let c = g.broadcast_in_dim(c, &[16], &[]).unwrap();
    let mut v = x;
    for i in 0..n {
        let op = if i % 2 == 0 {
            BinaryOp::Multiply
        } else {
            BinaryOp::Add
        };
        v = g.binary(op, v, c).unwrap();
    }
    g.result("y", v).unwrap();
    let input = random(DType::F32, &[16], 7);
    let bytes = vec![input.to_bytes()];
    let g2 = g.clone();
    let (low, outs) = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || run(&g2, &bytes))
        .unwrap()
        .join()
        .expect("no stack overflow");
    let want = eval(&g, &[input]);
    let got = Arr::from_bytes(DType::F32, &[16], &outs[0]);
    // The reference rounds every op to f32 as the kernels do: bit-exact.
    agree(&want[0], &got, 0.0).unwrap();
    assert!(
        (n / 64..=n / 32).contains(&low.launches),
        "{} kernels for {n} ops",
        low.launches
    );
}

/// f32 `exponential` and `tanh` (the prelude's `xh_expf` / `xh_tanhf`, on the CPU
/// branch-free double forms) correctly rounded (within 0.501 ulp) from the exact value (f64 `exp`/`tanh`), and exactly
/// the spec's special values: NaN, ±0, ±inf, the overflow and underflow edges, subnormal
/// results, tanh's small arguments and its rounding to ±1, and 2^17 random floats spread over
/// every exponent in range.
#[test]
fn f32_exp_and_tanh_are_rounded_once() {
    use rand::{Rng, SeedableRng};
    let d = DType::F32;
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        88.72,
        88.7228,
        88.7229,
        88.73,
        -87.3,
        -103.27,
        -103.97,
        -103.98,
        -104.0,
        -200.0,
        9.0,
        9.01,
        9.02,
        9.1,
        1e-30,
        -1e-30,
        1e-45,
        9.9e-4,
        1e-3,
        1.0001e-3,
        0.55,
        -0.55,
        1e-8,
        20.0,
        -20.0,
        f32::MAX,
        f32::MIN,
    ];
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(2027);
    while xs.len() < 1 << 17 {
        let e = r.random_range(-40i32..8);
        let m: f32 = r.random_range(1.0..2.0);
        let s = if r.random_bool(0.5) { -1.0 } else { 1.0 };
        xs.push(s * m * 2f32.powi(e));
    }
    let n = xs.len() as u64;
    let mut g = Graph::new("exp_tanh_ulp");
    let x = g.parameter("x", d, &[n]).unwrap();
    let ops = [UnaryOp::Exponential, UnaryOp::Tanh];
    for (k, op) in ops.iter().enumerate() {
        let y = g.unary(*op, x).unwrap();
        g.result(&format!("r{k}"), y).unwrap();
    }
    let input = Arr::floats(d, &[n], xs.iter().map(|&v| f64::from(v)).collect());
    let (_, outs) = run(&g, &[input.to_bytes()]);
    for (k, op) in ops.iter().enumerate() {
        let got = Arr::from_bytes(d, &[n], &outs[k]);
        let mut worst = (0.0f64, 0.0f32);
        for (i, &x) in xs.iter().enumerate() {
            let xd = f64::from(x);
            let want = if *op == UnaryOp::Exponential {
                xd.exp()
            } else {
                xd.tanh()
            };
            let g = got.f[i] as f32;
            if want.is_nan() {
                assert!(g.is_nan(), "{op:?}({x}) = {g}, want NaN");
                continue;
            }
            let w = want as f32; // the correctly rounded value but for double rounding
            if w.is_infinite() || w == 0.0 {
                assert!(
                    g == w && g.is_sign_negative() == w.is_sign_negative(),
                    "{op:?}({x:e}) = {g:e}, want {w:e}"
                );
                continue;
            }
            let ulp = f64::from(f32::from_bits(w.abs().to_bits() + 1) - w.abs());
            let err = (f64::from(g) - want).abs() / ulp;
            if err > worst.0 {
                worst = (err, x);
            }
            if x == 0.0 && *op == UnaryOp::Tanh {
                assert_eq!(g.to_bits(), x.to_bits(), "tanh keeps the sign of zero");
            }
        }
        // Rounded once from a value computed in double: half an ulp, but for the double
        // rounding of values next to a midpoint (a 6th-degree polynomial in the exp reads
        // 0.58 ulp; the 10th-degree one 0.500).
        assert!(
            worst.0 <= 0.501,
            "{op:?}: {:.3} ulp at {:e}",
            worst.0,
            worst.1
        );
        eprintln!(
            "{op:?}: largest error {:.3} ulp (at {:e})",
            worst.0, worst.1
        );
    }
}
