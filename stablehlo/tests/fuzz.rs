//! The stable fuzz test of the StableHLO reader (docs/fuzzing.md, target `mlir`): mutated
//! fixture texts through `parse` and `dense::decode` for a bounded number of cases from a
//! fixed seed (`XTHUNK_FUZZ_CASES`, `XTHUNK_FUZZ_SEED`), each within a time limit; any panic,
//! hang or broken property fails the test with the minimized input and its replay command.
//! The harness pieces come from `fuzz/harness/` (the reader needs none of the program targets).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/harness"]
#[allow(dead_code)]
mod harness {
    pub mod bytes;
    pub mod known;
    pub mod mlir;
    pub mod outcome;
    pub mod pool;
    pub mod rng;
    pub mod runner;
    pub mod text;
}

use harness::outcome::Outcome;
use harness::runner::{self, Report, Settings};
use std::time::Duration;

/// Default case count, sized for CI (debug build, 2 cores).
const CASES: u64 = 10_000;

fn settings(cases: u64) -> Settings {
    runner::settings("mlir", cases, Duration::from_secs(20)).unwrap_or_else(|e| panic!("{e}"))
}

fn check(report: &Report) {
    println!("{}{}", report.summary(), report.known_details());
    assert!(
        report.failures.is_empty(),
        "{}{}",
        report.summary(),
        report.details("cargo test -p xthunk-stablehlo --test fuzz fuzz_mlir")
    );
    // The mutants get past the first checks: some parse, the rest fail in many ways.
    if report.cases >= 1000 {
        assert!(
            report.accepted * 100 >= report.cases,
            "{}",
            report.summary()
        );
        assert!(report.classes >= 20, "{}", report.summary());
    }
}

#[test]
fn fuzz_mlir() {
    let report = runner::run(&settings(CASES), harness::mlir::MlirFuzzer::new());
    check(&report);
}

/// Every seed parses (a seed that does not is a defect of the corpus).
#[test]
fn seeds_parse() {
    for (name, text) in harness::mlir::SEEDS {
        let r = harness::mlir::target(text.as_bytes());
        assert_eq!(r, Ok(Outcome::Accepted { ran: false }), "{name}");
    }
}

/// The cargo-fuzz corpus: the seeds as files under `fuzz/corpus/mlir/` (`--ignored`).
#[test]
#[ignore = "writes fuzz/corpus/mlir/ for cargo-fuzz"]
fn write_cargo_fuzz_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/mlir");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in harness::mlir::SEEDS {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn replay(text: &str) -> Result<Outcome, String> {
    runner::check_one(harness::mlir::MlirFuzzer::new(), text.as_bytes())
}

/// Found by the long run (seed 7): a generic op with an empty name was read, and its errors
/// named no operation.
#[test]
fn regression_empty_op_name() {
    let r = replay("\"\"");
    assert!(matches!(r, Ok(Outcome::Rejected { .. })), "{r:?}");
    let e = xthunk_stablehlo::parse("module {\n  \"\"() : () -> ()\n}\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "2:3: an empty operation name (reading builtin.module)"
    );
}

/// Found by the long run (seed 7): a NaN float attribute did not equal itself, so two parses of
/// one text compared unequal; floats compare by their bits.
#[test]
fn regression_nan_attribute_equals_itself() {
    let text = "module {\n  func.func @n(%a: tensor<4xf32>) {\n    %0 = stablehlo.custom_call @t(%a) {ag = {a = 0x7FC00000 : f32}} : (tensor<4xf32>) -> tensor<4xf32>\n    return\n  }\n}\n";
    assert_eq!(replay(text), Ok(Outcome::Accepted { ran: false }));
    let (a, b) = (
        xthunk_stablehlo::parse(text).unwrap(),
        xthunk_stablehlo::parse(text).unwrap(),
    );
    assert_eq!(a, b);
    let zero = xthunk_stablehlo::parse(&text.replace("0x7FC00000", "0.0")).unwrap();
    let minus_zero = xthunk_stablehlo::parse(&text.replace("0x7FC00000", "-0.0")).unwrap();
    assert_ne!(zero, minus_zero);
}
