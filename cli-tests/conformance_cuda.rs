//! The conformance suite on the CUDA backend, with the clique provider the facade registers
//! with it (NCCL): on a machine without an NVIDIA GPU (or driver) every check is listed as ignored, with the
//! probe's reason in its kind.

#[path = "common/suite.rs"]
mod suite;

fn main() {
    suite::run_suite("cuda")
}
