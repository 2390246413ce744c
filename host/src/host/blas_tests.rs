//! Tests of the host gemm through the CPU BLAS against the built-in `gemm` crate (random
//! shapes, transposes, batches, padded leading dimensions, alpha and beta, NaN-poisoned
//! outputs), and of the BLAS search and its switch; the same through numpy's bundled ILP64
//! OpenBLAS where a Python folder has one (the CI venv's). Without an OpenBLAS or BLIS on the
//! machine the comparisons are skipped, saying why (`ci/test.sh` installs one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::blas::{
    Api, Builtin, Choice, CpuBlas, Flavour, Search, choose, decide, forced_off, forced_on,
};
use super::gemm::run_with;
use super::memory::{MemoryRegistry, Region};
use crate::backend::{DevicePtr, DeviceRange, GemmLaunch};
use crate::ir::{DType, MemorySpace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;

/// The BLAS the environment finds, taken over as when it is chosen, or `None` after saying
/// why the test is skipped.
fn blas_or_skip(test: &str) -> Option<super::blas::CpuBlas> {
    match Search::from_env().load() {
        Ok(mut b) => {
            b.take_over();
            Some(b)
        }
        Err(why) => {
            eprintln!("{test}: skipped, no CPU BLAS: {why}");
            None
        }
    }
}

/// A region holding `bytes`.
fn region(reg: &MemoryRegistry, bytes: &[u8]) -> Region {
    let a = reg
        .allocate("test", bytes.len() as u64, 64, MemorySpace::Device)
        .unwrap();
    // SAFETY: the allocation holds at least `bytes.len()` bytes and nobody else uses it.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), a.base(), bytes.len()) };
    reg.region(DevicePtr(a.base() as u64), bytes.len() as u64)
        .unwrap()
}

/// The bytes of a region.
fn read(r: &Region) -> Vec<u8> {
    // SAFETY: the region lies inside a live allocation; no gemm runs on it now.
    unsafe { std::slice::from_raw_parts(r.ptr(), r.len()) }.to_vec()
}

/// Elements one operand needs: `batch` entries `stride` apart of `rows` rows `ld` apart.
fn elems(batch: u64, stride: u64, rows: u64, cols: u64, ld: u64) -> u64 {
    (batch - 1) * stride + (rows - 1) * ld + cols
}

/// A random gemm shape of `dtype` (operand ranges left empty).
fn random_shape(rng: &mut ChaCha8Rng, dtype: DType) -> GemmLaunch {
    let dim = |rng: &mut ChaCha8Rng| {
        if rng.random_bool(0.3) {
            rng.random_range(1..5)
        } else {
            rng.random_range(1..90)
        }
    };
    let (m, n, k) = (dim(rng), dim(rng), dim(rng));
    shape_of(rng, dtype, m, n, k)
}

/// A random layout (transposes, padded leading dimensions and strides, batch, alpha and
/// beta) of an m×n×k gemm.
fn shape_of(rng: &mut ChaCha8Rng, dtype: DType, m: u64, n: u64, k: u64) -> GemmLaunch {
    let (trans_a, trans_b) = (rng.random_bool(0.5), rng.random_bool(0.5));
    let pad = |rng: &mut ChaCha8Rng| {
        if rng.random_bool(0.5) {
            0
        } else {
            rng.random_range(1..7)
        }
    };
    let lda = if trans_a { m } else { k } + pad(rng);
    let ldb = if trans_b { k } else { n } + pad(rng);
    let ldc = n + pad(rng);
    let batch = if rng.random_bool(0.5) {
        1
    } else {
        rng.random_range(2..5)
    };
    let rows_a = if trans_a { k } else { m };
    let rows_b = if trans_b { n } else { k };
    let (alpha, beta) = match rng.random_range(0..4) {
        0 => (1.0, 0.0),
        1 => (0.75, 0.0),
        2 => (1.0, 1.0),
        _ => (-1.5, 0.5),
    };
    let empty = DeviceRange {
        ptr: DevicePtr(0),
        len: 0,
    };
    GemmLaunch {
        a: empty,
        b: empty,
        c: empty,
        m,
        n,
        k,
        lda,
        ldb,
        ldc,
        trans_a,
        trans_b,
        alpha,
        beta,
        dtype,
        batch,
        stride_a: rows_a * lda + pad(rng),
        stride_b: rows_b * ldb + pad(rng),
        stride_c: m * ldc + pad(rng),
    }
}

/// Little-endian bytes of `count` random values in [-1, 1) as `dtype`; C of a gemm with
/// beta = 0 is NaN, which must not reach the result.
fn values(rng: &mut ChaCha8Rng, dtype: DType, count: u64, nan: bool) -> Vec<u8> {
    let mut out = vec![];
    for _ in 0..count {
        let v: f64 = if nan {
            f64::NAN
        } else {
            rng.random_range(-1.0..1.0)
        };
        match dtype {
            DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
            _ => out.extend_from_slice(&(v as f32).to_le_bytes()),
        }
    }
    out
}

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(dtype.size())
        .map(|c| match dtype {
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::F16 => half::f16::from_le_bytes(c.try_into().unwrap()).to_f64(),
            DType::BF16 => half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64(),
            _ => f32::from_le_bytes(c.try_into().unwrap()) as f64,
        })
        .collect()
}

