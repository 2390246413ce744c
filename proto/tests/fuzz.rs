//! Fuzzing that stays (issue 18): mutated binary programs through decode, conversion and
//! validation, and mutated text programs through the text parser, for a bounded number of
//! cases (`XTHUNK_FUZZ_CASES`, see `docs/fuzzing.md`), from the examples and the fuzzing
//! seeds. Any panic, hang or broken round trip fails the test with the minimized input (hex),
//! the seed, and the command that replays it. The harness lives in `fuzz/harness/` (shared
//! with `cli-tests/fuzz_host.rs` and the cargo-fuzz targets).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/harness/mod.rs"]
#[allow(dead_code)]
mod harness;

use harness::runner::{self, Fuzzer, Report, Settings};
use harness::targets::Outcome;
use harness::{corpus, fuzzers, wire};
use std::time::Duration;

/// Default case counts, sized for CI (debug build, 2 cores).
const DECODE_CASES: u64 = 100_000;
const TEXT_CASES: u64 = 10_000;

fn settings(name: &'static str, cases: u64) -> Settings {
    runner::settings(name, cases, Duration::from_secs(20)).unwrap_or_else(|e| panic!("{e}"))
}

fn check(report: &Report, name: &str) {
    println!("{}{}", report.summary(), report.known_details());
    assert!(
        report.failures.is_empty(),
        "{}{}",
        report.summary(),
        report.details(&format!("cargo test -p xthunk-proto --test fuzz {name}"))
    );
    // The mutators must get past the framing: some mutants load, others fail validation.
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
fn fuzz_decode() {
    let seeds = corpus::seeds().unwrap();
    let report = runner::run(
        &settings("decode", DECODE_CASES),
        fuzzers::DecodeFuzzer::new(&seeds),
    );
    check(&report, "fuzz_decode");
}

#[test]
fn fuzz_text() {
    let seeds = corpus::seeds().unwrap();
    let report = runner::run(
        &settings("text", TEXT_CASES),
        fuzzers::TextFuzzer::new(&seeds),
    );
    check(&report, "fuzz_text");
}

/// Every example program is a seed (a new example joins the corpus in `fuzz/harness/corpus.rs`).
#[test]
fn seeds_cover_every_example() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut examples: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".txtpb"))
        .map(|n| format!("examples/{n}"))
        .collect();
    examples.sort();
    let seeded: Vec<String> = corpus::SEEDS
        .iter()
        .map(|(n, _)| n.to_string())
        .filter(|n| n.starts_with("examples/"))
        .collect();
    assert_eq!(seeded, examples);
}

/// The seeds load, survive both round trips, and the wire parser reproduces their encoding.
#[test]
fn seeds_load_and_round_trip() {
    for seed in corpus::seeds().unwrap() {
        assert_eq!(
            harness::targets::decode(&seed.binary),
            Ok(Outcome::Accepted { ran: false }),
            "{}",
            seed.name
        );
        assert_eq!(
            harness::targets::text(seed.text.as_bytes()),
            Ok(Outcome::Accepted { ran: false }),
            "{}",
            seed.name
        );
        let tree = wire::parse(&seed.binary).expect(seed.name);
        assert_eq!(wire::serialize(&tree), seed.binary, "{}", seed.name);
    }
}

#[test]
fn case_counts_parse() {
    assert_eq!(runner::cases_from(None, "decode", 7), Ok(7));
    assert_eq!(runner::cases_from(Some("500"), "decode", 7), Ok(500));
    assert_eq!(runner::cases_from(Some("x10"), "decode", 7), Ok(70));
    assert_eq!(runner::cases_from(Some("x10,text=3"), "text", 7), Ok(3));
    assert_eq!(runner::cases_from(Some("x10,text=3"), "decode", 7), Ok(70));
    assert_eq!(
        runner::cases_from(Some("1_000_000"), "host", 7),
        Ok(1_000_000)
    );
    assert!(runner::cases_from(Some("many"), "host", 7).is_err());
}

