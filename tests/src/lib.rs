//! The xthunk conformance suite: checks written once over the backend traits and run on any
//! backend, from `cargo test` (through `libtest-mimic`) and from `xthunk conformance`.
//!
//! Every numerical check uses fresh random inputs, poisons its outputs first, and compares
//! with an f64 reference computed here, independently of the host backend's kernels, at an
//! explicit tolerance. A backend that is not available is reported as skipped with the
//! reason, never as a pass. Per-backend [`expectations`] list checks that are unsupported or
//! expected to fail, each with a reason; an expected failure that passes is reported.

use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Device};

pub mod checks;
pub mod reference;
pub mod util;

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

/// The body of a check.
pub type CheckFn = Box<dyn Fn(&Arc<dyn Device>) -> Result<(), CheckFailure> + Send + Sync>;

/// One named check. Names are `area/what`, e.g. `kernels/add_f32`, `gemm/f16_nt_odd`.
pub struct Check {
    pub name: String,
    pub run: CheckFn,
    /// Runs alone: no other check of this process runs at the same time (checks that compare
    /// device-wide memory statistics, or reuse freed addresses).
    pub exclusive: bool,
}

impl Check {
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&Arc<dyn Device>) -> Result<(), CheckFailure> + Send + Sync + 'static,
    ) -> Self {
        Check {
            name: name.into(),
            run: Box::new(f),
            exclusive: false,
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

/// Held shared by every running check, and exclusively by exclusive ones (`cargo test` runs
/// checks on several threads at once).
static EXCLUSIVE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs a check body under the exclusivity lock, turning a panic into a failure.
fn guarded(device: &Arc<dyn Device>, check: &Check) -> Result<(), CheckFailure> {
    let _shared;
    let _alone;
    if check.exclusive {
        _alone = EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner());
    } else {
        _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (check.run)(device))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            Err(CheckFailure::Mismatch(format!("the check panicked: {msg}")))
        }
    }
}

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
        _ => vec![],
    }
}

fn expectation_for(backend: &str, name: &str) -> Option<Expectation> {
    expectations(backend)
        .into_iter()
        .find(|(pat, _)| *pat == name || (pat.ends_with('/') && name.starts_with(pat)))
        .map(|(_, e)| e)
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed(String),
    /// Declared unsupported by the backend (not run).
    Unsupported(String),
    /// Failed, as declared.
    ExpectedFailure(String),
    /// Declared as an expected failure but passed: the list is out of date.
    UnexpectedPass(String),
    /// The backend is not available.
    Skipped(String),
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed => "pass",
            Outcome::Failed(_) => "FAIL",
            Outcome::Unsupported(_) => "unsupported",
            Outcome::ExpectedFailure(_) => "xfail",
            Outcome::UnexpectedPass(_) => "XPASS",
            Outcome::Skipped(_) => "skipped",
        }
    }
    /// True for outcomes that fail a run.
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed(_) | Outcome::UnexpectedPass(_))
    }
}

#[derive(Clone, Debug)]
pub struct CheckReport {
    pub name: String,
    pub outcome: Outcome,
    pub duration: Duration,
}

/// The result of running the suite on one device of one backend.
#[derive(Clone, Debug)]
pub struct Report {
    pub backend: String,
    /// Device name, or the reason the backend is unavailable.
    pub device: String,
    pub emulated: bool,
    pub results: Vec<CheckReport>,
}

impl Report {
    /// (passed, failed, unsupported, xfail, xpass, skipped)
    pub fn counts(&self) -> [usize; 6] {
        let mut c = [0; 6];
        for r in &self.results {
            let i = match r.outcome {
                Outcome::Passed => 0,
                Outcome::Failed(_) => 1,
                Outcome::Unsupported(_) => 2,
                Outcome::ExpectedFailure(_) => 3,
                Outcome::UnexpectedPass(_) => 4,
                Outcome::Skipped(_) => 5,
            };
            c[i] += 1;
        }
        c
    }

    /// True when nothing failed and nothing passed unexpectedly.
    pub fn ok(&self) -> bool {
        !self.results.iter().any(|r| r.outcome.is_failure())
    }

    /// True when the backend was unavailable (every check skipped).
    pub fn skipped(&self) -> bool {
        !self.results.is_empty()
            && self
                .results
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Skipped(_)))
    }

    /// A plain-text table: one line per check that did not simply pass, then a summary.
    pub fn table(&self, verbose: bool) -> String {
        let mut s = String::new();
        let label = if self.emulated {
            format!("{} [EMULATED device, not a GPU result]", self.device)
        } else {
            self.device.clone()
        };
        s.push_str(&format!(
            "conformance: backend {} on {}\n",
            self.backend, label
        ));
        for r in &self.results {
            let detail = match &r.outcome {
                Outcome::Passed => {
                    if !verbose {
                        continue;
                    }
                    String::new()
                }
                Outcome::Failed(m)
                | Outcome::Unsupported(m)
                | Outcome::ExpectedFailure(m)
                | Outcome::UnexpectedPass(m)
                | Outcome::Skipped(m) => m.clone(),
            };
            s.push_str(&format!(
                "  {:<11} {:<44} {:>8.1} ms  {}\n",
                r.outcome.label(),
                r.name,
                r.duration.as_secs_f64() * 1e3,
                detail
            ));
        }
        let [p, f, u, x, xp, sk] = self.counts();
        s.push_str(&format!(
            "{} passed, {} failed, {} unsupported, {} expected failures, {} unexpected passes, {} skipped\n",
            p, f, u, x, xp, sk
        ));
        s
    }
}

