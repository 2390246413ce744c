//! `dot_general`: `Gemm` thunks for f32/f64/f16 (plain, batched, transposed through the flags,
//! other layouts through a transposing kernel, fused producers), generated kernels for integer
//! dots and mixed result types, against the reference.

use crate::data::{Arr, agree, random, rnd};
use crate::reference::eval;
use crate::run;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xthunk_core::ir::{DType, Thunk};
use xthunk_tensor::graph::{DotDims, Graph, UnaryOp};

/// Small integers (exact products and sums in every float type), a few signed zeros.
fn small(d: DType, dims: &[u64], seed: u64) -> Arr {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let n = dims.iter().product::<u64>() as usize;
    Arr::floats(
        d,
        dims,
        (0..n)
            .map(|_| rnd(d, r.random_range(-4i32..5) as f64))
            .collect(),
    )
}

fn dims(lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]) -> DotDims {
    DotDims {
        lhs_batch: lb.to_vec(),
        rhs_batch: rb.to_vec(),
        lhs_contracting: lc.to_vec(),
        rhs_contracting: rc.to_vec(),
    }
}

struct Case {
    name: &'static str,
    lhs: Vec<u64>,
    rhs: Vec<u64>,
    dims: DotDims,
    /// (trans_a, trans_b) of the gemm, when the layouts map without a kernel.
    flags: Option<(bool, bool)>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "plain",
            lhs: vec![3, 4],
            rhs: vec![4, 5],
            dims: dims(&[], &[], &[1], &[0]),
            flags: Some((false, false)),
        },
        Case {
            name: "batched",
            lhs: vec![2, 3, 4],
            rhs: vec![2, 4, 5],
            dims: dims(&[0], &[0], &[2], &[1]),
            flags: Some((false, false)),
        },
        Case {
            name: "transposed",
            lhs: vec![4, 3],
            rhs: vec![5, 4],
            dims: dims(&[], &[], &[0], &[1]),
            flags: Some((true, true)),
        },
        Case {
            name: "batched_transposed",
            lhs: vec![2, 4, 3],
            rhs: vec![2, 5, 4],
            dims: dims(&[0], &[0], &[1], &[2]),
            flags: Some((true, true)),
        },
        Case {
            name: "two_contracting",
            lhs: vec![3, 2, 4],
            rhs: vec![2, 4, 5],
            dims: dims(&[], &[], &[1, 2], &[0, 1]),
            flags: Some((false, false)),
        },
        Case {
            name: "batch_in_the_middle",
            lhs: vec![3, 2, 4],
            rhs: vec![4, 2, 5],
            dims: dims(&[1], &[1], &[2], &[0]),
            flags: None,
        },
        Case {
            name: "matrix_vector",
            lhs: vec![6, 7],
            rhs: vec![7],
            dims: dims(&[], &[], &[1], &[0]),
            flags: Some((false, false)),
        },
    ]
}

fn gemm_flags(list: &[Thunk]) -> Vec<(bool, bool)> {
    list.iter()
        .filter_map(|t| match t {
            Thunk::Gemm(g) => Some((g.trans_a, g.trans_b)),
            _ => None,
        })
        .collect()
}

#[test]
fn float_dots_become_gemms() {
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for c in cases() {
            let mut g = Graph::new(format!("dot_{}_{d}", c.name));
            let a = g.parameter("a", d, &c.lhs).unwrap();
            let b = g.parameter("b", d, &c.rhs).unwrap();
            let r = g.dot_general(a, b, c.dims.clone(), d).unwrap();
            g.result("r", r).unwrap();
            let inputs = vec![small(d, &c.lhs, 1), small(d, &c.rhs, 2)];
            let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
            let want = eval(&g, &inputs);
            let t = g.ty(r);
            agree(&want[0], &Arr::from_bytes(d, &t.dims, &outs[0]), 0.0)
                .unwrap_or_else(|e| panic!("{} {d}: {e}", c.name));
            assert_eq!(low.gemms, 1, "{}", c.name);
            match c.flags {
                Some(f) => {
                    assert_eq!(gemm_flags(&low.executable.entry), vec![f], "{}", c.name);
                    assert_eq!(low.launches, 0, "{}", c.name);
                }
                None => assert_eq!(
                    low.launches, 2,
                    "{}: both operands transposed by kernels",
                    c.name
                ),
            }
        }
    }
}

