//! Custom calls end to end: the C test plugin (`cli-tests/plugins/test_plugin.c`, built here
//! with the system C compiler against `include/xthunk_ffi.h`) through `xthunk run --plugin` on
//! the host and, through the driver emulator, on EMULATED cuda and rocm devices; the Rust
//! handler of `examples/custom_call.rs` on the same three; `xthunk inspect` showing capture
//! and splits; and bad input (no registration symbol, another API version, a wrong attribute
//! type, dims that do not match their slice, a missing handler, a failing handler), each one
//! error line naming the file, thunk or target, with nothing written.
//!
//! On the emulated devices the plugin's work is a host function on the native stream that
//! reads and writes device memory from the host: valid only because the emulator's device
//! memory is host memory (the plugin checks it runs on the emulator and refuses otherwise).
//! These runs test the ABI, the stream handed over, ordering and capture, not a GPU kernel.
//!
//! Needs `cc` and the emulator library (`cargo test --workspace` builds it); without them the
//! tests concerned are skipped with the reason, unless `XTHUNK_REQUIRE_EMULATOR=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

#[path = "common/emulator.rs"]
mod emulator;
use emulator::{emulated_command, emulator_lib};
use xthunk::builder::ExecutableBuilder;
use xthunk::ir::{
    Attributes, CommandBufferThunk, CopyThunk, CustomCallThunk, DType, Executable, MemsetPattern,
    MemsetThunk, Thunk,
};

const N: u64 = 1000;
const ROWS: u64 = 7;
const COLS: u64 = 33;
const K: u64 = 5;
const SCALE: f32 = 1.5;
const SCALE2: f32 = -0.25;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scratch() -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("custom-calls-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds a plugin from `source` with `cc` (extra flags `defs`); `None` without a compiler.
fn build_plugin(source: &str, name: &str, defs: &[&str]) -> Option<PathBuf> {
    let out = scratch().join(format!("lib{name}.so"));
    let o = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .args(defs)
        .arg("-o")
        .arg(&out)
        .arg(root().join("cli-tests/plugins").join(source))
        .arg("-ldl")
        .output()
        .ok()?;
    assert!(
        o.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(out)
}

fn plugin() -> Option<&'static Path> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| build_plugin("test_plugin.c", "xthunk_test_plugin", &[]))
        .as_deref()
}

fn need<T>(what: Option<T>, why: &str, test: &str) -> Option<T> {
    if what.is_none() {
        if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
            panic!("{test}: {why}");
        }
        eprintln!("SKIPPED {test}: {why}");
    }
    what
}

/// Runs `bin ARGS`, through ci/with-emulator.sh for a GPU backend.
fn run(bin: &Path, backend: &str, args: &[&str]) -> Output {
    let mut cmd = if backend == "host" {
        Command::new(bin)
    } else {
        emulated_command(bin)
    };
    cmd.env_remove("XTHUNK_PLUGINS");
    cmd.args(args).current_dir(root()).output().unwrap()
}

fn xthunk_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_xthunk"))
}

