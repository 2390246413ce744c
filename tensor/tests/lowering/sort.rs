//! `sort` (one to three operands, along the last and a leading dimension, short rows sorted
//! by insertion and long ones merged, total-order float keys with NaN and ±0, descending,
//! multi-key comparators as JAX emits them) and `top_k`, against the reference's stable sort.

use crate::data::{Arr, random};
use crate::reference::eval;
use crate::{check_exact as check, run};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, CompareDirection, CompareType, Graph, Value};

/// The reference: each row's positions ordered by a stable insertion sort that asks the
/// comparator only "does lhs go before rhs", then every input gathered in that order.
pub fn reference(xs: &[Arr], dim: usize, comparator: &Graph) -> Vec<Arr> {
    let dims = xs[0].dims.clone();
    let len = dims[dim] as usize;
    let inner: usize = dims[dim + 1..].iter().product::<u64>() as usize;
    let rows = xs[0].len().checked_div(len).unwrap_or(0);
    let mut from: Vec<usize> = (0..xs[0].len()).collect();
    let before = |a: usize, b: usize| {
        let mut args = vec![];
        for x in xs {
            args.push(x.gather(&[], |_| a));
            args.push(x.gather(&[], |_| b));
        }
        eval(comparator, &args)[0].i[0] != 0
    };
    for r in 0..rows {
        let base = (r / inner) * len * inner + r % inner;
        let mut order: Vec<usize> = (0..len).map(|i| base + i * inner).collect();
        for i in 1..len {
            let mut q = i;
            while q > 0 && before(order[q], order[q - 1]) {
                order.swap(q, q - 1);
                q -= 1;
            }
        }
        for (i, src) in order.into_iter().enumerate() {
            from[base + i * inner] = src;
        }
    }
    xs.iter().map(|x| x.gather(&dims, |k| from[k])).collect()
}

/// A comparator over `types` (one pair of parameters each): key `0` first, by `LT` (or
/// `GT` when `descending`) of `kind`, then each next key by `LT`, as JAX's multi-key sorts
/// chain them (`lt0 or (eq0 and (lt1 or …))`).
fn comparator(types: &[DType], keys: usize, kinds: &[CompareType], descending: bool) -> Graph {
    let mut c = Graph::new("comparator");
    let mut ps: Vec<(Value, Value)> = vec![];
    for (j, d) in types.iter().enumerate() {
        let a = c.parameter(&format!("a{j}"), *d, &[]).unwrap();
        let b = c.parameter(&format!("b{j}"), *d, &[]).unwrap();
        ps.push((a, b));
    }
    let mut acc: Option<Value> = None;
    for k in (0..keys).rev() {
        let (a, b) = ps[k];
        let dir = if k == 0 && descending {
            CompareDirection::Gt
        } else {
            CompareDirection::Lt
        };
        let lt = c.compare(dir, kinds[k], a, b).unwrap();
        acc = Some(match acc {
            None => lt,
            Some(rest) => {
                let eq = c.compare(CompareDirection::Eq, kinds[k], a, b).unwrap();
                let both = c.binary(BinaryOp::And, eq, rest).unwrap();
                c.binary(BinaryOp::Or, lt, both).unwrap()
            }
        });
    }
    c.result("r", acc.unwrap()).unwrap();
    c
}

fn kind(d: DType) -> CompareType {
    if d.is_float() {
        CompareType::TotalOrder
    } else if d.is_signed_int() {
        CompareType::Signed
    } else {
        CompareType::Unsigned
    }
}

