//! End-to-end tests of the `xthunk` binary: the MLP example runs, every kind of bad input fails
//! with one clear line and no output files, conversion round-trips, devices and conformance.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

const MLP: &str = "examples/mlp.txtpb";

#[path = "common/binary.rs"]
mod binary;
use binary::{ok, root, text, xthunk};

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    binary::scratch_in("cli-tests", name)
}

/// Runs a command that must fail with status 1 (a failure, not a usage error): exactly one
/// `error: ` line on stderr that contains `needle`, no panic.
fn fails(args: &[&str], needle: &str) -> String {
    fails_with(1, args, needle)
}

/// [`fails`] for a usage error: status 2.
fn fails_usage(args: &[&str], needle: &str) -> String {
    fails_with(2, args, needle)
}

fn fails_with(code: i32, args: &[&str], needle: &str) -> String {
    let o = xthunk(args);
    let err = text(&o.stderr);
    assert!(
        !o.status.success(),
        "xthunk {args:?} succeeded:\n{}",
        text(&o.stdout)
    );
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: expected one error line: {err}");
    assert!(
        errors[0].contains(needle),
        "{args:?}: `{needle}` not in: {err}"
    );
    errors[0].to_string()
}

fn files_in(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    }
}

/// Writes a `.npy` file with the given type string, shape and raw data.
fn write_npy(path: &Path, type_str: &str, shape: &[u64], data: &[u8]) {
    use npyz::WriterBuilder;
    let ty: npyz::TypeStr = type_str.parse().unwrap();
    let mut out = vec![];
    npyz::WriteOptions::new_header_only()
        .dtype(npyz::DType::Plain(ty))
        .shape(shape)
        .writer(&mut out)
        .write_header_only()
        .unwrap();
    out.extend_from_slice(data);
    std::fs::write(path, out).unwrap();
}

fn f32_bytes(n: usize, f: impl Fn(usize) -> f32) -> Vec<u8> {
    (0..n).flat_map(|i| f(i).to_le_bytes()).collect()
}

fn read_f32_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.dtype().descr(), "'<f4'");
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec::<f32>().unwrap())
}

fn fingerprint(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("output probs:"))
        .unwrap_or_else(|| panic!("no probs line in {stdout}"));
    line.split("fnv1a=").nth(1).unwrap().trim().to_string()
}

#[test]
fn run_mlp_prints_probs_and_writes_npy() {
    let dir = scratch("run_mlp");
    let out_dir = dir.join("out");
    let stdout = ok(&[
        "run",
        MLP,
        "--iterations",
        "2",
        "--output-dir",
        out_dir.to_str().unwrap(),
    ]);
    assert!(stdout.contains("output probs: f32[64,10]"), "{stdout}");
    assert!(stdout.contains("first values: ["), "{stdout}");
    assert!(stdout.contains("time per iteration: mean"), "{stdout}");
    assert!(stdout.contains("(2 iterations)"), "{stdout}");
    assert_eq!(files_in(&out_dir), vec!["probs.npy".to_string()]);
    let (shape, probs) = read_f32_npy(&out_dir.join("probs.npy"));
    assert_eq!(shape, vec![64, 10]);
    for row in probs.chunks(10) {
        let s: f64 = row.iter().map(|v| *v as f64).sum();
        assert!((s - 1.0).abs() < 1e-5, "row sums to {s}");
    }
}