/// The program: a command buffer holding a memset, the capturable scaled add and the
/// splitting one; a top-k; the attribute reader.
fn program() -> Executable {
    let mut b = ExecutableBuilder::new("custom_calls");
    let x = b.parameter("x", DType::F32, &[N]);
    let y = b.parameter("y", DType::F32, &[N]);
    let m = b.parameter("m", DType::F32, &[ROWS, COLS]);
    let out = b.output("out", DType::F32, &[N]);
    let out2 = b.output("out2", DType::F32, &[N]);
    let vals = b.output("values", DType::F32, &[ROWS, K]);
    let idx = b.output("indices", DType::I32, &[ROWS, K]);
    let summary = b.output("summary", DType::F64, &[16]);
    let t = b.temp(DType::F32, &[N]);
    let add = |target: &str, out: &xthunk::builder::Tensor, scale: f32| {
        Thunk::CustomCall(
            CustomCallThunk::new(target)
                .operand(x.buffer())
                .operand(y.buffer())
                .result(out.buffer())
                .attr("scale", scale),
        )
    };
    b.push(Thunk::CommandBuffer(CommandBufferThunk {
        body: vec![
            Thunk::Memset(MemsetThunk {
                dst: t.slice(),
                pattern: MemsetPattern::U32(0),
            }),
            add("test.scaled_add", &t, SCALE),
            Thunk::Copy(CopyThunk {
                src: t.slice(),
                dst: out.slice(),
            }),
            add("test.scaled_add_split", &out2, SCALE2),
        ],
    }));
    b.push(Thunk::CustomCall(
        CustomCallThunk::new("test.top_k")
            .operand(m.buffer())
            .result(vals.buffer())
            .result(idx.buffer())
            .attr("k", K as i64)
            .attr("largest", true),
    ));
    let inner = Attributes(vec![
        ("w".into(), 0.375f64.into()),
        (
            "deeper".into(),
            Attributes(vec![("z".into(), (-9i32).into())]).into(),
        ),
    ]);
    b.push(Thunk::CustomCall(
        CustomCallThunk::new("test.attrs")
            .result(summary.buffer())
            .attr("flag", true)
            .attr("count", -7i32)
            .attr("big", 1i64 << 40)
            .attr("ratio", 0.5f32)
            .attr("precise", std::f64::consts::E)
            .attr("label", "xthunk")
            .attr("mask", vec![true, false, true, true])
            .attr("sizes", vec![1i32, -2, 30])
            .attr("offsets", vec![1i64 << 33, -5])
            .attr("weights", vec![0.25f32, 0.5, -1.0])
            .attr("coeffs", vec![1e10f64, 2.5])
            .attr("names", vec!["ab", "", "cde"])
            .attr("inner", inner)
            .with_side_effect(),
    ));
    b.build().unwrap()
}

/// The attribute summary the plugin writes for `program()` (see test_plugin.c).
const SUMMARY: [f64; 16] = [
    1.0,
    -7.0,
    (1u64 << 40) as f64,
    0.5,
    std::f64::consts::E,
    6.0,
    b'x' as f64,
    3.0,
    29.0,
    ((1i64 << 33) - 5) as f64,
    -0.25,
    1e10 + 2.5,
    3.0,
    5.0,
    0.375,
    -9.0,
];

fn write_npy(path: &Path, descr: &str, shape: &[u64], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

fn read_npy<T: npyz::Deserialize>(path: &Path) -> Vec<T> {
    let bytes = std::fs::read(path).unwrap();
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<T>()
        .unwrap()
}

struct Inputs {
    x: Vec<f32>,
    y: Vec<f32>,
    m: Vec<f32>,
    dir: PathBuf,
}

fn inputs(name: &str, seed: u64) -> Inputs {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = |n: u64| -> Vec<f32> { (0..n).map(|_| rng.random_range(-8.0..8.0)).collect() };
    let (x, y, m) = (v(N), v(N), v(ROWS * COLS));
    let dir = scratch().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let b = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    write_npy(&dir.join("x.npy"), "<f4", &[N], &b(&x));
    write_npy(&dir.join("y.npy"), "<f4", &[N], &b(&y));
    write_npy(&dir.join("m.npy"), "<f4", &[ROWS, COLS], &b(&m));
    Inputs { x, y, m, dir }
}

/// Checks the outputs in `dir` against f64 references of `inp`.
fn check_outputs(dir: &Path, inp: &Inputs) {
    for (file, scale) in [("out.npy", SCALE), ("out2.npy", SCALE2)] {
        let got: Vec<f32> = read_npy(&dir.join(file));
        assert_eq!(got.len(), N as usize);
        for (i, g) in got.iter().enumerate() {
            let want = f64::from(scale) * f64::from(inp.x[i]) + f64::from(inp.y[i]);
            let g = f64::from(*g);
            assert!(
                (g - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{file}[{i}] = {g}, want {want}"
            );
        }
    }
    // Top-k reference: a stable sort of each row by value, descending, in f64.
    let vals: Vec<f32> = read_npy(&dir.join("values.npy"));
    let idx: Vec<i32> = read_npy(&dir.join("indices.npy"));
    for r in 0..ROWS as usize {
        let row = &inp.m[r * COLS as usize..(r + 1) * COLS as usize];
        let mut order: Vec<usize> = (0..COLS as usize).collect();
        order.sort_by(|&a, &b| f64::from(row[b]).total_cmp(&f64::from(row[a])));
        for t in 0..K as usize {
            let at = r * K as usize + t;
            assert_eq!(idx[at] as usize, order[t], "indices[{r},{t}]");
            assert_eq!(vals[at], row[order[t]], "values[{r},{t}]");
        }
    }
    let summary: Vec<f64> = read_npy(&dir.join("summary.npy"));
    for (i, (g, w)) in summary.iter().zip(SUMMARY).enumerate() {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "summary[{i}] = {g}, want {w}"
        );
    }
}

fn program_file() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let p = scratch().join("custom_calls.txtpb");
        xthunk::proto::save_file(&p, &program()).unwrap();
        p
    })
}

