//! Bad input found by hardening (issue 18), each through the binary: one `error:` line, exit 1
//! (2 for a usage error), no abort, no panic, no hang, nothing written to `--output-dir`.
//!
//! - sizes: a 2^50-byte parameter without `--input` (its random input), gemm strides and
//!   launch extents whose arithmetic overflowed, collective sizes that wrapped;
//! - `.npy` headers with nested brackets (exponential in the old header parser);
//! - float immediates through `.pb -> .txtpb -> .pb`, bit for bit;
//! - the exit status of every usage error of `run`, `compile`, `inspect` and `convert`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

const MLP: &str = "examples/mlp.txtpb";

#[path = "common/binary.rs"]
mod binary;
use binary::{ok, root, text, xthunk};

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    binary::scratch_in("hardening-tests", name)
}

/// Runs a command that must fail with `code`: exactly one `error: ` line on stderr, which
/// contains every needle, and no panic. Returns the line.
fn fails_with(code: i32, args: &[&str], needles: &[&str]) -> String {
    let o = xthunk(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "xthunk {args:?}:\n{err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: expected one error line:\n{err}");
    for n in needles {
        assert!(
            errors[0].contains(n),
            "{args:?}: `{n}` not in: {}",
            errors[0]
        );
    }
    errors[0].to_string()
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.to_str().unwrap().to_string()
}

/// A program whose parameter `x` is `f32[dims]` (`bytes` bytes), copied in part to `y`.
fn big_parameter(dims: u64) -> String {
    format!(
        r#"
abi_version: 1
name: "big_param"
allocations {{ index: 0 size: {bytes} alignment: 64 parameter: 0 }}
allocations {{ index: 1 size: 16 alignment: 64 output: 0 }}
entry {{ copy {{ src {{ allocation: 0 size: 16 }} dst {{ allocation: 1 size: 16 }} }} }}
signature {{
  parameters {{ name: "x" dtype: DTYPE_F32 dims: {dims} allocation: 0 }}
  outputs {{ name: "y" dtype: DTYPE_F32 dims: 4 allocation: 1 }}
}}
"#,
        bytes = dims * 4
    )
}

#[test]
fn a_huge_parameter_without_input_is_one_error_not_an_abort() {
    let dir = scratch("huge_parameter");
    let out = dir.join("out");
    // 2^50 bytes (aborted with SIGABRT: "memory allocation of 1125899906842624 bytes failed"),
    // and 2^40 bytes, which fits the address space but not this machine.
    for (dims, bytes) in [(1u64 << 48, "1125899906842624"), (1 << 38, "1099511627776")] {
        let program = write(&dir, "big.txtpb", &big_parameter(dims));
        let t = Instant::now();
        let line = fails_with(
            1,
            &["run", &program, "--output-dir", out.to_str().unwrap()],
            &["parameter `x`", bytes, "host memory"],
        );
        assert!(t.elapsed() < Duration::from_secs(30), "{line}");
        assert!(!out.exists(), "{line}: the output directory was created");
    }
    // The same program with a small parameter runs.
    let program = write(&dir, "small.txtpb", &big_parameter(4));
    assert!(ok(&["run", &program]).contains("output y: f32[4]"));
}

/// A version-1 `.npy` file with this header text, padded as numpy pads it, and `data`.
fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend(u16::try_from(h.len()).unwrap().to_le_bytes());
    out.extend(h);
    out.extend(data);
    out
}

