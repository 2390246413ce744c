//! Benchmark `allreduce_sweep`: an f32 sum all-reduce over every rank (one device each, in
//! this process) at sizes from 8 B doubling up to `--sweep-max` (256 MiB on a GPU), through
//! xthunk and through the clique's communicator called directly, printed per size like
//! nccl-tests: time, algorithm bandwidth and bus bandwidth (`busbw = algbw · 2(n−1)/n`).
//!
//! Per size and path, one round is: zero the buffer, `ops` in-place all-reduces on one
//! stream, wait. xthunk runs a program of a `memset` and `ops` `all_reduce` thunks through
//! the executor (`Ranks::execute`: one execution per round, each rank on its thread); the
//! raw path makes the same calls on the same communicator (`ncclAllReduce` / RCCL's / the
//! host collectives') on a stream of its own, with no program and no executor. A round's
//! time is the slowest rank's; the table gives each path's median over the rounds divided
//! by `ops`. Each path's result is checked once per size (every rank's `rank + 1`, summed).
//!
//! `--collective-memory on` puts the all-reduce buffer of the xthunk program in
//! `MEMORY_SPACE_COLLECTIVE` (`both`: one sweep each): the hook for collective memory
//! registered with the communicators; what that space gives depends on the backend's support
//! for it in this build.

use super::report::{Row, Status};
use super::setup::Res;
use super::stats::{Goal, Spread};
use crate::cli::devices::human_bytes;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use xthunk::builder::ExecutableBuilder;
use xthunk::core::backend::{Backend, Device};
use xthunk::core::collectives::{CliqueKey, CliqueProvider, StreamKind, Timeouts};
use xthunk::core::executor::session::zeroed;
use xthunk::core::executor::spmd::Ranks;
use xthunk::core::executor::{ExecuteOptions, ExecutorConfig, Program};
use xthunk::ir::{CollectiveOp, CollectiveThunk, DType, MemorySpace, MemsetPattern, ReduceOp};
use xthunk::{Error, Runtime};

/// What the sweep runs on and how far.
pub(super) struct Sweep<'a> {
    pub(super) rt: &'a Runtime,
    pub(super) backend: &'a Arc<dyn Backend>,
    /// Ranks (devices 0..ranks).
    pub(super) ranks: usize,
    /// The largest size, in bytes.
    pub(super) max: u64,
    pub(super) space: MemorySpace,
    pub(super) quick: bool,
    pub(super) gpu: bool,
    pub(super) emulated: bool,
}

impl Sweep<'_> {
    /// The row's name: `allreduce_sweep`, `allreduce_sweep_collective` with collective memory.
    pub(super) fn name(&self) -> &'static str {
        match self.space {
            MemorySpace::Collective => "allreduce_sweep_collective",
            _ => "allreduce_sweep",
        }
    }
}

/// One size's measurements (seconds per all-reduce).
struct Point {
    bytes: u64,
    xthunk: f64,
    raw: f64,
}

/// The sizes of a sweep up to `max`: 8 B, doubling.
fn sizes(max: u64) -> Vec<u64> {
    std::iter::successors(Some(8u64), |s| s.checked_mul(2))
        .take_while(|s| *s <= max.max(8))
        .collect()
}

/// All-reduces per round: 20 up to 1 MiB (as nccl-tests' default), then fewer, at least 1.
fn ops_for(bytes: u64) -> usize {
    if bytes <= 1 << 20 {
        20
    } else {
        ((20u64 << 20) / bytes).max(1) as usize
    }
}

fn bus_factor(n: usize) -> f64 {
    2.0 * (n as f64 - 1.0) / n as f64
}

/// The program: the buffer (in `space`) zeroed, then `ops` in-place all-reduces; `check`
/// adds a parameter copied in first and an output copied out last.
fn program(bytes: u64, ops: usize, space: MemorySpace, check: bool) -> Res<Program> {
    let elems = bytes / 4;
    let mut b = ExecutableBuilder::new("allreduce_sweep");
    let x = check.then(|| b.parameter("x", DType::F32, &[elems]));
    let y = check.then(|| b.output("y", DType::F32, &[elems]));
    let t = b.temp_in(DType::F32, &[elems], space);
    match &x {
        Some(x) => b.copy(x.slice(), t.slice()),
        None => b.memset(t.slice(), MemsetPattern::U8(0)),
    }
    for _ in 0..ops {
        b.push(
            CollectiveThunk {
                op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                src: t.slice(),
                dst: t.slice(),
                dtype: DType::F32,
                groups: vec![],
            }
            .into(),
        );
    }
    if let Some(y) = &y {
        b.copy(t.slice(), y.slice());
    }
    Ok(Program::new(b.build()?)?)
}

/// Every rank's check input: `rank + 1` in every element.
fn check_input(rank: usize, elems: u64) -> Vec<u8> {
    let v = (rank as f32 + 1.0).to_le_bytes();
    (0..elems).flat_map(|_| v).collect()
}

