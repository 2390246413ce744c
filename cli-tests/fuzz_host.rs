//! Fuzzing that stays (issue 18), in the root crate: mutated programs (from the examples and
//! the fuzzing seeds, within the resource bounds of `fuzz/harness/bounds.rs`) loaded and
//! executed on the host backend with a deadline, and mutated `.npy` files through the CLI's
//! reader (`src/cli/npy.rs`, compiled into this test as the binary compiles it). Counts come
//! from `XTHUNK_FUZZ_CASES` (see `docs/fuzzing.md`); any panic (on the test's thread or a
//! runtime thread), hang or violated property fails the test with the minimized input (hex),
//! the seed and the command that replays it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../fuzz/harness/mod.rs"]
#[allow(dead_code)]
mod harness;

// The CLI's `.npy` reader and the error type it returns (`npy.rs` names it `super::error`).
#[path = "../src/cli/error.rs"]
#[allow(dead_code)]
mod error;
#[path = "../src/cli/npy.rs"]
#[allow(dead_code)]
mod npy;
// `npy.rs` and `error.rs` use the CLI's bounded host buffers (`super::tensor`).
#[path = "../src/cli/tensor.rs"]
#[allow(dead_code)]
mod tensor;

use harness::runner::{self, Report, Settings};
use harness::{corpus, fuzzers};
use std::time::Duration;

/// Default case counts, sized for CI (debug build, 2 cores): the host count yields at least
/// 1,000 loaded and executed programs.
const HOST_CASES: u64 = 2_000;
const NPY_CASES: u64 = 10_000;

fn settings(name: &'static str, cases: u64, timeout: Duration) -> Settings {
    runner::settings(name, cases, timeout).unwrap_or_else(|e| panic!("{e}"))
}

fn check(report: &Report, name: &str) {
    println!("{}{}", report.summary(), report.known_details());
    assert!(
        report.failures.is_empty(),
        "{}{}",
        report.summary(),
        report.details(&format!("cargo test -p xthunk --test fuzz_host {name}"))
    );
}

#[test]
fn fuzz_host() {
    let seeds = corpus::seeds().unwrap();
    let s = settings("host", HOST_CASES, Duration::from_secs(60));
    let report = runner::run(&s, fuzzers::HostFuzzer::new(&seeds).unwrap());
    check(&report, "fuzz_host");
    if report.cases >= 1000 {
        // Most cases must get as far as execution, and some executions must succeed.
        assert!(report.accepted * 2 >= report.cases, "{}", report.summary());
        assert!(report.ran * 10 >= report.cases, "{}", report.summary());
    }
}

#[test]
fn fuzz_npy() {
    let scratch = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fuzz-npy-{}.npy", std::process::id()));
    let s = settings("npy", NPY_CASES, Duration::from_secs(20));
    let report = runner::run(
        &s,
        fuzzers::NpyFuzzer::new(npy::read_input, scratch.clone()),
    );
    let _ = std::fs::remove_file(&scratch);
    check(&report, "fuzz_npy");
    if report.cases >= 1000 {
        assert!(
            report.accepted * 100 >= report.cases,
            "{}",
            report.summary()
        );
        assert!(report.classes >= 10, "{}", report.summary());
    }
}

/// The npy seeds are read as the parameters their selector bytes name.
#[test]
fn npy_seeds_read() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let scratch = dir.join(format!("npy-seed-{}.npy", std::process::id()));
    let mut accepted = 0;
    for seed in harness::npy::seeds() {
        let outcome = harness::targets::npy(&seed, &scratch, &npy::read_input).unwrap();
        accepted += matches!(outcome, harness::targets::Outcome::Accepted { .. }) as usize;
    }
    let _ = std::fs::remove_file(&scratch);
    // All but the complex-number seeds (no xthunk dtype) and the Fortran-order 2-D ones.
    assert!(accepted >= 60, "{accepted} seeds accepted");
}

// ---------------------------------------------------------------------------------------------
// Regression tests: minimized inputs the fuzzers found (fuzz/harness/known.rs lists the open
// ones; remove an `ignore` and its entry there when the fix lands).
// ---------------------------------------------------------------------------------------------

/// fuzz_npy, case 256 of the default seed: a version-3 header with the shape
/// (1744073709551615, 4294967296); npyz multiplies the extents unchecked while parsing the
/// header (an overflow panic in debug builds) instead of refusing the file.
#[test]
fn regression_npy_shape_product_overflows() {
    let input = harness::bytes::from_hex(
        "06934e554d50590300740000007b276465736372273a20273c7532272c2027666f727472616e5f6f726465\
         72273a20547275652c20277368617065273a2028313734343037333730393535313631352c20343239343936\
         37323936292c207d2020202020202020202020202020202020202020202020202020202020202020200a",
    )
    .unwrap();
    assert_npy_rejected(&input, "npy-regression");
}

