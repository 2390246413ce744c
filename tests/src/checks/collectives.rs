//! `collectives/`: collective thunks on 1 to 4 ranks of the backend under test (rank `r` on
//! device `r` of the [`Collectives`] context, each on its own thread with its own loaded
//! executable), compared with references computed here from every rank's inputs.
//!
//! # What is covered
//!
//! - **Every operation × dtype × reduction on 1, 2, 3 and 4 ranks** (one group of every rank):
//!   all-reduce and reduce-scatter with sum, prod, min and max; all-gather; all-to-all;
//!   broadcast from every root. Every dtype of [`COLLECTIVE_DTYPES`] (i8, u8, i32, i64, f16,
//!   bf16, f32, f64). Each program holds the operation at three sizes: 1 element, 1001
//!   elements and 64 KiB (per rank and block).
//! - **Group shapes** (f32 and i8, every operation, every root): `[[0,1],[2,3]]`,
//!   `[[0,2],[1,3]]`, `[[0,1,2,3]]` written out, groups that leave ranks out (`[[0,2]]` on 4
//!   ranks, `[[1,2]]` on 3, `[[1,2,3]]` on 4: the left-out ranks must keep their poisoned `dst`)
//!   and groups of one (`[[0],[1],…]` on 1 to 4 ranks).
//! - **In-place all-reduce** (`src == dst`) of every dtype, and on 4 ranks in a group that
//!   leaves ranks out (they keep their input).
//! - **Collective permute**: a ring on 1 to 4 ranks, and partial permutes whose non-targets
//!   must get zeros.
//! - **Send/receive** between pairs of ranks (`0↔1`, `2↔3`; on 3 ranks rank 2 takes no part),
//!   three messages each way, matched in order.
//! - The core **SPMD driver** (`run_spmd`, 3 iterations: communicators reused) with `RankId`;
//!   collectives in an **async communication scope** beside compute work, under the default,
//!   in-order and 4-stream schedules.
//! - **Failures**: rank 0 all-reduces while rank 1 all-gathers the same data — an error on
//!   every rank, not a hang; the provider then gives a fresh clique that works. A rank that
//!   never reaches a collective: the other fails at the terminate timeout naming it. These use
//!   the context's [`FAILURE_TIMEOUTS`] provider.
//!
//! Every run is watched: a rank that has not returned well after the terminate timeout fails
//! the check as a hang (its thread is left behind) instead of hanging the suite.
//!
//! # Inputs and references
//!
//! Every output starts poisoned ([`poison_byte`]) with a tail past its end that must stay
//! untouched; parameters must be unchanged after the run. Data-movement operations (all-gather,
//! all-to-all, broadcast, permute, send/receive) move random bytes (any bit pattern, NaNs
//! included) and are compared byte for byte. A group of one is a copy and is compared byte for
//! byte too.
//!
//! Reductions draw fresh random values per rank, chosen so that **no integer sum or product
//! overflows** (sum: each value within a quarter of the type's range; prod: |x| ≤ 3 for i8/u8,
//! 215 for i32, 50 000 for i64; min/max: the whole range); the integer reference is exact
//! (i128), wrapped to the type for form's sake, and compared exactly. Float inputs are uniform
//! in [-1, 1) (sum, min, max) or of magnitude [0.5, 2) with a random sign (prod: no overflow or
//! underflow), rounded to the dtype. NaN propagation of reductions is not part of the interface
//! (the host follows IEEE minNum/maxNum, NCCL does not) and is not tested.
//!
//! # Tolerances
//!
//! Float reductions over a group of `n` ranks are compared with the exact result rounded to
//! the dtype (the f64 reference: sums with Neumaier's compensation, products in f64), at
//!
//! ```text
//! tol = n·(u + 2^-53) / (1 - n·u) · M  +  n·s
//! ```
//!
//! where `u` is the dtype's unit roundoff (2^-11 f16, 2^-8 bf16, 2^-24 f32, 2^-53 f64), `s` its
//! smallest subnormal, and `M = Σ|x|` for sums, `|Π x|` for products. It bounds an
//! implementation that rounds to the dtype after each of the `n - 1` combining steps (a ring,
//! as NCCL does for f16 and bf16) plus the reference's rounding and its own f64 error: it grows
//! with the number of ranks. Min and max are exact.

