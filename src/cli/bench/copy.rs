//! Benchmark `copy_bandwidth`: device-to-device `Copy` thunks of 256 MiB, against `memcpy`
//! between host vectors (host) or the vendor's raw asynchronous copy (the backend's raw
//! baseline).

use super::program::{Prepared, wrong};
use super::report::{Row, Status};
use super::setup::{Res, Setup};
use super::stats::{Goal, Spread, interleaved, inverse, ratios, secs};
use crate::cli::devices::human_bytes;
use std::hint::black_box;
use std::time::Instant;
use xthunk::builder::ExecutableBuilder;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::{DType, Executable};

fn copy_program(bytes: u64, copies: usize) -> Res<Executable> {
    let mut b = ExecutableBuilder::new("copy_bandwidth");
    let x = b.parameter("x", DType::U8, &[bytes]);
    let y = b.output("y", DType::U8, &[bytes]);
    for _ in 0..copies {
        b.copy(x.slice(), y.slice());
    }
    Ok(b.build()?)
}

/// A byte pattern that differs at every offset of a 4 KiB window.
fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

pub fn copy_bandwidth(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "copy_bandwidth",
        "GB/s",
        "xthunk bandwidth / baseline bandwidth",
        Goal::ge(0.9),
    );
    let (bytes, copies) = if s.emulated {
        (16u64 << 20, 2usize)
    } else if s.gpu {
        (256u64 << 20, 8usize)
    } else {
        (256u64 << 20, 2usize)
    };
    row.work = format!(
        "{copies} device-to-device Copy thunks of {} each per execution (GB/s = bytes copied / \
         time, 1 GB = 1e9 bytes)",
        human_bytes(bytes)
    );
    let host_extra = if s.is_host() { 2 * bytes } else { 0 };
    if !s.fits(2 * bytes + host_extra) {
        row.status = Status::Skipped(format!(
            "needs {} of device memory; the device has {}",
            human_bytes(2 * bytes + host_extra),
            human_bytes(s.dev.info().total_memory)
        ));
        return Ok(row);
    }
    let p = Prepared::new(
        &s.dev,
        copy_program(bytes, copies)?,
        &ExecutorConfig::default(),
    )?;
    let src: Vec<u8> = (0..bytes).map(pattern_byte).collect();
    p.set_param(0, &src)?;
    p.run()?;
    for off in [0, bytes / 2, bytes - 4096] {
        let got = p.read(p.output(0)?, off, 4096)?;
        if got[..] != src[off as usize..off as usize + 4096] {
            return Err(wrong(
                "the Copy thunk",
                format!("bytes at offset {off} differ"),
            ));
        }
    }
    let gbs = |t: f64| (copies as u64 * bytes) as f64 / t / 1e9;
    let times = if s.is_host() {
        let mut dst = vec![0u8; bytes as usize];
        dst.copy_from_slice(&src);
        if dst != src {
            return Err(wrong("the baseline copy", "bytes differ".into()));
        }
        row.baseline_label = "copy_nonoverlapping".into();
        row.baseline_work = format!(
            "{copies} copies of {} between two host Vec<u8> with copy_from_slice \
             (ptr::copy_nonoverlapping, i.e. memcpy)",
            human_bytes(bytes)
        );
        interleaved(
            s.rounds(8, 3, 15),
            &mut [&mut || p.run(), &mut || {
                let start = Instant::now();
                for _ in 0..copies {
                    dst.copy_from_slice(black_box(&src));
                    black_box(&mut dst);
                }
                Ok(secs(start))
            }],
        )?
    } else if let Some(raw) = &s.baseline {
        drop(src);
        let stream = s.dev.create_stream()?;
        let (x, y) = (p.param(0)?, p.output(0)?);
        raw.copy_loop(stream.as_ref(), x, y, bytes, copies)?;
        let calls = raw.calls();
        row.baseline_label = calls.copy.into();
        row.baseline_work = format!(
            "{copies} {} calls of {} on one stream between the same buffers, then {}",
            calls.copy_symbol,
            human_bytes(bytes),
            calls.synchronize
        );
        interleaved(
            s.rounds(10, 3, 15),
            &mut [&mut || p.run(), &mut || {
                raw.copy_loop(stream.as_ref(), x, y, bytes, copies)
                    .map(|d| d.as_secs_f64())
            }],
        )?
    } else {
        drop(src);
        let t = interleaved(s.rounds(10, 3, 15), &mut [&mut || p.run()])?;
        row.without_baseline(s.no_baseline(), &t[0], |v| inverse(v, gbs));
        return Ok(row);
    };
    row.rounds = times[0].len();
    row.value = Some(inverse(Spread::of(&times[0]), gbs));
    row.baseline = Some(inverse(Spread::of(&times[1]), gbs));
    row.ratio = Some(Spread::of(&ratios(&times[1], &times[0])));
    Ok(row)
}
