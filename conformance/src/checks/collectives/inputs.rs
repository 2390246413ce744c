//! Inputs and references: random inputs whose reductions stay exact or within a stated bound, and
//! the comparison of every rank's outputs with the f64 reference.

use super::program::Coll;
use crate::util::{
    CheckResult, CheckRng, Values, compare_bytes, compare_floats, compare_ints, decode, encode,
    int_range, random_bytes, round_to, unit_roundoff, wrap_int,
};
use rand::RngCore;
use xthunk_core::ir::{CollectiveOp, DType, ReduceOp};

/// A fast stream of random words (splitmix64), seeded from the check's generator: the large
/// inputs stay cheap in debug builds.
pub(super) struct Mix(u64);

impl Mix {
    pub(super) fn new(rng: &mut CheckRng) -> Self {
        Mix(rng.next_u64())
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * 2f64.powi(-53)
    }
}

/// The range of integer inputs of a reduction: no sum of 4 values and no product of 4 values
/// overflows.
pub(super) fn int_inputs(dtype: DType, op: ReduceOp) -> (i64, i64) {
    let (lo, hi) = int_range(dtype);
    match op {
        ReduceOp::Sum => (lo / 4, hi / 4),
        ReduceOp::Prod => {
            let m = match dtype {
                DType::I8 | DType::U8 => 3,
                DType::I16 => 13,
                DType::U16 => 15,
                DType::I32 => 215,
                DType::U32 => 255,
                _ => 50_000,
            };
            ((-m).max(lo), m)
        }
        ReduceOp::Min | ReduceOp::Max => (lo, hi),
    }
}

/// `n` random inputs of a reduction (see the module documentation).
pub(super) fn reduce_values(mix: &mut Mix, dtype: DType, op: ReduceOp, n: usize) -> Values {
    if dtype.is_float() {
        Values::F(
            (0..n)
                .map(|_| {
                    let v = match op {
                        ReduceOp::Prod => {
                            let m = 0.5 + 1.5 * mix.unit();
                            if mix.next() & 1 == 0 { m } else { -m }
                        }
                        _ => 2.0 * mix.unit() - 1.0,
                    };
                    round_to(dtype, v)
                })
                .collect(),
        )
    } else {
        let (lo, hi) = int_inputs(dtype, op);
        let span = (hi as i128 - lo as i128 + 1) as u128;
        Values::I(
            (0..n)
                .map(|_| (lo as i128 + (mix.next() as u128 % span) as i128) as i64)
                .collect(),
        )
    }
}

/// The bytes of one rank's `src` of `c`.
pub(super) fn input(rng: &mut CheckRng, c: &Coll, world: usize) -> CheckResult<Vec<u8>> {
    let (se, _) = c.elems(world);
    match c.op {
        CollectiveOp::AllReduce { op } | CollectiveOp::ReduceScatter { op } => {
            let mut mix = Mix::new(rng);
            encode(c.dtype, &reduce_values(&mut mix, c.dtype, op, se))
        }
        _ => Ok(random_bytes(rng, se * c.dtype.size())),
    }
}

/// Smallest positive subnormal of a float type.
pub(super) fn smallest_subnormal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        DType::F32 => f32::from_bits(1) as f64,
        _ => f64::from_bits(1),
    }
}

/// The f64 reference of `op` over `xs` and the magnitude its tolerance scales with.
pub(super) fn reduce_f64(op: ReduceOp, xs: &[f64]) -> (f64, f64) {
    match op {
        ReduceOp::Sum => {
            // Neumaier's compensated sum: within an ulp of the exact sum for a few terms.
            let (mut s, mut c) = (0.0f64, 0.0f64);
            for &x in xs {
                let t = s + x;
                c += if s.abs() >= x.abs() {
                    (s - t) + x
                } else {
                    (x - t) + s
                };
                s = t;
            }
            (s + c, xs.iter().map(|x| x.abs()).sum())
        }
        ReduceOp::Prod => {
            let p: f64 = xs.iter().product();
            (p, p.abs())
        }
        ReduceOp::Min => (xs.iter().copied().fold(f64::INFINITY, f64::min), 0.0),
        ReduceOp::Max => (xs.iter().copied().fold(f64::NEG_INFINITY, f64::max), 0.0),
    }
}