use crate::util::{
    CheckResult, CheckRng, Values, compare_bytes, compare_floats, compare_ints, decode, encode,
    ensure, execute_loaded, fail, int_range, poison_byte, random_bytes, rng_from, round_to,
    seed_for, unit_roundoff, wrap_int,
};
use crate::{
    CHECK_TIMEOUTS, Check, CheckFailure, Collectives, FAILURE_TIMEOUTS, Provoked, panic_message,
};
use rand::RngCore;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use xthunk_core::collectives::CliqueProvider;
use xthunk_core::executor::spmd::run_spmd;
use xthunk_core::executor::{CollectiveContext, ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::ir::{
    AsyncKind, COLLECTIVE_DTYPES, CollectiveOp, CollectiveThunk, DType, Executable,
    ExecutableBuilder, ReduceOp, Thunk,
};

/// How long a run may take before it counts as hung: well past the terminate timeout, after
/// which a stuck collective must have failed.
const RUN_LIMIT: Duration = Duration::from_secs(CHECK_TIMEOUTS.terminate_after.as_secs() + 30);
/// The same for runs on the [`FAILURE_TIMEOUTS`] provider.
const FAILURE_RUN_LIMIT: Duration =
    Duration::from_secs(FAILURE_TIMEOUTS.terminate_after.as_secs() + 8);

pub fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    for n in 1..=4usize {
        for dtype in COLLECTIVE_DTYPES {
            for op in ReduceOp::ALL {
                v.push(matrix(CollectiveOp::AllReduce { op }, dtype, n));
                v.push(matrix(CollectiveOp::ReduceScatter { op }, dtype, n));
            }
            v.push(matrix(CollectiveOp::AllGather, dtype, n));
            v.push(matrix(CollectiveOp::AllToAll, dtype, n));
            // Broadcast: one program with a broadcast from every root.
            v.push(matrix(CollectiveOp::Broadcast { root: 0 }, dtype, n));
        }
    }
    let shapes: Vec<(&str, usize, Vec<Vec<u32>>)> = vec![
        ("pairs", 4, vec![vec![0, 1], vec![2, 3]]),
        ("strided", 4, vec![vec![0, 2], vec![1, 3]]),
        ("whole", 4, vec![vec![0, 1, 2, 3]]),
        ("leave_out_1_3", 4, vec![vec![0, 2]]),
        ("leave_out_0", 3, vec![vec![1, 2]]),
        ("leave_out_0_of_4", 4, vec![vec![1, 2, 3]]),
        ("singles", 1, vec![vec![0]]),
        ("singles", 2, vec![vec![0], vec![1]]),
        ("singles", 3, vec![vec![0], vec![1], vec![2]]),
        ("singles", 4, vec![vec![0], vec![1], vec![2], vec![3]]),
    ];
    for (shape, n, groups) in shapes {
        for dtype in [DType::F32, DType::I8] {
            v.push(groups_check(shape, n, groups.clone(), dtype));
        }
    }
    for n in 1..=4usize {
        v.push(in_place(n));
        v.push(permute(n, false));
        v.push(permute(n, true));
        v.push(spmd_driver(n));
        v.push(schedules(n));
    }
    for n in 2..=4usize {
        v.push(send_recv(n));
    }
    v.push(check("mismatch_reported_2ranks", 2, mismatch).provoking(Provoked::Mismatch));
    v.push(check("missing_rank_2ranks", 2, missing_rank).provoking(Provoked::MissingRank));
    v
}

/// A check `collectives/{name}` on `ranks` devices, with a generator seeded by its name.
fn check(
    name: impl Into<String>,
    ranks: usize,
    f: impl Fn(&Collectives, &mut CheckRng) -> CheckResult + Send + Sync + 'static,
) -> Check {
    let name = format!("collectives/{}", name.into());
    let seed = seed_for(&name);
    Check::collective(name, ranks, move |ctx| {
        let mut rng = rng_from(seed);
        f(ctx, &mut rng).map_err(|e| match e {
            CheckFailure::Mismatch(m) => CheckFailure::Mismatch(format!("{m} [seed {seed:#x}]")),
            other => other,
        })
    })
}

/// Element counts of every operation: one, odd, and 64 KiB.
fn counts(dtype: DType) -> [usize; 3] {
    [1, 1001, (64 << 10) / dtype.size()]
}

