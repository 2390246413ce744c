//! cargo-fuzz target `host`: bytes decoded as a program and, within the resource bounds of
//! `fuzz/harness/bounds.rs`, loaded and executed twice on a host device with a deadline; the
//! outputs must have the signature's sizes (`fuzz/harness/targets.rs`). Start it from the
//! binary seeds (`docs/fuzzing.md`): random bytes rarely decode.
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

use std::sync::{Arc, OnceLock};
use xthunk_core::backend::Device;

fn device() -> &'static Arc<dyn Device> {
    static DEVICE: OnceLock<Arc<dyn Device>> = OnceLock::new();
    DEVICE.get_or_init(|| match harness::targets::host_device() {
        Ok(d) => d,
        Err(e) => panic!("harness: {e}"),
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(property) = harness::targets::host(data, device()) {
        harness::known::fail(&property);
    }
});
