//! NVRTC for real, without a GPU: the PyPI wheel `nvidia-cuda-nvrtc-cu12` (or any NVRTC the
//! search finds). Compiles the whole portable standard library for sm_80 and sm_90 and checks
//! the cubins, the disk cache, the PTX fallback and compile errors.
//!
//! Without NVRTC every test prints why it is skipped and returns; with
//! `XTHUNK_REQUIRE_NVRTC=1` (CI) a missing NVRTC fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::Error;
use xthunk_core::ir::ModuleImage;
use xthunk_core::kernels::{portable, standard_library};
use xthunk_cuda::compile::Nvrtc;
use xthunk_cuda::image::{self, EM_CUDA};
use xthunk_cuda::{CacheStatus, Compiler, KernelCache, SearchConfig, Target};

const INSTALL: &str = "python3 -m pip install --target \"$HOME/.cache/xthunk/pip\" nvidia-cuda-nvrtc-cu12 \
     (or set XTHUNK_PIP_PREFIX / XTHUNK_CUDA_PATH to where NVRTC is)";

fn nvrtc_or_skip(test: &str) -> Option<Arc<Nvrtc>> {
    match Nvrtc::load(&SearchConfig::from_env()) {
        Ok(n) => {
            eprintln!(
                "{test}: NVRTC {}.{} from {}",
                n.version().0,
                n.version().1,
                n.path().display()
            );
            Some(Arc::new(n))
        }
        Err(e) => {
            if std::env::var("XTHUNK_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("{test}: XTHUNK_REQUIRE_NVRTC=1 but {e}");
            }
            eprintln!("SKIPPED {test}: NVRTC is not installed ({e}). Install it with: {INSTALL}");
            None
        }
    }
}

fn temp_compiler(nvrtc: Arc<Nvrtc>) -> (tempfile::TempDir, Compiler) {
    let dir = tempfile::tempdir().unwrap();
    let c = Compiler::new(nvrtc, Some(KernelCache::new(dir.path())));
    (dir, c)
}

#[test]
fn every_standard_kernel_compiles_for_sm80_and_sm90_and_is_cached() {
    let Some(nvrtc) = nvrtc_or_skip("every_standard_kernel_compiles") else {
        return;
    };
    let (_dir, compiler) = temp_compiler(nvrtc.clone());
    let src = portable::standard_source();
    let names: Vec<&str> = standard_library().names().collect();
    assert_eq!(names.len(), 247);
    let mut first = vec![];
    for sm in [80, 90] {
        let t0 = std::time::Instant::now();
        let out = compiler.compile(src, Target::Sm(sm)).unwrap();
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(out.cache, CacheStatus::Miss);
        let info = image::inspect(&out.image).unwrap();
        assert_eq!(info.machine, EM_CUDA, "e_machine");
        assert_eq!(info.sm, sm, "SM in e_flags {:#x}", info.e_flags);
        let missing: Vec<&&str> = names
            .iter()
            .filter(|n| !info.functions.iter().any(|f| f == *n))
            .collect();
        assert!(
            missing.is_empty(),
            "sm_{sm}: kernels missing from the cubin: {missing:?}"
        );
        eprintln!(
            "sm_{sm}: {} kernels in a {}-byte cubin (ELF ABI {}, e_flags {:#x}) in {secs:.1} s; log: {:?}",
            names.len(),
            out.image.len(),
            info.abi_version,
            info.e_flags,
            out.log
        );
        first.push(out.image);
    }
    assert_eq!(compiler.compilations(), 2);

    // The second load of each comes from the disk cache, NVRTC untouched...
    for (i, sm) in [80, 90].into_iter().enumerate() {
        let out = compiler.compile(src, Target::Sm(sm)).unwrap();
        assert_eq!(out.cache, CacheStatus::Hit, "sm_{sm}");
        assert_eq!(out.image, first[i]);
    }
    assert_eq!(compiler.compilations(), 2);
    // ...also for another compiler on the same folder (another process).
    let again = Compiler::new(nvrtc, compiler.cache().cloned());
    assert_eq!(
        again.compile(src, Target::Sm(90)).unwrap().cache,
        CacheStatus::Hit
    );
    assert_eq!(again.compilations(), 0);
}

