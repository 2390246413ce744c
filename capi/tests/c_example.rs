//! The C example (`examples/c/mlp.c`) compiled with the system C compiler against
//! `include/xthunk.h` and `libxthunk_capi.so`, run on the MLP program on the host, its output
//! checked against an f64 reference; a corrupt program's error and causes; and the complete
//! example of docs/c-api.md, compiled and run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::{Path, PathBuf};
use std::process::Command;
use xthunk_conformance::reference::{gelu, softmax};

const BATCH: usize = 64;
const IN: usize = 512;
const HIDDEN: usize = 1024;
const CLASSES: usize = 10;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The folder of `libxthunk_capi.so`: the profile folder above this test's `deps/`.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Builds `libxthunk_capi.so` (cargo builds only the rlib for tests) in this test's profile.
fn build_shared_library(lib: &Path) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "-q", "-p", "xthunk-capi", "--lib"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if lib.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    assert!(status.success(), "cargo build -p xthunk-capi --lib failed");
}

fn compile(out: &Path) {
    compile_source(&repo().join("examples/c/mlp.c"), out, &[]);
}

/// Compiles `src` against the header and the shared library (built first, once).
fn compile_source(src: &Path, out: &Path, extra: &[&str]) {
    let lib = lib_dir();
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| build_shared_library(&lib));
    assert!(
        lib.join("libxthunk_capi.so").is_file(),
        "{} has no libxthunk_capi.so",
        lib.display()
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(repo().join("include"))
        .arg(src)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lxthunk_capi")
        .args(extra)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0f32..1.0) * scale)
        .collect()
}

/// `a @ b + bias` in f64 (`a` rows × inner, `b` inner × cols).
fn affine(a: &[f64], b: &[f32], bias: &[f32], rows: usize, inner: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; rows * cols];
    for r in 0..rows {
        for k in 0..inner {
            let av = a[r * inner + k];
            for c in 0..cols {
                out[r * cols + c] += av * f64::from(b[k * cols + c]);
            }
        }
        for c in 0..cols {
            out[r * cols + c] += f64::from(bias[c]);
        }
    }
    out
}

#[test]
fn c_example_runs_the_mlp_and_matches_f64_reference() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("mlp");
    compile(&bin);

    let seed: u64 = rand::rng().random();
    eprintln!("seed {seed:#x}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = uniform(&mut rng, BATCH * IN, 1.0);
    let w1 = uniform(&mut rng, IN * HIDDEN, 3.0 / (IN as f32).sqrt());
    let b1 = uniform(&mut rng, HIDDEN, 0.1);
    let w2 = uniform(
        &mut rng,
        HIDDEN * CLASSES,
        2.0 * (3.0 / HIDDEN as f32).sqrt(),
    );
    let b2 = uniform(&mut rng, CLASSES, 0.1);
    let inputs: Vec<u8> = [&x, &w1, &b1, &w2, &b2]
        .iter()
        .flat_map(|v| v.iter().flat_map(|f| f.to_le_bytes()))
        .collect();
    let (inp, outp) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
    std::fs::write(&inp, &inputs).unwrap();
    // Poisoned: a run that writes nothing cannot pass.
    std::fs::write(&outp, vec![0xffu8; BATCH * CLASSES * 4]).unwrap();

    let out = Command::new(&bin)
        .arg(repo().join("examples/mlp.txtpb"))
        .args([&inp, &outp])
        .arg("host")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mlp failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("device-buffer run matches"), "{stdout}");
    let probs: Vec<f32> = std::fs::read(&outp)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(probs.len(), BATCH * CLASSES);

    let xf: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
    let hidden: Vec<f64> = affine(&xf, &w1, &b1, BATCH, IN, HIDDEN)
        .into_iter()
        .map(gelu)
        .collect();
    let reference = softmax(
        &affine(&hidden, &w2, &b2, BATCH, HIDDEN, CLASSES),
        BATCH,
        CLASSES,
    );
    const TOL: f64 = 1e-4;
    for (i, (got, want)) in probs.iter().zip(&reference).enumerate() {
        let err = (f64::from(*got) - want).abs();
        assert!(
            err <= TOL,
            "probs[{i}] = {got}, reference {want} (|diff| {err:e} > {TOL:e})"
        );
    }
    // Not every row one-hot: the comparison sees the probabilities.
    let spread = (0..BATCH)
        .filter(|r| {
            probs[r * CLASSES..(r + 1) * CLASSES]
                .iter()
                .all(|p| *p < 0.99)
        })
        .count();
    assert!(spread > BATCH / 2, "only {spread} rows spread");
}

#[test]
fn c_example_reports_a_corrupt_program_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("mlp");
    compile(&bin);
    let bad = dir.path().join("bad.pb");
    std::fs::write(&bad, b"\x0a\xff\xff\xff not a program").unwrap();
    let out = Command::new(&bin)
        .arg(&bad)
        .args([dir.path().join("in"), dir.path().join("out")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("mlp: load: "), "{stderr}");
    assert!(
        stderr.contains("caused by: "),
        "the decode error's cause is listed: {stderr}"
    );
}

#[test]
fn c_api_doc_example_runs_and_passes_its_check() {
    let doc = std::fs::read_to_string(repo().join("docs/c-api.md")).unwrap();
    let section = doc.split("## A complete example").nth(1).unwrap();
    let code = section
        .split("```c\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("doc_example.c");
    std::fs::write(&src, code).unwrap();
    let bin = dir.path().join("doc_example");
    compile_source(&src, &bin, &["-lm"]);
    let out = Command::new(&bin)
        .arg(repo().join("examples/mlp.txtpb"))
        .arg("host")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "doc example failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("max |xthunk - reference| = "), "{stdout}");
}

#[test]
fn c_donation_example_refuses_undeclared_overlaps_and_runs_declared_aliases() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("donate");
    compile_source(&repo().join("examples/c/donate.c"), &bin, &[]);
    let out = Command::new(&bin).arg("host").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "donate failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("donate: ok"), "{stdout}");
}

#[test]
fn c_async_example_waits_polls_calls_back_cancels_and_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("async");
    compile_source(&repo().join("examples/c/async.c"), &bin, &["-lpthread"]);
    let out = Command::new(&bin).arg("host").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "async failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("async: ok"), "{stdout}");
    println!("{stdout}");
}