#[test]
fn npy_headers_with_nested_brackets_fail_fast() {
    let dir = scratch("nested_npy");
    let out = dir.join("out");
    // The issue's file: 14 nested dicts in 107 bytes took 11 s (release) in npyz's header
    // parser, 20 never finished.
    for depth in [14, 20, 1000] {
        let header = format!("{{'descr': {}{}}}", "{".repeat(depth), "}".repeat(depth));
        let file = dir.join(format!("nested{depth}.npy"));
        std::fs::write(&file, npy(&header, &[])).unwrap();
        let input = format!("x={}", file.display());
        let t = Instant::now();
        fails_with(
            1,
            &[
                "run",
                MLP,
                "--input",
                &input,
                "--output-dir",
                out.to_str().unwrap(),
            ],
            &["input `x`", "not a valid .npy file", "'descr'"],
        );
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(!out.exists());
    }
    // A file as numpy writes it still reads, and changes the result.
    let data: Vec<u8> = (0..64 * 512)
        .flat_map(|i| ((i % 5) as f32 * 0.25).to_le_bytes())
        .collect();
    let file = dir.join("x.npy");
    std::fs::write(
        &file,
        npy(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 512), }",
            &data,
        ),
    )
    .unwrap();
    let input = format!("x={}", file.display());
    let given = ok(&["run", MLP, "--input", &input]);
    let random = ok(&["run", MLP]);
    let probs = |s: &str| {
        s.lines()
            .find(|l| l.contains("output probs"))
            .map(String::from)
    };
    assert!(probs(&given).is_some(), "{given}");
    assert_ne!(probs(&given), probs(&random));
}

const GEMM_LDC: &str = r#"
abi_version: 1
allocations { index: 0 size: 256 alignment: 16 temp {} }
allocations { index: 1 size: 256 alignment: 16 temp {} }
entry {
  gemm {
    a { allocation: 0 size: 64 }
    b { allocation: 0 size: 64 }
    c { allocation: 1 size: 64 }
    m: 1 n: 4 k: 4 lda: 4 ldb: 4 ldc: 9223372036854775808
    dtype: DTYPE_F32
  }
}
"#;

const BLOCK: &str = r#"
abi_version: 1
modules { name: "m" images { source { code: "__global__ void k() {}" } } }
entry {
  kernel {
    module: "m" name: "k"
    grid { x: 1 y: 1 z: 1 }
    block { x: 4194304 y: 4194304 z: 1048576 }
  }
}
"#;

const GATHER: &str = r#"
abi_version: 1
allocations { index: 0 size: 4611686018427387904 alignment: 16 temp {} }
allocations { index: 1 size: 64 alignment: 16 temp {} }
entry {
  all_gather {
    src { allocation: 0 size: 4611686018427387904 }
    dst { allocation: 1 size: 0 }
    dtype: DTYPE_F32
    groups { ranks: [0, 1, 2, 3] }
  }
}
"#;

#[test]
fn sizes_whose_arithmetic_overflowed_are_refused_at_load() {
    let dir = scratch("overflow");
    // Each panicked before ("attempt to negate with overflow" in the host gemm, "attempt to
    // multiply with overflow" in validation); in release builds the block wrapped to 0 threads
    // and the gather's 4 · 2^62 bytes to 0, and both passed.
    for (name, program, needles) in [
        (
            "gemm.txtpb",
            GEMM_LDC,
            &["entry[0]", "ldc", "signed 64-bit"][..],
        ),
        (
            "block.txtpb",
            BLOCK,
            &["entry[0]", "block", "18446744073709551616"][..],
        ),
        (
            "gather.txtpb",
            GATHER,
            &["entry[0]", "dst", "overflows"][..],
        ),
    ] {
        let p = write(&dir, name, program);
        fails_with(1, &["run", "--backend", "host", &p], needles);
        fails_with(1, &["inspect", &p], needles);
    }
}

