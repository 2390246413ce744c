//! One named check ([`Check`]): its body on one device or on several ([`CheckBody`]), whether
//! it runs alone, what it needs and the collective failure it provokes on purpose ([`Provoked`]).

use crate::context::Collectives;
use crate::failure::CheckFailure;
use std::sync::Arc;
use xthunk_core::backend::Device;

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
