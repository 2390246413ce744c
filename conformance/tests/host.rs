//! The conformance suite on the host backend, with 8 devices (the collective checks run on 1
//! to 8 ranks).

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let backend = std::sync::Arc::new(xthunk_core::host::HostBackend::with_devices(
        xthunk_conformance::MAX_RANKS,
    ));
    let subject = xthunk_conformance::Subject::new(backend)
        .with_cliques(std::sync::Arc::new(xthunk_core::host::HostCliqueFactory));
    libtest_mimic::run(&args, xthunk_conformance::trials(subject)).exit();
}