#[test]
fn nan_payloads_survive_pb_txtpb_pb() {
    let dir = scratch("nan");
    let src = write(
        &dir,
        "k.txtpb",
        r#"
abi_version: 1
modules { name: "m" images { source { code: "__global__ void k(float a, double b) {}" } } }
entry {
  kernel {
    module: "m" name: "k"
    grid { x: 1 y: 1 z: 1 }
    block { x: 1 y: 1 z: 1 }
    args { scalar { f32: 1.5 } }
    args { scalar { f64: 2.5 } }
  }
}
"#,
    );
    let pb = dir.join("k.pb");
    ok(&["convert", &src, pb.to_str().unwrap()]);
    // Patch the immediates into NaNs with a payload and the sign set, as a framework writes
    // them (the binary format carries any bits).
    let mut bytes = std::fs::read(&pb).unwrap();
    let patch = |bytes: &mut Vec<u8>, from: &[u8], to: &[u8]| {
        let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
        bytes[at..at + from.len()].copy_from_slice(to);
    };
    patch(&mut bytes, &1.5f32.to_le_bytes(), &[0xFF; 4]);
    patch(
        &mut bytes,
        &2.5f64.to_le_bytes(),
        &0xFFF0_0000_0000_0001u64.to_le_bytes(),
    );
    let nan = dir.join("nan.pb");
    std::fs::write(&nan, &bytes).unwrap();
    let txt = dir.join("nan.txtpb");
    let back = dir.join("back.pb");
    ok(&["convert", nan.to_str().unwrap(), txt.to_str().unwrap()]);
    ok(&["convert", txt.to_str().unwrap(), back.to_str().unwrap()]);
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(text.contains("f32_bits: 4294967295"), "{text}");
    assert!(text.contains("f64_bits: 18442240474082181121"), "{text}");
    // 0xFFFFFFFF came back as 0x7FC00000 (the text's one `NaN`).
    let again = dir.join("again.txtpb");
    ok(&["convert", back.to_str().unwrap(), again.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text);
    let listing = ok(&["inspect", back.to_str().unwrap()]);
    assert!(listing.contains("f32:NaN"), "{listing}");
}

#[test]
fn usage_errors_exit_2_with_one_line_and_write_nothing() {
    let dir = scratch("usage");
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    let a_file = write(&dir, "a_file", "x");
    let json = write(
        &dir,
        "mlp.json",
        &std::fs::read_to_string(root().join(MLP)).unwrap(),
    );
    let npy_path = dir.join("x.npy");
    std::fs::write(&npy_path, b"unused").unwrap();
    let x = format!("x={}", npy_path.display());
    let nosuch = format!("nosuch={}", npy_path.display());
    let never_pb = dir.join("never.pb");
    let never = never_pb.to_str().unwrap();
    let json_out = dir.join("never.json");
    let json_out = json_out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        // run
        (
            vec!["run", MLP, "--input", &nosuch, "--output-dir", out_s],
            vec!["no parameter `nosuch`"],
        ),
        (
            vec!["run", MLP, "--input", &x, "--input", &x],
            vec!["more than once"],
        ),
        (
            vec!["run", MLP, "--output-dir", &a_file],
            vec!["not a directory"],
        ),
        (
            vec!["run", MLP, "--devices", "2", "--output-dir", &a_file],
            vec!["not a directory"],
        ),
        (
            vec!["run", &json, "--output-dir", out_s],
            vec!["unknown program format"],
        ),
        (
            vec!["run", MLP, "--backend", "nosuch", "--output-dir", out_s],
            vec!["--backend nosuch", "no such backend"],
        ),
        (
            vec![
                "run",
                MLP,
                "--backend",
                "host",
                "--device",
                "7",
                "--output-dir",
                out_s,
            ],
            vec!["--device 7", "has 1 device"],
        ),
        // inspect
        (vec!["inspect", &json], vec!["unknown program format"]),
        // convert
        (
            vec!["convert", MLP, json_out],
            vec!["unknown program format"],
        ),
        (
            vec!["convert", &json, never],
            vec!["unknown program format"],
        ),
        // compile: an unknown target or output format, before the program is read
        (
            vec!["compile", "missing.txtpb", "--target", "sm90", "-o", never],
            vec!["unknown target `sm90`"],
        ),
        (
            vec!["compile", MLP, "--target", "sm_90", "-o", json_out],
            vec!["unknown program format"],
        ),
        // clap's own
        (vec!["run", MLP, "--iterations", "0"], vec![]),
        (vec!["run", MLP, "--input", "novalue"], vec![]),
        (vec!["convert", MLP], vec![]),
        (vec!["compile", MLP, "-o", never], vec![]),
        (vec!["inspect"], vec![]),
    ];
    for (args, needles) in &cases {
        fails_with(2, args, needles);
        assert!(!out.exists(), "{args:?} created the output directory");
        assert!(
            !never_pb.exists() && !Path::new(json_out).exists(),
            "{args:?}"
        );
    }
    // Failures that are not usage errors still exit 1.
    fails_with(1, &["run", "missing.txtpb"], &["missing.txtpb"]);
    fails_with(1, &["inspect", "missing.txtpb"], &["missing.txtpb"]);
    fails_with(1, &["run", MLP, "--input", &x], &["not a valid .npy file"]);
}
