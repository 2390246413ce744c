//! StableHLO (`.mlir`) through the binary: `run` and `inspect` take a JAX fixture directly,
//! a malformed or refused `.mlir` gives one error line with its position, and `import -o`
//! writes a `.pb` that runs to the same outputs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

const WHILE: &str = "stablehlo/tests/fixtures/while.mlir";
const MLP: &str = "stablehlo/tests/fixtures/mlp.mlir";

#[path = "common/binary.rs"]
mod binary;
use binary::{ok, root, text, xthunk};

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    binary::scratch_in("stablehlo-tests", name)
}

/// A command that must fail with exit 1 and exactly one `error: ` line; returns the line.
fn fails(args: &[&str]) -> String {
    let o = xthunk(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "xthunk {args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    lines[0].to_string()
}

/// A little-endian f32 `.npy` file (npyz writes the header).
fn write_npy(path: &Path, dims: &[u64], data: &[f32]) {
    use npyz::WriterBuilder;
    let mut out = vec![];
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(dims)
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
    std::fs::write(path, out).unwrap();
}

/// The f32 data of an `.npy` file.
fn read_npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<f32>()
        .unwrap()
}

fn while_inputs(dir: &Path) -> (String, String) {
    let (a0, a1) = (dir.join("a0.npy"), dir.join("a1.npy"));
    write_npy(&a0, &[], &[2.5]);
    write_npy(&a1, &[3], &[1.0, 2.0, 3.0]);
    (
        format!("arg0={}", a0.display()),
        format!("arg1={}", a1.display()),
    )
}

#[test]
fn run_takes_a_jax_fixture() {
    let dir = scratch("run");
    let (a0, a1) = while_inputs(&dir);
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let args = [
        "run",
        WHILE,
        "--backend",
        "host",
        "--input",
        &a0,
        "--input",
        &a1,
        "--output-dir",
        o,
    ];
    let stdout = ok(&args);
    assert!(stdout.contains("output out0: f32[]"), "{stdout}");
    assert_eq!(read_npy(&out.join("out0.npy")), [10.5]);
    assert_eq!(read_npy(&out.join("out1.npy")), [256.0, 512.0, 768.0]);
    // A program with a call, reductions and dots runs with random inputs.
    let stdout = ok(&["run", MLP, "--backend", "host"]);
    assert!(stdout.contains("output out3: f32[16,2]"), "{stdout}");
    let listing = ok(&["inspect", WHILE]);
    assert!(listing.contains("parameter 1  arg1  f32[3]"), "{listing}");
    let listing = ok(&["inspect", MLP]);
    assert!(
        listing.contains("JAX names:\n  out0  result[0]\n"),
        "{listing}"
    );
    assert!(listing.contains("  out3  result[1][2]\n"), "{listing}");
}

#[test]
fn a_malformed_or_refused_mlir_gives_one_line_with_its_position() {
    let dir = scratch("bad");
    let text = std::fs::read_to_string(root().join(MLP)).unwrap();
    let cut = dir.join("cut.mlir");
    std::fs::write(&cut, &text[..600]).unwrap();
    let line = fails(&["run", cut.to_str().unwrap(), "--backend", "host"]);
    assert!(line.contains("StableHLO program: 3:"), "{line}");
    // (A dynamic shape: refused for good, where a refused op may become supported.)
    let line = fails(&["inspect", "stablehlo/tests/fixtures/handwritten.mlir"]);
    assert!(
        line.contains("StableHLO program: 2:3: unsupported: parameter 2 tensor<?x4xf32>"),
        "{line}"
    );
    let garbage = dir.join("g.mlir");
    std::fs::write(&garbage, [0xff, 0xfe, 0x00]).unwrap();
    let line = fails(&["run", garbage.to_str().unwrap(), "--backend", "host"]);
    assert!(line.contains("not valid UTF-8"), "{line}");
}

