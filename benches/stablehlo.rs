//! StableHLO through xthunk, as a criterion bench (the `xthunk bench` rows
//! `stablehlo_mlp_step`, `stablehlo_transformer_step`, `stablehlo_cnn_forward` and
//! `stablehlo_load_*` measure the same paths at model sizes against XLA:CPU through jaxlib,
//! which needs a Python child; this bench needs nothing but the repository):
//!
//! - `stablehlo_import`: the reader, importer and lowering (`program_from_mlir`) of the JAX
//!   programs in `stablehlo/tests/fixtures` (an MLP and a transformer block's training steps,
//!   and a program of many random ops) — the front door's cost per load;
//! - `stablehlo_execute`: one step of the MLP and the transformer on the host backend after
//!   the load (kernels compiled once), inputs uploaded once: the per-step cost at the
//!   fixtures' small sizes, where dispatch and kernel launch overheads dominate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use xthunk::LoadedExecutable;
use xthunk_core::backend::{Backend, DeviceMemory};
use xthunk_core::executor::ExecuteOptions;
use xthunk_core::host::HostBackend;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("stablehlo/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn import(c: &mut Criterion) {
    let mut g = c.benchmark_group("stablehlo_import");
    for name in ["mlp.mlir", "transformer.mlir", "random.mlir"] {
        let text = fixture(name);
        g.bench_function(name, |b| {
            b.iter(|| xthunk::program_file::program_from_mlir(black_box(&text)).unwrap())
        });
    }
    g.finish();
}

fn execute(c: &mut Criterion) {
    let dev = HostBackend::new().device(0).unwrap();
    let mut g = c.benchmark_group("stablehlo_execute");
    for name in ["mlp.mlir", "transformer.mlir"] {
        let exe = xthunk::program_file::program_from_mlir(&fixture(name)).unwrap();
        let loaded = LoadedExecutable::load(dev.clone(), exe).unwrap();
        let params = loaded.allocate_parameters().unwrap();
        // Small deterministic inputs (values in [-0.5, 0.5)): the timing does not depend on them.
        for (i, p) in params.iter().enumerate() {
            let bytes: Vec<u8> = (0..p.size() as usize / 4)
                .flat_map(|j| ((((j * 7 + i * 13) % 101) as f32) / 101.0 - 0.5).to_le_bytes())
                .collect();
            dev.copy_from_host(&bytes, p.ptr()).unwrap();
        }
        let outs = loaded.allocate_outputs().unwrap();
        let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
        let o: Vec<&dyn DeviceMemory> = outs.iter().map(|b| b.as_ref() as _).collect();
        let opts = ExecuteOptions::default();
        g.bench_function(name, |b| b.iter(|| loaded.execute(&p, &o, &opts).unwrap()));
    }
    g.finish();
}

criterion_group!(benches, import, execute);
criterion_main!(benches);
