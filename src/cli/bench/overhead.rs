//! Benchmark `executor_overhead`: the executor's cost per thunk, from a chain of 10,000 tiny
//! `add_f32` kernels through `execute`, against the same kernels in a plain loop (host) or as
//! bare vendor launches (the backend's raw baseline).

use super::program::{Prepared, TINY, check_chain, f32_bytes, f32s, tiny_chain};
use super::report::{Row, thousands};
use super::setup::{Res, Setup};
use super::stats::{Goal, Rounds, Spread, interleaved, ratios, secs};
use std::time::Instant;
use xthunk::DeviceMemory;
use xthunk::core::backend::baseline::RawBaseline;
use xthunk::core::backend::{LaunchArg, LaunchDims};
use xthunk::core::bench;
use xthunk::core::executor::ExecutorConfig;
use xthunk::core::kernels::{HostKernelFn, standard_library};
use xthunk::ir::{Dim3, MemorySpace, Module, ModuleImage, Scalar};

const CHAIN: usize = 10_000;

/// The chain as a plain loop (core's [`bench::plain_chain`]); returns the seconds it took.
fn plain_chain(add: HostKernelFn, x: &[f32], bufs: &mut [Vec<f32>; 2]) -> Res<f64> {
    let start = Instant::now();
    bench::plain_chain(add, x, bufs, CHAIN)?;
    Ok(secs(start))
}

pub fn executor_overhead(s: &Setup) -> Res<Row> {
    let goal = if s.is_host() {
        Goal::le(1.5)
    } else {
        Goal::le(1.1)
    };
    let mut row = Row::new(
        "executor_overhead",
        "ns/thunk",
        "xthunk time / baseline time",
        goal,
    );
    row.work = format!(
        "a chain of {} add_f32 kernels on {TINY} f32 (each reading the previous result), \
         through LoadedExecutable::execute (default config), grid 1 x block 32",
        thousands(CHAIN as u64)
    );
    let p = Prepared::new(
        &s.dev,
        tiny_chain("chain_10k", CHAIN, false)?,
        &ExecutorConfig::default(),
    )?;
    let xv = vec![0.5f32; TINY as usize];
    p.set_param(0, &f32_bytes(&xv))?;
    p.run()?;
    check_chain(
        "the executor's chain",
        &f32s(&p.read(p.output(0)?, 0, TINY * 4)?),
        CHAIN,
        0.5,
    )?;
    row.notes
        .push(format!("schedule: {:?}", p.loaded().schedule_info()));
    let plan = s.rounds(200, 40, 20);
    let per = |v: f64| v / CHAIN as f64 * 1e9;
    let times = if s.is_host() {
        let add = standard_library()
            .get("add_f32")
            .map(|k| k.func)
            .ok_or_else(|| xthunk::Error::InvalidArgument("no host add_f32".into()))?;
        let mut bufs = [vec![0f32; TINY as usize], vec![0f32; TINY as usize]];
        plain_chain(add, &xv, &mut bufs)?;
        check_chain("the plain loop", &bufs[1], CHAIN, 0.5)?;
        row.baseline_label = "plain loop".into();
        row.baseline_work =
            "the same chain as a plain loop calling add_f32's host function directly".into();
        interleaved(
            plan,
            &mut [&mut || p.run(), &mut || plain_chain(add, &xv, &mut bufs)],
        )?
    } else if let Some(raw) = &s.baseline {
        vendor_launches(s, raw.as_ref(), plan, &p, &xv, &mut row)?
    } else {
        let t = interleaved(plan, &mut [&mut || p.run()])?;
        row.without_baseline(s.no_baseline(), &t[0], |v| v.map(per));
        return Ok(row);
    };
    row.rounds = times[0].len();
    row.value = Some(Spread::of(&times[0]).map(per));
    row.baseline = Some(Spread::of(&times[1]).map(per));
    row.ratio = Some(Spread::of(&ratios(&times[0], &times[1])));
    Ok(row)
}

/// The chain's launches as bare vendor launches on buffers of their own, checked once, then
/// interleaved with the executor's chain `p` (input `xv`); returns both variants' times.
fn vendor_launches(
    s: &Setup,
    raw: &dyn RawBaseline,
    plan: Rounds,
    p: &Prepared,
    xv: &[f32],
    row: &mut Row,
) -> Res<Vec<Vec<f64>>> {
    let module = s.dev.load_module(&Module {
        name: "std".into(),
        images: vec![ModuleImage::Standard],
        options: Default::default(),
    })?;
    let kernel = module.kernel("add_f32")?;
    let stream = s.dev.create_stream()?;
    let alloc = || s.dev.allocate(TINY * 4, 256, MemorySpace::Device);
    let (x, t, y) = (alloc()?, alloc()?, alloc()?);
    s.dev.copy_from_host(&f32_bytes(xv), x.ptr())?;
    let len = TINY * 4;
    let ptrs = [t.ptr(), y.ptr()];
    let launches: Vec<Vec<LaunchArg>> = (0..CHAIN)
        .map(|i| {
            let prev = if i == 0 { x.ptr() } else { ptrs[(i - 1) % 2] };
            vec![
                LaunchArg::Buffer { ptr: prev, len },
                LaunchArg::Buffer { ptr: x.ptr(), len },
                LaunchArg::Buffer {
                    ptr: ptrs[i % 2],
                    len,
                },
                LaunchArg::Scalar(Scalar::I64(TINY as i64)),
            ]
        })
        .collect();
    let lent: [&dyn DeviceMemory; 3] = [x.as_ref(), t.as_ref(), y.as_ref()];
    let dims = LaunchDims {
        grid: Dim3::x(1),
        block: Dim3::x(32),
        shared_mem: 0,
    };
    let launch_loop = raw.launch_loop(stream.as_ref(), &kernel, dims, &launches, &lent)?;
    launch_loop.run()?;
    let mut got = vec![0u8; len as usize];
    s.dev.copy_to_host(y.ptr(), &mut got)?;
    check_chain("the raw launch loop", &f32s(&got), CHAIN, 0.5)?;
    let calls = raw.calls();
    row.baseline_label = format!("{} loop", calls.launch);
    row.baseline_work = format!(
        "the same {} launches as bare {} calls (arguments marshalled beforehand) on one \
         stream, then {}",
        thousands(launch_loop.launches() as u64),
        calls.launch,
        calls.synchronize
    );
    interleaved(
        plan,
        &mut [&mut || p.run(), &mut || {
            launch_loop.run().map(|d| d.as_secs_f64())
        }],
    )
}
