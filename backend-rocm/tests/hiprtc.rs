//! hipRTC for real, without a GPU: Debian's ROCm 5.2 hipRTC (inside `libamdhip64.so.5`) and
//! comgr. Compiles the whole portable standard library and small kernels for several gfx
//! targets, checks every result is an AMD GPU ELF for its target with the expected kernels
//! and parameters, and checks the disk cache, compile errors and refused targets.
//!
//! Without hipRTC every test prints why it is skipped; with `XTHUNK_REQUIRE_ROCM=1` (CI) a
//! missing runtime fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TempDir, compiler_or_skip, note};
use xthunk_core::backend::{DevicePtr, LaunchArg};
use xthunk_core::ir::{DType, Scalar};
use xthunk_core::kernels::{ParamKind, portable, standard_library};
use xthunk_rocm::image::{CodeObject, EM_AMDGPU, mach_of};
use xthunk_rocm::module::check_against_metadata;
use xthunk_rocm::{CacheStatus, CompileError};

const SMALL: &str = r#"
extern "C" __global__ void scale_rows(float* x, long long n, unsigned short h, double d,
                                      signed char c, const unsigned short* bf) {
  XT_FOR(i, n) x[i] = x[i] * (float)d + xt_f16_to_f32(h) + (float)c + xt_bf16_to_f32(bf[i]);
}
extern "C" __global__ void second_kernel(int* out) { out[0] = 42; }
"#;

/// The targets checked besides gfx90a, when comgr lists them (gfx1030 is wave32 by default).
const OTHER_TARGETS: &[&str] = &["gfx906", "gfx908", "gfx1030"];

fn check_elf(image: &[u8], target: &str) -> CodeObject {
    let co = CodeObject::parse(image).unwrap_or_else(|e| panic!("{target}: {e}"));
    assert_eq!(co.e_machine, EM_AMDGPU, "{target}");
    let base = target.split(':').next().unwrap();
    assert_eq!(
        Some(co.mach()),
        mach_of(base),
        "{target}: e_flags {:#x}",
        co.e_flags
    );
    assert_eq!(co.target(), Some(base));
    co
}

#[test]
fn small_kernels_compile_for_every_chosen_target() {
    let dir = TempDir::new("small");
    let Some(c) = compiler_or_skip("small_kernels_compile_for_every_chosen_target", dir.path())
    else {
        return;
    };
    let supported = c.supported_targets();
    note(&format!(
        "hipRTC: {}; comgr lists {} targets: {}",
        c.version(),
        supported.len(),
        supported.join(" ")
    ));
    assert!(supported.iter().any(|t| t == "gfx90a"), "{supported:?}");
    let src = portable::with_prelude(SMALL);
    let mut targets = vec!["gfx90a", "gfx90a:sramecc+:xnack-"];
    targets.extend(
        OTHER_TARGETS
            .iter()
            .filter(|t| supported.iter().any(|s| s == *t)),
    );
    for target in targets {
        let out = c
            .compile(&src, target)
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        assert_eq!(out.cache, CacheStatus::Miss);
        let co = check_elf(&out.image, target);
        // The user's kernels, and the unit's source stamp (portable::stamp).
        let stamp = portable::stamp::expected_stamp(&xthunk_core::ir::Module {
            name: "source".into(),
            images: vec![xthunk_core::ir::ModuleImage::Source { code: SMALL.into() }],
            options: Default::default(),
        })
        .unwrap();
        let mut want = vec!["scale_rows".to_string(), "second_kernel".to_string(), stamp];
        want.sort();
        assert_eq!(co.kernels, want, "{target}");
        assert!(co.symbols.iter().any(|s| s == "scale_rows"), "{target}");
        assert!(co.symbols.iter().any(|s| s == "scale_rows.kd"), "{target}");
        if target.contains("xnack-") {
            // EF_AMDGPU_FEATURE_XNACK_OFF_V4 and SRAMECC_ON_V4.
            assert_eq!(co.e_flags & 0x300, 0x200, "{target}: {:#x}", co.e_flags);
            assert_eq!(co.e_flags & 0xc00, 0xc00, "{target}: {:#x}", co.e_flags);
        }
        // The metadata describes the parameters exactly as the launch marshals them.
        let args = &co.kernel_args["scale_rows"];
        let explicit: Vec<_> = args.iter().filter(|a| a.is_explicit()).cloned().collect();
        let kinds: Vec<(&str, u64)> = explicit
            .iter()
            .map(|a| (a.value_kind.as_str(), a.size))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("global_buffer", 8),
                ("by_value", 8),
                ("by_value", 2),
                ("by_value", 8),
                ("by_value", 1),
                ("global_buffer", 8),
            ],
            "{target}: {args:?}"
        );
        let buf = LaunchArg::Buffer {
            ptr: DevicePtr(0x1000),
            len: 16,
        };
        let good = [
            buf,
            LaunchArg::Scalar(Scalar::I64(4)),
            LaunchArg::Scalar(Scalar::F16(0x3c00)),
            LaunchArg::Scalar(Scalar::F64(2.0)),
            LaunchArg::Scalar(Scalar::I8(-1)),
            buf,
        ];
        check_against_metadata("scale_rows", &explicit, &good).unwrap();
        let mut wrong = good;
        wrong[1] = LaunchArg::Scalar(Scalar::I32(4));
        assert!(check_against_metadata("scale_rows", &explicit, &wrong).is_err());
        // Damaged copies are errors or parse, never panics.
        if target == "gfx90a" {
            for cut in (0..out.image.len()).step_by(97) {
                let _ = CodeObject::parse(&out.image[..cut]);
            }
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            for _ in 0..2000 {
                let mut img = out.image.as_ref().clone();
                for _ in 0..8 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let i = (seed % img.len() as u64) as usize;
                    img[i] = (seed >> 32) as u8;
                }
                let _ = CodeObject::parse(&img);
            }
        }
        note(&format!(
            "{target}: {} bytes, e_flags {:#x}, kernels {:?}",
            out.image.len(),
            co.e_flags,
            co.kernels
        ));
    }
}