/// Fresh random operands for `shape` (C NaN-poisoned when beta is 0), run through each of
/// `engines` (`None`: the built-in gemm) on its own copies: the operands' bytes and each
/// engine's C.
fn run_engines(
    rng: &mut ChaCha8Rng,
    shape: &GemmLaunch,
    engines: &[Option<&CpuBlas>],
) -> ([Vec<u8>; 3], Vec<Vec<f64>>) {
    let g = shape;
    let dt = g.dtype;
    let (ra, ca) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
    let (rb, cb) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
    let na = elems(g.batch, g.stride_a, ra, ca, g.lda);
    let nb = elems(g.batch, g.stride_b, rb, cb, g.ldb);
    let nc = elems(g.batch, g.stride_c, g.m, g.n, g.ldc);
    let (a, b) = (values(rng, dt, na, false), values(rng, dt, nb, false));
    let c = values(rng, dt, nc, g.beta == 0.0);
    let es = dt.size() as u64;
    let mut out = vec![];
    for &engine in engines {
        let reg = MemoryRegistry::default();
        let (ra, rb, rc) = (region(&reg, &a), region(&reg, &b), region(&reg, &c));
        let range = |r: &Region| DeviceRange {
            ptr: DevicePtr(r.ptr() as u64),
            len: r.len() as u64,
        };
        let launch = GemmLaunch {
            a: range(&ra),
            b: range(&rb),
            c: range(&rc),
            ..*g
        };
        assert_eq!(
            (ra.len() as u64, rb.len() as u64, rc.len() as u64),
            (na * es, nb * es, nc * es)
        );
        run_with(&launch, &ra, &rb, &rc, engine).unwrap();
        out.push(decode(dt, &read(&rc)));
    }
    ([a, b, c], out)
}

/// Runs `shape` on fresh random operands through `blas` and through the built-in gemm; returns
/// both C's, decoded, and the entries of C the gemm writes.
fn both(
    rng: &mut ChaCha8Rng,
    shape: &GemmLaunch,
    blas: &super::blas::CpuBlas,
) -> (Vec<f64>, Vec<f64>, Vec<usize>) {
    let g = shape;
    let (_, mut out) = run_engines(rng, g, &[Some(blas), None]);
    let mut written = vec![];
    for bi in 0..g.batch {
        for i in 0..g.m {
            for j in 0..g.n {
                written.push((bi * g.stride_c + i * g.ldc + j) as usize);
            }
        }
    }
    let builtin = out.pop().unwrap();
    (out.pop().unwrap(), builtin, written)
}

fn compare(dtype: DType, cases: usize, seed: u64) {
    if let Some(blas) = blas_or_skip(&format!("blas_matches_builtin_{dtype}")) {
        compare_with(&blas, dtype, cases, seed);
    }
}

fn compare_with(blas: &CpuBlas, dtype: DType, cases: usize, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let shapes: Vec<GemmLaunch> = (0..cases).map(|_| random_shape(&mut rng, dtype)).collect();
    compare_shapes(blas, dtype, &shapes, seed);
}

