//! CPU execution of the standard library's portable source against the host implementations
//! of the same kernels: elementwise (`add_f32`, `gelu_f32`) and row reductions
//! (`reduce_sum_f32`, `softmax_f32`), both through the host backend's streams. The portable
//! kernels run with two launch shapes: GPU-like (256 threads per block) and CPU-like (one
//! thread per block: no fiber switch at `__syncthreads`). Prints the ratio host time / CPU
//! execution time (>= 0.5 is the goal) after the criterion groups.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Device, KernelHandle, LaunchArg, LaunchDims, Stream};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{Dim3, MemorySpace, Module, ModuleImage, Scalar};
use xthunk_core::kernels::portable;

const N: usize = 1 << 22;
const ROWS: usize = 4096;
const COLS: usize = 1024;

struct Setup {
    dev: Arc<dyn Device>,
    stream: Arc<dyn Stream>,
    host: Arc<dyn xthunk_core::backend::LoadedModule>,
    cpu: Arc<dyn xthunk_core::backend::LoadedModule>,
}

fn setup() -> Setup {
    let dev = HostBackend::new().device(0).unwrap();
    let names = ["add_f32", "gelu_f32", "reduce_sum_f32", "softmax_f32"];
    let code: String = names
        .iter()
        .map(|n| portable::kernel_definition(n).unwrap())
        .collect();
    let cpu = dev
        .load_module(&Module {
            name: "portable".into(),
            images: vec![ModuleImage::Source { code }],
            options: Default::default(),
        })
        .unwrap();
    let host = dev
        .load_module(&Module {
            name: "standard".into(),
            images: vec![ModuleImage::Standard],
            options: Default::default(),
        })
        .unwrap();
    let stream = dev.create_stream().unwrap();
    Setup {
        dev,
        stream,
        host,
        cpu,
    }
}

fn buffer(dev: &Arc<dyn Device>, floats: usize) -> (xthunk_core::backend::Buffer, LaunchArg) {
    let b = dev
        .allocate((floats * 4) as u64, 64, MemorySpace::Device)
        .unwrap();
    let bytes: Vec<u8> = (0..floats)
        .flat_map(|i| ((i % 977) as f32 * 0.01 - 4.0).to_le_bytes())
        .collect();
    dev.copy_from_host(&bytes, b.ptr()).unwrap();
    let a = LaunchArg::Buffer {
        ptr: b.ptr(),
        len: (floats * 4) as u64,
    };
    (b, a)
}

fn dims(grid: u32, block: u32) -> LaunchDims {
    LaunchDims {
        grid: Dim3::new(grid, 1, 1),
        block: Dim3::new(block, 1, 1),
        shared_mem: 0,
    }
}

/// (name, args, GPU-like dims, CPU-like dims)
fn cases(
    s: &Setup,
    keep: &mut Vec<xthunk_core::backend::Buffer>,
) -> Vec<(&'static str, Vec<LaunchArg>, LaunchDims, LaunchDims)> {
    let mut mk = |n| {
        let (b, a) = buffer(&s.dev, n);
        keep.push(b);
        a
    };
    let (x, y, z) = (mk(N), mk(N), mk(N));
    let (m, r, o) = (mk(ROWS * COLS), mk(ROWS), mk(ROWS * COLS));
    let n = LaunchArg::Scalar(Scalar::I64(N as i64));
    let (rows, cols) = (
        LaunchArg::Scalar(Scalar::I64(ROWS as i64)),
        LaunchArg::Scalar(Scalar::I64(COLS as i64)),
    );
    let elem_gpu = dims((N / 256) as u32, 256);
    let elem_cpu = dims((N / 1024) as u32, 1024);
    let row_gpu = dims(ROWS as u32, 256);
    let row_cpu = dims(ROWS as u32, 1);
    vec![
        ("add_f32", vec![x, y, z, n], elem_gpu, elem_cpu),
        ("gelu_f32", vec![x, z, n], elem_gpu, elem_cpu),
        ("reduce_sum_f32", vec![m, r, rows, cols], row_gpu, row_cpu),
        ("softmax_f32", vec![m, o, rows, cols], row_gpu, row_cpu),
    ]
}

fn time(s: &Setup, k: &Arc<dyn KernelHandle>, d: LaunchDims, args: &[LaunchArg]) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        s.stream.launch(k, d, args).unwrap();
        s.stream.synchronize().unwrap();
        best = best.min(t.elapsed());
    }
    best
}

fn bench(c: &mut Criterion) {
    let s = setup();
    let mut keep = vec![];
    let cases = cases(&s, &mut keep);
    let mut g = c.benchmark_group("cpu_exec");
    g.sample_size(10);
    let mut summary = vec![];
    for (name, args, gpu, cpu) in &cases {
        let hk = s.host.kernel(name).unwrap();
        let ck = s.cpu.kernel(name).unwrap();
        for (label, k, d) in [
            ("host", &hk, *gpu),
            ("portable-gpu-shape", &ck, *gpu),
            ("portable-cpu-shape", &ck, *cpu),
        ] {
            g.bench_function(format!("{name}/{label}"), |b| {
                b.iter(|| {
                    s.stream.launch(k, d, args).unwrap();
                    s.stream.synchronize().unwrap();
                })
            });
        }
        let h = time(&s, &hk, *gpu, args);
        let pg = time(&s, &ck, *gpu, args);
        let pc = time(&s, &ck, *cpu, args);
        summary.push(format!(
            "{name:>16}: host {h:>10.2?}  portable (256-thread blocks) {pg:>10.2?} ratio {:.2}  portable (CPU shape) {pc:>10.2?} ratio {:.2}",
            h.as_secs_f64() / pg.as_secs_f64(),
            h.as_secs_f64() / pc.as_secs_f64()
        ));
    }
    g.finish();
    eprintln!("host time / CPU-execution time (best of 5):");
    for l in summary {
        eprintln!("{l}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
