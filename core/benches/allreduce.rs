//! Host all-reduce (f32 sum, out of place) on 2 and 4 devices of one host backend, for 1 KiB to
//! 256 MiB per rank (powers of 4), against a memcpy of the same bytes measured in the same run
//! (`cargo bench -p xthunk-core --bench allreduce`).
//!
//! Criterion measures each all-reduce (its throughput line is the algorithm bandwidth). Then,
//! for every size, a `TABLE` line measured by interleaving — every round runs the all-reduce,
//! N concurrent memcpys and one memcpy back to back, and the medians over rounds are used, so
//! that load from other processes hits all alike — reports, as nccl-tests define them:
//!
//! - `algbw` = S / t, S the bytes per rank (the all-reduce's count × 4);
//! - `busbw` = algbw × 2(n−1)/n;
//! - `memcpyN/rank` = S / t_N, t_N the time for the n ranks' streams to each copy S bytes
//!   (`Stream::copy`, glibc `memmove`), concurrently, on the same buffers;
//! - `memcpy1` = S / t_1, one stream copying S bytes alone;
//! - **`eff` = algbw / memcpyN/rank = t_N / t**: the memory-bandwidth bound. Each rank of the
//!   fused all-reduce must read S bytes (its chunk of every rank's input) and write S bytes
//!   (its chunk of every rank's output) — exactly the traffic of one memcpy of S bytes — and
//!   the ranks work at the same time, so the all-reduce can at best take as long as n
//!   concurrent memcpys of S bytes. Equivalently, eff = busbw / (memcpyN/rank × 2(n−1)/n);
//!   for n = 2 it is busbw / memcpyN-per-rank bandwidth. Goal: eff ≥ 0.7 at 64 MiB, 2 devices.
//! - `busbw/memcpy1`: busbw against one lone memcpy (on this 2-CPU machine one core does not
//!   saturate memory, so this exceeds eff).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Buffer, Device, Stream};
use xthunk_core::collectives::{
    CliqueKey, CliqueProvider, Communicator, ReduceOp, StreamKind, Timeouts,
};
use xthunk_core::host::{HostBackend, HostCliqueProvider};
use xthunk_core::ir::{DType, MemorySpace, MemsetPattern};

const MAX: u64 = 256 << 20;
const SIZES: [u64; 10] = [
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];

struct Rank {
    stream: Arc<dyn Stream>,
    src: Buffer,
    dst: Buffer,
}

struct Bench {
    ranks: Vec<Rank>,
    provider: HostCliqueProvider,
}

impl Bench {
    fn new(n: usize) -> Bench {
        let backend = HostBackend::with_devices(n);
        let devices: Vec<Arc<dyn Device>> = (0..n).map(|i| backend.device(i).unwrap()).collect();
        let ranks = devices
            .iter()
            .map(|d| {
                let stream = d.create_stream().unwrap();
                let src = d.allocate(MAX, 64, MemorySpace::Device).unwrap();
                let dst = d.allocate(MAX, 64, MemorySpace::Device).unwrap();
                // Touch every page (and make the inputs 1.0).
                stream
                    .memset(src.ptr(), MAX, MemsetPattern::U32(1.0f32.to_bits()))
                    .unwrap();
                stream
                    .memset(dst.ptr(), MAX, MemsetPattern::U32(0))
                    .unwrap();
                stream.synchronize().unwrap();
                Rank { stream, src, dst }
            })
            .collect();
        let provider = HostCliqueProvider::new(devices, Timeouts::default()).unwrap();
        Bench { ranks, provider }
    }

    fn comms(&self) -> Vec<Arc<dyn Communicator>> {
        let n = self.ranks.len();
        let key = CliqueKey::new(0..n, StreamKind::Communication).unwrap();
        (0..n)
            .map(|g| self.provider.acquire(&key, g).unwrap())
            .collect()
    }

    fn all_reduce(&self, comms: &[Arc<dyn Communicator>], bytes: u64) {
        for (r, c) in self.ranks.iter().zip(comms) {
            c.all_reduce(
                r.stream.as_ref(),
                r.src.ptr(),
                r.dst.ptr(),
                bytes / 4,
                DType::F32,
                ReduceOp::Sum,
            )
            .unwrap();
        }
        for r in &self.ranks {
            r.stream.synchronize().unwrap();
        }
    }