#[test]
fn run_says_which_backend_on_stderr() {
    let o = xthunk(&["run", MLP, "--backend", "host"]);
    assert!(o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("backend `host` (requested)"), "{err}");
    let o = xthunk(&["run", MLP]);
    let err = text(&o.stderr);
    assert!(err.contains("(auto-selected)"), "{err}");
    // stdout carries only the report.
    assert!(
        text(&o.stdout).starts_with("program mlp"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn no_temp_plan_changes_no_output() {
    let program = "examples/transformer.txtpb";
    let y = |args: &[&str]| {
        let out = ok(args);
        let line = out.lines().find(|l| l.starts_with("output y:"));
        line.unwrap_or_else(|| panic!("no y line in {out}"))
            .to_string()
    };
    let planned = y(&["run", program, "--seed", "5"]);
    let unplanned = y(&["run", program, "--seed", "5", "--no-temp-plan"]);
    assert!(planned.contains("fnv1a="), "{planned}");
    assert_eq!(planned, unplanned);
    let other = y(&["run", program, "--seed", "6"]);
    assert_ne!(planned, other);
}

#[test]
fn seeds_and_inputs_are_deterministic() {
    let a = fingerprint(&ok(&["run", MLP, "--seed", "3"]));
    let b = fingerprint(&ok(&["run", MLP, "--seed", "3"]));
    let c = fingerprint(&ok(&["run", MLP, "--seed", "4"]));
    assert_eq!(a, b);
    assert_ne!(a, c);

    let dir = scratch("inputs");
    let x = dir.join("x.npy");
    write_npy(
        &x,
        "<f4",
        &[64, 512],
        &f32_bytes(64 * 512, |i| (i % 7) as f32 * 0.1),
    );
    let arg = format!("x={}", x.display());
    let d = fingerprint(&ok(&["run", MLP, "--seed", "3", "--input", &arg]));
    let e = fingerprint(&ok(&["run", MLP, "--seed", "3", "--input", &arg]));
    assert_eq!(d, e);
    assert_ne!(a, d, "the --input value must replace the random one");
}

#[test]
fn bad_inputs_fail_with_one_line_and_no_files() {
    let dir = scratch("bad_inputs");
    let out_dir = dir.join("out");
    let out = out_dir.to_str().unwrap().to_string();
    let mlp_text = std::fs::read_to_string(root().join(MLP)).unwrap();

    // Programs.
    let pb = dir.join("mlp.pb");
    ok(&["convert", MLP, pb.to_str().unwrap()]);
    let bytes = std::fs::read(&pb).unwrap();
    let truncated = dir.join("truncated.pb");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let corrupt = dir.join("corrupt.pb");
    std::fs::write(&corrupt, b"\xff\xff\xff\xff\x0f not a program").unwrap();
    let malformed = dir.join("malformed.txtpb");
    std::fs::write(&malformed, "name: \"x\"\nnot_a_field: {\n").unwrap();
    let outside = dir.join("outside.txtpb");
    let edited = mlp_text.replacen(
        "    c {\n      allocation: 6\n",
        "    c {\n      allocation: 6\n      offset: 4096\n",
        1,
    );
    assert_ne!(
        edited, mlp_text,
        "the MLP text changed shape; update this test"
    );
    std::fs::write(&outside, edited).unwrap();
    let kernel = dir.join("kernel.txtpb");
    std::fs::write(&kernel, mlp_text.replacen("gelu_f32", "gelu_nope_f32", 1)).unwrap();
    let module = dir.join("module.txtpb");
    std::fs::write(
        &module,
        mlp_text.replacen("module: \"std\"", "module: \"nope\"", 1),
    )
    .unwrap();
    let unknown_ext = dir.join("mlp.json");
    std::fs::write(&unknown_ext, &mlp_text).unwrap();

    let p = |p: &Path| p.to_str().unwrap().to_string();
    let cases: Vec<(String, &str)> = vec![
        (p(&truncated), "cannot decode binary program"),
        (p(&corrupt), "cannot decode binary program"),
        (p(&malformed), "line 2"),
        (p(&outside), "entry[0]"),
        (p(&kernel), "gelu_nope_f32"),
        (p(&module), "nope"),
        (p(&dir.join("missing.txtpb")), "missing.txtpb"),
        (p(&unknown_ext), "unknown program format"),
    ];
    for (program, needle) in &cases {
        // A file name of no known format is a usage error (exit 2).
        let code = if program.ends_with(".json") { 2 } else { 1 };
        fails_with(code, &["run", program, "--output-dir", &out], needle);
        fails_with(code, &["inspect", program], needle);
        assert!(
            files_in(&out_dir).is_empty(),
            "{program}: {:?}",
            files_in(&out_dir)
        );
    }
    let line = fails(&["run", &p(&outside)], "entry[0]");
    assert!(
        line.contains("outside") || line.contains("allocation"),
        "{line}"
    );

    // Inputs.
    let wrong_dtype = dir.join("x_f64.npy");
    write_npy(&wrong_dtype, "<f8", &[64, 512], &vec![0u8; 64 * 512 * 8]);
    let wrong_shape = dir.join("x_shape.npy");
    write_npy(&wrong_shape, "<f4", &[512, 64], &vec![0u8; 64 * 512 * 4]);
    let truncated_npy = dir.join("x_short.npy");
    write_npy(&truncated_npy, "<f4", &[64, 512], &[0u8; 100]);
    let not_npy = dir.join("x_text.npy");
    std::fs::write(&not_npy, "hello").unwrap();
    let cases: Vec<(String, &str)> = vec![
        (format!("x={}", p(&wrong_dtype)), "'<f8'"),
        (format!("x={}", p(&wrong_shape)), "shape [512,64]"),
        (format!("x={}", p(&truncated_npy)), "truncated"),
        (format!("x={}", p(&not_npy)), "not a valid .npy"),
        (format!("x={}", p(&dir.join("nothere.npy"))), "nothere.npy"),
        (
            format!("nosuch={}", p(&wrong_dtype)),
            "no parameter `nosuch`",
        ),
    ];
    for (input, needle) in &cases {
        // An --input name the program does not have is a usage error (exit 2).
        let code = if input.starts_with("nosuch=") { 2 } else { 1 };
        let line = fails_with(
            code,
            &["run", MLP, "--input", input, "--output-dir", &out],
            needle,
        );
        if input.starts_with("x=") {
            assert!(
                line.contains("input `x`") || line.contains("nothere"),
                "{line}"
            );
        }
        assert!(
            files_in(&out_dir).is_empty(),
            "{input}: {:?}",
            files_in(&out_dir)
        );
    }
    assert!(
        !out_dir.exists(),
        "the output directory is created only on success"
    );

    // Usage errors are clap's (exit 2), never a panic.
    let o = xthunk(&["run", MLP, "--iterations", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let o = xthunk(&["run", MLP, "--input", "novalue"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!text(&o.stderr).contains("panicked"));
}

#[test]
fn deadline_and_output_dir_that_is_a_file() {
    let dir = scratch("deadline");
    let file = dir.join("a_file");
    std::fs::write(&file, "x").unwrap();
    fails_usage(
        &["run", MLP, "--output-dir", file.to_str().unwrap()],
        "not a directory",
    );
    // A generous deadline passes; an impossible one fails, naming the pending thunk, and
    // writes nothing.
    ok(&["run", MLP, "--deadline", "600"]);
    let out_dir = dir.join("out");
    let line = fails(
        &[
            "run",
            MLP,
            "--deadline",
            "0.000001",
            "--output-dir",
            out_dir.to_str().unwrap(),
        ],
        "deadline",
    );
    assert!(line.contains("entry["), "{line}");
    assert!(!out_dir.exists());
}

#[test]
fn convert_round_trip_is_stable() {
    let dir = scratch("convert");
    let pb = dir.join("mlp.pb");
    let txt = dir.join("mlp.txtpb");
    let pb2 = dir.join("mlp2.pb");
    let stdout = ok(&["convert", MLP, pb.to_str().unwrap()]);
    assert!(stdout.contains("wrote"), "{stdout}");
    ok(&["convert", pb.to_str().unwrap(), txt.to_str().unwrap()]);
    ok(&["convert", txt.to_str().unwrap(), pb2.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_to_string(&txt).unwrap(),
        std::fs::read_to_string(root().join(MLP)).unwrap(),
        "txtpb -> pb -> txtpb changed the text"
    );
    assert_eq!(std::fs::read(&pb).unwrap(), std::fs::read(&pb2).unwrap());
    // The binary form runs the same.
    let a = fingerprint(&ok(&["run", MLP]));
    let b = fingerprint(&ok(&["run", pb.to_str().unwrap()]));
    assert_eq!(a, b);

    // A bad input or an unknown output extension writes nothing.
    let bad = dir.join("bad.txtpb");
    std::fs::write(&bad, "allocations: [").unwrap();
    let target = dir.join("never.pb");
    fails(
        &["convert", bad.to_str().unwrap(), target.to_str().unwrap()],
        "bad.txtpb",
    );
    fails_usage(
        &["convert", MLP, dir.join("never.json").to_str().unwrap()],
        "unknown program format",
    );
    let mut names = files_in(&dir);
    names.sort();
    assert_eq!(names, vec!["bad.txtpb", "mlp.pb", "mlp.txtpb", "mlp2.pb"]);
}

#[test]
fn inspect_lists_the_program() {
    let s = ok(&["inspect", MLP]);
    for needle in [
        "program mlp  (ABI version 1, 6 thunks",
        "parameter 0  x",
        "output 0     probs  f32[64,10]",
        "%5   output(0)",
        "std: standard",
        "entry[0]  gemm f32 NN m=64 n=1024 k=512",
        "entry[1]  kernel std.add_row_f32 grid=(256,1,1) block=(256,1,1) args=[%6[0..+262144] r, %2[0..+4096] r, %7[0..+262144] w, i64:64, i64:1024]",
        "entry[5]  kernel std.softmax_f32",
        "temp plan (default schedule):\n  5 temps: 524288 bytes planned of 791552 bytes (34% saved) in 1 arena",
    ] {
        assert!(s.contains(needle), "`{needle}` not in:\n{s}");
    }
}

#[test]
fn devices_lists_host() {
    let s = ok(&["devices"]);
    assert!(s.contains("host: available"), "{s}");
    assert!(s.contains("  [0] "), "{s}");
    assert!(s.contains("cuda: "), "{s}");
    assert!(s.contains("rocm: "), "{s}");
}

/// The host's line names the gemm it runs on: a CPU BLAS where one is found (CI installs
/// OpenBLAS), or the built-in gemm crate where the BLAS's kernels lack the CPU's AVX-512;
/// `XTHUNK_HOST_BLAS=off` forces the built-in gemm, `=on` the BLAS found.
#[test]
fn devices_names_the_host_gemm_and_the_switch_turns_the_blas_off() {
    let devices = |setting: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xthunk"));
        cmd.arg("devices")
            .current_dir(root())
            .env_remove("RUST_LOG")
            .env_remove("XTHUNK_HOST_BLAS");
        if let Some(v) = setting {
            cmd.env("XTHUNK_HOST_BLAS", v);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let s = text(&o.stdout);
        s.lines()
            .find(|l| l.starts_with("host: available"))
            .unwrap_or_else(|| panic!("{s}"))
            .to_string()
    };
    let host = devices(None);
    let library = host.contains("; gemm: OpenBLAS") || host.contains("; gemm: BLIS");
    let narrower =
        host.contains("; gemm: built-in gemm crate, AVX-512 kernels (the CPU BLAS found, ");
    assert!(
        library
            || narrower
            || host.contains("; gemm: built-in gemm crate (no OpenBLAS or BLIS found"),
        "{host}"
    );
    if narrower {
        assert!(host.contains("XTHUNK_HOST_BLAS=on uses it"), "{host}");
    }
    if library || narrower {
        let on = devices(Some("on"));
        assert!(
            on.contains("; gemm: OpenBLAS") || on.contains("; gemm: BLIS"),
            "{on}"
        );
    }
    let off = devices(Some("off"));
    assert!(
        off.contains("; gemm: built-in gemm crate (XTHUNK_HOST_BLAS turns the CPU BLAS off)"),
        "{off}"
    );
}

/// `bench --filter numpy --quick` on the host: the row compares with numpy's matmul (a ratio
/// and the 0.95 goal) or, where the Python found has no numpy, is skipped with the reason;
/// a Python that does not exist skips it, exit status 0.
#[test]
fn bench_numpy_row_compares_with_numpy_or_says_why_not() {
    let dir = scratch("bench-numpy");
    let json = dir.join("bench.json");
    let missing = dir.join("no-such-python");
    for extra in [vec![], vec!["--python", missing.to_str().unwrap()]] {
        let mut args = vec!["bench", "--backend", "host", "--filter", "numpy", "--quick"];
        args.extend_from_slice(&extra);
        args.extend_from_slice(&["--json", json.to_str().unwrap()]);
        let stdout = ok(&args);
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let rows = doc["results"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{stdout}");
        let row = &rows[0];
        assert_eq!(row["name"], "gemm_f32_numpy", "{row}");
        match row["status"].as_str().unwrap() {
            "ran" if extra.is_empty() => {
                assert!(row["ratio"]["median"].as_f64().unwrap() > 0.0, "{row}");
                assert_eq!(row["goal"]["value"].as_f64(), Some(0.95), "{row}");
                assert!(stdout.contains("numpy"), "{stdout}");
            }
            "skipped" => {
                let why = row["reason"].as_str().unwrap();
                assert!(why.starts_with("no numpy baseline: "), "{why}");
                if !extra.is_empty() {
                    assert!(why.contains("cannot start"), "{why}");
                } else {
                    eprintln!("SKIPPED the numpy comparison: {why}");
                }
            }
            other => panic!("row {other}: {row}"),
        }
    }
}

#[test]
fn conformance_on_host_passes_and_missing_backends_are_skipped() {
    let s = ok(&[
        "conformance",
        "--backend",
        "host",
        "--filter",
        "kernels/add_f32",
    ]);
    assert!(s.contains("conformance: backend host"), "{s}");
    assert!(s.contains("0 failed"), "{s}");

    // cuda is skipped (exit 2) where it is unavailable; on a machine with a GPU it runs.
    let o = xthunk(&[
        "conformance",
        "--backend",
        "cuda",
        "--filter",
        "kernels/add_f32",
    ]);
    let out = text(&o.stdout);
    match o.status.code() {
        Some(2) => assert!(out.contains("SKIPPED"), "{out}"),
        Some(0) => assert!(out.contains("0 failed"), "{out}"),
        other => panic!("unexpected status {other:?}: {out}{}", text(&o.stderr)),
    }
    fails(
        &["conformance", "--backend", "nosuch"],
        "unknown backend `nosuch`",
    );
}

#[test]
fn help_documents_exit_codes_and_bf16() {
    let s = ok(&["--help"]);
    for verb in ["run", "inspect", "convert", "devices", "conformance"] {
        assert!(s.contains(verb), "{verb} missing from:\n{s}");
    }
    assert!(s.contains("Exit status"), "{s}");
    let s = ok(&["run", "--help"]);
    assert!(s.contains("bfloat16") && s.contains("'<u2'"), "{s}");
    let s = ok(&["conformance", "--help"]);
    assert!(s.contains("SKIPPED"), "{s}");
}

#[test]
fn verbose_logs_go_to_stderr() {
    let o = xthunk(&["-vv", "run", MLP]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(out.starts_with("program mlp"), "{out}");
    assert!(text(&o.stderr).contains("DEBUG"), "{}", text(&o.stderr));
}

/// `xthunk compile` stores cubins beside the portable source; the result still runs on the
/// host backend, with the same outputs. Needs NVRTC (the PyPI wheel that ci/test.sh installs).
#[test]
fn compile_for_sm_90_runs_unchanged_on_host() {
    let dir = scratch("compile");
    let out = dir.join("mlp-sm90.pb");
    let o = xthunk(&[
        "compile",
        MLP,
        "--target",
        "sm_90",
        "-o",
        out.to_str().unwrap(),
    ]);
    if !o.status.success() {
        let err = text(&o.stderr);
        if err.contains("NVRTC") && std::env::var_os("XTHUNK_REQUIRE_NVRTC").is_none() {
            eprintln!("SKIPPED compile_for_sm_90_runs_unchanged_on_host: {err}");
            return;
        }
        panic!("compile failed: {err}");
    }
    let listing = ok(&["inspect", out.to_str().unwrap()]);
    assert!(listing.contains("std: standard, cubin(sm_90)"), "{listing}");
    let original = fingerprint(&ok(&["run", MLP, "--backend", "host"]));
    let compiled = fingerprint(&ok(&["run", out.to_str().unwrap(), "--backend", "host"]));
    assert_eq!(original, compiled);
    fails_usage(
        &[
            "compile",
            MLP,
            "--target",
            "sm90",
            "-o",
            out.to_str().unwrap(),
        ],
        "unknown target `sm90`",
    );
}

/// Vendor libraries are opened at run time, never linked: the binary's dynamic dependencies
/// name none of them (checked with `ldd`, skipped with a reason where it is missing).
#[test]
fn binary_links_no_vendor_library() {
    let bin = env!("CARGO_BIN_EXE_xthunk");
    let o = match Command::new("ldd").arg(bin).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED binary_links_no_vendor_library: cannot run ldd: {e}");
            return;
        }
    };
    let deps = text(&o.stdout);
    assert!(deps.contains("libc.so"), "unexpected ldd output: {deps}");
    for lib in [
        "libcuda",
        "libnvrtc",
        "libcublas",
        "libnccl",
        "amdhip64",
        "hiprtc",
        "rocblas",
        "rccl",
    ] {
        assert!(!deps.contains(lib), "{bin} links {lib}:\n{deps}");
    }
}

/// A program with one source module `user` whose code is `code`, launching `kernel` from it.
fn source_program(code: &str, kernel: &str) -> String {
    source_program_with(code, kernel, "")
}

/// Text-format escaping of a string's contents.
fn escaped(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// [`source_program`] with the module's `options` field given as text (`options { ... }`).
fn source_program_with(code: &str, kernel: &str, options: &str) -> String {
    let code = escaped(code);
    format!(
        "abi_version: 1\nname: \"user\"\n\
         allocations: [{{ size: 64 alignment: 64 parameter: 0 }}]\n\
         modules: [{{ name: \"user\" images: [{{ source {{ code: \"{code}\" }} }}] {options} }}]\n\
         entry: [{{ kernel {{ module: \"user\" name: \"{kernel}\" grid {{ x: 1 y: 1 z: 1 }} \
         block {{ x: 32 y: 1 z: 1 }} args: [{{ buffer {{ slice {{ allocation: 0 size: 64 }} \
         access: ACCESS_READ_WRITE }} }}] }} }}]\n\
         signature {{ parameters: [{{ name: \"x\" dtype: DTYPE_F32 dims: [16] }}] }}\n"
    )
}

/// `compile --check` (and every `compile`) refuses vendor-only constructs for every target,
/// naming the module and the user's line, and kernels the program launches but the source
/// does not define; portable source passes with no compiler involved.
#[test]
fn compile_check_refuses_vendor_constructs_and_unknown_kernels() {
    let dir = scratch("compile-check");
    let bad = dir.join("bad.txtpb");
    let code = "// warp sum\n__global__ void k(float* x) {\n  float v = __shfl_down(x[0], 1);\n  atomicAdd_system(x, v);\n}\n";
    std::fs::write(&bad, source_program(code, "k")).unwrap();
    let err = fails(
        &["compile", bad.to_str().unwrap(), "--check"],
        "module `user`, line 3: `__shfl_down` is not in the portable subset",
    );
    assert!(
        err.contains("module `user`, line 4: `atomicAdd_system`"),
        "{err}"
    );
    // Refused for a ROCm target too, where hipRTC would have rejected it anyway, and for a
    // CUDA target, where NVRTC would have accepted it: before any compiler runs.
    let out = dir.join("never.pb");
    for t in ["sm_90", "gfx90a"] {
        fails(
            &[
                "compile",
                bad.to_str().unwrap(),
                "--target",
                t,
                "-o",
                out.to_str().unwrap(),
            ],
            "line 3: `__shfl_down`",
        );
        assert!(!out.exists());
    }
    let unknown = dir.join("unknown.txtpb");
    let good = "__global__ void k(float* x) {\n  x[0] = xt_warp_reduce_add(x[0]);\n}\n";
    std::fs::write(&unknown, source_program(good, "kk")).unwrap();
    fails(
        &["compile", unknown.to_str().unwrap(), "--check"],
        "the program launches kernel `kk`, which its source does not define (it defines: k)",
    );
    let fine = dir.join("fine.txtpb");
    std::fs::write(&fine, source_program(good, "k")).unwrap();
    let s = ok(&["compile", fine.to_str().unwrap(), "--check"]);
    assert!(s.contains("every source module is portable"), "{s}");
}

/// `xthunk compile` of an edited program keeps no image of the old source: compiled for sm_80,
/// edited, then compiled for gfx90a, the sm_80 cubin is dropped with a warning (its source stamp
/// differs). Needs NVRTC and hipRTC (skipped, saying so, without them).
#[test]
fn compile_drops_images_of_an_edited_source() {
    let dir = scratch("compile-stale");
    let first = dir.join("first.txtpb");
    let code = "__global__ void k(float* x) {\n  x[0] = 1.0f;\n}\n";
    std::fs::write(&first, source_program(code, "k")).unwrap();
    let sm80 = dir.join("sm80.txtpb");
    let o = xthunk(&[
        "compile",
        first.to_str().unwrap(),
        "--target",
        "sm_80",
        "-o",
        sm80.to_str().unwrap(),
    ]);
    if !o.status.success() {
        let err = text(&o.stderr);
        if err.contains("NVRTC") && std::env::var_os("XTHUNK_REQUIRE_NVRTC").is_none() {
            eprintln!("SKIPPED compile_drops_images_of_an_edited_source: {err}");
            return;
        }
        panic!("compile failed: {err}");
    }
    let listing = ok(&["inspect", sm80.to_str().unwrap()]);
    assert!(listing.contains("cubin(sm_80)"), "{listing}");
    // Recompiling the same source for another target keeps the cubin.
    let same = dir.join("same.txtpb");
    let o = xthunk(&[
        "compile",
        sm80.to_str().unwrap(),
        "--target",
        "gfx90a",
        "-o",
        same.to_str().unwrap(),
    ]);
    if !o.status.success() {
        let err = text(&o.stderr);
        if err.contains("hipRTC") && std::env::var_os("XTHUNK_REQUIRE_ROCM").is_none() {
            eprintln!("SKIPPED compile_drops_images_of_an_edited_source: {err}");
            return;
        }
        panic!("compile failed: {err}");
    }
    assert!(!text(&o.stdout).contains("warning"), "{}", text(&o.stdout));
    let listing = ok(&["inspect", same.to_str().unwrap()]);
    assert!(
        listing.contains("cubin(sm_80)") && listing.contains("hsaco(gfx90a"),
        "{listing}"
    );
    // The edited source: the cubin is dropped.
    let edited = dir.join("edited.txtpb");
    let text_pb = std::fs::read_to_string(&sm80).unwrap();
    assert!(text_pb.contains("1.0f"));
    std::fs::write(&edited, text_pb.replace("1.0f", "2.0f")).unwrap();
    let out = dir.join("out.txtpb");
    let s = ok(&[
        "compile",
        edited.to_str().unwrap(),
        "--target",
        "gfx90a",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        s.contains(
            "warning: dropped: module `user`: the cubin(sm_80) image was compiled from other source"
        ),
        "{s}"
    );
    let listing = ok(&["inspect", out.to_str().unwrap()]);
    assert!(
        !listing.contains("cubin(sm_80)") && listing.contains("hsaco(gfx90a"),
        "{listing}"
    );
}

/// Per-module compile options in the program: defines, fast math and carried headers (the
/// source includes one, which `--check` accepts only because it is carried), kept through
/// a conversion to binary and back; a malformed define is refused naming its field.
#[test]
fn module_options_are_part_of_the_program() {
    let dir = scratch("module-options");
    let code =
        "#include \"util.h\"\n__global__ void k(float* x) {\n  x[0] = twice(x[0]) * (float)N;\n}\n";
    let header = "__device__ float twice(float x) { return 2.0f * x; }";
    let options = format!(
        "options {{ defines: [\"N=4\"] fast_math: true headers: [{{ name: \"util.h\" code: \"{}\" }}] }}",
        escaped(header)
    );
    let with = dir.join("with.txtpb");
    std::fs::write(&with, source_program_with(code, "k", &options)).unwrap();
    ok(&["compile", with.to_str().unwrap(), "--check"]);
    let bin = dir.join("with.pb");
    let back = dir.join("back.txtpb");
    ok(&["convert", with.to_str().unwrap(), bin.to_str().unwrap()]);
    ok(&["convert", bin.to_str().unwrap(), back.to_str().unwrap()]);
    let t = std::fs::read_to_string(&back).unwrap();
    assert!(
        t.contains("N=4") && t.contains("fast_math: true") && t.contains("name: \"util.h\""),
        "{t}"
    );
    // Without the header carried, its #include is refused.
    let without = dir.join("without.txtpb");
    std::fs::write(&without, source_program(code, "k")).unwrap();
    fails(
        &["compile", without.to_str().unwrap(), "--check"],
        "module `user`, line 1: `#include`",
    );
    let bad = dir.join("bad.txtpb");
    std::fs::write(
        &bad,
        source_program_with(code, "k", "options { defines: [\"4N\"] }"),
    )
    .unwrap();
    fails(
        &["compile", bad.to_str().unwrap(), "--check"],
        "modules[0].options.defines[0]",
    );
}