fn op_name(op: &CollectiveOp) -> String {
    match op {
        CollectiveOp::AllReduce { op } => format!("all_reduce_{op}"),
        CollectiveOp::ReduceScatter { op } => format!("reduce_scatter_{op}"),
        other => other.name().to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Collectives, programs and references.

/// One collective thunk of a program.
#[derive(Clone, Debug)]
struct Coll {
    op: CollectiveOp,
    dtype: DType,
    /// Elements per block: all-reduce and broadcast move `count`; all-gather sends `count` and
    /// receives `g·count` (`g` the group size); reduce-scatter sends `g·count` and receives
    /// `count`; all-to-all sends and receives `g` blocks of `count`.
    count: usize,
    groups: Vec<Vec<u32>>,
    /// `src == dst` (all-reduce only): the output starts with the input, no parameter.
    in_place: bool,
}

impl Coll {
    fn new(op: CollectiveOp, dtype: DType, count: usize, groups: Vec<Vec<u32>>) -> Self {
        Coll {
            op,
            dtype,
            count,
            groups,
            in_place: false,
        }
    }

    fn group_size(&self, world: usize) -> usize {
        self.groups.first().map_or(world, Vec::len)
    }

    /// Elements of `src` and `dst`.
    fn elems(&self, world: usize) -> (usize, usize) {
        let (g, c) = (self.group_size(world), self.count);
        match self.op {
            CollectiveOp::AllReduce { .. } | CollectiveOp::Broadcast { .. } => (c, c),
            CollectiveOp::AllGather => (c, g * c),
            CollectiveOp::ReduceScatter { .. } => (g * c, c),
            CollectiveOp::AllToAll => (g * c, g * c),
        }
    }

    /// The group (global ranks) of `rank` and its position there; `None` in no group.
    fn group_of(&self, world: usize, rank: usize) -> Option<(Vec<usize>, usize)> {
        let group: Vec<usize> = if self.groups.is_empty() {
            (0..world).collect()
        } else {
            self.groups
                .iter()
                .find(|g| g.contains(&(rank as u32)))?
                .iter()
                .map(|&r| r as usize)
                .collect()
        };
        let pos = group.iter().position(|&r| r == rank)?;
        Some((group, pos))
    }

    fn describe(&self) -> String {
        let op = match self.op {
            CollectiveOp::AllReduce { op } => format!("all_reduce({op})"),
            CollectiveOp::ReduceScatter { op } => format!("reduce_scatter({op})"),
            CollectiveOp::Broadcast { root } => format!("broadcast(root {root})"),
            ref other => other.name().to_string(),
        };
        let groups = if self.groups.is_empty() {
            "every rank".to_string()
        } else {
            format!("groups {:?}", self.groups)
        };
        format!(
            "{op}{} {} × {} over {groups}",
            if self.in_place { " in place" } else { "" },
            self.dtype,
            self.count
        )
    }
}

/// A program of collectives: parameter `x{i}` and output `y{i}` for the `i`-th (an in-place
/// one has only `y{i}`); output `i` belongs to collective `i`.
fn program(name: &str, colls: &[Coll], world: usize) -> CheckResult<Executable> {
    let mut b = ExecutableBuilder::new(name);
    for (i, c) in colls.iter().enumerate() {
        let (se, de) = c.elems(world);
        let (src, dst) = if c.in_place {
            let y = b.output(&format!("y{i}"), c.dtype, &[de as u64]);
            (y.slice(), y.slice())
        } else {
            let x = b.parameter(&format!("x{i}"), c.dtype, &[se as u64]);
            let y = b.output(&format!("y{i}"), c.dtype, &[de as u64]);
            (x.slice(), y.slice())
        };
        b.push(Thunk::Collective(CollectiveThunk {
            op: c.op.clone(),
            src,
            dst,
            dtype: c.dtype,
            groups: c.groups.clone(),
        }));
    }
    b.build()
        .map_err(|e| fail(format!("building `{name}`: {e}")))
}

/// A fast stream of random words (splitmix64), seeded from the check's generator: the large
/// inputs stay cheap in debug builds.
struct Mix(u64);

impl Mix {
    fn new(rng: &mut CheckRng) -> Self {
        Mix(rng.next_u64())
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * 2f64.powi(-53)
    }
}

/// The range of integer inputs of a reduction: no sum of 4 values and no product of 4 values
/// overflows.
fn int_inputs(dtype: DType, op: ReduceOp) -> (i64, i64) {
    let (lo, hi) = int_range(dtype);
    match op {
        ReduceOp::Sum => (lo / 4, hi / 4),
        ReduceOp::Prod => {
            let m = match dtype {
                DType::I8 | DType::U8 => 3,
                DType::I32 => 215,
                _ => 50_000,
            };
            ((-m).max(lo), m)
        }
        ReduceOp::Min | ReduceOp::Max => (lo, hi),
    }
}

/// `n` random inputs of a reduction (see the module documentation).
fn reduce_values(mix: &mut Mix, dtype: DType, op: ReduceOp, n: usize) -> Values {
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
fn input(rng: &mut CheckRng, c: &Coll, world: usize) -> CheckResult<Vec<u8>> {
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
fn smallest_subnormal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        DType::F32 => f32::from_bits(1) as f64,
        _ => f64::from_bits(1),
    }
}

/// The f64 reference of `op` over `xs` and the magnitude its tolerance scales with.
fn reduce_f64(op: ReduceOp, xs: &[f64]) -> (f64, f64) {
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
fn compare_reduced(
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
fn verify(
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

/// Runs `colls` as one program on `world` ranks with fresh inputs and poisoned outputs, and
/// checks every rank's outputs.
fn run_case(
    ctx: &Collectives,
    rng: &mut CheckRng,
    name: &str,
    world: usize,
    colls: &[Coll],
) -> CheckResult {
    let exe = program(name, colls, world)?;
    let inputs = (0..world)
        .map(|_| {
            colls
                .iter()
                .map(|c| input(rng, c, world))
                .collect::<CheckResult<Vec<_>>>()
        })
        .collect::<CheckResult<Vec<_>>>()?;
    let inits: Vec<Vec<Vec<u8>>> = inputs
        .iter()
        .map(|mine| {
            colls
                .iter()
                .zip(mine)
                .map(|(c, x)| {
                    if c.in_place {
                        x.clone()
                    } else {
                        vec![poison_byte(c.dtype); c.elems(world).1 * c.dtype.size()]
                    }
                })
                .collect()
        })
        .collect();
    let runs = (0..world)
        .map(|r| RankRun {
            exe: exe.clone(),
            params: colls
                .iter()
                .zip(&inputs[r])
                .filter(|(c, _)| !c.in_place)
                .map(|(_, x)| x.clone())
                .collect(),
            outputs_init: inits[r].clone(),
        })
        .collect();
    let outputs = all_ok(spmd(
        ctx,
        ctx.cliques()?,
        runs,
        &ExecutorConfig::default(),
        RUN_LIMIT,
    )?)?;
    for (i, c) in colls.iter().enumerate() {
        for (r, out) in outputs.iter().enumerate() {
            verify(c, world, r, i, &inputs, &inits[r][i], &out[i])?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running ranks.

/// What one rank runs.
struct RankRun {
    exe: Executable,
    params: Vec<Vec<u8>>,
    outputs_init: Vec<Vec<u8>>,
}

type RankResult = CheckResult<Vec<Vec<u8>>>;

/// Runs `runs[r]` as rank `r` of `runs.len()` on device `r`, each rank on its own thread with
/// its own loaded executable, through [`execute_loaded`] (fresh buffers, poisoned outputs with
/// checked tails, parameters checked unchanged); returns each rank's outputs or error. Fails
/// as a hang if a rank has not returned after `limit` (its thread is left behind).
fn spmd(
    ctx: &Collectives,
    cliques: Arc<dyn CliqueProvider>,
    runs: Vec<RankRun>,
    config: &ExecutorConfig,
    limit: Duration,
) -> CheckResult<Vec<RankResult>> {
    let world = runs.len();
    ensure(ctx.devices().len() >= world, || {
        format!("{world} ranks but {} devices", ctx.devices().len())
    })?;
    let (tx, rx) = mpsc::channel::<(usize, RankResult)>();
    for (rank, run) in runs.into_iter().enumerate() {
        let device = ctx.devices()[rank].clone();
        let tx = tx.clone();
        let config = config.clone();
        let opts = ExecuteOptions {
            collectives: Some(CollectiveContext {
                rank: rank as u32,
                world: world as u32,
                cliques: cliques.clone(),
            }),
            ..Default::default()
        };
        std::thread::Builder::new()
            .name(format!("conformance-rank-{rank}"))
            .spawn(move || {
                let body = || -> RankResult {
                    let loaded = LoadedExecutable::load_with(device.clone(), run.exe, &config)?;
                    execute_loaded(&device, &loaded, &run.params, &run.outputs_init, &opts)
                };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                    .unwrap_or_else(|p| Err(fail(format!("panicked: {}", panic_message(&*p)))));
                let _ = tx.send((rank, r));
            })
            .map_err(|e| fail(format!("spawning the thread of rank {rank}: {e}")))?;
    }
    drop(tx);
    let deadline = Instant::now() + limit;
    let mut results: Vec<Option<RankResult>> = (0..world).map(|_| None).collect();
    while results.iter().any(Option::is_none) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((rank, r)) => results[rank] = Some(r),
            Err(_) => {
                let missing: Vec<usize> = (0..world).filter(|&r| results[r].is_none()).collect();
                return Err(fail(format!(
                    "rank(s) {missing:?} of {world} had not returned after {limit:?}: the run \
                     hung (their threads are left behind)"
                )));
            }
        }
    }
    Ok(results.into_iter().flatten().collect())
}

/// Every rank's outputs, or a failure listing every rank's error.
fn all_ok(results: Vec<RankResult>) -> CheckResult<Vec<Vec<Vec<u8>>>> {
    let errors: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(r, x)| x.as_ref().err().map(|e| format!("rank {r}: {e}")))
        .collect();
    if !errors.is_empty() {
        return Err(fail(errors.join("; ")));
    }
    Ok(results.into_iter().flatten().collect())
}

/// Runs `f` on a thread of its own; fails as a hang after `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> CheckResult<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("conformance-spmd".into())
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        })
        .map_err(|e| fail(format!("spawning a thread: {e}")))?;
    match rx.recv_timeout(limit) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(p)) => Err(fail(format!("{what} panicked: {}", panic_message(&*p)))),
        Err(_) => Err(fail(format!(
            "{what} had not returned after {limit:?}: it hung (its thread is left behind)"
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// `op` of `dtype` over every rank of `n`, at every size (broadcast: from every root).
fn matrix(op: CollectiveOp, dtype: DType, n: usize) -> Check {
    let name = format!("{}_{dtype}_{n}ranks", op_name(&op));
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let mut colls = Vec::new();
        for count in counts(dtype) {
            match op {
                CollectiveOp::Broadcast { .. } => {
                    for root in 0..n as u32 {
                        colls.push(Coll::new(
                            CollectiveOp::Broadcast { root },
                            dtype,
                            count,
                            vec![],
                        ));
                    }
                }
                ref op => colls.push(Coll::new(op.clone(), dtype, count, vec![])),
            }
        }
        run_case(ctx, rng, &prog, n, &colls)
    })
}

/// Every operation (two reductions each, broadcast from every root) of `dtype` over `groups`
/// of `n` ranks, at every size.
fn groups_check(shape: &str, n: usize, groups: Vec<Vec<u32>>, dtype: DType) -> Check {
    let name = format!("groups_{shape}_{dtype}_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let g = groups.first().map_or(n, Vec::len) as u32;
        let mut ops = vec![
            CollectiveOp::AllReduce { op: ReduceOp::Sum },
            CollectiveOp::AllReduce { op: ReduceOp::Max },
            CollectiveOp::ReduceScatter { op: ReduceOp::Sum },
            CollectiveOp::ReduceScatter { op: ReduceOp::Min },
            CollectiveOp::AllGather,
            CollectiveOp::AllToAll,
        ];
        ops.extend((0..g).map(|root| CollectiveOp::Broadcast { root }));
        let colls: Vec<Coll> = counts(dtype)
            .into_iter()
            .flat_map(|count| {
                ops.iter()
                    .map(move |op| (op.clone(), count))
                    .collect::<Vec<_>>()
            })
            .map(|(op, count)| Coll::new(op, dtype, count, groups.clone()))
            .collect();
        run_case(ctx, rng, &prog, n, &colls)
    })
}

/// In-place sums of every dtype at every size; on 4 ranks also an in-place max in a group that
/// leaves ranks 1 and 3 out (they keep their input).
fn in_place(n: usize) -> Check {
    let name = format!("in_place_all_reduce_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let mut colls = Vec::new();
        for dtype in COLLECTIVE_DTYPES {
            for count in counts(dtype) {
                let mut c = Coll::new(
                    CollectiveOp::AllReduce { op: ReduceOp::Sum },
                    dtype,
                    count,
                    vec![],
                );
                c.in_place = true;
                colls.push(c);
            }
        }
        if n == 4 {
            let mut c = Coll::new(
                CollectiveOp::AllReduce { op: ReduceOp::Max },
                DType::F32,
                1001,
                vec![vec![0, 2]],
            );
            c.in_place = true;
            colls.push(c);
        }
        run_case(ctx, rng, &prog, n, &colls)
    })
}

/// The messages of the permute and send/receive checks: (dtype, elements).
const MESSAGES: [(DType, usize); 3] = [
    (DType::F16, 1),
    (DType::I8, 1001),
    (DType::F32, (64 << 10) / 4),
];

/// A collective permute on `n` ranks: a ring (`r → r+1 mod n`), or a partial permute whose
/// non-targets must receive zeros.
fn permute(n: usize, partial: bool) -> Check {
    let kind = if partial { "partial" } else { "ring" };
    let name = format!("permute_{kind}_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let pairs: Vec<(u32, u32)> = match (partial, n) {
            (false, _) => (0..n as u32).map(|r| (r, (r + 1) % n as u32)).collect(),
            (true, 1) => vec![],
            (true, 2) => vec![(0, 1)],
            (true, 3) => vec![(0, 2), (2, 0)],
            (true, _) => vec![(0, 2), (2, 1)],
        };
        let mut b = ExecutableBuilder::new(prog.as_str());
        for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
            let x = b.parameter(&format!("x{i}"), dtype, &[count as u64]);
            let y = b.output(&format!("y{i}"), dtype, &[count as u64]);
            b.push(Thunk::CollectivePermute {
                src: x.slice(),
                dst: y.slice(),
                dtype,
                pairs: pairs.clone(),
            });
        }
        let exe = b
            .build()
            .map_err(|e| fail(format!("building `{prog}`: {e}")))?;
        let inputs: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|_| {
                MESSAGES
                    .iter()
                    .map(|(d, c)| random_bytes(rng, c * d.size()))
                    .collect()
            })
            .collect();
        let inits: Vec<Vec<u8>> = MESSAGES
            .iter()
            .map(|(d, c)| vec![poison_byte(*d); c * d.size()])
            .collect();
        let runs = inputs
            .iter()
            .map(|x| RankRun {
                exe: exe.clone(),
                params: x.clone(),
                outputs_init: inits.clone(),
            })
            .collect();
        let outputs = all_ok(spmd(
            ctx,
            ctx.cliques()?,
            runs,
            &ExecutorConfig::default(),
            RUN_LIMIT,
        )?)?;
        for (t, out) in outputs.iter().enumerate() {
            let from = pairs
                .iter()
                .find(|p| p.1 as usize == t)
                .map(|p| p.0 as usize);
            for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
                let what =
                    format!("rank {t} of {n}: collective_permute {pairs:?} of {dtype} × {count}");
                match from {
                    Some(s) => {
                        compare_bytes(&format!("{what} (from rank {s})"), &out[i], &inputs[s][i])?
                    }
                    None => compare_bytes(
                        &format!("{what} (no source: zeros)"),
                        &out[i],
                        &vec![0u8; count * dtype.size()],
                    )?,
                }
            }
        }
        Ok(())
    })
}

