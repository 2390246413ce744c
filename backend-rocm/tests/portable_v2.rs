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
use xthunk_core::kernels::portable::{self, scan};
use xthunk_rocm::image::CodeObject;

/// The user kernel sources of `conformance/kernels/user/`, by module name.
const USER: &[(&str, &str)] = &[
    (
        "subset_v2",
        include_str!("../../conformance/kernels/user/subset_v2.cu"),
    ),
    (
        "training",
        include_str!("../../conformance/kernels/user/training.cu"),
    ),
    ("docs_example", include_str!("../../docs/kernels.md")),
    (
        "checked_set",
        include_str!("../../conformance/kernels/user/checked_set.cu"),
    ),
];

/// The code of the first ```cuda block of `doc` (the complete example of docs/kernels.md).
fn cuda_block(doc: &str) -> &str {
    doc.split_once("```cuda\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map_or("", |(code, _)| code)
}

#[test]
fn user_kernels_compile_unmodified_for_gfx90a() {
    let dir = TempDir::new("user-v2");
    let Some(c) = compiler_or_skip("user_kernels_compile_unmodified_for_gfx90a", dir.path()) else {
        return;
    };
    for &(module, code) in USER {
        let code = if module == "docs_example" {
            cuda_block(code)
        } else {
            code
        };
        assert_eq!(scan::vendor_constructs(code), [], "{module}");
        let names = scan::kernel_names(code);
        assert!(!names.is_empty(), "{module}");
        let src = portable::module_source(module, code);
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
    let module = |code: &str| xthunk_core::ir::Module {
        name: "m".into(),
        images: vec![xthunk_core::ir::ModuleImage::Source { code: code.into() }],
        options: Default::default(),
    };
    let old = module("__global__ void k(float* x) { x[0] = 1.0f; }");
    let new = module("__global__ void k(float* x) { x[0] = 2.0f; }");
    let want_old = portable::stamp::expected_stamp(&old).unwrap();
    let want_new = portable::stamp::expected_stamp(&new).unwrap();
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
    use xthunk_core::ir::{HeaderSource, ModuleOptions};
    let code =
        "#include \"util.h\"\n__global__ void k(float* x) { x[0] = twice(x[0]) / (float)N; }\n";
    let options = ModuleOptions {
        defines: vec!["N=4".into()],
        fast_math: true,
        headers: vec![HeaderSource {
            name: "util.h".into(),
            code: "__device__ float twice(float x) { return 2.0f * x; }".into(),
        }],
    };
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