fn check_result(what: &str, n: usize, got: &[u8]) -> Res<()> {
    let want = (n * (n + 1) / 2) as f32;
    match got
        .chunks_exact(4)
        .position(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) != want)
    {
        None => Ok(()),
        Some(i) => Err(Error::InvalidArgument(format!(
            "allreduce_sweep: WRONG RESULT through {what}: element {i} is not {want}"
        ))),
    }
}

/// The slowest rank per round, then the median over rounds.
fn slowest_median(per_rank: &[Vec<Duration>]) -> f64 {
    let rounds = per_rank.iter().map(Vec::len).min().unwrap_or(0);
    let slowest: Vec<f64> = (0..rounds)
        .map(|i| {
            per_rank
                .iter()
                .map(|t| t[i].as_secs_f64())
                .fold(0.0, f64::max)
        })
        .collect();
    Spread::of(&slowest).median
}

/// Every rank's value, or the first rank's error.
fn first<T>(r: Vec<Res<T>>) -> Res<Vec<T>> {
    r.into_iter().collect()
}

/// xthunk's seconds per all-reduce at `bytes`, after checking its result once.
fn through_xthunk(
    s: &Sweep<'_>,
    devices: &[Arc<dyn Device>],
    cliques: &Arc<dyn CliqueProvider>,
    bytes: u64,
    rounds: u32,
) -> Res<f64> {
    let n = devices.len();
    let config = ExecutorConfig::default();
    let opts = ExecuteOptions::default();
    let fail = |_: usize, e: Error| e;
    let check = program(bytes, 1, s.space, true)?;
    let inputs: Vec<Vec<Vec<u8>>> = (0..n).map(|r| vec![check_input(r, bytes / 4)]).collect();
    let ranks = Ranks::new(
        0,
        n,
        first(Ranks::load(&check, devices, &inputs, 0, &config, None))?,
    );
    for out in first(ranks.execute(cliques, 1, &opts, &fail, &zeroed))? {
        check_result("xthunk", n, out.outputs.first().map_or(&[][..], |v| v))?;
    }
    let ops = ops_for(bytes);
    let timed = program(bytes, ops, s.space, false)?;
    let none: Vec<Vec<Vec<u8>>> = vec![vec![]; n];
    let ranks = Ranks::new(
        0,
        n,
        first(Ranks::load(&timed, devices, &none, 0, &config, None))?,
    );
    // One warm-up execution, then the rounds.
    first(ranks.execute(cliques, 1, &opts, &fail, &zeroed))?;
    let times: Vec<Vec<Duration>> = first(ranks.execute(cliques, rounds, &opts, &fail, &zeroed))?
        .into_iter()
        .map(|o| o.times)
        .collect();
    Ok(slowest_median(&times) / ops as f64)
}