#[test]
fn dot_operand_producers_fuse_into_the_layout_kernel() {
    let d = DType::F32;
    let mut g = Graph::new("dot_of_exp");
    let a = g.parameter("a", d, &[3, 4]).unwrap();
    let b = g.parameter("b", d, &[4, 5]).unwrap();
    let e = g.unary(UnaryOp::Exponential, a).unwrap();
    let r = g.dot_general(e, b, dims(&[], &[], &[1], &[0]), d).unwrap();
    g.result("r", r).unwrap();
    let inputs = vec![random(d, &[3, 4], 3), small(d, &[4, 5], 4)];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    agree(
        &eval(&g, &inputs)[0],
        &Arr::from_bytes(d, &[3, 5], &outs[0]),
        1e-5,
    )
    .unwrap();
    assert_eq!((low.launches, low.gemms), (1, 1));
}

#[test]
fn integer_and_mixed_dots_are_kernels() {
    for d in [DType::I32, DType::I8, DType::I64] {
        for c in cases() {
            let mut g = Graph::new(format!("idot_{}_{d}", c.name));
            let a = g.parameter("a", d, &c.lhs).unwrap();
            let b = g.parameter("b", d, &c.rhs).unwrap();
            let r = g.dot_general(a, b, c.dims.clone(), d).unwrap();
            g.result("r", r).unwrap();
            let inputs = vec![random(d, &c.lhs, 5), random(d, &c.rhs, 6)];
            let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
            let t = g.ty(r);
            agree(
                &eval(&g, &inputs)[0],
                &Arr::from_bytes(d, &t.dims, &outs[0]),
                0.0,
            )
            .unwrap_or_else(|e| panic!("{} {d}: {e}", c.name));
            assert_eq!((low.gemms, low.launches), (0, 1));
        }
    }
    // i8 × i8 → i32 (as `preferred_element_type` asks): the operands widened first.
    let mut g = Graph::new("widening");
    let a = g.parameter("a", DType::I8, &[3, 40]).unwrap();
    let b = g.parameter("b", DType::I8, &[40, 2]).unwrap();
    let r = g
        .dot_general(a, b, dims(&[], &[], &[1], &[0]), DType::I32)
        .unwrap();
    g.result("r", r).unwrap();
    let inputs = vec![
        random(DType::I8, &[3, 40], 9),
        random(DType::I8, &[40, 2], 10),
    ];
    let (_, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    agree(
        &eval(&g, &inputs)[0],
        &Arr::from_bytes(DType::I32, &[3, 2], &outs[0]),
        0.0,
    )
    .unwrap();

    // bf16 × bf16 → f32: a kernel accumulating in f32.
    let mut g = Graph::new("mixed");
    let a = g.parameter("a", DType::BF16, &[3, 4]).unwrap();
    let b = g.parameter("b", DType::BF16, &[4, 5]).unwrap();
    let r = g
        .dot_general(a, b, dims(&[], &[], &[1], &[0]), DType::F32)
        .unwrap();
    g.result("r", r).unwrap();
    let inputs = vec![
        small(DType::BF16, &[3, 4], 7),
        small(DType::BF16, &[4, 5], 8),
    ];
    let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
    agree(
        &eval(&g, &inputs)[0],
        &Arr::from_bytes(DType::F32, &[3, 5], &outs[0]),
        0.0,
    )
    .unwrap();
    assert_eq!((low.gemms, low.launches), (0, 1));
}

/// `x · xᵀ`: one buffer as both operands (the second through the transpose flag).
#[test]
fn gram_matrix_reads_one_buffer_twice() {
    let d = DType::F32;
    let mut g = Graph::new("gram");
    let x = g.parameter("x", d, &[4, 6]).unwrap();
    let r = g.dot_general(x, x, dims(&[], &[], &[1], &[1]), d).unwrap();
    g.result("r", r).unwrap();
    let inputs = vec![small(d, &[4, 6], 12)];
    let (low, outs) = run(&g, &[inputs[0].to_bytes()]);
    agree(
        &eval(&g, &inputs)[0],
        &Arr::from_bytes(d, &[4, 4], &outs[0]),
        0.0,
    )
    .unwrap();
    assert_eq!(gemm_flags(&low.executable.entry), vec![(false, true)]);
}

/// A dot read only through a transpose that swaps its free dimensions is computed transposed
/// (the gemm of the swapped operands, writing the transpose's value: no kernel); a dot also
/// read otherwise, or a transpose that moves a batch dimension, is not. Each against the
/// reference, for a plain, a batched and a multi-free-dimension dot, with the layout flags.
#[test]
fn a_dot_read_transposed_is_the_dot_of_the_swapped_operands() {
    let d = DType::F32;
    // (lhs, rhs, dims, transpose of the result, computed transposed)
    type Shapes = (Vec<u64>, Vec<u64>, DotDims, Vec<usize>, bool);
    let cases: Vec<Shapes> = vec![
        (
            vec![3, 4],
            vec![4, 5],
            dims(&[], &[], &[1], &[0]),
            vec![1, 0],
            true,
        ),
        (
            vec![4, 3],
            vec![5, 4],
            dims(&[], &[], &[0], &[1]),
            vec![1, 0],
            true,
        ),
        (
            vec![2, 3, 4],
            vec![2, 4, 5],
            dims(&[0], &[0], &[2], &[1]),
            vec![0, 2, 1],
            true,
        ),
        (
            vec![6, 2, 4],
            vec![4, 5],
            dims(&[], &[], &[2], &[0]),
            vec![2, 0, 1],
            true,
        ),
        // Not the free groups swapped: a batch dimension moves, or the groups' order inside.
        (
            vec![2, 3, 4],
            vec![2, 4, 5],
            dims(&[0], &[0], &[2], &[1]),
            vec![1, 0, 2],
            false,
        ),
        (
            vec![6, 2, 4],
            vec![4, 5],
            dims(&[], &[], &[2], &[0]),
            vec![2, 1, 0],
            false,
        ),
    ];
    for (i, (l, r, dd, perm, swapped)) in cases.into_iter().enumerate() {
        for also_plain in [false, true] {
            let mut g = Graph::new(format!("dot_t{i}"));
            let a = g.parameter("a", d, &l).unwrap();
            let b = g.parameter("b", d, &r).unwrap();
            let p = g.dot_general(a, b, dd.clone(), d).unwrap();
            let t = g.transpose(p, &perm).unwrap();
            let e = g.unary(UnaryOp::Exponential, t).unwrap();
            g.result("t", e).unwrap();
            if also_plain {
                g.result("p", p).unwrap();
            }
            let inputs = vec![small(d, &l, 5 + i as u64), small(d, &r, 6 + i as u64)];
            let (low, outs) = run(&g, &inputs.iter().map(Arr::to_bytes).collect::<Vec<_>>());
            let want = eval(&g, &inputs);
            for (k, (_, v)) in g.results().iter().enumerate() {
                let ty = g.ty(*v);
                agree(&want[k], &Arr::from_bytes(d, &ty.dims, &outs[k]), 1e-6)
                    .unwrap_or_else(|e| panic!("case {i} (plain read {also_plain}): {e}"));
            }
            assert_eq!(low.gemms, 1, "case {i}");
            let src = crate::source_of(&low);
            // The exp kernel reads the transposed value: linearly when the gemm wrote it so.
            let linear = src.contains("= p0[i];");
            assert_eq!(
                linear,
                swapped && !also_plain,
                "case {i} (plain read {also_plain}):\n{src}"
            );
        }
    }
}