#[test]
fn corrupt_cache_entry_is_detected_and_rebuilt() {
    let Some(nvrtc) = nvrtc_or_skip("corrupt_cache_entry_is_detected_and_rebuilt") else {
        return;
    };
    let (_dir, compiler) = temp_compiler(nvrtc);
    let src = portable::kernel_source("add_f32").unwrap();
    let out = compiler.compile(&src, Target::Sm(90)).unwrap();
    assert_eq!(out.cache, CacheStatus::Miss);
    let path = out.cache_path.clone().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() - out.image.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    let rebuilt = compiler.compile(&src, Target::Sm(90)).unwrap();
    assert_eq!(rebuilt.cache, CacheStatus::Rebuilt);
    assert_eq!(rebuilt.image, out.image);
    // A truncated entry too.
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    assert_eq!(
        compiler.compile(&src, Target::Sm(90)).unwrap().cache,
        CacheStatus::Rebuilt
    );
    assert_eq!(
        compiler.compile(&src, Target::Sm(90)).unwrap().cache,
        CacheStatus::Hit
    );
    assert_eq!(compiler.compilations(), 3);
}

#[test]
fn broken_kernel_error_carries_the_nvrtc_log() {
    let Some(nvrtc) = nvrtc_or_skip("broken_kernel_error_carries_the_nvrtc_log") else {
        return;
    };
    let (_dir, compiler) = temp_compiler(nvrtc);
    let src = portable::with_prelude(
        "extern \"C\" __global__ void broken(float* x) { x[0] = xt_no_such_name; }",
    );
    let e = compiler.compile(&src, Target::Sm(80)).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Module { .. }), "{msg}");
    assert!(msg.contains("NVRTC_ERROR_COMPILATION"), "{msg}");
    assert!(msg.contains("NVRTC log:"), "{msg}");
    assert!(
        msg.contains("xt_no_such_name") && msg.contains("undefined"),
        "{msg}"
    );
    eprintln!("broken kernel: {msg}");
    // Nothing was cached for it.
    assert_eq!(
        std::fs::read_dir(compiler.cache().unwrap().dir())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}

#[test]
fn unknown_architecture_falls_back_to_ptx() {
    let Some(nvrtc) = nvrtc_or_skip("unknown_architecture_falls_back_to_ptx") else {
        return;
    };
    let archs = nvrtc.supported_archs().to_vec();
    assert!(archs.contains(&80) && archs.contains(&90), "{archs:?}");
    let newest = archs.iter().copied().max().unwrap();
    let (_dir, compiler) = temp_compiler(nvrtc);
    assert_eq!(compiler.target_for_device(90).unwrap(), Target::Sm(90));
    assert_eq!(
        compiler.target_for_device(250).unwrap(),
        Target::Compute(newest)
    );
    let out = compiler
        .compile_for_device(&portable::kernel_source("softmax_bf16").unwrap(), 250)
        .unwrap();
    let ptx = String::from_utf8(out.image).unwrap();
    assert!(ptx.contains(".entry softmax_bf16"), "{ptx}");
    assert!(ptx.contains(&format!(".target sm_{newest}")), "{ptx}");
    assert!(compiler.target_for_device(10).is_err());
}

#[test]
fn compile_for_target_and_precompile() {
    if nvrtc_or_skip("compile_for_target_and_precompile").is_none() {
        return;
    }
    let src = portable::kernel_source("gelu_f16").unwrap();
    let cubin = xthunk_cuda::compile_for_target(&src, "sm_90").unwrap();
    let info = image::inspect(&cubin).unwrap();
    assert_eq!((info.machine, info.sm), (EM_CUDA, 90));
    assert!(info.functions.iter().any(|f| f == "gelu_f16"));
    let ptx = xthunk_cuda::compile_for_target(&src, "compute_80").unwrap();
    assert!(String::from_utf8_lossy(&ptx).contains(".entry gelu_f16"));
    assert!(xthunk_cuda::compile_for_target(&src, "gfx90a").is_err());

    let image = ModuleImage::Source {
        code: "extern \"C\" __global__ void twice(float* x, long long n) { XT_FOR(i, n) x[i] *= 2.0f; }"
            .into(),
    };
    match xthunk_cuda::precompile(&image, "sm_80").unwrap() {
        Some(ModuleImage::Cubin { arch, data }) => {
            assert_eq!(arch, "sm_80");
            assert_eq!(image::inspect(&data).unwrap().sm, 80);
        }
        other => panic!("expected a cubin, got {other:?}"),
    }
    assert_eq!(
        xthunk_cuda::precompile(
            &ModuleImage::Ptx {
                code: String::new()
            },
            "sm_80"
        )
        .unwrap(),
        None
    );
}
