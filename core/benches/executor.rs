//! Executor benchmarks on the host backend, all measured in one run so that the ratios printed
//! at the end of each group compare like with like:
//!
//! - `executor_chain_10k`: executor overhead per thunk. A true chain of 10,000 tiny kernels
//!   (`add_f32` on 16 elements, each reading the previous one's output) executed through
//!   `LoadedExecutable::execute` (in-order and default config), against a plain loop calling
//!   the same host kernel function directly. Throughput is 10,000 elements, so criterion's
//!   time per element is the time per thunk.
//! - `graph_build`: `DependencyGraph::build` for 10k and 100k nodes of a realistic program
//!   (kernels reading two and writing one random slice of 64 allocations); the growth from 10k
//!   to 100k should be close to 10x.
//! - `command_buffer_1k`: the same 1,000 tiny kernels as the body of one `CommandBuffer`
//!   (recorded once, replayed) and directly in the entry, both in order, same buffers.
//! - `wide_dag_2v1_streams`: 8 independent chains of 4 heavy elementwise kernels (`exp_f32` /
//!   `tanh_f32` over 256K elements) on 2 streams against 1.
//!
//! After criterion's samples, each group prints a `RATIO` line measured in the same run by
//! interleaving: every round runs each compared variant once, back to back, and the line gives
//! the median time of each and the median over rounds of their ratio, so that load from other
//! processes on the machine hits both sides alike (`cargo bench -p xthunk-core --bench
//! executor`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Buffer, Device, DeviceMemory};
use xthunk_core::bench::{self, CpuSnapshot, TINY, WIDE_CHAINS, WIDE_LEN};
use xthunk_core::executor::graph::{DependencyGraph, NodeUses};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{Access, BufferUse, Executable, Slice};
use xthunk_core::kernels::{HostKernelFn, standard_library};