#[test]
fn import_then_run_gives_the_same_outputs() {
    let dir = scratch("import");
    let (a0, a1) = while_inputs(&dir);
    let pb = dir.join("w.pb");
    let stdout = ok(&["import", WHILE, "-o", pb.to_str().unwrap()]);
    assert!(stdout.contains("wrote"), "{stdout}");
    for (prog, out) in [(WHILE, "from_mlir"), (pb.to_str().unwrap(), "from_pb")] {
        let o = dir.join(out);
        ok(&[
            "run",
            prog,
            "--backend",
            "host",
            "--input",
            &a0,
            "--input",
            &a1,
            "--output-dir",
            o.to_str().unwrap(),
        ]);
    }
    for f in ["out0.npy", "out1.npy"] {
        let a = std::fs::read(dir.join("from_mlir").join(f)).unwrap();
        let b = std::fs::read(dir.join("from_pb").join(f)).unwrap();
        assert_eq!(a, b, "{f}");
    }
    // `import` reads StableHLO only: a usage error otherwise.
    let o = xthunk(&["import", "examples/mlp.txtpb", "-o", pb.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// The rows of `bench --filter stablehlo` in a `--json` document.
fn bench_rows(extra: &[&str], dir: &Path) -> Vec<serde_json::Value> {
    let json = dir.join("bench.json");
    let mut args = vec![
        "bench",
        "--backend",
        "host",
        "--filter",
        "stablehlo",
        "--quick",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let stdout = ok(&args);
    assert!(stdout.contains("stablehlo_mlp_step"), "{stdout}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = doc["results"].as_array().unwrap().clone();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "stablehlo_load_cold",
            "stablehlo_load_warm",
            "stablehlo_import_scale",
            "stablehlo_mlp_step",
            "stablehlo_transformer_step",
            "stablehlo_cnn_forward"
        ],
        "{stdout}"
    );
    rows
}

/// The rows without an XLA:CPU baseline (loading and importing) ran, whatever the Python:
/// the warm loads compiled nothing, and the scale row has its memory ratio.
fn check_load_rows(row: &serde_json::Value) {
    let name = row["name"].as_str().unwrap();
    assert_eq!(row["status"], "ran", "{row}");
    assert!(row["value"]["median"].as_f64().unwrap() > 0.0, "{row}");
    let notes = row["notes"].to_string();
    match name {
        "stablehlo_load_cold" => assert!(notes.contains("1 C++ compiles"), "{notes}"),
        "stablehlo_load_warm" => assert!(
            notes.contains("0 C++ compiles, 0 from the disk cache")
                && notes.contains("a second load compiles nothing"),
            "{notes}"
        ),
        _ => {
            assert!(notes.contains("100 levels"), "{notes}");
            if std::path::Path::new("/proc/self/clear_refs").exists() {
                assert!(row["ratio"]["median"].as_f64().unwrap() > 0.0, "{row}");
            }
        }
    }
}

/// `bench --filter stablehlo --quick` (the small programs) on the host: each row has its
/// ratio against XLA:CPU on the same StableHLO text and the kernels-per-step line, or, where
/// the Python found has no jax, is skipped with the reason (never failed); a Python that does
/// not exist skips them with the reason, exit status 0. The loading rows (cold and warm
/// loads, the import at scale) run either way. With `XTHUNK_REQUIRE_JAX` set (CI,
/// once its venv has jax) a skipped comparison fails.
#[test]
fn bench_rows_compare_with_xla_or_say_why_not() {
    let dir = scratch("bench");
    for row in bench_rows(&[], &dir) {
        if !row["name"].as_str().unwrap().ends_with("_step")
            && row["name"] != "stablehlo_cnn_forward"
        {
            check_load_rows(&row);
            continue;
        }
        match row["status"].as_str().unwrap() {
            "ran" => {
                assert!(row["ratio"]["median"].as_f64().unwrap() > 0.0, "{row}");
                assert_eq!(row["goal"], serde_json::Value::Null, "{row}");
                assert_eq!(row["verdict"], "info", "{row}");
                let notes = row["notes"].to_string();
                assert!(
                    notes.contains("kernels per step: xthunk ")
                        && notes.contains("kernel launches")
                        && notes.contains("fusions"),
                    "{notes}"
                );
                assert!(notes.contains("results checked once"), "{notes}");
            }
            "skipped" => {
                let why = row["reason"].as_str().unwrap();
                assert!(why.starts_with("no XLA:CPU baseline: "), "{why}");
                // CI sets this once its venv has jax: the comparison must then run.
                assert!(
                    std::env::var_os("XTHUNK_REQUIRE_JAX").is_none(),
                    "XTHUNK_REQUIRE_JAX is set: {why}"
                );
                eprintln!("SKIPPED the XLA:CPU comparison: {why}");
            }
            other => panic!("row {other}: {row}"),
        }
    }
    let missing = dir.join("no-such-python");
    for row in bench_rows(&["--python", missing.to_str().unwrap()], &dir) {
        if !row["name"].as_str().unwrap().ends_with("_step")
            && row["name"] != "stablehlo_cnn_forward"
        {
            check_load_rows(&row);
            continue;
        }
        assert_eq!(row["status"], "skipped", "{row}");
        let why = row["reason"].as_str().unwrap();
        assert!(
            why.contains("cannot start") && why.contains("no-such-python"),
            "{why}"
        );
    }
}

#[test]
fn donated_arguments_are_listed_as_aliases_and_run() {
    // JAX's MLP training step lowered with donate_argnums=(0,) (python/tests/test_donate.py).
    let step = "python/tests/data/mlp_step_donated.mlir";
    let listing = ok(&["inspect", step]);
    assert!(
        listing.contains("aliases (an output that may reuse a parameter's buffer):"),
        "{listing}"
    );
    assert!(
        listing.contains("output 2 out2  <-  parameter 2 arg2"),
        "{listing}"
    );
    let stdout = ok(&["run", step, "--backend", "host"]);
    assert!(stdout.contains("output out4: f32[]"), "{stdout}");
}

#[test]
fn a_shard_map_program_takes_and_gives_global_values_on_its_ranks() {
    const SHARD_MAP: &str = "stablehlo/tests/fixtures/shard_map.mlir";
    let dir = scratch("shard_map");
    // Integers in f32: every sum exact in any order.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut state = seed | 1;
    let x: Vec<f32> = (0..32)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 41) as f32 - 20.0
        })
        .collect();
    let input = dir.join("x.npy");
    write_npy(&input, &[8, 4], &x);
    let arg = format!("arg0={}", input.display());
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    // The fixture (stablehlo/tests/fixtures/make.py): rank r holds rows 2r..2r+2 (a_r) and
    // gives psum(a) + psum_scatter(all_gather(a)) = 4 a_r + all_to_all(a, 1, 1) (column i
    // from a_i's column r) + ppermute (a_{r-1}) + r; the global result is those blocks.
    let a = |r: usize, i: usize, j: usize| x[(2 * r + i) * 4 + j];
    let mut want = vec![];
    for r in 0..4 {
        for i in 0..2 {
            for j in 0..4 {
                let s: f32 = (0..4).map(|q| a(q, i, j)).sum();
                want.push(s + 4.0 * a(r, i, j) + a(j, i, r) + a((r + 3) % 4, i, j) + r as f32);
            }
        }
    }
    let args = [
        "run",
        SHARD_MAP,
        "--backend",
        "host",
        "--devices",
        "4",
        "--input",
        &arg,
        "--output-dir",
        o,
    ];
    ok(&args);
    for r in 0..4 {
        let got = read_npy(&out.join(format!("rank{r}")).join("out0.npy"));
        assert_eq!(got, want, "rank {r} (seed {seed})");
    }
    // Random inputs: rank 0's global values on every rank, so every rank gives one result.
    let stdout = ok(&["run", SHARD_MAP, "--backend", "host", "--devices", "4"]);
    let hashes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("output out0"))
        .filter_map(|l| l.split("fnv1a=").nth(1))
        .collect();
    assert_eq!(hashes.len(), 4, "{stdout}");
    assert!(hashes.iter().all(|h| *h == hashes[0]), "{stdout}");
    // Its mesh has 4 devices: any other count is a usage error naming 4.
    let o = xthunk(&["run", SHARD_MAP, "--backend", "host", "--devices", "2"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a sharded program of 4 ranks") && err.contains("not 2"),
        "{err}"
    );
}
