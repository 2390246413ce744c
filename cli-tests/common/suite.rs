//! The conformance suite on one backend of the `xthunk` facade, as a `cargo test` target
//! (harness = false), with the clique provider the facade registers with that backend. On a
//! machine without the backend's GPU (or driver) every check is listed as ignored, with the
//! probe's reason in its kind.

/// Runs the suite on the backend named `backend` of [`xthunk::Runtime`] and exits.
pub fn run_suite(backend: &str) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let rt = xthunk::Runtime::with_host_devices(xthunk_conformance::MAX_RANKS);
    let Some(b) = rt.registry().get(backend).cloned() else {
        eprintln!(
            "conformance: backend `{backend}` is not in this build (it has: {})",
            rt.registry().names().join(", ")
        );
        std::process::exit(1);
    };
    let subject = xthunk_conformance::Subject {
        cliques: rt.collectives(backend).cliques,
        ..xthunk_conformance::Subject::new(b)
    };
    libtest_mimic::run(&args, xthunk_conformance::trials(subject)).exit()
}
