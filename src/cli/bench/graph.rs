//! Benchmark `graph_build`: loading a program in the dependency graph's worst shape (core's
//! memsets then whole copies: 10,000 memsets to distinct offsets, then 10,000 copies of the
//! whole buffer, each reading every memset's bytes), against loading the same number of
//! thunks in a plain shape (each copy takes one memset's element). Loading is validation,
//! planning, the dependency graph and the schedule.

use super::program::Prepared;
use super::report::{Row, thousands};
use super::setup::{Res, Setup};
use super::stats::fmt_num;
use super::stats::{Goal, Spread, interleaved, ratios, secs};
use std::time::Instant;
use xthunk::LoadedExecutable;
use xthunk::core::bench::memsets_then_copies;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::Executable;

/// Memsets (and copies) of each program.
const N: u64 = 10_000;

/// Issue 18's bound on the worst shape's load time, in seconds.
const BOUND_S: f64 = 1.0;

pub fn graph_build(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "graph_build",
        "ms",
        "worst-shape load time / plain-shape load time",
        Goal::le(3.0),
    );
    let n = thousands(N);
    row.work = format!(
        "LoadedExecutable::load of {n} one-element memsets to distinct offsets, then {n} copies \
         of the whole buffer (each depends on every memset and the copy before)"
    );
    row.baseline_label = "plain shape".into();
    row.baseline_work =
        format!("the same {n} memsets, then {n} copies of one element each (one memset each)");
    let worst = memsets_then_copies(N, true)?;
    let plain = memsets_then_copies(N, false)?;
    // Both programs compute y = 0, 1, …, N-1: check that once.
    for (what, exe) in [("worst shape", &worst), ("plain shape", &plain)] {
        let p = Prepared::new(&s.dev, exe.clone(), &ExecutorConfig::default())?;
        p.run()?;
        let y = p.read(p.output(0)?, 0, N * 4)?;
        let bad = y
            .chunks_exact(4)
            .enumerate()
            .find(|(i, c)| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != *i as u32);
        if let Some((i, _)) = bad {
            return Err(super::program::wrong(
                "graph_build",
                format!("the {what}'s y[{i}] is not {i}"),
            ));
        }
        if what == "worst shape" {
            row.notes
                .push(format!("worst shape: {:?}", p.loaded().schedule_info()));
        }
    }
    let load = |exe: &Executable| -> Res<f64> {
        let exe = exe.clone();
        let start = Instant::now();
        let l = LoadedExecutable::load(s.dev.clone(), exe)?;
        let t = secs(start);
        drop(l);
        Ok(t)
    };
    let t = interleaved(
        s.rounds(10, 3, 20),
        &mut [&mut || load(&worst), &mut || load(&plain)],
    )?;
    let ms = |v: f64| v * 1e3;
    row.rounds = t[0].len();
    let value = Spread::of(&t[0]);
    row.notes.push(format!(
        "bound of issue 18: the worst shape loads in under {} ms: {} ({} ms)",
        fmt_num(BOUND_S * 1e3),
        if value.median < BOUND_S {
            "met"
        } else {
            "MISSED"
        },
        fmt_num(ms(value.median))
    ));
    row.value = Some(value.map(ms));
    row.baseline = Some(Spread::of(&t[1]).map(ms));
    row.ratio = Some(Spread::of(&ratios(&t[0], &t[1])));
    Ok(row)
}
