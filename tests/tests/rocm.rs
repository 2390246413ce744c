//! The conformance suite on the ROCm backend: on a machine without an AMD GPU every check is
//! listed as ignored, with the probe's reason in its kind.

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let backend = std::sync::Arc::new(xthunk_rocm::RocmBackend::new());
    libtest_mimic::run(&args, xthunk_conformance::trials(backend)).exit();
}