/// Values with many repeats (so stability shows), NaN of both signs and both zeros for floats.
fn keys(d: DType, dims: &[u64], seed: u64) -> Arr {
    let a = random(d, dims, seed);
    if d.is_float() {
        let specials = [
            f64::NAN,
            -f64::NAN,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let f =
            a.f.iter()
                .enumerate()
                .map(|(k, v)| match k % 7 {
                    0 => specials[(k / 7) % specials.len()],
                    1 | 2 => (v.abs() * 3.0).floor().min(3.0),
                    _ => *v,
                })
                .collect();
        Arr::floats(d, dims, f)
    } else {
        Arr::ints(d, dims, a.i.iter().map(|v| v.rem_euclid(5)).collect())
    }
}

#[test]
fn sorts_keys_with_payloads_short_and_long_rows_any_dimension() {
    for d in [DType::F32, DType::BF16, DType::I32, DType::U8, DType::F64] {
        // [rows, len] along the last dimension, and [len, 3] along the first: len 5 (insertion),
        // 37 (a thread per row merging, an odd pass count), 64 (an even one), 600 (a block per
        // row).
        for (dims, dim) in [
            (vec![4u64, 5], 1),
            (vec![3, 37], 1),
            (vec![2, 64], 1),
            (vec![37, 3], 0),
            (vec![2, 9, 3], 1),
            (vec![600, 2], 0),
        ] {
            let mut g = Graph::new(format!("sort_{d}_{dims:?}_{dim}"));
            let x = g.parameter("x", d, &dims).unwrap();
            let p = g.parameter("payload", DType::I32, &dims).unwrap();
            let c = comparator(&[d, DType::I32], 1, &[kind(d)], false);
            let s = g.sort(&[x, p], dim, true, c).unwrap();
            g.result("keys", s[0]).unwrap();
            g.result("payload", s[1]).unwrap();
            let n: u64 = dims.iter().product();
            let order = Arr::ints(DType::I32, &dims, (0..n as i128).collect());
            let low = check(&g, &[keys(d, &dims, 7), order]);
            assert_eq!(low.launches, 1, "{}", g.name());
        }
    }
}

#[test]
fn sorts_descending_by_two_keys_and_three_operands() {
    let dims = [5u64, 23];
    let mut g = Graph::new("sort_two_keys");
    let a = g.parameter("a", DType::I16, &dims).unwrap();
    let b = g.parameter("b", DType::F16, &dims).unwrap();
    let c = g.parameter("c", DType::U32, &dims).unwrap();
    let types = [DType::I16, DType::F16, DType::U32];
    let cmp = comparator(&types, 2, &[CompareType::Signed, CompareType::Float], true);
    // A fused producer: the first operand negated inside the sort's input kernel.
    let na = g.unary(xthunk_tensor::graph::UnaryOp::Negate, a).unwrap();
    let s = g.sort(&[na, b, c], 1, false, cmp).unwrap();
    for (j, v) in s.iter().enumerate() {
        g.result(&format!("r{j}"), *v).unwrap();
    }
    let bvals = random(DType::F16, &dims, 4);
    let bfinite = Arr::floats(
        DType::F16,
        &dims,
        bvals
            .f
            .iter()
            .map(|v| if v.is_nan() { 1.0 } else { *v })
            .collect(),
    );
    check(
        &g,
        &[
            keys(DType::I16, &dims, 3),
            bfinite,
            random(DType::U32, &dims, 5),
        ],
    );
}

#[test]
fn sorts_empty_and_single_element_rows() {
    for dims in [vec![4u64, 1], vec![0, 6], vec![3, 0], vec![1]] {
        let mut g = Graph::new(format!("sort_trivial_{dims:?}"));
        let x = g.parameter("x", DType::F32, &dims).unwrap();
        let c = comparator(&[DType::F32], 1, &[CompareType::TotalOrder], false);
        let s = g.sort(&[x], dims.len() - 1, true, c).unwrap();
        g.result("r", s[0]).unwrap();
        check(&g, &[keys(DType::F32, &dims, 1)]);
    }
}

#[test]
fn top_k_takes_the_largest_first_lower_index_on_ties() {
    for (d, dims, k) in [
        (DType::F32, vec![4u64, 10], 3u64),
        (DType::F32, vec![40], 40),
        (DType::I32, vec![2, 3, 30], 5),
        (DType::U8, vec![6, 4], 0),
    ] {
        let mut g = Graph::new(format!("top_k_{d}_{dims:?}"));
        let x = g.parameter("x", d, &dims).unwrap();
        let [v, i] = g.top_k(x, k).unwrap();
        g.result("values", v).unwrap();
        g.result("indices", i).unwrap();
        check(&g, &[keys(d, &dims, 11)]);
    }
    // +NaN above +inf, then +0 above -0, -NaN last; ties by index.
    let mut g = Graph::new("top_k_order");
    let x = g.parameter("x", DType::F32, &[8]).unwrap();
    let [v, i] = g.top_k(x, 8).unwrap();
    g.result("values", v).unwrap();
    g.result("indices", i).unwrap();
    let input = [
        1.0f32,
        f32::NAN,
        -0.0,
        0.0,
        f32::INFINITY,
        -f32::NAN,
        1.0,
        0.0,
    ];
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (_, outs) = run(&g, &[bytes]);
    let idx: Vec<i32> = outs[1]
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(idx, [1, 4, 0, 6, 3, 7, 2, 5]);
}

#[test]
fn sort_rules_refuse() {
    let mut g = Graph::new("sort_rules");
    let x = g.parameter("x", DType::F32, &[4, 5]).unwrap();
    let y = g.parameter("y", DType::F32, &[5, 4]).unwrap();
    let one = || comparator(&[DType::F32], 1, &[CompareType::Float], false);
    let e = |r: Result<Vec<Value>, xthunk_tensor::GraphError>| r.unwrap_err().to_string();
    assert!(e(g.sort(&[x], 2, true, one())).contains("dimension 2 of rank 2"));
    assert!(e(g.sort(&[x, y], 1, true, one())).contains("input shapes differ"));
    assert!(e(g.sort(&[x, x], 1, true, one())).contains("must map 4 scalars"));
    assert!(e(g.sort(&[], 0, true, one())).contains("no inputs"));
    assert!(g.top_k(x, 6).unwrap_err().to_string().contains("k = 6"));
}

#[test]
fn sorts_few_long_rows_with_a_kernel_per_pass() {
    // Three rows of 4,500 (13 passes, each a kernel over every element), along dimension 0.
    let (len, rows) = (4500usize, 3usize);
    let mut g = Graph::new("sort_long_rows");
    let x = g
        .parameter("x", DType::F32, &[len as u64, rows as u64])
        .unwrap();
    let p = g
        .parameter("p", DType::I32, &[len as u64, rows as u64])
        .unwrap();
    let c = comparator(
        &[DType::F32, DType::I32],
        1,
        &[CompareType::TotalOrder],
        false,
    );
    let s = g.sort(&[x, p], 0, true, c).unwrap();
    g.result("keys", s[0]).unwrap();
    g.result("payload", s[1]).unwrap();
    let keys = self::keys(DType::F32, &[len as u64, rows as u64], 3);
    let xs: Vec<f32> = keys.f.iter().map(|v| *v as f32).collect();
    let ps: Vec<i32> = (0..(len * rows) as i32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let pbytes: Vec<u8> = ps.iter().flat_map(|f| f.to_le_bytes()).collect();
    let (low, outs) = run(&g, &[bytes(&xs), pbytes]);
    assert_eq!(low.launches, 13);
    for r in 0..rows {
        let mut order: Vec<usize> = (0..len).collect();
        order.sort_by(|&a, &b| xs[a * rows + r].total_cmp(&xs[b * rows + r]));
        for (i, &k) in order.iter().enumerate() {
            let o = (i * rows + r) * 4;
            let got = i32::from_le_bytes(outs[1][o..o + 4].try_into().unwrap());
            assert_eq!(got, (k * rows + r) as i32, "row {r}, position {i}");
            assert_eq!(&outs[0][o..o + 4], &xs[k * rows + r].to_le_bytes());
        }
    }
}
