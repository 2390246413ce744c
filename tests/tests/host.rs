//! The conformance suite on the host backend.

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let backend = std::sync::Arc::new(xthunk_core::host::HostBackend::new());
    libtest_mimic::run(&args, xthunk_conformance::trials(backend)).exit();
}
