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

use std::sync::Arc;
use std::time::Duration;
use xthunk_core::backend::Device;
use xthunk_core::collectives::Timeouts;

pub mod checks;
mod context;
pub mod expect;
mod harness;
pub mod reference;
mod report;
pub mod util;

pub use context::{Collectives, cliques_for};
pub use expect::{Expectation, Expectations};
pub use harness::{Subject, panic_message, run, run_checks, run_observed, trials};
pub use report::{CheckReport, Outcome, Report};
pub use xthunk_core::collectives::CliqueFactory;

/// A failed check: what differed.
#[derive(Debug, thiserror::Error)]
pub enum CheckFailure {
    #[error("{0}")]
    Mismatch(String),
    #[error("backend error: {0}")]
    Backend(#[from] xthunk_core::Error),
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// The body of a check on one device.
pub type CheckFn = Box<dyn Fn(&Arc<dyn Device>) -> Result<(), CheckFailure> + Send + Sync>;

/// The body of a check on several devices.
pub type CollectiveCheckFn = Box<dyn Fn(&Collectives) -> Result<(), CheckFailure> + Send + Sync>;

/// What a check runs on.
pub enum CheckBody {
    /// The device under test.
    Device(CheckFn),
    /// The first `ranks` devices of a [`Collectives`] context (rank `r` on its device `r`).
    Collectives {
        ranks: usize,
        run: CollectiveCheckFn,
    },
}

/// One named check. Names are `area/what`, e.g. `kernels/add_f32`, `gemm/f16_nt_odd`.
pub struct Check {
    pub name: String,
    pub run: CheckBody,
    /// Runs alone: no other check of this process runs at the same time (checks that compare
    /// device-wide memory statistics, or reuse freed addresses).
    pub exclusive: bool,
    /// The failure the check provokes on purpose, which the clique provider must detect.
    pub provokes: Option<Provoked>,
    /// What the check needs besides the device under test (e.g. a C++ compiler for the CPU
    /// execution it compares with): `Err(why)` reports it skipped, with why, not run.
    pub requires: Option<Requirement>,
}

/// A precondition of a check (see [`Check::requiring`]).
pub type Requirement = fn() -> Result<(), String>;

/// A collective failure a check provokes on purpose: on a clique provider that does not
/// detect it ([`xthunk_core::collectives::Undetected`]) the check is unsupported, with the
/// provider's reason (its ranks would wait until aborted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provoked {
    /// Ranks issuing different operations.
    Mismatch,
    /// A rank that never issues the operation its peers wait for.
    MissingRank,
}

impl Check {
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&Arc<dyn Device>) -> Result<(), CheckFailure> + Send + Sync + 'static,
    ) -> Self {
        Check {
            name: name.into(),
            run: CheckBody::Device(Box::new(f)),
            exclusive: false,
            provokes: None,
            requires: None,
        }
    }

    /// A check on `ranks` devices with communicators among them (see [`Collectives`]).
    /// Collective checks run one at a time, never beside an exclusive check.
    pub fn collective(
        name: impl Into<String>,
        ranks: usize,
        f: impl Fn(&Collectives) -> Result<(), CheckFailure> + Send + Sync + 'static,
    ) -> Self {
        Check {
            name: name.into(),
            run: CheckBody::Collectives {
                ranks,
                run: Box::new(f),
            },
            exclusive: false,
            provokes: None,
            requires: None,
        }
    }

    /// The same check, needing what `requirement` checks (skipped, with why, where it fails).
    pub fn requiring(self, requirement: Requirement) -> Self {
        Check {
            requires: Some(requirement),
            ..self
        }
    }

    /// The same check, provoking `failure` on purpose (see [`Provoked`]).
    pub fn provoking(self, failure: Provoked) -> Self {
        Check {
            provokes: Some(failure),
            ..self
        }
    }

    /// The devices the check needs.
    pub fn ranks(&self) -> usize {
        match &self.run {
            CheckBody::Device(_) => 1,
            CheckBody::Collectives { ranks, .. } => *ranks,
        }
    }

    /// A check that runs alone (see the `exclusive` field).
    pub fn exclusive(
        name: impl Into<String>,
        f: impl Fn(&Arc<dyn Device>) -> Result<(), CheckFailure> + Send + Sync + 'static,
    ) -> Self {
        Check {
            exclusive: true,
            ..Check::new(name, f)
        }
    }
}

/// The most devices (ranks) a collective check uses.
pub const MAX_RANKS: usize = 4;

/// Rendezvous timeouts of the communicators of ordinary collective checks: generous, so that a
/// loaded machine never fails a correct run (a hang still fails, after `terminate_after`).
pub const CHECK_TIMEOUTS: Timeouts = Timeouts::new(Duration::from_secs(2), Duration::from_secs(30));

/// Rendezvous timeouts of the communicators of the checks that make collectives fail on
/// purpose (mismatched operations, a rank that never arrives).
pub const FAILURE_TIMEOUTS: Timeouts =
    Timeouts::new(Duration::from_millis(300), Duration::from_secs(2));

/// Every check of the suite.
pub fn all_checks() -> Vec<Check> {
    checks::all()
}
