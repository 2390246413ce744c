//! Loading a large program: binary decode + conversion + validation of 100k thunks (copies,
//! memsets and kernel launches over a few allocations), reported in thunks per second. The
//! 10k and 100k sizes together show that loading is linear in the number of thunks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use std::hint::black_box;
use xthunk_core::ir::{
    ABI_VERSION, Access, AllocationKind, BufferAllocation, CopyThunk, DType, Dim3, Executable,
    KernelArg, KernelThunk, MemorySpace, MemsetPattern, MemsetThunk, Module, ModuleImage, Scalar,
    Signature, Slice, TensorSpec, Thunk,
};

const ALLOCS: u32 = 4;
const ALLOC_SIZE: u64 = 1 << 20;

/// `n` thunks: copies, memsets and kernels in the entry sequence, every 64th one a sequence of
/// 8 more (so nested paths are exercised too).
fn program(n: usize) -> Executable {
    let allocations = (0..ALLOCS)
        .map(|i| BufferAllocation {
            index: i,
            size: ALLOC_SIZE,
            alignment: 256,
            kind: if i == 0 {
                AllocationKind::Parameter(0)
            } else {
                AllocationKind::Temp
            },
            memory_space: MemorySpace::Device,
        })
        .collect();
    let signature = Signature {
        parameters: vec![TensorSpec {
            name: "x".into(),
            dtype: DType::F32,
            dims: vec![ALLOC_SIZE / 4],
            allocation: 0,
        }],
        outputs: vec![],
    };
    let leaf = |i: usize| -> Thunk {
        let a = 1 + (i as u32 % (ALLOCS - 1));
        let off = (i as u64 * 4096) % (ALLOC_SIZE / 2);
        match i % 3 {
            0 => CopyThunk {
                src: Slice::new(0, off, 4096),
                dst: Slice::new(a, off, 4096),
            }
            .into(),
            1 => MemsetThunk {
                dst: Slice::new(a, off, 4096),
                pattern: MemsetPattern::U32(i as u32),
            }
            .into(),
            _ => KernelThunk {
                module: "kernels".into(),
                name: "scale_f32".into(),
                grid: Dim3::x(4),
                block: Dim3::x(256),
                shared_mem: 0,
                args: vec![
                    KernelArg::Buffer {
                        slice: Slice::new(a, off, 4096),
                        access: Access::ReadWrite,
                    },
                    KernelArg::Scalar(Scalar::F32(2.0)),
                    KernelArg::Scalar(Scalar::I64(1024)),
                ],
            }
            .into(),
        }
    };
    let mut entry = Vec::new();
    let mut count = 0;
    while count < n {
        if count % 64 == 0 && n - count >= 9 {
            entry.push(Thunk::from(
                (count..count + 8).map(leaf).collect::<Vec<_>>(),
            ));
            count += 9;
        } else {
            entry.push(leaf(count));
            count += 1;
        }
    }
    Executable {
        abi_version: ABI_VERSION,
        name: "bench".into(),
        allocations,
        modules: vec![Module {
            name: "kernels".into(),
            images: vec![ModuleImage::Host {
                library: "bench".into(),
            }],
            options: Default::default(),
        }],
        entry,
        signature,
        aliases: vec![],
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("load");
    g.sample_size(20);
    for n in [10_000usize, 100_000] {
        let exe = program(n);
        assert_eq!(exe.thunk_count(), n);
        let bytes = xthunk_proto::encode(&exe);
        assert_eq!(xthunk_proto::decode(&bytes).unwrap(), exe);
        let msg = xthunk_proto::pb::Executable::decode(bytes.as_slice()).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(
            BenchmarkId::new("decode+from_proto", n),
            &bytes,
            |b, bytes| b.iter(|| xthunk_proto::decode(black_box(bytes)).unwrap()),
        );
        g.bench_with_input(BenchmarkId::new("prost_decode", n), &bytes, |b, bytes| {
            b.iter(|| xthunk_proto::pb::Executable::decode(black_box(bytes.as_slice())).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("from_proto", n), &msg, |b, msg| {
            b.iter(|| xthunk_proto::from_proto(black_box(msg)).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("verify", n), &exe, |b, exe| {
            b.iter(|| xthunk_core::verify(black_box(exe)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