fn run_c_plugin(backend: &str, test: &str) {
    let Some(plugin) = need(plugin(), "no C compiler (`cc`)", test) else {
        return;
    };
    if backend != "host"
        && need(emulator_lib(), "the emulator library is not built", test).is_none()
    {
        return;
    }
    let inp = inputs(backend, 0xC0FFEE ^ backend.len() as u64);
    let out = inp.dir.join("out");
    let arg = |n: &str| format!("{n}={}", inp.dir.join(format!("{n}.npy")).display());
    let o = run(
        xthunk_bin(),
        backend,
        &[
            "run",
            program_file().to_str().unwrap(),
            "--backend",
            backend,
            "--plugin",
            plugin.to_str().unwrap(),
            "--input",
            &arg("x"),
            "--input",
            &arg("y"),
            "--input",
            &arg("m"),
            "--iterations",
            "3",
            "--output-dir",
            out.to_str().unwrap(),
            "-vv",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "xthunk run on {backend} failed:\n{err}");
    // The trace: the buffer is split at the incompatible call when loaded; its first part
    // (memset, the compatible call, copy) is recorded once, in the first of 3 executions,
    // and replayed after.
    assert!(
        err.contains(
            "the command buffer is split command_buffer=entry[0] custom_call=entry[0].body[3]"
        ),
        "{err}"
    );
    assert_eq!(err.matches("recorded command buffer").count(), 1, "{err}");
    assert!(
        err.contains("recorded command buffer command_buffer=1 nodes=3"),
        "{err}"
    );
    if backend != "host" {
        assert!(err.contains("[EMULATED, not a GPU]"), "{err}");
    }
    check_outputs(&out, &inp);
}

#[test]
fn c_plugin_on_host() {
    run_c_plugin("host", "c_plugin_on_host");
}

#[test]
fn c_plugin_on_emulated_cuda() {
    run_c_plugin("cuda", "c_plugin_on_emulated_cuda");
}

#[test]
fn c_plugin_on_emulated_rocm() {
    run_c_plugin("rocm", "c_plugin_on_emulated_rocm");
}

/// The example binary, built beside the test binaries by `cargo test`.
fn example_bin() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_BIN_EXE_xthunk"))
        .parent()?
        .join("examples/custom_call");
    p.exists().then_some(p)
}

#[test]
fn rust_handler_example_on_host_and_emulated_gpus() {
    let test = "rust_handler_example_on_host_and_emulated_gpus";
    let Some(bin) = need(example_bin(), "examples/custom_call is not built", test) else {
        return;
    };
    let gpus = need(emulator_lib(), "the emulator library is not built", test).is_some();
    for backend in ["host", "cuda", "rocm"] {
        if backend != "host" && !gpus {
            continue;
        }
        let o = run(&bin, backend, &[backend]);
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{backend}: {out}\n{err}");
        assert!(
            out.contains("3 executions match the f64 reference"),
            "{out}"
        );
        // Captured when the command buffer recorded, replayed after.
        assert!(out.contains("issued 1 time(s)"), "{out}");
        if backend != "host" {
            assert!(out.contains("[EMULATED]"), "{out}");
        }
    }
}

