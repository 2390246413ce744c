//! cargo-fuzz target `decode`: bytes through decode, conversion and validation; a program that
//! loads must survive the binary and text round trips (`fuzz/harness/targets.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(property) = harness::targets::decode(data) {
        harness::known::fail(&property);
    }
});