/// cargo fuzz run npy (fork mode, five minutes): a version-3 header whose length field says
/// 0xff00002a bytes; npyz allocates the header buffer at that size before reading it (an
/// out-of-memory under the sanitizer's allocation limit; without one, 4 GiB reserved). The
/// reader must refuse the length without allocating it (a bounded header length).
#[test]
fn regression_npy_huge_header_length_is_refused() {
    let input = harness::bytes::from_hex(
        "00934e554d505903002a0000ff6127646573056336363631272c36363636000000747208934e554d505901\
         0076007b276d6573",
    )
    .unwrap();
    assert_npy_rejected(&input, "npy-header-length");
}

/// Runs `input` through the npy target (a scratch file named after `name`) and asserts that
/// the reader refuses it cleanly.
fn assert_npy_rejected(input: &[u8], name: &str) {
    let scratch = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}.npy", std::process::id()));
    let r = runner::check_one(
        fuzzers::NpyFuzzer::new(npy::read_input, scratch.clone()),
        input,
    );
    let _ = std::fs::remove_file(&scratch);
    assert!(
        matches!(r, Ok(harness::targets::Outcome::Rejected { .. })),
        "{r:?}"
    );
}

/// Writes the seed corpus of the cargo-fuzz targets into `fuzz/corpus/<target>/` (run it once
/// before `cargo fuzz run`, see docs/fuzzing.md).
#[test]
#[ignore = "writes fuzz/corpus/ for cargo fuzz; run on demand"]
fn write_cargo_fuzz_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut files: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for seed in corpus::seeds().unwrap() {
        let stem = std::path::Path::new(seed.name)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        files.push(("decode", format!("{stem}.pb"), seed.binary.clone()));
        files.push(("host", format!("{stem}.pb"), seed.binary.clone()));
        files.push((
            "text",
            format!("{stem}.txtpb"),
            seed.text.as_bytes().to_vec(),
        ));
    }
    for (i, input) in harness::npy::seeds().into_iter().enumerate() {
        files.push(("npy", format!("seed{i:02}.bin"), input));
    }
    for (target, name, bytes) in &files {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    println!("wrote {} files under {}", files.len(), root.display());
}

/// cargo fuzz run npy (a minute from the seeds): a header of nested brackets, here 24 `{`
/// before the dictionary; npyz's header parser (py_literal) takes exponential time on them.
/// The reader must refuse the header within a second.
#[test]
fn regression_npy_nested_header_is_quick() {
    let dict = format!(
        "{}{{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }}",
        "{".repeat(24)
    );
    let mut input = vec![6];
    input.extend(harness::npy::file(1, &dict, &[0, 1, 0, 1]));
    let scratch = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("npy-nested-{}.npy", std::process::id()));
    let (tx, rx) = std::sync::mpsc::channel();
    let path = scratch.clone();
    std::thread::spawn(move || {
        let r = runner::check_one(fuzzers::NpyFuzzer::new(npy::read_input, path), &input);
        let _ = tx.send(r);
    });
    // The thread is left behind if the reader hangs.
    let r = rx.recv_timeout(Duration::from_secs(5));
    let _ = std::fs::remove_file(&scratch);
    assert!(
        matches!(r, Ok(Ok(harness::targets::Outcome::Rejected { .. }))),
        "{r:?}"
    );
}

/// fuzz_host, a long run (cases 37938, 40621, 43346 of seed 8): a `while` with a trip count of
/// 2^40 and an empty body ran for 40 s in a release build (and does not end in a debug
/// build) under a deadline of 500 ms: the executor did not look at the deadline between the
/// trips of a counted loop (fixed: it fails at the deadline, naming the trips issued).
#[test]
fn regression_trip_count_loop_meets_deadline() {
    let text = "abi_version: 1\n\
                allocations { index: 0 size: 1 alignment: 1 temp {} }\n\
                entry { while { pred { size: 1 } trip_count: 1099511627776 } }\n";
    // Run directly: the host target's bounds skip this program.
    let exe = xthunk_proto::parse_text(text).unwrap();
    let device = harness::targets::host_device().unwrap();
    let loaded = xthunk::LoadedExecutable::load(device, exe).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let opts = xthunk::ExecuteOptions {
            deadline: Some(harness::targets::HOST_DEADLINE),
            ..Default::default()
        };
        let _ = tx.send(loaded.run_with_host_data(&[], &opts).map(|_| ()));
    });
    // The thread is left behind if the execution does not stop.
    let limit = harness::targets::HOST_DEADLINE * 10 + Duration::from_secs(5);
    let r = rx.recv_timeout(limit);
    // The deadline error, at the loop's thunk (naming how many trips it had issued).
    let text = match &r {
        Ok(Err(e)) => format!("{e:?}"),
        other => panic!("{other:?}"),
    };
    assert!(
        text.contains("DeadlineExceeded") && text.contains("trips"),
        "{text}"
    );
}
