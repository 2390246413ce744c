//! The xthunk conformance suite: checks written once over the backend traits and run on any
//! backend, from `cargo test` (through `libtest-mimic`) and from `xthunk conformance`.
//!
//! Every numerical check uses fresh random inputs, poisons its outputs first, and compares
//! with an f64 reference computed here, independently of the host backend's kernels, at an
//! explicit tolerance. A backend that is not available is reported as skipped with the
//! reason, never as a pass.
//!
//! The suite runs on a [`Subject`]: a backend, the [`CliqueFactory`] its devices form cliques
//! with (injected: this crate knows no vendor crate; the `xthunk` facade registers one with
//! each backend) and expectations declared by check name. What is unsupported or expected to
//! fail, each with a reason, is decided from what the device and the clique provider say of
//! themselves, never from the backend's name ([`expect`]); an expected failure that passes is
//! reported as XPASS, and fails the run.
//!
//! Most checks run on one device. Collective checks ([`Check::collective`]) run on several
//! devices of the backend under test, given as a [`Collectives`] context: up to [`MAX_RANKS`]
//! devices (the one under test is rank 0) and a clique provider from the subject's factory
//! ([`cliques_for`]). A collective check needing more devices than the backend has is reported
//! as skipped with why; on a backend without a clique provider, as unsupported with why.
//! Collective checks run one at a time (they share the devices and the provider).

mod check;
pub mod checks;
mod context;
pub mod expect;
mod failure;
mod harness;
pub mod reference;
mod report;
pub mod util;

pub use check::{Check, CheckBody, CheckFn, CollectiveCheckFn, Provoked, Requirement};
pub use context::{CHECK_TIMEOUTS, Collectives, FAILURE_TIMEOUTS, MAX_RANKS, cliques_for};
pub use expect::{Expectation, Expectations};
pub use failure::CheckFailure;
pub use harness::{Subject, run, run_checks, run_observed, trials};
pub use report::{CheckReport, Outcome, Report};
pub use util::panic_message;
pub use xthunk_core::collectives::CliqueFactory;

/// Every check of the suite.
pub fn all_checks() -> Vec<Check> {
    checks::all()
}
