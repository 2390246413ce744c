//! The host backend's CPU execution of portable source, beyond numbers: launch errors that
//! name what is wrong, deadlocks reported as failed launches, and kernels the preprocessor
//! removes. The numerical checks of the portable kernel set (`conformance/kernels/user/
//! checked_set.cu`) against f64 references are the conformance suite's `kernels/user/` area
//! (`conformance/src/checks/kernels/user.rs`), run on the host with 32- and 64-lane warps by its
//! tests. Without a C++ compiler every test is reported SKIPPED with the reason (and fails when
//! `XTHUNK_REQUIRE_CXX=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::backend::{Backend, Device, LaunchArg, LaunchDims, LoadedModule};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{Dim3, MemorySpace, Module, ModuleImage, Scalar};

const SOURCE: &str = include_str!("../../conformance/kernels/user/checked_set.cu");

/// A host device and `code` loaded on it; `None` (reported SKIPPED) without a C++ compiler.
fn load(name: &str, code: &str) -> Option<(Arc<dyn Device>, Arc<dyn LoadedModule>)> {
    let dev = HostBackend::new().device(0).unwrap();
    let m = Module {
        name: name.into(),
        images: vec![ModuleImage::Source { code: code.into() }],
        options: Default::default(),
    };
    match dev.load_module(&m) {
        Ok(module) => Some((dev, module)),
        Err(e @ xthunk_core::Error::Unavailable { .. }) => {
            assert!(
                !std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1"),
                "{e}"
            );
            eprintln!("SKIPPED: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn launch_errors_are_clear() {
    let Some((dev, module)) = load("user-kernels", SOURCE) else {
        return;
    };
    // A name the source does not define.
    let e = module.kernel("nope").err().unwrap().to_string();
    assert!(
        e.contains("no kernel `nope`") && e.contains("residual") && !e.contains("xt_source_"),
        "{e}"
    );
    // An immediate of the wrong size for the parameter.
    let k = module.kernel("residual").unwrap();
    let s = dev.create_stream().unwrap();
    let buf = dev.allocate(256, 64, MemorySpace::Device).unwrap();
    let b = LaunchArg::Buffer {
        ptr: buf.ptr(),
        len: 256,
    };
    let r = s.launch(
        &k,
        LaunchDims {
            grid: Dim3::new(1, 1, 1),
            block: Dim3::new(1, 1, 1),
            shared_mem: 0,
        },
        &[b, b, b, LaunchArg::Scalar(Scalar::I32(4))],
    );
    let e = r.err().unwrap().to_string();
    assert!(e.contains("argument 3") && e.contains("4 bytes"), "{e}");
    // A float pointer 2 bytes into a buffer: refused, as a GPU would fault on it.
    let odd = LaunchArg::Buffer {
        ptr: buf.ptr().offset(2),
        len: 200,
    };
    let r = s.launch(
        &k,
        LaunchDims {
            grid: Dim3::new(1, 1, 1),
            block: Dim3::new(1, 1, 1),
            shared_mem: 0,
        },
        &[b, odd, b, LaunchArg::Scalar(Scalar::I64(4))],
    );
    let e = r.err().unwrap().to_string();
    assert!(
        e.contains("argument 1") && e.contains("not aligned to its pointee's 4 bytes"),
        "{e}"
    );
    // A deadlock is a failed launch naming the block, not a hang.
    let k = module.kernel("divergent").unwrap();
    s.launch(
        &k,
        LaunchDims {
            grid: Dim3::new(2, 1, 1),
            block: Dim3::new(32, 1, 1),
            shared_mem: 0,
        },
        &[b],
    )
    .unwrap();
    let e = s.synchronize().err().unwrap().to_string();
    assert!(e.contains("deadlock in block"), "{e}");
}

#[test]
fn kernels_the_preprocessor_removes_are_not_in_the_table() {
    let code = "#if defined(XT_CUDA) || defined(XT_HIP)\n__global__ void gpu_only(float* y) { y[0] = 1.0f; }\n#else\n__global__ void cpu_side(float* y) { y[0] = 2.0f; }\n#endif\n#define K(name) __global__ void name(float* y) { y[0] = 3.0f; }\nK(from_macro)\n";
    let Some((dev, m)) = load("conditional", code) else {
        return;
    };
    assert!(m.kernel("gpu_only").is_err());
    for (name, want) in [("cpu_side", 2.0f32), ("from_macro", 3.0)] {
        let k = m.kernel(name).unwrap();
        let b = dev.allocate(4, 64, MemorySpace::Device).unwrap();
        dev.copy_from_host(&f32::NAN.to_le_bytes(), b.ptr())
            .unwrap();
        let s = dev.create_stream().unwrap();
        s.launch(
            &k,
            LaunchDims {
                grid: Dim3::new(1, 1, 1),
                block: Dim3::new(1, 1, 1),
                shared_mem: 0,
            },
            &[LaunchArg::Buffer {
                ptr: b.ptr(),
                len: 4,
            }],
        )
        .unwrap();
        s.synchronize().unwrap();
        let mut out = [0u8; 4];
        dev.copy_to_host(b.ptr(), &mut out).unwrap();
        assert_eq!(f32::from_le_bytes(out), want, "{name}");
    }
}

#[test]
fn every_name_of_the_subset_compiles_on_the_cpu() {
    // The file the backends' portable_v2 tests compile for sm_80, sm_90 and gfx90a.
    let code = include_str!("../../conformance/kernels/user/subset_v2.cu");
    let Some((_, m)) = load("subset_v2", code) else {
        return;
    };
    for name in xthunk_core::kernels::portable::scan::kernel_names(code) {
        assert!(m.kernel(&name).is_ok(), "{name}");
    }
}
