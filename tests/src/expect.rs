//! What a backend declares about checks: unsupported, or expected to fail, each with why.

/// What a backend declares about a check (matched by exact name or by a `prefix/` ending in
/// `/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expectation {
    Unsupported(&'static str),
    ExpectedFailure(&'static str),
}

/// The declared expectations of a backend.
pub fn expectations(backend: &str) -> Vec<(&'static str, Expectation)> {
    match backend {
        // The host backend is the reference: it must pass everything.
        "host" => vec![],
        // NCCL/RCCL do not compare the operations ranks issue, and a collective waits for its
        // peers without a timeout: a mismatched or missing rank is found only when the
        // communicator is aborted (the executor's watchdog, a coordinator's failure report),
        // not by the checks' short timeouts.
        "cuda" | "rocm" => vec![
            (
                "collectives/mismatch_reported_2ranks",
                Expectation::Unsupported(
                    "NCCL/RCCL do not detect mismatched collectives (they hang until aborted)",
                ),
            ),
            (
                "collectives/missing_rank_2ranks",
                Expectation::Unsupported(
                    "NCCL/RCCL wait for a missing rank without a timeout (until aborted)",
                ),
            ),
        ],
        _ => vec![],
    }
}

pub(crate) fn expectation_for(backend: &str, name: &str) -> Option<Expectation> {
    expectations(backend)
        .into_iter()
        .find(|(pat, _)| *pat == name || (pat.ends_with('/') && name.starts_with(pat)))
        .map(|(_, e)| e)
}