/// Pairs `0↔1`, `2↔3` exchange three messages each way with `Send`/`Recv` (the even rank sends
/// first, the odd one receives first; the `k`-th send meets the `k`-th receive); on 3 ranks,
/// rank 2 takes no part and keeps its poisoned outputs.
fn send_recv(n: usize) -> Check {
    let name = format!("send_recv_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let peer = |r: usize| Some(r ^ 1).filter(|&p| p < n);
        let mut runs = Vec::new();
        let mut inputs = Vec::new();
        let inits: Vec<Vec<u8>> = MESSAGES
            .iter()
            .map(|(d, c)| vec![poison_byte(*d); c * d.size()])
            .collect();
        for r in 0..n {
            let mut b = ExecutableBuilder::new(format!("{prog}_rank{r}"));
            let mut xs = Vec::new();
            let mut ys = Vec::new();
            for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
                xs.push((b.parameter(&format!("x{i}"), dtype, &[count as u64]), dtype));
                ys.push((b.output(&format!("y{i}"), dtype, &[count as u64]), dtype));
            }
            if let Some(p) = peer(r) {
                let sends: Vec<Thunk> = xs
                    .iter()
                    .map(|(x, dtype)| Thunk::Send {
                        src: x.slice(),
                        dtype: *dtype,
                        peer: p as u32,
                    })
                    .collect();
                let recvs: Vec<Thunk> = ys
                    .iter()
                    .map(|(y, dtype)| Thunk::Recv {
                        dst: y.slice(),
                        dtype: *dtype,
                        peer: p as u32,
                    })
                    .collect();
                let (first, second) = if r % 2 == 0 {
                    (sends, recvs)
                } else {
                    (recvs, sends)
                };
                for t in first.into_iter().chain(second) {
                    b.push(t);
                }
            }
            let exe = b
                .build()
                .map_err(|e| fail(format!("building the program of rank {r}: {e}")))?;
            let x: Vec<Vec<u8>> = MESSAGES
                .iter()
                .map(|(d, c)| random_bytes(rng, c * d.size()))
                .collect();
            runs.push(RankRun {
                exe,
                params: x.clone(),
                outputs_init: inits.clone(),
            });
            inputs.push(x);
        }
        let outputs = all_ok(spmd(
            ctx,
            ctx.cliques()?,
            runs,
            &ExecutorConfig::default(),
            RUN_LIMIT,
        )?)?;
        for (r, out) in outputs.iter().enumerate() {
            for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
                let what = format!("rank {r} of {n}: message {i} ({dtype} × {count})");
                match peer(r) {
                    Some(p) => {
                        compare_bytes(&format!("{what} from rank {p}"), &out[i], &inputs[p][i])?
                    }
                    None => compare_bytes(
                        &format!("{what}: rank {r} has no peer and must keep its poison"),
                        &out[i],
                        &inits[i],
                    )?,
                }
            }
        }
        Ok(())
    })
}

