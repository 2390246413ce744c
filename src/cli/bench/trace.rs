//! Benchmark `trace_overhead`: what `--trace` costs. The `executor_overhead` chain of 10,000
//! tiny `add_f32` kernels run thunk by thunk (no implicit command buffer, so every thunk gets
//! its own trace record) with a trace (host issue spans, device timing off; one tracer keeps
//! every traced execution, as `run --trace --iterations N`) against the same executions
//! without one; notes give a fresh tracer per execution, the default configuration (one
//! implicit command buffer: one record per execution) and device timing on.

use super::program::{Prepared, TINY, check_chain, f32_bytes, f32s, tiny_chain};
use super::report::{Row, thousands};
use super::setup::{Res, Setup};
use super::stats::{Goal, Spread, interleaved, ratios};
use std::sync::Arc;
use xthunk::ExecuteOptions;
use xthunk::core::executor::ExecutorConfig;
use xthunk::core::trace::{ClockSource, TraceConfig, Tracer};

const CHAIN: usize = 10_000;

/// Options with a fresh tracer (made before the timed execution).
fn traced(device_times: bool) -> ExecuteOptions {
    ExecuteOptions {
        trace: Some(Arc::new(Tracer::new(TraceConfig { device_times }))),
        ..Default::default()
    }
}

/// The median ratio of `p` traced (`device_times` or not, a fresh tracer per execution) to
/// untraced, over `plan` rounds.
fn ratio_of(s: &Setup, p: &Prepared, device_times: bool, rounds: usize) -> Res<Spread> {
    let plan = s.rounds(rounds, rounds / 4 + 3, 10);
    let t = interleaved(
        plan,
        &mut [&mut || p.run_with(&traced(device_times)), &mut || {
            p.run_with(&ExecuteOptions::default())
        }],
    )?;
    Ok(Spread::of(&ratios(&t[0], &t[1])))
}

pub fn trace_overhead(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "trace_overhead",
        "ns/thunk",
        "traced time / untraced time",
        Goal::le(1.05),
    );
    row.work = format!(
        "the executor_overhead chain of {} add_f32 kernels on {TINY} f32, thunk by thunk \
         (auto_command_buffer off), with --trace (device timing off)",
        thousands(CHAIN as u64)
    );
    row.baseline_label = "no trace".into();
    row.baseline_work = "the same executions without a trace".into();
    let per_thunk = ExecutorConfig {
        auto_command_buffer: false,
        ..Default::default()
    };
    let p = Prepared::new(&s.dev, tiny_chain("chain_10k", CHAIN, false)?, &per_thunk)?;
    let xv = vec![0.5f32; TINY as usize];
    p.set_param(0, &f32_bytes(&xv))?;
    p.run_with(&traced(false))?;
    check_chain(
        "the traced chain",
        &f32s(&p.read(p.output(0)?, 0, TINY * 4)?),
        CHAIN,
        0.5,
    )?;
    // One tracer keeps every traced execution, as `run --trace --iterations N` does: each
    // execution's marks take new memory, part of what tracing costs (at most 101 x 10,000
    // records, under the tracer's limit: none dropped).
    let kept = Arc::new(Tracer::new(TraceConfig::default()));
    let keep = ExecuteOptions {
        trace: Some(kept.clone()),
        ..Default::default()
    };
    let plan = s.rounds(100, 20, 15);
    let per = |v: f64| v / CHAIN as f64 * 1e9;
    let times = interleaved(
        plan,
        &mut [&mut || p.run_with(&keep), &mut || {
            p.run_with(&ExecuteOptions::default())
        }],
    )?;
    row.rounds = times[0].len();
    row.value = Some(Spread::of(&times[0]).map(per));
    row.baseline = Some(Spread::of(&times[1]).map(per));
    row.ratio = Some(Spread::of(&ratios(&times[0], &times[1])));
    row.notes.push(format!(
        "one tracer for every traced execution ({} dropped); per-thunk marks read from {} \
         (one read per thunk)",
        kept.dropped_executions(),
        match kept.clock().source() {
            ClockSource::Tsc => "the TSC",
            ClockSource::Instant => "Instant (the TSC is not reliable here)",
        }
    ));
    let fresh = ratio_of(s, &p, false, 40)?;
    row.notes.push(format!(
        "a fresh tracer per execution (made before the timer starts; the freed records' memory \
         is reused): ratio {:.3} (p25 {:.3}, p75 {:.3})",
        fresh.median, fresh.p25, fresh.p75
    ));
    let dt = ratio_of(s, &p, true, 20)?;
    row.notes.push(format!(
        "with device timing on (two timing events per thunk): ratio {:.3} (p25 {:.3}, p75 {:.3})",
        dt.median, dt.p25, dt.p75
    ));
    let fused = Prepared::new(
        &s.dev,
        tiny_chain("chain_10k", CHAIN, false)?,
        &ExecutorConfig::default(),
    )?;
    fused.set_param(0, &f32_bytes(&xv))?;
    let f = ratio_of(s, &fused, false, 40)?;
    row.notes.push(format!(
        "default config (one implicit command buffer, one trace record per execution): \
         ratio {:.3} (p25 {:.3}, p75 {:.3})",
        f.median, f.p25, f.p75
    ));
    Ok(row)
}
