//! Collectives that fail on purpose: mismatched operations and a missing rank must be reported,
//! naming the ranks, instead of hanging.

use super::common::FAILURE_RUN_LIMIT;
use super::inputs::{Mix, compare_reduced, reduce_values};
use super::program::{Coll, program};
use super::runner::{RankRun, all_ok, spmd};
use crate::context::Collectives;
use crate::util::{CheckResult, CheckRng, encode, ensure, fail, poison_byte, random_bytes};
use std::time::Instant;
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::ExecutorConfig;
use xthunk_core::ir::{CollectiveOp, DType, Executable, ReduceOp};

/// A program of one collective `op` of f32 × `count` over every rank of `world`.
pub(super) fn one_collective(
    name: &str,
    op: CollectiveOp,
    count: usize,
    world: usize,
) -> CheckResult<Executable> {
    program(name, &[Coll::new(op, DType::F32, count, vec![])], world)
}

/// Rank 0 all-reduces while rank 1 all-gathers the same data: every rank must fail (not
/// hang); after evicting the failed clique, a matched all-reduce on the same provider works.
pub(super) fn mismatch(ctx: &Collectives, rng: &mut CheckRng) -> CheckResult {
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
pub(super) fn names_rank(msg: &str, r: usize) -> bool {
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
pub(super) fn missing_rank(ctx: &Collectives, rng: &mut CheckRng) -> CheckResult {
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
