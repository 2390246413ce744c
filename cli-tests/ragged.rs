//! `ragged_all_to_all` through the binary: a program written as `.txtpb`, per-rank operands
//! and index arrays as `.npy` (`--input NAME=FILE{rank}.npy`), run with `run --devices 4` on
//! the host and on emulated CUDA and ROCm, and as launched jobs (`launch -n 4` on the host,
//! `launch -n 2 -- run --devices 2` on emulated CUDA and ROCm); every rank's output must be
//! what the definition gives.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/emulator.rs"]
mod emulator;
use emulator::{emulated_command, have_emulator};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xthunk::builder::ExecutableBuilder;
use xthunk::ir::{DType, RaggedAllToAllThunk};

const BIN: &str = env!("CARGO_BIN_EXE_xthunk");
const RANKS: usize = 4;
/// f32 elements per row.
const ROW: usize = 2;
/// Rows in every operand and output: each rank sends and receives 0 + 1 + 2 + 3.
const ROWS: usize = 6;
const ARRAYS: [&str; 4] = [
    "input_offsets",
    "send_sizes",
    "output_offsets",
    "recv_sizes",
];

/// Rows from rank `s` to rank `t`: every count 0..3 once per sender and per receiver.
fn size(s: usize, t: usize) -> usize {
    (s + t) % RANKS
}

/// Where rank `s`'s rows for `t` start in its operand (parts in rank order).
fn input_offset(s: usize, t: usize) -> usize {
    (0..t).map(|u| size(s, u)).sum()
}

/// Where rank `s`'s rows start in rank `t`'s output (parts in sender order).
fn output_offset(s: usize, t: usize) -> usize {
    (0..s).map(|u| size(u, t)).sum()
}

fn operand(r: usize) -> Vec<f32> {
    (0..ROWS * ROW).map(|i| (100 * r + i) as f32).collect()
}

fn expected(t: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; ROWS * ROW];
    for s in 0..RANKS {
        let (from, to, n) = (input_offset(s, t), output_offset(s, t), size(s, t));
        y[to * ROW..(to + n) * ROW].copy_from_slice(&operand(s)[from * ROW..(from + n) * ROW]);
    }
    y
}

fn write_npy<T: npyz::AutoSerialize + Copy>(path: &Path, data: &[T]) {
    use npyz::WriterBuilder;
    let mut out = vec![];
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[data.len() as u64])
        .writer(&mut out)
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
    std::fs::write(path, out).unwrap();
}

/// The program and every rank's inputs under `dir`; the `run` arguments naming them.
fn prepare(dir: &Path) -> Vec<String> {
    let mut b = ExecutableBuilder::new("ragged");
    let x = b.parameter("x", DType::F32, &[(ROWS * ROW) as u64]);
    let ix: Vec<_> = ARRAYS
        .iter()
        .map(|a| b.parameter(a, DType::I32, &[RANKS as u64]))
        .collect();
    let y = b.output("y", DType::F32, &[(ROWS * ROW) as u64]);
    b.push(
        RaggedAllToAllThunk {
            operand: x.slice(),
            output: y.slice(),
            input_offsets: ix[0].slice(),
            send_sizes: ix[1].slice(),
            output_offsets: ix[2].slice(),
            recv_sizes: ix[3].slice(),
            dtype: DType::F32,
            index_dtype: DType::I32,
            row_elements: ROW as u64,
            groups: vec![],
        }
        .into(),
    );
    let program = dir.join("ragged.txtpb");
    xthunk::proto::save_file(&program, &b.build().unwrap()).unwrap();
    for r in 0..RANKS {
        write_npy(&dir.join(format!("x{r}.npy")), &operand(r));
        let arrays: [Vec<i32>; 4] = [
            (0..RANKS).map(|t| input_offset(r, t) as i32).collect(),
            (0..RANKS).map(|t| size(r, t) as i32).collect(),
            (0..RANKS).map(|t| output_offset(r, t) as i32).collect(),
            (0..RANKS).map(|s| size(s, r) as i32).collect(),
        ];
        for (name, a) in ARRAYS.iter().zip(&arrays) {
            write_npy(&dir.join(format!("{name}{r}.npy")), a);
        }
    }
    let mut args = vec![];
    for name in std::iter::once("x").chain(ARRAYS) {
        args.push("--input".to_string());
        args.push(format!(
            "{name}={}",
            dir.join(format!("{name}{{rank}}.npy")).display()
        ));
    }
    args.push(program.display().to_string());
    args
}

fn check_outputs(what: &str, dir: &Path) {
    for t in 0..RANKS {
        let path = dir.join(format!("rank{t}/y.npy"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{what}: {path:?}: {e}"));
        let got = npyz::NpyFile::new(&bytes[..])
            .unwrap()
            .into_vec::<f32>()
            .unwrap();
        assert_eq!(got, expected(t), "{what}: rank {t}");
    }
}

fn scratch(name: &str) -> PathBuf {
    // Short: the emulator's rendezvous sockets live below (at most 107 bytes a path).
    let d = std::env::temp_dir().join(format!("xrg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("tmp")).unwrap();
    d
}

fn assert_ran(what: &str, c: &mut Command) -> String {
    let o = c
        .stdin(Stdio::null())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what}:\n{text}");
    text
}

#[test]
fn host_run_and_job() {
    let d = scratch("host");
    let inputs = prepare(&d);
    let out = d.join("spmd");
    assert_ran(
        "run --devices 4 on the host",
        Command::new(BIN)
            .args(["run", "--backend", "host", "--devices", "4", "--output-dir"])
            .arg(&out)
            .args(&inputs),
    );
    check_outputs("host, run --devices 4", &out);
    let out = d.join("job");
    assert_ran(
        "launch -n 4 on the host",
        Command::new(BIN)
            .args([
                "launch",
                "-n",
                "4",
                "--",
                "run",
                "--backend",
                "host",
                "--output-dir",
            ])
            .arg(&out)
            .args(&inputs)
            .env("TMPDIR", d.join("tmp")),
    );
    check_outputs("host, launch -n 4", &out);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn emulated_gpus_run_and_job() {
    if !have_emulator("emulated_gpus_run_and_job") {
        return;
    }
    let d = scratch("emu");
    let inputs = prepare(&d);
    for backend in ["cuda", "rocm"] {
        let out = d.join(format!("{backend}-spmd"));
        let what = format!("run --devices 4 on emulated {backend}");
        let text = assert_ran(
            &what,
            emulated_command(BIN)
                .args([
                    "run",
                    "--backend",
                    backend,
                    "--devices",
                    "4",
                    "--output-dir",
                ])
                .arg(&out)
                .args(&inputs)
                .env("XTHUNK_EMU_DEVICES", "4")
                .env("TMPDIR", d.join("tmp")),
        );
        assert!(text.contains("EMULATED"), "{what}: not labelled\n{text}");
        check_outputs(&what, &out);
        let out = d.join(format!("{backend}-job"));
        let what = format!("launch -n 2 -- run --devices 2 on emulated {backend}");
        assert_ran(
            &what,
            emulated_command(BIN)
                .args(["launch", "-n", "2", "--", "run", "--backend", backend])
                .args([
                    "--devices",
                    "2",
                    "--collective-timeout",
                    "30",
                    "--output-dir",
                ])
                .arg(&out)
                .args(&inputs)
                .env("XTHUNK_EMU_DEVICES", "4")
                .env("TMPDIR", d.join("tmp")),
        );
        check_outputs(&what, &out);
    }
    let _ = std::fs::remove_dir_all(&d);
}
