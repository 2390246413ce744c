//! Benchmark `stream_ordered_scratch`: repeated executions of a temp-heavy program (a chain of
//! 64 `add_f32` kernels, each writing a temp of its own) with its temp arenas taken from the
//! device's stream-ordered memory pool at each execution and given back at its end, against
//! the same program with the arenas kept in the pooled execution state (the fallback, and the
//! behaviour without memory pools). Both make no driver allocation after the first execution;
//! the row says what the stream-ordered path costs per execution, and its note how much
//! device memory each path keeps between executions. Informational: no goal.

use super::program::{Prepared, f32_bytes, f32s, wrong};
use super::report::Row;
use super::setup::{Res, Setup};
use super::stats::{Spread, interleaved, ratios};
use xthunk::builder::ExecutableBuilder;
use xthunk::core::executor::{ExecutorConfig, ScratchPath};
use xthunk::ir::{Access, DType, Dim3, Executable, KernelArg, KernelThunk, Scalar};

/// Kernels (and temps) of the chain.
const LEN: usize = 64;

/// `t_0 = x + x; t_i = t_{i-1} + x; y = t_{LEN-1} + x` over `n` f32: `y = (LEN + 2) x`.
fn program(n: u64) -> Res<Executable> {
    let mut b = ExecutableBuilder::new("scratch_chain");
    b.standard_module();
    let x = b.parameter("x", DType::F32, &[n]);
    let y = b.output("y", DType::F32, &[n]);
    let temps: Vec<_> = (0..LEN).map(|_| b.temp(DType::F32, &[n])).collect();
    let add = |a, out| {
        let buffer = |slice, access| KernelArg::Buffer { slice, access };
        KernelThunk {
            module: "std".into(),
            name: "add_f32".into(),
            grid: Dim3::x(n.div_ceil(256).max(1) as u32),
            block: Dim3::x(256),
            shared_mem: 0,
            args: vec![
                buffer(a, Access::Read),
                buffer(x.slice(), Access::Read),
                buffer(out, Access::Write),
                KernelArg::Scalar(Scalar::I64(n as i64)),
            ],
        }
        .into()
    };
    let mut prev = x.slice();
    for t in &temps {
        b.push(add(prev, t.slice()));
        prev = t.slice();
    }
    b.push(add(prev, y.slice()));
    Ok(b.build()?)
}

pub fn stream_ordered_scratch(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "stream_ordered_scratch",
        "us/execution",
        "pooled-state time / stream-ordered time",
        None,
    );
    let n: u64 = if s.gpu { 1 << 20 } else { 1 << 12 };
    row.work = format!(
        "{LEN} add_f32 kernels on {n} f32, each writing its own temp (planned into shared \
         arenas), the device arenas from the device's stream-ordered memory pool at each \
         execution, in-order executor"
    );
    row.baseline_label = "pooled-state arenas".into();
    row.baseline_work = "the same program with stream-ordered scratch off: the arenas \
                         allocated once per pooled execution state and kept with it"
        .into();
    let on = ExecutorConfig::in_order();
    let off = ExecutorConfig {
        stream_ordered_scratch: false,
        ..ExecutorConfig::in_order()
    };
    let ordered = Prepared::new(&s.dev, program(n)?, &on)?;
    let pooled = Prepared::new(&s.dev, program(n)?, &off)?;
    let x = vec![0.5f32; n as usize];
    ordered.set_param(0, &f32_bytes(&x))?;
    pooled.set_param(0, &f32_bytes(&x))?;
    let want = (LEN as f32 + 2.0) * 0.5;
    for _ in 0..2 {
        for (what, p) in [("stream-ordered", &ordered), ("pooled", &pooled)] {
            p.run()?;
            let got = f32s(&p.read(p.output(0)?, 0, n * 4)?);
            if let Some((i, v)) = got.iter().enumerate().find(|(_, v)| **v != want) {
                return Err(wrong(what, format!("y[{i}] = {v}, want {want}")));
            }
        }
    }
    let planned = ordered.loaded().temp_plan().planned_bytes;
    if ordered.loaded().scratch_path() != ScratchPath::StreamOrdered {
        row.notes.push(format!(
            "the device has no stream-ordered memory pool: both variants keep their arenas \
             in the pooled state ({planned} bytes each)"
        ));
    } else {
        row.notes.push(format!(
            "between executions the stream-ordered variant holds none of its {planned} bytes \
             of temp arenas (they are back in the device's pool, for any user of it); the \
             pooled-state variant holds them"
        ));
    }
    let t = interleaved(
        s.rounds(200, 40, 10),
        &mut [&mut || ordered.run(), &mut || pooled.run()],
    )?;
    let us = |v: f64| v * 1e6;
    row.rounds = t[0].len();
    row.value = Some(Spread::of(&t[0]).map(us));
    row.baseline = Some(Spread::of(&t[1]).map(us));
    row.ratio = Some(Spread::of(&ratios(&t[1], &t[0])));
    Ok(row)
}
