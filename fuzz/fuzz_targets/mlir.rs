//! cargo-fuzz target `mlir`: bytes (read as UTF-8, lossily) through the StableHLO reader
//! (`xthunk_stablehlo::parse`, then every `dense` value decoded); refusals are one line with a
//! position inside the text (`fuzz/harness/mlir.rs`). Only the harness pieces the reader's
//! target needs are included: it depends on none of the program targets.
#![no_main]

#[path = "../harness"]
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

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(property) = harness::mlir::target(data) {
        harness::known::fail(&property);
    }
});
