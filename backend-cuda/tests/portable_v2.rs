//! The portable subset v2 (docs/kernels.md) with the real NVRTC, without a GPU: a source using
//! every name of the subset, and the user kernel set of `tests/kernels/user/`, compile
//! unmodified for sm_80 and sm_90, every kernel found by its plain name in the cubin (C
//! linkage applied by default), and compile errors point at the user's own line.
//!
//! Without NVRTC every test prints why it is skipped and returns; with
//! `XTHUNK_REQUIRE_NVRTC=1` (CI) a missing NVRTC fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::kernels::portable::{self, scan};
use xthunk_cuda::compile::Nvrtc;
use xthunk_cuda::image;
use xthunk_cuda::{Compiler, KernelCache, SearchConfig, Target};

/// The user kernel sources of `tests/kernels/user/`, by module name.
const USER: &[(&str, &str)] = &[(
    "subset_v2",
    include_str!("../../tests/kernels/user/subset_v2.cu"),
)];

fn nvrtc_or_skip(test: &str) -> Option<Arc<Nvrtc>> {
    match Nvrtc::load(&SearchConfig::from_env()) {
        Ok(n) => Some(Arc::new(n)),
        Err(e) => {
            if std::env::var("XTHUNK_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("{test}: XTHUNK_REQUIRE_NVRTC=1 but {e}");
            }
            eprintln!("SKIPPED {test}: NVRTC is not installed ({e})");
            None
        }
    }
}

#[test]
fn user_kernels_compile_unmodified_for_sm80_and_sm90() {
    let Some(nvrtc) = nvrtc_or_skip("user_kernels_compile_unmodified_for_sm80_and_sm90") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let c = Compiler::new(nvrtc, Some(KernelCache::new(dir.path())));
    for (module, code) in USER {
        assert_eq!(scan::vendor_constructs(code), [], "{module}");
        let names = scan::kernel_names(code);
        assert!(!names.is_empty(), "{module}");
        let src = portable::module_source(module, code);
        for sm in [80, 90] {
            let out = c
                .compile(&src, Target::Sm(sm))
                .unwrap_or_else(|e| panic!("{module} for sm_{sm}: {e}"));
            let info = image::inspect(&out.image).unwrap();
            assert_eq!(info.sm, sm);
            for n in &names {
                assert!(
                    info.functions.iter().any(|f| f == n),
                    "{module} sm_{sm}: `{n}` not in the cubin: {:?}",
                    info.functions
                );
            }
            eprintln!(
                "{module} sm_{sm}: {} kernels; log {:?}",
                names.len(),
                out.log
            );
        }
    }
}

#[test]
fn compile_errors_point_at_the_users_line_and_module() {
    let Some(nvrtc) = nvrtc_or_skip("compile_errors_point_at_the_users_line_and_module") else {
        return;
    };
    let c = Compiler::new(nvrtc, None);
    let src = portable::module_source(
        "my_kernels",
        "\n\n__global__ void k(float* x) {\n  x[0] = nope;\n}\n",
    );
    let e = c.compile(&src, Target::Sm(80)).unwrap_err().to_string();
    assert!(e.contains("my_kernels(4)"), "{e}");
}
