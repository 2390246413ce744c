//! The portable subset v2 (docs/kernels.md) with the real NVRTC, without a GPU: a source using
//! every name of the subset, and the user kernel set of `conformance/kernels/user/`, compile
//! unmodified for sm_80 and sm_90, every kernel found by its plain name in the cubin (C
//! linkage applied by default), and compile errors point at the user's own line.
//!
//! Without NVRTC every test prints why it is skipped and returns; with
//! `XTHUNK_REQUIRE_NVRTC=1` (CI) a missing NVRTC fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::kernels::portable;

#[path = "../../gpu/tests/fixtures/portable_v2.rs"]
mod fixtures;
use xthunk_cuda::compile::Nvrtc;
use xthunk_cuda::image;
use xthunk_cuda::{Compiler, KernelCache, SearchConfig, Target};

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
    for fixtures::UserModule {
        name: module,
        source: src,
        kernels: names,
    } in fixtures::user_modules()
    {
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

/// Every image records the source it was compiled from: cubins (sm_80) and PTX carry the
/// module's stamp, which differs from an edited source's.
#[test]
fn images_record_their_source() {
    if nvrtc_or_skip("images_record_their_source").is_none() {
        return;
    }
    let ((old, want_old), (_, want_new)) = fixtures::stamp_modules();
    assert_ne!(want_old, want_new);
    let src = &old.images[0];
    match xthunk_cuda::precompile_module(&old, src, "sm_80").unwrap() {
        Some(xthunk_core::ir::ModuleImage::Cubin { data, .. }) => {
            let f = image::inspect(&data).unwrap().functions;
            let names = || f.iter().map(String::as_str);
            assert_eq!(
                portable::stamp::check_stamp(&want_old, names()),
                portable::stamp::Stamp::Matches
            );
            assert_eq!(
                portable::stamp::check_stamp(&want_new, names()),
                portable::stamp::Stamp::Differs {
                    found: want_old.clone()
                }
            );
        }
        other => panic!("{other:?}"),
    }
    match xthunk_cuda::precompile_module(&old, src, "compute_80").unwrap() {
        Some(xthunk_core::ir::ModuleImage::Ptx { code }) => {
            let entries = portable::stamp::ptx_entries(&code);
            assert!(entries.contains(&"k"), "{entries:?}");
            assert_eq!(
                portable::stamp::check_stamp(&want_new, entries),
                portable::stamp::Stamp::Differs { found: want_old }
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Module options reach NVRTC: a define and a carried header the source needs (it does not
/// compile without them), fast math.
#[test]
fn module_options_reach_nvrtc() {
    let Some(nvrtc) = nvrtc_or_skip("module_options_reach_nvrtc") else {
        return;
    };
    let c = Compiler::new(nvrtc, None);
    let (code, options) = fixtures::needs_options();
    let out = c
        .compile(
            &portable::module_source_with("m", code, &options),
            Target::Sm(80),
        )
        .unwrap();
    let f = image::inspect(&out.image).unwrap().functions;
    assert!(f.iter().any(|n| n == "k"), "{f:?}");
    let e = c
        .compile(&portable::module_source("m", code), Target::Sm(80))
        .unwrap_err()
        .to_string();
    assert!(e.contains("util.h"), "{e}");
}