/// Every check of the suite.
pub fn all_checks() -> Vec<Check> {
    checks::all()
}

fn run_one(backend: &str, device: &Arc<dyn Device>, check: &Check) -> CheckReport {
    let start = Instant::now();
    let exp = expectation_for(backend, &check.name);
    if let Some(Expectation::Unsupported(why)) = exp {
        return CheckReport {
            name: check.name.clone(),
            outcome: Outcome::Unsupported(why.into()),
            duration: Duration::ZERO,
        };
    }
    let result = guarded(device, check);
    let outcome = match (result, exp) {
        (Ok(()), Some(Expectation::ExpectedFailure(why))) => {
            Outcome::UnexpectedPass(format!("declared as expected failure ({why}) but passed"))
        }
        (Ok(()), _) => Outcome::Passed,
        (Err(e), Some(Expectation::ExpectedFailure(why))) => {
            Outcome::ExpectedFailure(format!("{why}: {e}"))
        }
        (Err(CheckFailure::Unsupported(m)), _) => {
            Outcome::Failed(format!("unsupported but not declared so: {m}"))
        }
        (Err(e), _) => Outcome::Failed(e.to_string()),
    };
    CheckReport {
        name: check.name.clone(),
        outcome,
        duration: start.elapsed(),
    }
}

/// Probes `backend` and runs every check whose name contains `filter` on its device
/// `ordinal`; when the backend is unavailable, every check is reported as skipped with why.
pub fn run(backend: &dyn Backend, ordinal: usize, filter: Option<&str>) -> Report {
    let checks: Vec<Check> = all_checks()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
        .collect();
    let skipped = |reason: String| Report {
        backend: backend.name().into(),
        device: reason.clone(),
        emulated: false,
        results: checks
            .iter()
            .map(|c| CheckReport {
                name: c.name.clone(),
                outcome: Outcome::Skipped(reason.clone()),
                duration: Duration::ZERO,
            })
            .collect(),
    };
    let device = match backend.probe().and_then(|info| {
        if info.devices.is_empty() {
            Err(xthunk_core::Error::Unavailable {
                backend: backend.name().into(),
                reason: "no device found".into(),
            })
        } else {
            backend.device(ordinal)
        }
    }) {
        Ok(d) => d,
        Err(e) => return skipped(e.to_string()),
    };
    let results = checks
        .iter()
        .map(|c| {
            let r = run_one(backend.name(), &device, c);
            tracing::info!(check = %c.name, outcome = r.outcome.label(), "conformance");
            r
        })
        .collect();
    Report {
        backend: backend.name().into(),
        device: device.info().name.clone(),
        emulated: device.info().emulated,
        results,
    }
}

/// The suite as `libtest-mimic` trials for a `cargo test` target (harness = false): an
/// unavailable backend yields ignored trials whose name carries the reason.
pub fn trials(backend: Arc<dyn Backend>) -> Vec<libtest_mimic::Trial> {
    use libtest_mimic::{Failed, Trial};
    let name = backend.name();
    let device = backend.probe().and_then(|info| {
        if info.devices.is_empty() {
            Err(xthunk_core::Error::Unavailable {
                backend: name.into(),
                reason: "no device found".into(),
            })
        } else {
            backend.device(0)
        }
    });
    match device {
        Err(e) => {
            let reason = e.to_string();
            eprintln!("conformance: backend {name} skipped: {reason}");
            all_checks()
                .into_iter()
                .map(|c| {
                    Trial::test(format!("{name}::{}", c.name), || Ok(()))
                        .with_ignored_flag(true)
                        .with_kind(format!("skipped: {reason}"))
                })
                .collect()
        }
        Ok(device) => all_checks()
            .into_iter()
            .map(|c| {
                let d = device.clone();
                let bname = name.to_string();
                Trial::test(format!("{name}::{}", c.name), move || {
                    let r = run_one(&bname, &d, &c);
                    match r.outcome {
                        Outcome::Passed | Outcome::ExpectedFailure(_) | Outcome::Unsupported(_) => {
                            Ok(())
                        }
                        other => Err(Failed::from(format!("{}: {other:?}", c.name))),
                    }
                })
            })
            .collect(),
    }
}
