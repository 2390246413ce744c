//! The portable subset v2 (docs/kernels.md) with the real hipRTC, without a GPU: a source using
//! every name of the subset, and the user kernel set of `conformance/kernels/user/`, compile
//! unmodified for gfx90a (64-lane wavefronts), every kernel found by its plain name in the
//! code object (C linkage applied by default), and compile errors point at the user's line.
//!
//! Without hipRTC every test prints why it is skipped; with `XTHUNK_REQUIRE_ROCM=1` (CI) a
//! missing runtime fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TempDir, compiler_or_skip, note};
use xthunk_core::kernels::portable;

#[path = "../../gpu/tests/fixtures/portable_v2.rs"]
mod fixtures;
use xthunk_rocm::image::CodeObject;

#[test]
fn user_kernels_compile_unmodified_for_gfx90a() {
    let dir = TempDir::new("user-v2");
    let Some(c) = compiler_or_skip("user_kernels_compile_unmodified_for_gfx90a", dir.path()) else {
        return;
    };
    for fixtures::UserModule {
        name: module,
        source: src,
        kernels: names,
    } in fixtures::user_modules()
    {
        let out = c
            .compile(&src, "gfx90a")
            .unwrap_or_else(|e| panic!("{module} for gfx90a: {e}"));
        let co = CodeObject::parse(&out.image).unwrap();
        for n in &names {
            assert!(
                co.kernels.iter().any(|k| k == n),
                "{module}: `{n}` not in the code object: {:?}",
                co.kernels
            );
        }
        note(&format!(
            "{module} gfx90a: {} kernels; log {:?}",
            names.len(),
            out.log
        ));
    }
}

#[test]
fn compile_errors_point_at_the_users_line_and_module() {
    let dir = TempDir::new("user-v2-err");
    let Some(c) = compiler_or_skip(
        "compile_errors_point_at_the_users_line_and_module",
        dir.path(),
    ) else {
        return;
    };
    let src = portable::module_source(
        "my_kernels",
        "\n\n__global__ void k(float* x) {\n  x[0] = nope;\n}\n",
    );
    let e = c.compile(&src, "gfx90a").unwrap_err().to_string();
    assert!(e.contains("my_kernels:4:"), "{e}");
}

#[test]
fn the_warp_size_is_the_targets_wavefront() {
    let dir = TempDir::new("user-v2-wave");
    let Some(c) = compiler_or_skip("the_warp_size_is_the_targets_wavefront", dir.path()) else {
        return;
    };
    let check = |target: &str, lanes: u32| {
        let code = format!(
            "__global__ void k(int* x) {{ static_assert(XT_HIP_WAVE == {lanes}, \"lanes\"); x[0] = xt_warp_size(); }}"
        );
        c.compile(&portable::module_source("wave", &code), target)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    check("gfx90a", 64).unwrap();
    assert!(check("gfx90a", 32).is_err());
    if c.supported_targets().iter().any(|t| t == "gfx1030") {
        check("gfx1030", 32).unwrap();
    } else {
        note("gfx1030 not listed by comgr: wave32 not checked");
    }
}

/// Every code object records the source it was compiled from (its stamp kernel), which
/// differs from an edited source's.
#[test]
fn code_objects_record_their_source() {
    let dir = TempDir::new("user-v2-stamp");
    let Some(c) = compiler_or_skip("code_objects_record_their_source", dir.path()) else {
        return;
    };
    let ((old, want_old), (_, want_new)) = fixtures::stamp_modules();
    let out = c.compile_image(&old, &old.images[0], "gfx90a").unwrap();
    let co = CodeObject::parse(&out.image).unwrap();
    let names = || co.kernels.iter().map(String::as_str);
    assert_eq!(
        portable::stamp::check_stamp(&want_old, names()),
        portable::stamp::Stamp::Matches
    );
    assert_eq!(
        portable::stamp::check_stamp(&want_new, names()),
        portable::stamp::Stamp::Differs { found: want_old }
    );
}

/// Module options reach hipRTC: a define and a carried header the source needs (it does not
/// compile without them), fast math.
#[test]
fn module_options_reach_hiprtc() {
    let dir = TempDir::new("user-v2-options");
    let Some(c) = compiler_or_skip("module_options_reach_hiprtc", dir.path()) else {
        return;
    };
    let (code, options) = fixtures::needs_options();
    let out = c
        .compile(&portable::module_source_with("m", code, &options), "gfx90a")
        .unwrap();
    let co = CodeObject::parse(&out.image).unwrap();
    assert!(co.kernels.iter().any(|n| n == "k"), "{:?}", co.kernels);
    let e = c
        .compile(&portable::module_source("m", code), "gfx90a")
        .unwrap_err()
        .to_string();
    assert!(e.contains("util.h"), "{e}");
}
