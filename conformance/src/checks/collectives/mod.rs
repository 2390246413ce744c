//! `collectives/`: collective thunks on 1 to 4 ranks (the ragged all-to-all on up to 8) of the backend under test (rank `r` on
//! device `r` of the [`Collectives`](crate::Collectives) context, each on its own thread with
//! its own loaded executable), compared with references computed here from every rank's inputs.
//!
//! # What is covered
//!
//! - **Every operation × dtype × reduction on 1, 2, 3 and 4 ranks** (one group of every rank):
//!   all-reduce and reduce-scatter with sum, prod, min and max; all-gather; all-to-all;
//!   broadcast from every root. Every dtype of [`COLLECTIVE_DTYPES`] (i8, u8, i32, i64, u32,
//!   u64, f16, bf16, f32, f64). Each program holds the operation at three sizes: 1 element, 1001
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
//! - **Ragged all-to-all** (`ragged.rs`) on 2 to 8 ranks: uneven parts with empty ones, all
//!   parts empty, in groups and leaving a rank out, against a reference from the definition.
//! - **Failures**: rank 0 all-reduces while rank 1 all-gathers the same data — an error on
//!   every rank, not a hang; the provider then gives a fresh clique that works. A rank that
//!   never reaches a collective: the other fails at the terminate timeout naming it. These use
//!   the context's [`FAILURE_TIMEOUTS`](crate::FAILURE_TIMEOUTS) provider.
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

mod common;
mod drivers;
mod failures;
mod inputs;
mod matrix;
mod memory;
mod p2p;
mod program;
mod ragged;
mod runner;

use crate::check::{Check, Provoked};
use common::check;
use drivers::{schedules, spmd_driver};
use failures::{mismatch, missing_rank};
use matrix::{groups_check, in_place, matrix};
use p2p::{permute, send_recv};
use xthunk_core::ir::{COLLECTIVE_DTYPES, CollectiveOp, DType, ReduceOp};

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
    v.extend(ragged::checks());
    v.push(check("mismatch_reported_2ranks", 2, mismatch).provoking(Provoked::Mismatch));
    v.push(check("missing_rank_2ranks", 2, missing_rank).provoking(Provoked::MissingRank));
    // Named in the memory area: collective memory (`memory.rs`).
    v.extend(memory::checks());
    v
}
