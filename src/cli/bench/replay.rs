//! Benchmark `command_buffer`: 1,000 tiny kernels recorded once as one `CommandBuffer` and
//! replayed, against the same kernels launched directly from the entry.

use super::program::{Prepared, TINY, check_chain, f32_bytes, f32s, tiny_chain};
use super::report::{Row, thousands};
use super::setup::{Res, Setup};
use super::stats::{Goal, Spread, interleaved, ratios};
use xthunk::core::executor::ExecutorConfig;

const CB: usize = 1_000;

pub fn command_buffer(s: &Setup) -> Res<Row> {
    let goal = if s.is_host() {
        Goal::ge(2.0)
    } else {
        Goal::ge(3.0)
    };
    let mut row = Row::new(
        "command_buffer",
        "ns/kernel",
        "direct time / replay time (speedup)",
        goal,
    );
    let native = if s.is_host() {
        "a pre-resolved host graph"
    } else if s.dev.capabilities().supports_graphs {
        "a native graph (stream capture)"
    } else {
        "a pre-planned schedule"
    };
    row.work = format!(
        "{} add_f32 kernels on {TINY} f32 in a chain as the body of one CommandBuffer \
         (recorded once as {native}, then replayed), in-order executor",
        thousands(CB as u64)
    );
    row.baseline_label = "direct launches".into();
    row.baseline_work = "the same kernels directly in the entry (one stream launch each), \
                         in-order executor, same buffers"
        .into();
    let cfg = ExecutorConfig::in_order();
    let replay = Prepared::new(&s.dev, tiny_chain("command_buffer_1k", CB, true)?, &cfg)?;
    let direct = Prepared::new(&s.dev, tiny_chain("direct_1k", CB, false)?, &cfg)?;
    let xv = f32_bytes(&vec![0.25f32; TINY as usize]);
    replay.set_param(0, &xv)?;
    direct.set_param(0, &xv)?;
    // The first execution records, the later ones replay: check both.
    for _ in 0..2 {
        replay.run()?;
        direct.run()?;
        for (what, p) in [
            ("the replayed command buffer", &replay),
            ("direct", &direct),
        ] {
            check_chain(what, &f32s(&p.read(p.output(0)?, 0, TINY * 4)?), CB, 0.25)?;
        }
    }
    let t = interleaved(
        s.rounds(300, 60, 15),
        &mut [&mut || replay.run(), &mut || direct.run()],
    )?;
    let per = |v: f64| v / CB as f64 * 1e9;
    row.rounds = t[0].len();
    row.value = Some(Spread::of(&t[0]).map(per));
    row.baseline = Some(Spread::of(&t[1]).map(per));
    row.ratio = Some(Spread::of(&ratios(&t[1], &t[0])));
    Ok(row)
}