/// The core SPMD driver (`run_spmd`), 3 iterations: `RankId`, an all-gather of the ids and an
/// f64 all-reduce.
fn spmd_driver(n: usize) -> Check {
    let name = format!("spmd_driver_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        const COUNT: usize = 1001;
        let mut b = ExecutableBuilder::new(prog.as_str());
        let x = b.parameter("x", DType::F64, &[COUNT as u64]);
        let id = b.output("id", DType::I32, &[1]);
        let ids = b.output("ids", DType::I32, &[n as u64]);
        let y = b.output("y", DType::F64, &[COUNT as u64]);
        b.push(Thunk::RankId { dst: id.slice() });
        b.push(Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllGather,
            src: id.slice(),
            dst: ids.slice(),
            dtype: DType::I32,
            groups: vec![],
        }));
        b.push(Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
            src: x.slice(),
            dst: y.slice(),
            dtype: DType::F64,
            groups: vec![],
        }));
        let exe = b
            .build()
            .map_err(|e| fail(format!("building `{prog}`: {e}")))?;
        let mut mix = Mix::new(rng);
        let inputs = (0..n)
            .map(|_| {
                Ok(vec![encode(
                    DType::F64,
                    &reduce_values(&mut mix, DType::F64, ReduceOp::Sum, COUNT),
                )?])
            })
            .collect::<CheckResult<Vec<Vec<Vec<u8>>>>>()?;
        let devices: Vec<_> = ctx.devices()[..n].to_vec();
        let cliques = ctx.cliques()?;
        let ins = inputs.clone();
        let results = within(RUN_LIMIT, "run_spmd", move || {
            run_spmd(
                &exe,
                &devices,
                cliques,
                &ins,
                3,
                &ExecutorConfig::default(),
                &ExecuteOptions::default(),
            )
        })??;
        ensure(results.len() == n, || {
            format!("run_spmd returned {} ranks, expected {n}", results.len())
        })?;
        let all_ids: Vec<u8> = (0..n as i32).flat_map(|r| r.to_le_bytes()).collect();
        let srcs: Vec<&[u8]> = inputs.iter().map(|x| &x[0][..]).collect();
        for (r, out) in results.iter().enumerate() {
            ensure(out.outputs.len() == 3 && out.times.len() == 3, || {
                format!(
                    "rank {r}: {} outputs and {} iteration times, expected 3 and 3",
                    out.outputs.len(),
                    out.times.len()
                )
            })?;
            compare_bytes(
                &format!("rank {r} of {n}: rank_id"),
                &out.outputs[0],
                &(r as i32).to_le_bytes(),
            )?;
            compare_bytes(
                &format!("rank {r} of {n}: all_gather of the rank ids"),
                &out.outputs[1],
                &all_ids,
            )?;
            compare_reduced(
                &format!("rank {r} of {n}: all_reduce(sum) f64 × {COUNT} after 3 iterations"),
                DType::F64,
                ReduceOp::Sum,
                &srcs,
                &out.outputs[2],
            )?;
        }
        Ok(())
    })
}

