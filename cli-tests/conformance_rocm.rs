//! The conformance suite on the ROCm backend, with the clique provider the facade registers
//! with it (RCCL): on a machine without an AMD GPU every check is listed as ignored, with the
//! probe's reason in its kind.

#[path = "common/suite.rs"]
mod suite;

fn main() {
    suite::run_suite("rocm")
}