/// A target that panics on inputs holding 0x42 and loops on 0x99: the runner catches the
/// panic, minimizes the input to the one byte, and reports the hang.
struct Planted {
    hangs: bool,
}

impl Fuzzer for Planted {
    fn generate(&mut self, rng: &mut harness::rng::Rng) -> Vec<u8> {
        (0..64).map(|_| rng.byte()).collect()
    }
    fn run(&mut self, input: &[u8]) -> Result<Outcome, String> {
        if self.hangs && input.contains(&0x99) {
            std::thread::sleep(Duration::from_secs(3600));
        }
        if input.contains(&0x42) {
            panic!("planted");
        }
        if input.contains(&0x17) {
            return Err("planted property".into());
        }
        Ok(Outcome::Rejected {
            class: String::new(),
        })
    }
}

#[test]
fn runner_catches_minimizes_and_times_out() {
    let mut s = runner::settings("planted", 200, Duration::from_millis(500)).unwrap();
    s.cases = 200;
    s.replay = None;
    let report = runner::run(&s, Planted { hangs: false });
    let panic = report
        .failures
        .iter()
        .find(|f| f.what.contains("planted") && f.what.starts_with("panic at "))
        .unwrap_or_else(|| panic!("no panic reported: {report:?}"));
    assert!(panic.what.contains("proto/tests/fuzz.rs"), "{}", panic.what);
    assert_eq!(panic.minimized, vec![0x42]);
    let details = report.details("cargo test");
    assert!(
        details.contains("replay: XTHUNK_FUZZ_INPUT=42 cargo test"),
        "{details}"
    );
    let report = runner::run(&s, Planted { hangs: true });
    let hang = report.failures.iter().find(|f| f.what.starts_with("hang"));
    assert!(
        hang.is_some_and(|h| h.minimized.contains(&0x99)),
        "{report:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Regression tests: minimized inputs the fuzzers found (fuzz/harness/known.rs lists the open
// ones; remove an `ignore` and its entry there when the fix lands).
// ---------------------------------------------------------------------------------------------

fn replay_decode(hex: &str) -> Result<Outcome, String> {
    let input = harness::bytes::from_hex(hex).unwrap();
    runner::check_one(fuzzers::DecodeFuzzer::new(&[]), &input)
}

/// fuzz_decode, case 4224 of the default seed: a kernel launched with a block of
/// (2^31-1, 2^31-1, 2^31-1) threads; validation multiplies the extents unchecked
/// (`Dim3::count`, an overflow panic in debug builds) instead of refusing the block.
#[test]
fn regression_block_extents_overflow() {
    let r = replay_decode(
        "08011a07108008180120001a090801108008180120011a090802108008180120021a090803108008180128001a\
         090804108008180128012a24422210011a1e1a1c1a06080110011801221208ffffffff0710ffffffff0718ff\
         ffffff07323f0a090a017710081a0280020a0b0a017410081a02800220010a0b0a017810081a0280022002\
         120b0a017710081a0280022003120b0a017910081a0280022004",
    );
    assert!(matches!(r, Ok(Outcome::Rejected { .. })), "{r:?}");
}

/// fuzz_decode, case 10054 of the default seed: a program with an f32 immediate of bits
/// 0x7f800001 (a signalling NaN) loads from binary, but its text form loads with another NaN:
/// the text format must carry the payload or refuse it.
#[test]
fn regression_nan_payload_through_text() {
    let r = replay_decode(
        "08011a07108008180120001a090801108008180120011a090802108008180120021a090803108008180128001a\
         0908041080081801280122090a0373746412020a002a454243080110011a3d1a3b0a0373746412097363616c\
         655f6633321a06080110011801220608011001180132090a070a03188008100332071205450100807f320512\
         032880022a044a020801323f0a090a017710081a0280020a0b0a017410081a02800220010a0b0a017810081a\
         0280022002120b0a017710081a0280022003120b0a017910081a0280022004",
    );
    assert!(r.is_ok(), "{r:?}");
}