/// Compares `got` (bytes of `dtype`) with `op` over the members' `srcs`, element by element.
pub(super) fn compare_reduced(
    what: &str,
    dtype: DType,
    op: ReduceOp,
    srcs: &[&[u8]],
    got: &[u8],
) -> CheckResult {
    if let [only] = srcs {
        return compare_bytes(&format!("{what} (a group of one copies)"), got, only);
    }
    let n = srcs.len();
    let ins: Vec<Values> = srcs.iter().map(|b| decode(dtype, b)).collect();
    match decode(dtype, got) {
        Values::I(got) => {
            let ins = ins
                .iter()
                .map(|v| v.ints(what))
                .collect::<CheckResult<Vec<_>>>()?;
            let expected: Vec<i64> = (0..got.len())
                .map(|i| {
                    let mut it = ins.iter().map(|v| v[i] as i128);
                    let first = it.next().unwrap_or_default();
                    let r = it.fold(first, |a, b| match op {
                        ReduceOp::Sum => a + b,
                        ReduceOp::Prod => a * b,
                        ReduceOp::Min => a.min(b),
                        ReduceOp::Max => a.max(b),
                    });
                    wrap_int(dtype, r)
                })
                .collect();
            compare_ints(what, &got, &expected, 0)
        }
        Values::F(got) => {
            let ins = ins
                .iter()
                .map(|v| v.floats(what))
                .collect::<CheckResult<Vec<_>>>()?;
            let u = unit_roundoff(dtype);
            let nf = n as f64;
            let gamma = nf * (u + 2f64.powi(-53)) / (1.0 - nf * u);
            let mut expected = Vec::with_capacity(got.len());
            let mut tol = Vec::with_capacity(got.len());
            let mut xs = Vec::with_capacity(n);
            for i in 0..got.len() {
                xs.clear();
                xs.extend(ins.iter().map(|v| v[i]));
                let (r, m) = reduce_f64(op, &xs);
                expected.push(round_to(dtype, r));
                tol.push(match op {
                    ReduceOp::Min | ReduceOp::Max => 0.0,
                    _ => gamma * m + nf * smallest_subnormal(dtype),
                });
            }
            compare_floats(what, &got, &expected, 0, |i| tol[i])
        }
    }
}

/// Checks rank `rank`'s output `got` of collective `c` (index `i`), given every rank's inputs
/// (`inputs[rank][i]`) and its initial output `init`.
pub(super) fn verify(
    c: &Coll,
    world: usize,
    rank: usize,
    i: usize,
    inputs: &[Vec<Vec<u8>>],
    init: &[u8],
    got: &[u8],
) -> CheckResult {
    let what = format!("rank {rank} of {world}: {}", c.describe());
    let Some((group, pos)) = c.group_of(world, rank) else {
        return compare_bytes(
            &format!("{what}: rank {rank} is in no group and must keep its dst"),
            got,
            init,
        );
    };
    let es = c.dtype.size();
    let block =
        |m: usize, j: usize| -> &[u8] { &inputs[m][i][j * c.count * es..(j + 1) * c.count * es] };
    match c.op {
        CollectiveOp::AllReduce { op } => {
            let srcs: Vec<&[u8]> = group.iter().map(|&m| &inputs[m][i][..]).collect();
            compare_reduced(&what, c.dtype, op, &srcs, got)
        }
        CollectiveOp::ReduceScatter { op } => {
            let srcs: Vec<&[u8]> = group.iter().map(|&m| block(m, pos)).collect();
            compare_reduced(&what, c.dtype, op, &srcs, got)
        }
        CollectiveOp::AllGather => {
            let expected: Vec<u8> = group.iter().flat_map(|&m| inputs[m][i].clone()).collect();
            compare_bytes(&what, got, &expected)
        }
        CollectiveOp::AllToAll => {
            let expected: Vec<u8> = group.iter().flat_map(|&m| block(m, pos).to_vec()).collect();
            compare_bytes(&what, got, &expected)
        }
        CollectiveOp::Broadcast { root } => {
            let from = group[root as usize];
            compare_bytes(
                &format!("{what} (from global rank {from})"),
                got,
                &inputs[from][i],
            )
        }
    }
}