/// A barrier for the raw path's rank threads that a failing rank poisons, so that the
/// others return an error instead of waiting for it forever.
struct Gate {
    n: usize,
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Gate {
    fn new(n: usize) -> Gate {
        Gate {
            n,
            state: Mutex::new((0, 0, false)),
            cv: Condvar::new(),
        }
    }

    /// Waits for every rank; an error once a rank has failed.
    fn wait(&self) -> Res<()> {
        let poisoned = || {
            Error::InvalidArgument("allreduce_sweep: another rank of the raw path failed".into())
        };
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.2 {
            return Err(poisoned());
        }
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.n {
            *g = (0, generation.wrapping_add(1), false);
            self.cv.notify_all();
            return Ok(());
        }
        while g.1 == generation && !g.2 {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        if g.2 { Err(poisoned()) } else { Ok(()) }
    }

    fn poison(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cv.notify_all();
    }
}

/// The raw path's seconds per all-reduce at `bytes`, after checking its result once.
fn through_raw(
    devices: &[Arc<dyn Device>],
    cliques: &Arc<dyn CliqueProvider>,
    bytes: u64,
    rounds: u32,
) -> Res<f64> {
    let n = devices.len();
    let ops = ops_for(bytes);
    let key = CliqueKey::new(0..n, StreamKind::Compute)?;
    let gate = Gate::new(n);
    let rank = |r: usize| -> Res<Vec<Duration>> {
        let dev = &devices[r];
        let comm = cliques.acquire(&key, r).inspect_err(|_| gate.poison())?;
        // A failing rank stops the others: its communicator aborted, the gate poisoned.
        let fail = |e: Error| {
            comm.abort(&format!("allreduce_sweep: rank {r} failed: {e}"));
            gate.poison();
            e
        };
        let run = || -> Res<Vec<Duration>> {
            let stream = dev.create_stream()?;
            let buf = dev.allocate(bytes, 256, MemorySpace::Device)?;
            let (p, count) = (buf.ptr(), bytes / 4);
            dev.copy_from_host(&check_input(r, count), p)?;
            comm.all_reduce(stream.as_ref(), p, p, count, DType::F32, ReduceOp::Sum)?;
            stream.synchronize()?;
            let mut got = vec![0u8; bytes as usize];
            dev.copy_to_host(p, &mut got)?;
            check_result("the raw communicator", n, &got)?;
            let mut times = Vec::new();
            // One warm-up round, then the timed ones.
            for round in 0..=rounds {
                gate.wait()?;
                let start = Instant::now();
                stream.memset(p, bytes, MemsetPattern::U8(0))?;
                for _ in 0..ops {
                    comm.all_reduce(stream.as_ref(), p, p, count, DType::F32, ReduceOp::Sum)?;
                }
                stream.synchronize()?;
                if round > 0 {
                    times.push(start.elapsed());
                }
            }
            Ok(times)
        };
        run().map_err(fail)
    };
    let results: Vec<Res<Vec<Duration>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n).map(|r| scope.spawn(move || rank(r))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument(
                        "allreduce_sweep: a raw rank's thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let times = results.into_iter().collect::<Res<Vec<_>>>()?;
    Ok(slowest_median(&times) / ops as f64)
}

/// Runs the sweep; prints its table to `out` and returns the bench table's row (the ratio of
/// bus bandwidths at the largest size).
pub(super) fn allreduce_sweep(s: &Sweep<'_>, out: &mut String) -> Res<Row> {
    let goal = if s.gpu { Goal::ge(0.95) } else { None };
    let mut row = Row::new(
        s.name(),
        "GB/s",
        "xthunk busbw / raw communicator busbw, at the largest size",
        goal,
    );
    let n = s.ranks;
    let available = s.backend.probe()?.devices.len();
    if n == 0 || n > available {
        row.status = Status::Skipped(format!("--ranks {n}: the backend has {available} devices"));
        return Ok(row);
    }
    let devices = (0..n)
        .map(|i| s.backend.device(i))
        .collect::<Res<Vec<_>>>()?;
    let timeouts = Timeouts::new(Duration::from_secs(10), Duration::from_secs(60));
    let (cliques, off) = xthunk::embed::spmd_cliques(s.rt, s.backend.as_ref(), &devices, timeouts)?;
    if let Some(why) = off {
        row.status = Status::Skipped(format!("collectives are off: {why}"));
        return Ok(row);
    }
    let rounds: u32 = if s.quick { 2 } else { 5 };
    let space = match s.space {
        MemorySpace::Collective => "on (MEMORY_SPACE_COLLECTIVE buffer)",
        _ => "off (device memory)",
    };
    let mark = if s.emulated {
        " [EMULATED, no verdict]"
    } else {
        ""
    };
    out.push_str(&format!(
        "allreduce_sweep: {n} ranks of {}{mark}, f32 sum in place, collective memory {space}; \
         xthunk = all_reduce thunks through the executor, raw = the same communicator called \
         directly; time per all-reduce (median of {rounds} rounds), GB = 1e9 B, \
         busbw = algbw * 2(n-1)/n, ratio = xthunk busbw / raw busbw\n",
        s.backend.name()
    ));
    out.push_str(&format!(
        "{:>10} {:>10} {:>6} | {:>11} {:>9} {:>9} | {:>11} {:>9} {:>9} | {:>6}\n",
        "size",
        "count",
        "ops",
        "xthunk(us)",
        "algbw",
        "busbw",
        "raw(us)",
        "algbw",
        "busbw",
        "ratio"
    ));
    let mut points = Vec::new();
    for bytes in sizes(s.max) {
        let x = through_xthunk(s, &devices, &cliques, bytes, rounds)?;
        let r = through_raw(&devices, &cliques, bytes, rounds)?;
        let (xa, ra) = (bytes as f64 / x / 1e9, bytes as f64 / r / 1e9);
        let f = bus_factor(n);
        out.push_str(&format!(
            "{:>10} {:>10} {:>6} | {:>11.2} {:>9.3} {:>9.3} | {:>11.2} {:>9.3} {:>9.3} | {:>6.3}\n",
            human_bytes(bytes),
            bytes / 4,
            ops_for(bytes),
            x * 1e6,
            xa,
            xa * f,
            r * 1e6,
            ra,
            ra * f,
            r / x
        ));
        points.push(Point {
            bytes,
            xthunk: x,
            raw: r,
        });
    }
    out.push('\n');
    if let Some(last) = points.last() {
        let f = bus_factor(n);
        let bw = |t: f64| last.bytes as f64 / t / 1e9 * f;
        row.value = Some(Spread::of(&[bw(last.xthunk)]));
        row.baseline = Some(Spread::of(&[bw(last.raw)]));
        row.ratio = Some(Spread::of(&[last.raw / last.xthunk]));
        row.rounds = rounds as usize;
    }
    row.work = format!(
        "f32 sum all-reduce sweep 8 B..{} over {n} ranks, collective memory {space}; the row: \
         busbw at the largest size (the sweep's table is printed above)",
        human_bytes(s.max)
    );
    row.baseline_label = "raw communicator".into();
    row.baseline_work =
        "the same in-place all-reduces on the clique's communicator (ncclAllReduce, \
                         RCCL's, or the host collectives') on one stream, no executor"
            .into();
    if n == 1 {
        // Nothing to compare: no ratio and no verdict (the per-size times are still printed).
        row.ratio = None;
        row.goal = None;
        row.notes.push(
            "1 rank: busbw is 0 by definition and xthunk's group of one is no work in place, so              no ratio and no verdict (a GPU machine needs 2 or more devices for one)"
                .into(),
        );
    }
    Ok(row)
}