#[test]
fn inspect_shows_capture_and_splits() {
    let Some(plugin) = need(
        plugin(),
        "no C compiler (`cc`)",
        "inspect_shows_capture_and_splits",
    ) else {
        return;
    };
    let o = run(
        xthunk_bin(),
        "host",
        &[
            "inspect",
            program_file().to_str().unwrap(),
            "--plugin",
            plugin.to_str().unwrap(),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for needle in [
        "entry[0].body[1]  custom_call test.scaled_add operands=[f32[1000] %0[0..+4000], f32[1000] %1[0..+4000]] results=[f32[1000] %8[0..+4000]] attributes={scale=f32:1.5} [cuda: captured into the command buffer; host: captured into the command buffer; rocm: captured into the command buffer]",
        "entry[0].body[3]  custom_call test.scaled_add_split",
        "[cuda: splits the command buffer; host: splits the command buffer; rocm: splits the command buffer]",
        "entry[2]  custom_call test.attrs",
        "big=i64:1099511627776",
        "inner={w=f64:0.375, deeper={z=i32:-9}}",
        "side_effect [cuda: not command-buffer compatible",
    ] {
        assert!(out.contains(needle), "`{needle}` not in:\n{out}");
    }
}

/// `xthunk run PROGRAM --plugin PLUGIN` fails with exit 1, one error line containing every
/// needle, and no output directory.
fn refused(program: &Path, plugin: Option<&Path>, needles: &[&str]) {
    let out = scratch().join(format!("refused-{}", rand::random::<u32>()));
    let mut args = vec![
        "run".to_string(),
        program.display().to_string(),
        "--backend".into(),
        "host".into(),
        "--output-dir".into(),
        out.display().to_string(),
    ];
    if let Some(p) = plugin {
        args.extend(["--plugin".into(), p.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(xthunk_bin(), "host", &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in:\n{err}"));
    for n in needles {
        assert!(line.contains(n), "`{n}` not in `{line}`");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "{} was written", out.display());
}

fn edited(name: &str, edit: impl FnOnce(&mut Executable)) -> PathBuf {
    let mut exe = program();
    edit(&mut exe);
    let p = scratch().join(format!("{name}.pb"));
    std::fs::write(&p, xthunk::proto::encode(&exe)).unwrap();
    p
}

fn top_k(exe: &mut Executable) -> &mut CustomCallThunk {
    match &mut exe.entry[1] {
        Thunk::CustomCall(c) => c,
        _ => panic!(),
    }
}

#[test]
fn bad_plugins_and_calls_are_refused_before_anything_runs() {
    let test = "bad_plugins_and_calls_are_refused_before_anything_runs";
    let Some(plugin) = need(plugin(), "no C compiler (`cc`)", test) else {
        return;
    };
    let prog = program_file();
    let no_symbol = build_plugin("no_symbol.c", "no_symbol", &[]).unwrap();
    refused(
        prog,
        Some(&no_symbol),
        &["libno_symbol.so", "does not export `xthunk_ffi_register`"],
    );
    let no_version = build_plugin("no_symbol.c", "no_version", &["-DNO_VERSION"]).unwrap();
    refused(
        prog,
        Some(&no_version),
        &[
            "libno_version.so",
            "does not export `xthunk_ffi_api_version`",
        ],
    );
    let v2 = build_plugin("test_plugin.c", "version2", &["-DTEST_PLUGIN_VERSION=2"]).unwrap();
    refused(
        prog,
        Some(&v2),
        &[
            "libversion2.so",
            "built for custom-call API version 2",
            "implements version 1",
        ],
    );
    refused(
        prog,
        Some(&scratch().join("missing.so")),
        // The loader's own reason, not only libloading's "dlopen failed".
        &[
            "missing.so",
            "cannot be loaded: dlopen failed: ",
            "cannot open shared object file",
        ],
    );
    // Without the plugin nothing handles the calls: the load lists what is registered.
    refused(
        prog,
        None,
        &[
            "thunk entry[0].body[1]: custom call `test.scaled_add` has no handler on backend `host` (registered there: none)",
        ],
    );
    let wrong = edited("wrong_type", |e| {
        top_k(e).attributes.0[0].1 = 5i32.into();
    });
    refused(
        &wrong,
        Some(plugin),
        &["thunk entry[1]: custom call `test.top_k`: attribute `k` is i32, the handler reads i64"],
    );
    let dims = edited("dims", |e| {
        top_k(e).results[1].dims = vec![ROWS, K + 1];
    });
    refused(
        &dims,
        Some(plugin),
        &["entry[1]", "results[1].dims", "[7, 6] x i32 is 168 bytes"],
    );
    let unprepared = edited("unprepared", |e| {
        top_k(e).target = "test.prepare_fails".into();
    });
    refused(
        &unprepared,
        Some(plugin),
        &[
            "thunk entry[1] (custom_call): custom call `test.prepare_fails` failed: prepare refused test.prepare_fails at entry[1] on device 0",
        ],
    );
    let failing = edited("failing", |e| {
        top_k(e).target = "test.fail".into();
    });
    refused(
        &failing,
        Some(plugin),
        &[
            "thunk entry[1] (custom_call): custom call `test.fail` failed: deliberate failure at entry[1]",
        ],
    );
}

#[test]
fn the_text_example_runs_with_the_plugin_named_by_xthunk_plugins() {
    let Some(plugin) = need(
        plugin(),
        "no C compiler (`cc`)",
        "the_text_example_runs_with_the_plugin_named_by_xthunk_plugins",
    ) else {
        return;
    };
    let dir = scratch().join("text_example");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let x: Vec<f32> = (0..8).map(|_| rng.random_range(-2.0..2.0)).collect();
    let y: Vec<f32> = (0..8).map(|_| rng.random_range(-2.0..2.0)).collect();
    let b = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    write_npy(&dir.join("x.npy"), "<f4", &[8], &b(&x));
    write_npy(&dir.join("y.npy"), "<f4", &[8], &b(&y));
    let out = dir.join("out");
    let arg = |n: &str| format!("{n}={}", dir.join(format!("{n}.npy")).display());
    let o = Command::new(xthunk_bin())
        .env("XTHUNK_PLUGINS", plugin)
        .args(["run", "examples/custom_call.txtpb", "--backend", "host"])
        .args(["--input", &arg("x"), "--input", &arg("y"), "--output-dir"])
        .arg(&out)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (file, scale) in [("out.npy", 2.0f64), ("out2.npy", -1.0)] {
        let got: Vec<f32> = read_npy(&out.join(file));
        for (i, g) in got.iter().enumerate() {
            let want = scale * f64::from(x[i]) + f64::from(y[i]);
            assert!(
                (f64::from(*g) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{file}[{i}]"
            );
        }
    }
}

/// A StableHLO module as `jax.jit(f).lower(x, y).as_text()` prints it for
/// `f = lambda x, y: (sin(v), i + 1)` where `v, i = top_k(scaled_add(x, y, scale=2.5), k=3)`,
/// both calls `jax.ffi.ffi_call`s (typed attributes in `mhlo.backend_config`); the scaled
/// add's result aliases `x` (it starts as a copy of it).
const FFI_MODULE: &str = r#"module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<7x33xf32>, %arg1: tensor<7x33xf32>) -> (tensor<7x5xf32> {jax.result_info = "result[0]"}, tensor<7x5xi32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.custom_call @test.scaled_add(%arg0, %arg1) {backend_config = "", mhlo.backend_config = {scale = 2.500000e+00 : f32}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[1, 0]> : tensor<2xindex>]} : (tensor<7x33xf32>, tensor<7x33xf32>) -> tensor<7x33xf32>
    %1:2 = stablehlo.custom_call @test.top_k(%0) {backend_config = "", mhlo.backend_config = {k = 5 : i64, largest = true}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>], result_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>]} : (tensor<7x33xf32>) -> (tensor<7x5xf32>, tensor<7x5xi32>)
    %2 = stablehlo.sine %1#0 : tensor<7x5xf32>
    %c = stablehlo.constant dense<1> : tensor<i32>
    %3 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<7x5xi32>
    %4 = stablehlo.add %1#1, %3 : tensor<7x5xi32>
    return %2, %4 : tensor<7x5xf32>, tensor<7x5xi32>
  }
}
"#;

/// StableHLO's `custom_call` imported as xthunk `CustomCall` thunks: the module above run by
/// `xthunk run prog.mlir --plugin` against references computed here (f64 scaled add, a stable
/// sort for the top k, f64 sine).
fn stablehlo_custom_call(backend: &str, test: &str) {
    let Some(plugin) = need(plugin(), "no C compiler (`cc`)", test) else {
        return;
    };
    if backend != "host"
        && need(emulator_lib(), "the emulator library is not built", test).is_none()
    {
        return;
    }
    let dir = scratch().join(format!("stablehlo-{backend}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED ^ backend.len() as u64);
    let n = ROWS * COLS;
    let mut v = || -> Vec<f32> { (0..n).map(|_| rng.random_range(-4.0..4.0)).collect() };
    let (x, y) = (v(), v());
    let b = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    write_npy(&dir.join("x.npy"), "<f4", &[ROWS, COLS], &b(&x));
    write_npy(&dir.join("y.npy"), "<f4", &[ROWS, COLS], &b(&y));
    let prog = dir.join("ffi.mlir");
    std::fs::write(&prog, FFI_MODULE).unwrap();
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let arg = |i: usize, n: &str| format!("arg{i}={}", dir.join(format!("{n}.npy")).display());
    let o = run(
        xthunk_bin(),
        backend,
        &[
            "run",
            prog.to_str().unwrap(),
            "--backend",
            backend,
            "--plugin",
            plugin.to_str().unwrap(),
            "--input",
            &arg(0, "x"),
            "--input",
            &arg(1, "y"),
            "--output-dir",
            out.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "xthunk run on {backend} failed:\n{err}");
    let sines: Vec<f32> = read_npy(&out.join("out0.npy"));
    let idx: Vec<i32> = read_npy(&out.join("out1.npy"));
    assert_eq!(
        (sines.len(), idx.len()),
        ((ROWS * K) as usize, (ROWS * K) as usize)
    );
    let s: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(x, y)| 2.5 * f64::from(*x) + f64::from(*y))
        .collect();
    for r in 0..ROWS as usize {
        let row = &s[r * COLS as usize..(r + 1) * COLS as usize];
        let mut order: Vec<usize> = (0..COLS as usize).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        for t in 0..K as usize {
            let at = r * K as usize + t;
            assert_eq!(idx[at] as usize, order[t] + 1, "out1[{r},{t}]");
            let want = row[order[t]].sin();
            let got = f64::from(sines[at]);
            assert!(
                (got - want).abs() <= 1e-5,
                "out0[{r},{t}] = {got}, want {want}"
            );
        }
    }
}

#[test]
fn stablehlo_custom_call_on_host() {
    stablehlo_custom_call("host", "stablehlo_custom_call_on_host");
}

#[test]
fn stablehlo_custom_call_on_emulated_cuda() {
    stablehlo_custom_call("cuda", "stablehlo_custom_call_on_emulated_cuda");
}

#[test]
fn stablehlo_custom_call_on_emulated_rocm() {
    stablehlo_custom_call("rocm", "stablehlo_custom_call_on_emulated_rocm");
}
