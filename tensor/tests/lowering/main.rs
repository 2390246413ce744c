//! Tests of the lowering on the host backend: graphs built in Rust, lowered, run with
//! poisoned outputs, and compared with an independent reference interpreter (`reference.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod control;
mod data;
mod dot;
mod elementwise;
mod gather;
mod linalg;
mod movement;
mod programs;
mod reduce;
mod reference;
mod rules;
mod scatter;
mod sort;
mod window;
mod xla;

use std::sync::Arc;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, Session};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{ModuleImage, Thunk};
use xthunk_core::kernels::portable::scan;
use xthunk_core::program::Program;
use xthunk_tensor::graph::Graph;
use xthunk_tensor::lower::{Lowered, lower};

fn launched(list: &[Thunk], out: &mut Vec<String>) {
    for t in list {
        if let Thunk::Kernel(k) = t {
            out.push(k.name.clone());
        }
        for (_, nested) in t.as_kind().nested() {
            launched(nested, out);
        }
    }
}

/// The portable-subset check `xthunk compile --check` runs (`check_program` in
/// `src/cli/compile.rs`): no vendor-only construct, every launched kernel defined.
pub fn check_portable(low: &Lowered) {
    let mut names = vec![];
    launched(&low.executable.entry, &mut names);
    for m in &low.executable.modules {
        for img in &m.images {
            if let ModuleImage::Source { code } = img {
                let found = scan::vendor_constructs_in(code, &[]);
                assert!(found.is_empty(), "vendor constructs: {found:?}");
                let defined = scan::kernel_names(code);
                for n in &names {
                    assert!(defined.contains(n), "kernel {n} launched, not defined");
                }
            }
        }
    }
}

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

/// Lowers `g`, runs it once on the host with `inputs` (outputs poisoned first) and returns
/// the lowering and the outputs' bytes.
/// Runs `g` on `inputs` and requires every result to equal the reference interpreter's
/// exactly (NaN equal to NaN); the lowering, for further checks.
pub fn check_exact(g: &Graph, inputs: &[data::Arr]) -> Lowered {
    let (low, outs) = run(
        g,
        &inputs.iter().map(data::Arr::to_bytes).collect::<Vec<_>>(),
    );
    let want = reference::eval(g, inputs);
    for (k, (name, v)) in g.results().iter().enumerate() {
        let t = g.ty(*v);
        let got = data::Arr::from_bytes(t.dtype, &t.dims, &outs[k]);
        data::agree(&want[k], &got, 0.0).unwrap_or_else(|e| panic!("{} {name}: {e}", g.name()));
    }
    low
}

pub fn run(g: &Graph, inputs: &[Vec<u8>]) -> (Lowered, Vec<Vec<u8>>) {
    let low = lower(g).unwrap_or_else(|e| panic!("lowering {}: {e}", g.name()));
    check_portable(&low);
    dump_unit(g.name(), &low);
    let program = Program::new(low.executable.clone()).unwrap();
    let dev = device();
    let session = Session::load(dev.clone(), &program, &ExecutorConfig::default(), None)
        .unwrap_or_else(|e| panic!("loading {}: {e:#}\n{}", g.name(), source_of(&low)));
    session.bind(inputs).unwrap();
    for i in 0..g.results().len() {
        let buf = session.output(i).unwrap();
        dev.copy_from_host(&vec![0xA5; buf.size() as usize], buf.ptr())
            .unwrap();
    }
    session.execute(&ExecuteOptions::default()).unwrap();
    let outs = session.read_outputs().unwrap();
    (low, outs)
}

/// With `XTHUNK_TENSOR_DUMP=DIR`, writes the module's translation unit (as NVRTC and hipRTC
/// are given it) to `DIR/<graph>.cu`, for compiling it with the GPU compilers by hand.
fn dump_unit(name: &str, low: &Lowered) {
    if let Some(dir) = std::env::var_os("XTHUNK_TENSOR_DUMP") {
        let code = source_of(low);
        if !code.is_empty() {
            let unit = xthunk_core::kernels::portable::module_unit(
                xthunk_tensor::lower::MODULE,
                &code,
                &Default::default(),
            );
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.cu")), unit).unwrap();
        }
    }
}

/// The generated source (for failure messages).
pub fn source_of(low: &Lowered) -> String {
    low.executable
        .modules
        .iter()
        .flat_map(|m| m.images.iter())
        .filter_map(|i| match i {
            ModuleImage::Source { code } => Some(code.clone()),
            _ => None,
        })
        .collect()
}
