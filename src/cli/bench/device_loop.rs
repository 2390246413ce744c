//! Benchmark `device_loop`: a data-dependent `while` of 1,000 trips over a tiny body, inside
//! a `CommandBuffer` (a conditional `While` node where the backend has them: no host
//! involvement per trip) against the same loop in the entry (host-driven: the predicate read
//! back to the host after every `cond`).

use super::program::{Prepared, f32_bytes, f32s};
use super::report::{Row, thousands};
use super::setup::{Res, Setup};
use super::stats::{Goal, Spread, interleaved, ratios};
use xthunk::builder::ExecutableBuilder;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::{
    CommandBufferThunk, CopyThunk, DType, Executable, KernelArg, KernelThunk, MemsetPattern,
    MemsetThunk, Slice, Thunk, WhileThunk,
};
use xthunk::ir::{Dim3, Scalar};

const TRIPS: i32 = 1_000;
const N: u64 = 16;

fn kernel(name: &str, args: Vec<KernelArg>) -> Thunk {
    KernelThunk {
        module: "std".into(),
        name: name.into(),
        grid: Dim3::x(1),
        block: Dim3::x(32),
        shared_mem: 0,
        args,
    }
    .into()
}

/// `y = 0; counter = count; while counter > 0 { y += x; counter -= 1 }`, the loop in one
/// command buffer when `device` (its `cond` computes the predicate on the device).
fn program(device: bool) -> Res<Executable> {
    let mut b = ExecutableBuilder::new(if device { "device_loop" } else { "host_loop" });
    b.standard_module();
    let x = b.parameter("x", DType::F32, &[N]);
    let count = b.parameter("count", DType::I32, &[1]);
    let y = b.output("y", DType::F32, &[N]);
    let counter = b.temp(DType::I32, &[1]);
    let tmp = b.temp(DType::I32, &[1]);
    let pred = b.temp(DType::Pred, &[1]);
    let zero = b.constant(DType::I32, &[1], 0i32.to_le_bytes().to_vec());
    let one = b.constant(DType::I32, &[1], 1i32.to_le_bytes().to_vec());
    let neg1 = b.constant(DType::I32, &[1], (-1i32).to_le_bytes().to_vec());
    let one_i = KernelArg::Scalar(Scalar::I64(1));
    let cond = vec![
        kernel("max_i32", vec![counter.r(), zero.r(), tmp.w(), one_i]),
        kernel("min_i32", vec![tmp.r(), one.r(), tmp.w(), one_i]),
        CopyThunk {
            src: Slice::new(tmp.slice().allocation, 0, 1),
            dst: pred.slice(),
        }
        .into(),
    ];
    let body = vec![
        kernel(
            "axpy_f32",
            vec![
                x.r(),
                y.rw(),
                KernelArg::Scalar(Scalar::F32(1.0)),
                KernelArg::Scalar(Scalar::I64(N as i64)),
            ],
        ),
        kernel("add_i32", vec![counter.r(), neg1.r(), counter.w(), one_i]),
    ];
    let all = vec![
        MemsetThunk {
            dst: y.slice(),
            pattern: MemsetPattern::U32(0),
        }
        .into(),
        CopyThunk {
            src: count.slice(),
            dst: counter.slice(),
        }
        .into(),
        WhileThunk {
            cond,
            pred: pred.slice(),
            body,
            trip_count: None,
        }
        .into(),
    ];
    if device {
        b.push(CommandBufferThunk { body: all }.into());
    } else {
        for t in all {
            b.push(t);
        }
    }
    Ok(b.build()?)
}

pub fn device_loop(s: &Setup) -> Res<Row> {
    // The GPU goal; on the host the two differ by a worker round trip per trip (no verdict).
    let goal = if s.gpu { Goal::ge(10.0) } else { None };
    let mut row = Row::new(
        "device_loop",
        "us/trip",
        "host-driven time / device loop time (speedup)",
        goal,
    );
    row.work = format!(
        "a data-dependent while of {} trips (cond: pred = counter > 0 on the device; body: \
         axpy on {N} f32 and a decrement) inside one CommandBuffer, in-order executor",
        thousands(TRIPS as u64)
    );
    row.baseline_label = "host-driven loop".into();
    row.baseline_work = "the same while in the entry: the predicate read back to the host \
                         after every cond"
        .into();
    let cfg = ExecutorConfig::in_order();
    let dev_loop = Prepared::new(&s.dev, program(true)?, &cfg)?;
    let host_loop = Prepared::new(&s.dev, program(false)?, &cfg)?;
    let x = f32_bytes(&(0..N).map(|i| 0.25 * i as f32).collect::<Vec<_>>());
    for p in [&dev_loop, &host_loop] {
        p.set_param(0, &x)?;
        p.set_param(1, &TRIPS.to_le_bytes())?;
    }
    // The first execution records, the later ones replay: check both.
    for _ in 0..2 {
        for (what, p) in [("device loop", &dev_loop), ("host-driven loop", &host_loop)] {
            p.run()?;
            let y = f32s(&p.read(p.output(0)?, 0, N * 4)?);
            for (i, v) in y.iter().enumerate() {
                let want = 0.25 * i as f64 * TRIPS as f64;
                if (*v as f64 - want).abs() > 1e-3 * (1.0 + want) {
                    return Err(xthunk::Error::InvalidArgument(format!(
                        "{what}: y[{i}] = {v}, expected {want}"
                    )));
                }
            }
        }
    }
    let t = interleaved(
        s.rounds(100, 20, 15),
        &mut [&mut || dev_loop.run(), &mut || host_loop.run()],
    )?;
    let per = |v: f64| v / TRIPS as f64 * 1e6;
    row.rounds = t[0].len();
    row.value = Some(Spread::of(&t[0]).map(per));
    row.baseline = Some(Spread::of(&t[1]).map(per));
    row.ratio = Some(Spread::of(&ratios(&t[1], &t[0])));
    Ok(row)
}
