//! The conformance suite on the host backend, with 4 devices (the collective checks run on 1
//! to 4 ranks).

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let backend = std::sync::Arc::new(xthunk_core::host::HostBackend::with_devices(
        xthunk_conformance::MAX_RANKS,
    ));
    libtest_mimic::run(&args, xthunk_conformance::trials(backend)).exit();
}