fn compare_shapes(blas: &CpuBlas, dtype: DType, shapes: &[GemmLaunch], seed: u64) {
    let tol = match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        // f16/bf16 round the same f32 results once: at most one step apart.
        _ => 1e-2,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    for (case, &shape) in shapes.iter().enumerate() {
        let (got, want, written) = both(&mut rng, &shape, blas);
        for &idx in &written {
            let (x, y) = (got[idx], want[idx]);
            // Entries are sums of k products of values below 1 in magnitude, plus beta·C.
            let bound = tol * (shape.k as f64 + 2.0);
            assert!(
                x.is_finite() && (x - y).abs() <= bound,
                "case {case} {shape:?}: C[{idx}] = {x} through {}, {y} built in",
                blas.describe()
            );
        }
        // What the gemm does not write stays as it was (a gap between rows or entries).
        let written: std::collections::HashSet<usize> = written.into_iter().collect();
        for idx in 0..got.len() {
            if !written.contains(&idx) {
                assert!(
                    got[idx].to_bits() == want[idx].to_bits()
                        || (got[idx].is_nan() && want[idx].is_nan()),
                    "case {case}: C[{idx}] outside the result changed"
                );
            }
        }
    }
}

#[test]
fn blas_f32_gemms_match_the_builtin_gemm() {
    compare(DType::F32, 60, 1);
}

#[test]
fn blas_f64_gemms_match_the_builtin_gemm() {
    compare(DType::F64, 40, 2);
}

/// Gemms large enough to be split into panels over the CPU workers (rows of C, or columns
/// when it is wider than tall; batches of 1 and more; every layout), and one large enough for
/// the library's own threads, against the built-in gemm.
#[test]
fn split_gemms_match_the_builtin_gemm() {
    let Some(blas) = blas_or_skip("split_gemms_match_the_builtin_gemm") else {
        return;
    };
    if !blas.splits() {
        eprintln!(
            "split_gemms_match_the_builtin_gemm: skipped, {} keeps its own threads (a thread \
             variable is set, or it cannot set its threads)",
            blas.describe()
        );
        return;
    }
    for (i, g) in split_shapes().iter().enumerate() {
        compare_shapes(&blas, g.dtype, std::slice::from_ref(g), 100 + i as u64);
    }
}

/// Gemms that [`super::gemm::split_parts`] cuts into panels (at least ten of them where there
/// are two CPU workers or more): rows of C, or columns when it is wider than tall, with a last
/// partial panel; batches of 1 and more; every layout; one large enough for a BLAS's own
/// threads.
fn split_shapes() -> Vec<GemmLaunch> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut shapes = vec![];
    for _ in 0..12 {
        let (m, n) = (rng.random_range(40..420), rng.random_range(40..420));
        let k = rng.random_range(9_000_000 / (m * n) + 1..9_000_000 / (m * n) + 200);
        shapes.push(shape_of(&mut rng, DType::F32, m, n, k));
    }
    // Row panels (tall) and column panels (wide), with a last partial panel.
    shapes.push(shape_of(&mut rng, DType::F32, 1000, 37, 300));
    shapes.push(shape_of(&mut rng, DType::F64, 37, 1000, 300));
    shapes.push(shape_of(&mut rng, DType::F32, 1024, 1024, 256));
    // Batches spread whole entries, or entries cut in panels, over the workers.
    let mut batched = shape_of(&mut rng, DType::F32, 128, 64, 128);
    batched.batch = 8;
    batched.stride_a = 128 * batched.lda + 3;
    batched.stride_b = 128 * batched.ldb + 5;
    batched.stride_c = 128 * batched.ldc + 1;
    shapes.push(batched);
    let mut two = shape_of(&mut rng, DType::F32, 300, 200, 100);
    two.batch = 2;
    two.stride_a = if two.trans_a { 100 } else { 300 } * two.lda;
    two.stride_b = if two.trans_b { 200 } else { 100 } * two.ldb;
    two.stride_c = 300 * two.ldc;
    shapes.push(two);
    let split = shapes
        .iter()
        .filter(|g| super::gemm::split_parts(g, true) > 0)
        .count();
    if super::cpu::program::workers() > 1 {
        assert!(split >= 10, "only {split} of the shapes are split");
    }
    shapes
}