/// The parameter list a standard kernel's signature declares, as (value kind, size).
fn expected_params(name: &str) -> Vec<(&'static str, u64)> {
    let k = standard_library().get(name).unwrap();
    k.signature
        .params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Buffer { .. } => ("global_buffer", 8),
            ParamKind::Scalar(t) => ("by_value", scalar_size(*t)),
        })
        .collect()
}

fn scalar_size(t: DType) -> u64 {
    t.size() as u64
}

#[test]
fn every_standard_kernel_compiles_and_the_disk_cache_is_hit() {
    let dir = TempDir::new("std");
    let test = "every_standard_kernel_compiles_and_the_disk_cache_is_hit";
    let Some(c) = compiler_or_skip(test, dir.path()) else {
        return;
    };
    let src = portable::standard_source();
    let names: Vec<&str> = standard_library().names().collect();
    assert_eq!(names.len(), 247);
    let supported = c.supported_targets();
    // gfx90a, and the other chosen targets comgr lists (gfx1030, RDNA, is wave32 by default:
    // no kernel may assume a warp size).
    let mut targets = vec!["gfx90a"];
    targets.extend(
        OTHER_TARGETS
            .iter()
            .filter(|t| supported.iter().any(|s| s == *t)),
    );
    let mut first = Vec::new();
    for target in &targets {
        let t0 = std::time::Instant::now();
        let out = c
            .compile(src, target)
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(out.cache, CacheStatus::Miss);
        let co = check_elf(&out.image, target);
        let mut missing = Vec::new();
        for n in &names {
            if !co.kernels.iter().any(|k| k == n) || !co.symbols.iter().any(|s| s == n) {
                missing.push(*n);
                continue;
            }
            // Every kernel's parameters, from the code object, match its signature: what
            // the launch marshals.
            let got: Vec<(&str, u64)> = co.kernel_args[*n]
                .iter()
                .filter(|a| a.is_explicit())
                .map(|a| (a.value_kind.as_str(), a.size))
                .collect();
            assert_eq!(got, expected_params(n), "{target}: {n}");
        }
        assert!(missing.is_empty(), "{target}: kernels missing: {missing:?}");
        // Every standard kernel and the library's source stamp.
        assert_eq!(co.kernels.len(), names.len() + 1, "{target}");
        let stamp = portable::stamp::stamp_name(&portable::standard_hash());
        assert!(co.kernels.contains(&stamp), "{target}: no {stamp}");
        note(&format!(
            "standard library for {target}: {} kernels, {} bytes, {secs:.1}s",
            co.kernels.len(),
            out.image.len()
        ));
        first.push(out.image);
    }
    // Same compiler: from memory. A new compiler on the same folder: from the disk cache.
    assert_eq!(c.compilations(), targets.len() as u64);
    assert_eq!(c.compile(src, "gfx90a").unwrap().cache, CacheStatus::Memory);
    assert_eq!(c.compilations(), targets.len() as u64);
    let c2 = compiler_or_skip(test, dir.path()).unwrap();
    for (target, img) in targets.iter().zip(&first) {
        let t0 = std::time::Instant::now();
        let out = c2.compile(src, target).unwrap();
        assert_eq!(out.cache, CacheStatus::Hit, "{target}");
        assert_eq!(out.image, *img, "{target}");
        note(&format!(
            "{target}: disk cache hit in {:.1} ms",
            t0.elapsed().as_secs_f64() * 1000.0
        ));
    }
    // A corrupt entry is detected, removed and rebuilt.
    let key = c2.cache_key(src, &xthunk_rocm::Target::parse("gfx90a").unwrap());
    let path = c2.cache().unwrap().path_for(&key);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let c3 = compiler_or_skip(test, dir.path()).unwrap();
    let out = c3.compile(src, "gfx90a").unwrap();
    assert_eq!(out.cache, CacheStatus::Rebuilt);
    assert_eq!(out.cache_path.as_deref(), Some(path.as_path()));
    assert_eq!(out.image, first[0]);
    let c4 = compiler_or_skip(test, dir.path()).unwrap();
    assert_eq!(c4.compile(src, "gfx90a").unwrap().cache, CacheStatus::Hit);
    assert_eq!(c4.compilations(), 0);
    // No temporary files are left behind: one entry per target, nothing else.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    assert!(names.iter().all(|n| n.ends_with(".bin")), "{names:?}");
    assert_eq!(names.len(), targets.len(), "{names:?}");
}

