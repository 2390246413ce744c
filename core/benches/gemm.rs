//! Host gemm (f32, 1024³) through the host backend's stream, next to a plain triple loop
//! (i-k-j order, the fastest simple loop) on the same data in the same run. Criterion's
//! throughput is in elements = floating-point operations (2·m·n·k), so "Gelem/s" reads as
//! GFLOP/s.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use xthunk_core::backend::{Backend, DeviceRange, GemmLaunch};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{DType, MemorySpace};

const N: usize = 1024;

fn plain_loop(a: &[f32], b: &[f32], c: &mut [f32]) {
    c.fill(0.0);
    for i in 0..N {
        for p in 0..N {
            let av = a[i * N + p];
            let brow = &b[p * N..(p + 1) * N];
            let crow = &mut c[i * N..(i + 1) * N];
            for (cv, bv) in crow.iter_mut().zip(brow) {
                *cv += av * bv;
            }
        }
    }
}

fn bench(cr: &mut Criterion) {
    let backend = HostBackend::new();
    let Ok(dev) = backend.device(0) else {
        eprintln!("host device unavailable");
        return;
    };
    let bytes = (N * N * 4) as u64;
    let (Ok(a), Ok(b), Ok(c)) = (
        dev.allocate(bytes, 64, MemorySpace::Device),
        dev.allocate(bytes, 64, MemorySpace::Device),
        dev.allocate(bytes, 64, MemorySpace::Device),
    ) else {
        eprintln!("allocation failed");
        return;
    };
    let ha: Vec<f32> = (0..N * N)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let hb: Vec<f32> = (0..N * N)
        .map(|i| ((i * 104729) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let _ = dev.copy_from_host(bytemuck::cast_slice(&ha), a.ptr());
    let _ = dev.copy_from_host(bytemuck::cast_slice(&hb), b.ptr());
    let Ok(stream) = dev.create_stream() else {
        return;
    };
    let launch = GemmLaunch {
        a: DeviceRange {
            ptr: a.ptr(),
            len: bytes,
        },
        b: DeviceRange {
            ptr: b.ptr(),
            len: bytes,
        },
        c: DeviceRange {
            ptr: c.ptr(),
            len: bytes,
        },
        m: N as u64,
        n: N as u64,
        k: N as u64,
        lda: N as u64,
        ldb: N as u64,
        ldc: N as u64,
        trans_a: false,
        trans_b: false,
        alpha: 1.0,
        beta: 0.0,
        dtype: DType::F32,
        batch: 1,
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
    };
    let mut g = cr.benchmark_group("gemm_f32_1024");
    g.throughput(Throughput::Elements(2 * (N as u64).pow(3)));
    g.sample_size(10);
    g.bench_function("host_backend", |bch| {
        bch.iter(|| {
            let r = stream.gemm(&launch).and_then(|_| stream.synchronize());
            black_box(r.is_ok())
        })
    });
    let mut hc = vec![0f32; N * N];
    g.bench_function("plain_loop", |bch| {
        bch.iter(|| {
            plain_loop(&ha, &hb, &mut hc);
            black_box(hc[N + 1])
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