/// The built-in gemm (split over the CPU workers as the BLAS's gemms are) against a plain
/// f64 loop written here, on the split shapes and on small random ones: every written entry
/// within rounding, nothing else touched, NaN-poisoned C unread when beta is 0.
#[test]
fn builtin_gemms_match_a_plain_loop() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut shapes = split_shapes();
    shapes.extend((0..30).map(|_| random_shape(&mut rng, DType::F32)));
    shapes.extend((0..10).map(|_| random_shape(&mut rng, DType::F64)));
    for (case, g) in shapes.iter().enumerate() {
        let dt = g.dtype;
        let ([a, b, c], out) = run_engines(&mut rng, g, &[None]);
        let got = &out[0];
        let (a, b, c0) = (decode(dt, &a), decode(dt, &b), decode(dt, &c));
        let mut want = c0.clone();
        let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
        for bi in 0..g.batch as usize {
            let (oa, ob, oc) = (
                bi * g.stride_a as usize,
                bi * g.stride_b as usize,
                bi * g.stride_c as usize,
            );
            for i in 0..g.m as usize {
                for j in 0..g.n as usize {
                    let mut sum = 0.0;
                    for l in 0..g.k as usize {
                        let x = if g.trans_a {
                            a[oa + l * lda + i]
                        } else {
                            a[oa + i * lda + l]
                        };
                        let y = if g.trans_b {
                            b[ob + j * ldb + l]
                        } else {
                            b[ob + l * ldb + j]
                        };
                        sum += x * y;
                    }
                    let at = oc + i * ldc + j;
                    let old = if g.beta == 0.0 { 0.0 } else { g.beta * c0[at] };
                    want[at] = g.alpha * sum + old;
                }
            }
        }
        let tol = if dt == DType::F64 { 1e-12 } else { 1e-5 } * (g.k as f64 + 2.0);
        for idx in 0..got.len() {
            let (x, y) = (got[idx], want[idx]);
            let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
            assert!(
                same || (x - y).abs() <= tol,
                "case {case} {g:?}: C[{idx}] = {x}, the plain loop gives {y}"
            );
        }
    }
}

/// A BLAS whose kernels lack AVX-512 gives way to the built-in gemm where the built-in one
/// has AVX-512 kernels, unless `XTHUNK_HOST_BLAS=on`; kernel sets that use AVX-512, or that
/// the rule does not know, keep the BLAS.
#[test]
fn a_blas_without_avx512_kernels_gives_way_where_the_builtin_gemm_has_them() {
    let Some(real) = blas_or_skip("a_blas_without_avx512_kernels_gives_way") else {
        return;
    };
    if real.flavour == Flavour::OpenBlas {
        let k = real.kernels.as_deref().unwrap_or("");
        assert!(
            !k.is_empty(),
            "OpenBLAS names its core: {}",
            real.describe()
        );
        assert!(real.describe().contains(&format!(", {k} kernels")));
    }
    let with = |kernels: Option<&str>| {
        let mut b = Search::from_env().load().unwrap();
        b.kernels = kernels.map(str::to_string);
        Ok(b)
    };
    for (kernels, wide, setting, builtin) in [
        (Some("Haswell"), true, None, true),
        (Some("Haswell"), true, Some("auto"), true),
        (Some("zen3"), true, None, true),
        (Some("Haswell"), true, Some("on"), false),
        (Some("Haswell"), true, Some("blas"), false),
        (Some("Haswell"), false, None, false),
        (Some("SkylakeX"), true, None, false),
        (Some("Cooperlake"), true, None, false),
        (Some("skx"), true, None, false),
        (Some("zen4"), true, None, false),
        (Some("SomeFutureCore"), true, None, false),
        (None, true, None, false),
    ] {
        let c = decide(setting, with(kernels), wide);
        let what = format!("{kernels:?} wide={wide} {setting:?}: {}", c.describe());
        assert_eq!(c.blas().is_none(), builtin, "{what}");
        if builtin {
            let Choice::Builtin(Builtin::Narrower { kernels: k, .. }) = &c else {
                panic!("{what}");
            };
            assert_eq!(Some(k.as_str()), kernels, "{what}");
            assert!(c.describe().contains("XTHUNK_HOST_BLAS=on"), "{what}");
        }
    }
    for v in ["on", "ON", "1", "yes", "blas"] {
        assert!(forced_on(Some(v)), "{v}");
    }
    for v in [None, Some("auto"), Some(""), Some("off")] {
        assert!(!forced_on(v), "{v:?}");
    }
    let not_found = decide(None, Err("nowhere".into()), true);
    assert!(matches!(not_found, Choice::Builtin(Builtin::NotFound(_))));
}