/// An all-reduce in an async communication scope beside a compute copy, then an all-gather of
/// its result and a reduce-scatter, under the default, in-order and 4-stream schedules.
fn schedules(n: usize) -> Check {
    let name = format!("schedules_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        const COUNT: usize = 1001;
        let c = COUNT as u64;
        let mut b = ExecutableBuilder::new(prog.as_str());
        let x = b.parameter("x", DType::F32, &[c]);
        let z = b.parameter("z", DType::U8, &[c]);
        let a = b.parameter("a", DType::I32, &[n as u64 * c]);
        let y = b.output("y", DType::F32, &[c]);
        let w = b.output("w", DType::U8, &[c]);
        let g = b.output("g", DType::F32, &[n as u64 * c]);
        let s = b.output("s", DType::I32, &[c]);
        b.push(Thunk::AsyncStart {
            id: 1,
            kind: AsyncKind::Communication,
            body: vec![Thunk::Collective(CollectiveThunk {
                op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                src: x.slice(),
                dst: y.slice(),
                dtype: DType::F32,
                groups: vec![],
            })],
        });
        b.copy(z.slice(), w.slice());
        b.push(Thunk::AsyncDone { id: 1 });
        b.push(Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllGather,
            src: y.slice(),
            dst: g.slice(),
            dtype: DType::F32,
            groups: vec![],
        }));
        b.push(Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::ReduceScatter { op: ReduceOp::Max },
            src: a.slice(),
            dst: s.slice(),
            dtype: DType::I32,
            groups: vec![],
        }));
        let exe = b
            .build()
            .map_err(|e| fail(format!("building `{prog}`: {e}")))?;
        let mut mix = Mix::new(rng);
        let mut inputs = Vec::new();
        for _ in 0..n {
            inputs.push(vec![
                encode(
                    DType::F32,
                    &reduce_values(&mut mix, DType::F32, ReduceOp::Sum, COUNT),
                )?,
                random_bytes(rng, COUNT),
                encode(
                    DType::I32,
                    &reduce_values(&mut mix, DType::I32, ReduceOp::Max, n * COUNT),
                )?,
            ]);
        }
        let inits = vec![
            vec![poison_byte(DType::F32); COUNT * 4],
            vec![poison_byte(DType::U8); COUNT],
            vec![poison_byte(DType::F32); n * COUNT * 4],
            vec![poison_byte(DType::I32); COUNT * 4],
        ];
        let configs = [
            ("default schedule", ExecutorConfig::default()),
            ("in-order schedule", ExecutorConfig::in_order()),
            (
                "4-stream schedule",
                ExecutorConfig {
                    streams: 4,
                    sequential_below: 0,
                    force_sequential: false,
                    ..ExecutorConfig::default()
                },
            ),
        ];
        for (label, config) in configs {
            let runs = inputs
                .iter()
                .map(|x| RankRun {
                    exe: exe.clone(),
                    params: x.clone(),
                    outputs_init: inits.clone(),
                })
                .collect();
            let outputs = all_ok(spmd(ctx, ctx.cliques()?, runs, &config, RUN_LIMIT)?)
                .map_err(|e| fail(format!("{label}: {e}")))?;
            let xs: Vec<&[u8]> = inputs.iter().map(|x| &x[0][..]).collect();
            let gathered: Vec<u8> = outputs.iter().flat_map(|o| o[0].clone()).collect();
            for (r, out) in outputs.iter().enumerate() {
                let what = |s: &str| format!("{label}, rank {r} of {n}: {s}");
                compare_reduced(
                    &what("all_reduce(sum) f32 in an async communication scope"),
                    DType::F32,
                    ReduceOp::Sum,
                    &xs,
                    &out[0],
                )?;
                compare_bytes(&what("copy beside the async scope"), &out[1], &inputs[r][1])?;
                compare_bytes(
                    &what("all_gather of every rank's all_reduce result"),
                    &out[2],
                    &gathered,
                )?;
                let blocks: Vec<&[u8]> = inputs
                    .iter()
                    .map(|x| &x[2][r * COUNT * 4..(r + 1) * COUNT * 4])
                    .collect();
                compare_reduced(
                    &what("reduce_scatter(max) i32"),
                    DType::I32,
                    ReduceOp::Max,
                    &blocks,
                    &out[3],
                )?;
            }
        }
        Ok(())
    })
}