    /// Every rank's stream copies `bytes` at once (or only the first one's).
    fn memcpy(&self, bytes: u64, all: bool) {
        let k = if all { self.ranks.len() } else { 1 };
        for r in &self.ranks[..k] {
            r.stream.copy(r.src.ptr(), r.dst.ptr(), bytes).unwrap();
        }
        for r in &self.ranks[..k] {
            r.stream.synchronize().unwrap();
        }
    }
}

fn label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}MiB", b >> 20),
        b => format!("{}KiB", b >> 10),
    }
}

fn gbs(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

/// Interleaved timing: every round runs each variant `reps` times back to back. Returns the
/// median seconds per call of each variant, and for each variant the median over rounds of
/// variant 0's time divided by its time in the same round (so that load from other processes,
/// which drifts, hits both sides of every ratio alike).
fn paired(rounds: usize, reps: usize, variants: &mut [&mut dyn FnMut()]) -> (Vec<f64>, Vec<f64>) {
    let mut times = vec![Vec::with_capacity(rounds); variants.len()];
    for round in 0..=rounds {
        for (i, f) in variants.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            if round > 0 {
                times[i].push(start.elapsed().as_secs_f64() / reps as f64);
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratios = (0..variants.len())
        .map(|i| median((0..rounds).map(|r| times[i][r] / times[0][r]).collect()))
        .collect();
    (times.into_iter().map(median).collect(), ratios)
}

fn bench_n(c: &mut Criterion, n: usize) {
    let b = Bench::new(n);
    let comms = b.comms();
    let mut group = c.benchmark_group(format!("allreduce_f32_sum/{n}dev"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300))
        .sampling_mode(SamplingMode::Flat);
    for bytes in SIZES {
        group.throughput(Throughput::Bytes(bytes));
        group.bench_with_input(
            BenchmarkId::from_parameter(label(bytes)),
            &bytes,
            |bn, &s| bn.iter(|| b.all_reduce(&comms, s)),
        );
    }
    group.finish();

    println!(
        "\nTABLE host all-reduce f32 sum, {n} ranks (one stream thread each, {} CPUs); S = bytes \
         per rank; times and bandwidths are medians over interleaved rounds; eff = median over \
         rounds of t(n concurrent memcpys of S) / t(all-reduce), the memory-bandwidth bound; \
         busbw/memcpy1 likewise against one lone memcpy",
        std::thread::available_parallelism().map_or(1, |p| p.get())
    );
    println!(
        "TABLE {:>7} {:>10} {:>9} {:>9} {:>12} {:>9} {:>6} {:>14}",
        "size", "time", "algbw", "busbw", "memcpyN/rank", "memcpy1", "eff", "busbw/memcpy1"
    );
    for bytes in SIZES {
        // Enough repetitions that a round takes a few milliseconds at least.
        let reps = (4 << 20) / bytes.min(4 << 20);
        let rounds = if bytes >= 256 << 20 { 7 } else { 15 };
        let (t, ratio) = paired(
            rounds,
            reps as usize,
            &mut [
                &mut || b.all_reduce(&comms, bytes),
                &mut || b.memcpy(bytes, true),
                &mut || b.memcpy(bytes, false),
            ],
        );
        let (ar, cn, c1) = (t[0], t[1], t[2]);
        let algbw = gbs(bytes, ar);
        let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
        println!(
            "TABLE {:>7} {:>8.1}us {:>6.2}GB/s {:>6.2}GB/s {:>9.2}GB/s {:>6.2}GB/s {:>6.2} {:>14.2}",
            label(bytes),
            ar * 1e6,
            algbw,
            busbw,
            gbs(bytes, cn),
            gbs(bytes, c1),
            ratio[1],
            ratio[2] * 2.0 * (n as f64 - 1.0) / n as f64,
        );
    }
}

fn benches(c: &mut Criterion) {
    bench_n(c, 2);
    bench_n(c, 4);
}

criterion_group!(allreduce, benches);
criterion_main!(allreduce);