/// Runs every variant once per round, back to back, for `rounds` rounds after one warm-up
/// round. Returns the median seconds per call of each variant and, for each variant, the
/// median over rounds of its time divided by variant 0's time in the same round, and a note
/// on how busy the machine was meanwhile.
fn paired(rounds: usize, variants: &mut [&mut dyn FnMut()]) -> (Vec<f64>, Vec<f64>, String) {
    let before = CpuSnapshot::take();
    let k = variants.len();
    let mut times = vec![Vec::with_capacity(rounds); k];
    for round in 0..=rounds {
        for (i, f) in variants.iter_mut().enumerate() {
            let start = Instant::now();
            f();
            let el = start.elapsed().as_secs_f64();
            if round > 0 {
                times[i].push(el);
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratios = (0..k)
        .map(|i| median((0..rounds).map(|r| times[i][r] / times[0][r]).collect()))
        .collect();
    let note = match before.and_then(|a| a.since()) {
        Some(used) => format!(
            "  (meanwhile this process used {:.0}% and other processes {:.0}% of the machine's \
             {} CPUs)",
            100.0 * used.own,
            100.0 * used.others,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
        None => String::new(),
    };
    (times.into_iter().map(median).collect(), ratios, note)
}

fn fmt_time(secs: f64) -> String {
    if secs < 1e-6 {
        format!("{:.1} ns", secs * 1e9)
    } else if secs < 1e-3 {
        format!("{:.2} us", secs * 1e6)
    } else {
        format!("{:.3} ms", secs * 1e3)
    }
}

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).expect("host device")
}

/// The tiny chain shared with `xthunk bench` ([`bench::tiny_chain`]).
fn tiny_chain(name: &str, len: usize, command_buffer: bool) -> Executable {
    bench::tiny_chain(name, len, command_buffer).expect("valid program")
}

/// Parameters (filled with `fill`) and outputs for `exe`.
struct Io {
    params: Vec<Buffer>,
    outputs: Vec<Buffer>,
}

impl Io {
    fn new(l: &LoadedExecutable, fill: f32) -> Io {
        let params = l.allocate_parameters().unwrap();
        for p in &params {
            let v = vec![fill; (p.size() / 4) as usize];
            l.device()
                .copy_from_host(bytemuck::cast_slice(&v), p.ptr())
                .unwrap();
        }
        Io {
            params,
            outputs: l.allocate_outputs().unwrap(),
        }
    }

    fn execute(&self, l: &LoadedExecutable) {
        let p: Vec<&dyn DeviceMemory> = self.params.iter().map(|b| b.as_ref() as _).collect();
        let o: Vec<&dyn DeviceMemory> = self.outputs.iter().map(|b| b.as_ref() as _).collect();
        l.execute(&p, &o, &ExecuteOptions::default())
            .expect("execute");
    }

    fn output(&self, l: &LoadedExecutable, i: usize) -> Vec<f32> {
        let mut v = vec![0u8; self.outputs[i].size() as usize];
        l.device()
            .copy_to_host(self.outputs[i].ptr(), &mut v)
            .unwrap();
        v.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

fn quick<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g
}

// ---------------------------------------------------------------------------------------------
// a. Executor overhead per thunk
// ---------------------------------------------------------------------------------------------

const CHAIN: usize = 10_000;

/// The chain as a plain loop (the shared [`bench::plain_chain`]), `CHAIN` kernels long.
fn plain_chain(add: HostKernelFn, x: &[f32], bufs: &mut [Vec<f32>; 2]) {
    let r = bench::plain_chain(add, x, bufs, CHAIN);
    black_box(r.is_ok());
}

fn chain_overhead(c: &mut Criterion) {
    let dev = device();
    let exe = tiny_chain("chain_10k", CHAIN, false);
    let in_order =
        LoadedExecutable::load_with(dev.clone(), exe.clone(), &ExecutorConfig::in_order()).unwrap();
    let default = LoadedExecutable::load_with(dev, exe, &ExecutorConfig::default()).unwrap();
    let io_in_order = Io::new(&in_order, 0.5);
    let io_default = Io::new(&default, 0.5);

    // The plain loop: the same host kernel function on host buffers, the same ping-pong.
    let add = standard_library().get("add_f32").expect("add_f32").func;
    let x = vec![0.5f32; TINY as usize];
    let mut bufs = [vec![0f32; TINY as usize], vec![0f32; TINY as usize]];

    // Same results both ways.
    io_in_order.execute(&in_order);
    io_default.execute(&default);
    plain_chain(add, &x, &mut bufs);
    let want = (CHAIN as f32 + 1.0) * 0.5;
    assert_eq!(io_in_order.output(&in_order, 0), vec![want; TINY as usize]);
    assert_eq!(io_default.output(&default, 0), vec![want; TINY as usize]);
    assert_eq!(bufs[1], vec![want; TINY as usize]);
    println!(
        "executor_chain_10k: schedule in_order {:?}; default {:?}",
        in_order.schedule_info(),
        default.schedule_info()
    );

    let mut g = quick(c, "executor_chain_10k");
    g.throughput(Throughput::Elements(CHAIN as u64));
    g.bench_function("execute_in_order", |b| {
        b.iter(|| io_in_order.execute(&in_order))
    });
    g.bench_function("execute_default_config", |b| {
        b.iter(|| io_default.execute(&default))
    });
    g.bench_function("plain_loop_host_kernel", |b| {
        b.iter(|| plain_chain(add, &x, &mut bufs))
    });
    g.finish();
    let (t, r, note) = paired(
        40,
        &mut [
            &mut || plain_chain(add, &x, &mut bufs),
            &mut || io_in_order.execute(&in_order),
            &mut || io_default.execute(&default),
        ],
    );
    let per = |v: f64| fmt_time(v / CHAIN as f64);
    println!(
        "RATIO executor_chain_10k (40 interleaved rounds): per thunk: plain loop {}, execute in_order {}, \
         execute default {}; in_order/plain = {:.2}x, default/plain = {:.2}x (goal <= 1.5x); \
         executor overhead {} per thunk (in_order)",
        per(t[0]),
        per(t[1]),
        per(t[2]),
        r[1],
        r[2],
        per(t[1] - t[0]),
    );
    println!("{note}");
}

// ---------------------------------------------------------------------------------------------
// b. Graph construction
// ---------------------------------------------------------------------------------------------

/// `n` kernel-like nodes: two reads and one write of random slices of 64 allocations of 1 MiB
/// each (256-byte aligned offsets, 256 B .. 64 KiB).
fn random_uses(n: usize, seed: u64) -> Vec<NodeUses> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let slice = |rng: &mut ChaCha8Rng| {
        let alloc = rng.random_range(0..64u32);
        let size = rng.random_range(1..=256u64) * 256;
        let offset = rng.random_range(0..=(1 << 20) - size) / 256 * 256;
        Slice::new(alloc, offset, size)
    };
    (0..n)
        .map(|_| NodeUses {
            buffers: vec![
                BufferUse {
                    slice: slice(&mut rng),
                    access: Access::Read,
                },
                BufferUse {
                    slice: slice(&mut rng),
                    access: Access::Read,
                },
                BufferUse {
                    slice: slice(&mut rng),
                    access: Access::Write,
                },
            ],
            resources: vec![],
        })
        .collect()
}

fn graph_build(c: &mut Criterion) {
    let small = random_uses(10_000, 7);
    let large = random_uses(100_000, 7);
    let mut g = quick(c, "graph_build");
    for uses in [&small, &large] {
        let n = uses.len();
        let gr = DependencyGraph::build(uses);
        println!(
            "graph_build: {n} nodes -> {} edges after reduction, chain: {}",
            gr.edge_count(),
            gr.is_chain()
        );
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), uses, |b, uses| {
            b.iter(|| black_box(DependencyGraph::build(black_box(uses))))
        });
    }
    g.finish();
    let (t, r, note) = paired(
        5,
        &mut [
            &mut || {
                black_box(DependencyGraph::build(&small));
            },
            &mut || {
                black_box(DependencyGraph::build(&large));
            },
        ],
    );
    println!(
        "RATIO graph_build (5 interleaved rounds): 10k nodes {} ({} per node), 100k nodes {} ({} per node); \
         100k/10k = {:.1}x (linear: 10x, quadratic: 100x)",
        fmt_time(t[0]),
        fmt_time(t[0] / 1e4),
        fmt_time(t[1]),
        fmt_time(t[1] / 1e5),
        r[1]
    );
    println!("{note}");
}