#[test]
fn a_broken_kernel_fails_with_the_hiprtc_log() {
    let dir = TempDir::new("broken");
    let Some(c) = compiler_or_skip("a_broken_kernel_fails_with_the_hiprtc_log", dir.path()) else {
        return;
    };
    let src = portable::with_prelude(
        "extern \"C\" __global__ void broken(float* x) { x[0] = no_such_identifier; }",
    );
    match c.compile(&src, "gfx90a") {
        Err(e @ CompileError::Compilation { .. }) => {
            let CompileError::Compilation {
                ref call, ref log, ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(call, "hiprtcCompileProgram");
            assert!(log.contains("no_such_identifier"), "{log}");
            assert!(log.contains("error"), "{log}");
            let msg = e.to_string();
            assert!(
                msg.contains("HIPRTC_ERROR_COMPILATION (6)") && msg.contains("gfx90a"),
                "{msg}"
            );
            // As a core error it keeps the log.
            let core: xthunk_core::Error = e.into();
            assert!(core.to_string().contains("no_such_identifier"));
            note(&format!("broken kernel: {msg}"));
        }
        other => panic!("expected a compilation error, got {other:?}"),
    }
    // Nothing was cached for it.
    assert_eq!(
        std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}

#[test]
fn unsupported_targets_are_refused_before_hiprtc_sees_them() {
    let dir = TempDir::new("targets");
    let Some(c) = compiler_or_skip(
        "unsupported_targets_are_refused_before_hiprtc_sees_them",
        dir.path(),
    ) else {
        return;
    };
    let src = portable::with_prelude(SMALL);
    let mut refused = vec!["gfx999"];
    // ROCm 5.2's comgr does not know gfx942: hipRTC would abort the whole process.
    if !c.supported_targets().iter().any(|t| t == "gfx942") {
        refused.push("gfx942");
    }
    for target in refused {
        match c.compile(&src, target) {
            Err(e @ CompileError::UnsupportedTarget { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(target) && msg.contains("gfx90a"), "{msg}");
                let core: xthunk_core::Error = e.into();
                assert!(matches!(core, xthunk_core::Error::Unsupported { .. }));
                note(&format!("{target}: {msg}"));
            }
            other => panic!("{target}: expected a refusal, got {other:?}"),
        }
    }
    for bad in ["sm_90", "gfx90a --save-temps", "gfx90a:xnack"] {
        assert!(
            matches!(
                c.compile(&src, bad),
                Err(CompileError::InvalidTarget { .. })
            ),
            "{bad}"
        );
    }
    // Still alive, and still compiling.
    assert!(c.compile(&src, "gfx90a").is_ok());
}

/// `compile_for_target` and `precompile` (for `xthunk compile`) on the default compiler, in a
/// child process whose `XDG_CACHE_HOME` is a temporary folder.
#[test]
fn compile_for_target_uses_the_default_cache() {
    if std::env::var_os("XTHUNK_ROCM_TEST_CHILD").is_some() {
        let img = match xthunk_rocm::compile_for_target(&portable::with_prelude(SMALL), "gfx90a") {
            Ok(i) => i,
            Err(e) => {
                return common::skip("compile_for_target_uses_the_default_cache", &e.to_string());
            }
        };
        check_elf(&img, "gfx90a");
        let cache = std::path::PathBuf::from(std::env::var("XDG_CACHE_HOME").unwrap())
            .join("xthunk/kernels/rocm");
        let entries = std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
        assert_eq!(entries, 1, "{}", cache.display());
        let pre = xthunk_rocm::precompile(
            &xthunk_core::ir::ModuleImage::Source { code: SMALL.into() },
            "gfx90a",
        )
        .unwrap();
        assert!(
            matches!(pre, Some(xthunk_core::ir::ModuleImage::Hsaco { ref arch, ref data }) if arch == "gfx90a" && *data == img)
        );
        assert_eq!(
            xthunk_rocm::precompile(
                &xthunk_core::ir::ModuleImage::Host {
                    library: "x".into()
                },
                "gfx90a"
            )
            .unwrap(),
            None
        );
        return;
    }
    let dir = TempDir::new("xdg");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "compile_for_target_uses_the_default_cache",
            "--nocapture",
        ])
        .env("XTHUNK_ROCM_TEST_CHILD", "1")
        .env("XDG_CACHE_HOME", dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    if text.contains("SKIPPED") {
        note(text.trim());
    }
}
