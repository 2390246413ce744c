//! The matrix: every operation × dtype × size on 1 to 4 ranks, group shapes, in-place all-reduce.

use super::common::check;
use super::program::{Coll, counts, op_name};
use super::runner::run_case;
use crate::check::Check;
use xthunk_core::ir::{COLLECTIVE_DTYPES, CollectiveOp, DType, ReduceOp};

/// `op` of `dtype` over every rank of `n`, at every size (broadcast: from every root).
pub(super) fn matrix(op: CollectiveOp, dtype: DType, n: usize) -> Check {
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
pub(super) fn groups_check(shape: &str, n: usize, groups: Vec<Vec<u32>>, dtype: DType) -> Check {
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
pub(super) fn in_place(n: usize) -> Check {
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