// ---------------------------------------------------------------------------------------------
// c. Command-buffer replay vs direct execution
// ---------------------------------------------------------------------------------------------

const CB: usize = 1_000;

fn command_buffer(c: &mut Criterion) {
    let dev = device();
    let cfg = ExecutorConfig::in_order();
    let direct =
        LoadedExecutable::load_with(dev.clone(), tiny_chain("direct_1k", CB, false), &cfg).unwrap();
    let replay =
        LoadedExecutable::load_with(dev, tiny_chain("command_buffer_1k", CB, true), &cfg).unwrap();
    let io_direct = Io::new(&direct, 0.25);
    let io_replay = Io::new(&replay, 0.25);
    // The first execution records; later ones replay. Same result every time.
    for _ in 0..3 {
        io_direct.execute(&direct);
        io_replay.execute(&replay);
        let want = vec![(CB as f32 + 1.0) * 0.25; TINY as usize];
        assert_eq!(io_direct.output(&direct, 0), want);
        assert_eq!(io_replay.output(&replay, 0), want);
    }

    let mut g = quick(c, "command_buffer_1k");
    g.throughput(Throughput::Elements(CB as u64));
    g.bench_function("replay_command_buffer", |b| {
        b.iter(|| io_replay.execute(&replay))
    });
    g.bench_function("direct_in_entry", |b| b.iter(|| io_direct.execute(&direct)));
    g.finish();
    let (t, r, note) = paired(
        100,
        &mut [&mut || io_replay.execute(&replay), &mut || {
            io_direct.execute(&direct)
        }],
    );
    println!(
        "RATIO command_buffer_1k (100 interleaved rounds): replay {} ({} per thunk), direct {} ({} per thunk); \
         replay is {:.2}x faster than direct (goal >= 2x)",
        fmt_time(t[0]),
        fmt_time(t[0] / CB as f64),
        fmt_time(t[1]),
        fmt_time(t[1] / CB as f64),
        r[1]
    );
    println!("{note}");
}

// ---------------------------------------------------------------------------------------------
// d. A wide DAG on 2 streams vs 1
// ---------------------------------------------------------------------------------------------

const WIDE_N: u64 = 256 * 1024;

/// The wide DAG shared with `xthunk bench` ([`bench::wide_dag`]) over 256K f32 per chain,
/// grid 1024.
fn wide_dag() -> Executable {
    bench::wide_dag(WIDE_N, 1024).expect("valid program")
}

fn wide(c: &mut Criterion) {
    let dev = device();
    let exe = wide_dag();
    let one =
        LoadedExecutable::load_with(dev.clone(), exe.clone(), &ExecutorConfig::with_streams(1))
            .unwrap();
    let two = LoadedExecutable::load_with(dev, exe, &ExecutorConfig::with_streams(2)).unwrap();
    let io_one = Io::new(&one, 0.3);
    let io_two = Io::new(&two, 0.3);
    io_one.execute(&one);
    io_two.execute(&two);
    let (r1, r2) = (io_one.output(&one, 0), io_two.output(&two, 0));
    assert_eq!(r1, r2, "2 streams give other results than 1");
    let want = (0.3f32.exp().tanh().exp()).tanh();
    assert!((r1[0] - want).abs() < 1e-5, "{} vs {want}", r1[0]);
    println!(
        "wide_dag_2v1_streams: schedule 1 stream {:?}; 2 streams {:?}",
        one.schedule_info(),
        two.schedule_info()
    );

    let kernels = WIDE_CHAINS * WIDE_LEN as u64;
    let mut g = quick(c, "wide_dag_2v1_streams");
    g.throughput(Throughput::Elements(kernels));
    g.bench_function("streams_1", |b| b.iter(|| io_one.execute(&one)));
    g.bench_function("streams_2", |b| b.iter(|| io_two.execute(&two)));
    g.finish();
    let (t, r, note) = paired(
        15,
        &mut [&mut || io_one.execute(&one), &mut || io_two.execute(&two)],
    );
    println!(
        "RATIO wide_dag_2v1_streams (15 interleaved rounds): {WIDE_CHAINS} chains x {WIDE_LEN} kernels over \
         {WIDE_N} f32 on {} CPUs: 1 stream {}, 2 streams {}; 2 streams are {:.2}x faster (goal > 1x)",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        fmt_time(t[0]),
        fmt_time(t[1]),
        1.0 / r[1]
    );
    println!("{note}");
}

criterion_group!(benches, chain_overhead, graph_build, command_buffer, wide);
criterion_main!(benches);