#[test]
fn blas_half_gemms_match_the_builtin_gemm() {
    compare(DType::F16, 15, 3);
    compare(DType::BF16, 15, 4);
}

#[test]
fn a_found_blas_is_openblas_or_blis_and_describes_itself() {
    let Some(blas) = blas_or_skip("a_found_blas_is_openblas_or_blis") else {
        return;
    };
    assert_ne!(blas.flavour, Flavour::Other);
    assert!(blas.path.is_absolute(), "{}", blas.path.display());
    let d = blas.describe();
    assert!(d.starts_with("OpenBLAS") || d.starts_with("BLIS"), "{d}");
    assert!(blas.version.is_some(), "{d}");
}

#[test]
fn xthunk_host_blas_off_forces_the_builtin_gemm() {
    for v in ["off", "OFF", "0", "none", "builtin"] {
        assert!(forced_off(Some(v)), "{v}");
        let c = choose(Some(v), &Search::from_env(), true);
        assert!(c.blas().is_none(), "{v}");
        assert!(matches!(c, Choice::Builtin(Builtin::Forced(_))));
        assert!(
            c.describe().contains("XTHUNK_HOST_BLAS"),
            "{}",
            c.describe()
        );
    }
    for v in [None, Some("on"), Some("1"), Some("")] {
        assert!(!forced_off(v), "{v:?}");
    }
}

#[test]
fn without_a_blas_the_search_says_where_it_looked() {
    let dir = std::env::temp_dir().join(format!("xthunk-no-blas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let search = Search {
        override_paths: vec![dir.clone(), PathBuf::from("libm.so.6")],
        dirs: vec![],
        system_search: false,
        python_dirs: vec![],
    };
    let c = choose(None, &search, false);
    let Choice::Builtin(Builtin::NotFound(why)) = &c else {
        panic!("expected the built-in gemm: {}", c.describe());
    };
    assert!(why.contains("no-blas"), "{why}");
    assert!(why.contains("/libopenblas.so.0, "), "{why}");
    assert!(why.contains("/libblas.so (no such file)"), "{why}");
    assert!(
        why.contains("libm.so.6 (lacks required symbols cblas_sgemm, cblas_dgemm)"),
        "{why}"
    );
    assert!(c.describe().starts_with("built-in gemm crate"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_override_names_a_library_file_or_its_folder() {
    let Some(blas) = blas_or_skip("the_override_names_a_library_file_or_its_folder") else {
        return;
    };
    for entry in [blas.path.clone(), blas.path.parent().unwrap().to_path_buf()] {
        let search = Search {
            override_paths: vec![entry.clone()],
            dirs: vec![],
            system_search: false,
            python_dirs: vec![],
        };
        let again = search.load().unwrap();
        assert_eq!(again.flavour, blas.flavour, "{}", entry.display());
    }
}

/// numpy's bundled OpenBLAS (ILP64, `scipy_cblas_sgemm64_`), found in the CI venv's package
/// folder (`$XTHUNK_VENV` or `~/.cache/xthunk/venv`), computes what the built-in gemm does.
#[test]
fn numpys_bundled_openblas_is_found_in_a_python_folder_and_matches() {
    let venv = std::env::var_os("XTHUNK_VENV")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/xthunk/venv")));
    let python_dirs = venv
        .map(|v| crate::backend::search::site_packages_under(&v))
        .unwrap_or_default();
    let search = Search {
        override_paths: vec![],
        dirs: vec![],
        system_search: false,
        python_dirs,
    };
    let blas = match search.load() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("numpys_bundled_openblas: skipped, no numpy wheel with its OpenBLAS: {why}");
            return;
        }
    };
    assert!(matches!(blas.api, Api::Scipy64(_)), "{}", blas.describe());
    assert!(blas.describe().contains(" ILP64 ("), "{}", blas.describe());
    compare_with(&blas, DType::F32, 30, 5);
    compare_with(&blas, DType::F64, 20, 6);
}
