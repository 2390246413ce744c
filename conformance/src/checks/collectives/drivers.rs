//! The SPMD driver (`run_spmd`) and schedules of several collectives on both stream kinds.

use super::common::{RUN_LIMIT, check};
use super::inputs::{Mix, compare_reduced, reduce_values};
use super::runner::{RankRun, all_ok, spmd, within};
use crate::check::Check;
use crate::util::{CheckResult, compare_bytes, encode, ensure, fail, poison_byte, random_bytes};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::spmd::run_spmd;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::ir::{
    AsyncDoneThunk, AsyncKind, AsyncStartThunk, CollectiveOp, CollectiveThunk, DType, RankIdThunk,
    ReduceOp,
};

/// The core SPMD driver (`run_spmd`), 3 iterations: `RankId`, an all-gather of the ids and an
/// f64 all-reduce.
pub(super) fn spmd_driver(n: usize) -> Check {
    let name = format!("spmd_driver_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        const COUNT: usize = 1001;
        let mut b = ExecutableBuilder::new(prog.as_str());
        let x = b.parameter("x", DType::F64, &[COUNT as u64]);
        let id = b.output("id", DType::I32, &[1]);
        let ids = b.output("ids", DType::I32, &[n as u64]);
        let y = b.output("y", DType::F64, &[COUNT as u64]);
        b.push(RankIdThunk { dst: id.slice() }.into());
        b.push(
            CollectiveThunk {
                op: CollectiveOp::AllGather,
                src: id.slice(),
                dst: ids.slice(),
                dtype: DType::I32,
                groups: vec![],
            }
            .into(),
        );
        b.push(
            CollectiveThunk {
                op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                src: x.slice(),
                dst: y.slice(),
                dtype: DType::F64,
                groups: vec![],
            }
            .into(),
        );
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
pub(super) fn schedules(n: usize) -> Check {
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
        b.push(
            AsyncStartThunk {
                id: 1,
                kind: AsyncKind::Communication,
                body: vec![
                    CollectiveThunk {
                        op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                        src: x.slice(),
                        dst: y.slice(),
                        dtype: DType::F32,
                        groups: vec![],
                    }
                    .into(),
                ],
            }
            .into(),
        );
        b.copy(z.slice(), w.slice());
        b.push(AsyncDoneThunk { id: 1 }.into());
        b.push(
            CollectiveThunk {
                op: CollectiveOp::AllGather,
                src: y.slice(),
                dst: g.slice(),
                dtype: DType::F32,
                groups: vec![],
            }
            .into(),
        );
        b.push(
            CollectiveThunk {
                op: CollectiveOp::ReduceScatter { op: ReduceOp::Max },
                src: a.slice(),
                dst: s.slice(),
                dtype: DType::I32,
                groups: vec![],
            }
            .into(),
        );
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
