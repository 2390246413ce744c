//! Benchmark `wide_dag`: 8 independent chains of 4 elementwise kernels (core's shared wide
//! DAG) on 2 streams, against the same program on 1 stream.

use super::gemm::gemm_value;
use super::program::{Prepared, f32_bytes, f32s, wrong};
use super::report::{Row, thousands};
use super::setup::{Res, Setup};
use super::stats::{Goal, Spread, interleaved, ratios};
use xthunk::core::bench::{WIDE_CHAINS, WIDE_LEN, wide_dag as wide_program};
use xthunk::core::executor::ExecutorConfig;

pub fn wide_dag(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "wide_dag",
        "ms",
        "1-stream time / 2-stream time (speedup)",
        Goal::gt(1.0),
    );
    let (n, grid) = if s.emulated {
        (64 * 1024u64, 64u32)
    } else if s.gpu {
        // Few blocks per kernel, so that one kernel leaves most of the GPU idle and a second
        // stream has room to run.
        (1024 * 1024, 32)
    } else {
        (256 * 1024, 1024)
    };
    row.work = format!(
        "{WIDE_CHAINS} independent chains of {WIDE_LEN} kernels (exp, tanh, exp, tanh) over {} \
         f32 each, grid {grid} x block 256, on 2 streams (ms per execution)",
        thousands(n)
    );
    row.baseline_label = "1 stream".into();
    row.baseline_work = "the same program on 1 stream".into();
    let two = Prepared::new(
        &s.dev,
        wide_program(n, grid)?,
        &ExecutorConfig::with_streams(2),
    )?;
    let one = Prepared::new(
        &s.dev,
        wide_program(n, grid)?,
        &ExecutorConfig::with_streams(1),
    )?;
    let x = f32_bytes(
        &(0..n * WIDE_CHAINS)
            .map(|i| gemm_value(i, 7))
            .collect::<Vec<f32>>(),
    );
    two.set_param(0, &x)?;
    one.set_param(0, &x)?;
    two.run()?;
    one.run()?;
    let bytes = n * WIDE_CHAINS * 4;
    let (r2, r1) = (
        f32s(&two.read(two.output(0)?, 0, bytes)?),
        f32s(&one.read(one.output(0)?, 0, bytes)?),
    );
    if r1 != r2 {
        return Err(wrong(
            "wide_dag",
            "2 streams give other results than 1".into(),
        ));
    }
    let v = gemm_value(0, 7);
    let want = v.exp().tanh().exp().tanh();
    if (r1[0] - want).abs() > 1e-5 {
        return Err(wrong(
            "wide_dag",
            format!("y[0] = {}, expected {want}", r1[0]),
        ));
    }
    row.notes.push(format!(
        "schedule: 2 streams {:?}; 1 stream {:?}",
        two.loaded().schedule_info(),
        one.loaded().schedule_info()
    ));
    let t = interleaved(
        s.rounds(20, 5, 15),
        &mut [&mut || two.run(), &mut || one.run()],
    )?;
    let ms = |v: f64| v * 1e3;
    row.rounds = t[0].len();
    row.value = Some(Spread::of(&t[0]).map(ms));
    row.baseline = Some(Spread::of(&t[1]).map(ms));
    row.ratio = Some(Spread::of(&ratios(&t[1], &t[0])));
    Ok(row)
}