/// A program of one collective `op` of f32 × `count` over every rank of `world`.
fn one_collective(
    name: &str,
    op: CollectiveOp,
    count: usize,
    world: usize,
) -> CheckResult<Executable> {
    program(name, &[Coll::new(op, DType::F32, count, vec![])], world)
}

/// Rank 0 all-reduces while rank 1 all-gathers the same data: every rank must fail (not
/// hang); after evicting the failed clique, a matched all-reduce on the same provider works.
fn mismatch(ctx: &Collectives, rng: &mut CheckRng) -> CheckResult {
    const COUNT: usize = 1001;
    let cliques = ctx.failure_cliques()?;
    let reduce = one_collective(
        "mismatch_rank0",
        CollectiveOp::AllReduce { op: ReduceOp::Sum },
        COUNT,
        2,
    )?;
    let gather = one_collective("mismatch_rank1", CollectiveOp::AllGather, COUNT, 2)?;
    let mut mix = Mix::new(rng);
    let xs = (0..2)
        .map(|_| {
            encode(
                DType::F32,
                &reduce_values(&mut mix, DType::F32, ReduceOp::Sum, COUNT),
            )
        })
        .collect::<CheckResult<Vec<_>>>()?;
    let poison = |n: usize| vec![poison_byte(DType::F32); n * COUNT * 4];
    let runs = vec![
        RankRun {
            exe: reduce.clone(),
            params: vec![xs[0].clone()],
            outputs_init: vec![poison(1)],
        },
        RankRun {
            exe: gather,
            params: vec![xs[1].clone()],
            outputs_init: vec![poison(2)],
        },
    ];
    let start = Instant::now();
    let results = spmd(
        ctx,
        cliques.clone(),
        runs,
        &ExecutorConfig::default(),
        FAILURE_RUN_LIMIT,
    )?;
    let took = start.elapsed();
    for (r, res) in results.iter().enumerate() {
        ensure(res.is_err(), || {
            format!(
                "rank {r}: the mismatched collective (rank 0 all_reduce, rank 1 all_gather) \
                 succeeded; every rank must report an error"
            )
        })?;
    }
    tracing::debug!(?took, "mismatch reported on every rank");
    // The failed clique is forgotten; the same ranks get a fresh one that works.
    cliques.evict_aborted();
    let runs = xs
        .iter()
        .map(|x| RankRun {
            exe: reduce.clone(),
            params: vec![x.clone()],
            outputs_init: vec![poison(1)],
        })
        .collect();
    let outputs = all_ok(spmd(
        ctx,
        cliques,
        runs,
        &ExecutorConfig::default(),
        FAILURE_RUN_LIMIT,
    )?)
    .map_err(|e| fail(format!("the matched all_reduce after the mismatch: {e}")))?;
    let srcs: Vec<&[u8]> = xs.iter().map(|x| &x[..]).collect();
    for (r, out) in outputs.iter().enumerate() {
        compare_reduced(
            &format!("rank {r}: all_reduce(sum) after the mismatch"),
            DType::F32,
            ReduceOp::Sum,
            &srcs,
            &out[0],
        )?;
    }
    Ok(())
}

/// True when `msg` names rank `r` (`rank 1`, `rank(s) 1`, `ranks [1]`, …).
fn names_rank(msg: &str, r: usize) -> bool {
    [
        format!("rank {r}"),
        format!("rank(s) {r}"),
        format!("ranks {r}"),
        format!("rank [{r}]"),
        format!("ranks [{r}]"),
        format!("rank(s) [{r}]"),
    ]
    .iter()
    .any(|p| msg.contains(p.as_str()))
}

/// Rank 1 never reaches the all-reduce rank 0 waits in: rank 0 fails (after the terminate
/// timeout, not hanging) with an error naming rank 1.
fn missing_rank(ctx: &Collectives, rng: &mut CheckRng) -> CheckResult {
    const COUNT: usize = 1001;
    let cliques = ctx.failure_cliques()?;
    let reduce = one_collective(
        "missing_rank0",
        CollectiveOp::AllReduce { op: ReduceOp::Sum },
        COUNT,
        2,
    )?;
    let mut b = ExecutableBuilder::new("missing_rank1");
    let x = b.parameter("x", DType::F32, &[COUNT as u64]);
    let y = b.output("y", DType::F32, &[COUNT as u64]);
    b.copy(x.slice(), y.slice());
    let copy = b
        .build()
        .map_err(|e| fail(format!("building `missing_rank1`: {e}")))?;
    let x = random_bytes(rng, COUNT * 4);
    let init = vec![poison_byte(DType::F32); COUNT * 4];
    let runs = vec![
        RankRun {
            exe: reduce,
            params: vec![x.clone()],
            outputs_init: vec![init.clone()],
        },
        RankRun {
            exe: copy,
            params: vec![x],
            outputs_init: vec![init],
        },
    ];
    let mut results = spmd(
        ctx,
        cliques,
        runs,
        &ExecutorConfig::default(),
        FAILURE_RUN_LIMIT,
    )?
    .into_iter();
    match results.next() {
        Some(Err(e)) => {
            let msg = e.to_string();
            ensure(names_rank(&msg, 1), || {
                format!("rank 0's error does not name the missing rank 1: {msg}")
            })?;
        }
        Some(Ok(_)) => {
            return Err(fail(
                "rank 0 completed an all_reduce that rank 1 never joined",
            ));
        }
        None => return Err(fail("no result for rank 0")),
    }
    match results.next() {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(fail(format!(
            "rank 1 (a plain copy, no collective) failed: {e}"
        ))),
        None => Err(fail("no result for rank 1")),
    }
}
