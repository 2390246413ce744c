//! Running the checks: the locks that keep exclusive and collective checks apart, what may
//! run where, one check's outcome, the whole suite ([`run`]) and its `libtest-mimic` trials
//! ([`trials`]).

use crate::context::collectives_context;
use crate::expect::{Expectation, expectation_for};
use crate::{
    Check, CheckBody, CheckFailure, CheckReport, Collectives, Outcome, Report, all_checks,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Device};

/// Held shared by every running check, and exclusively by exclusive ones (`cargo test` runs
/// checks on several threads at once).
static EXCLUSIVE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by every running collective check: they share devices and communicators (two
/// executions interleaving their collectives on one clique would mismatch), so they run one at
/// a time. Taken before [`EXCLUSIVE`].
static COLLECTIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs a check body under the exclusivity lock, turning a panic into a failure.
fn guarded(
    device: &Arc<dyn Device>,
    collectives: Option<&Collectives>,
    check: &Check,
) -> Result<(), CheckFailure> {
    let _collective;
    if matches!(check.run, CheckBody::Collectives { .. }) {
        _collective = COLLECTIVE.lock().unwrap_or_else(|e| e.into_inner());
    }
    let _shared;
    let _alone;
    if check.exclusive {
        _alone = EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner());
    } else {
        _shared = EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner());
    }
    let body = || match (&check.run, collectives) {
        (CheckBody::Device(f), _) => f(device),
        (CheckBody::Collectives { run, .. }, Some(c)) => run(c),
        (CheckBody::Collectives { .. }, None) => Err(CheckFailure::Unsupported(
            "no multi-device context was given".into(),
        )),
    };
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(p) => Err(CheckFailure::Mismatch(format!(
            "the check panicked: {}",
            panic_message(p.as_ref())
        ))),
    };
    if let (CheckBody::Collectives { .. }, Some(c)) = (&check.run, collectives) {
        c.evict_aborted();
    }
    result
}

/// The message of a panic payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Whether `check` can run here: `Some(outcome)` (declared unsupported, too few devices, no
/// clique provider) when it cannot.
fn precheck(backend: &str, collectives: Option<&Collectives>, check: &Check) -> Option<Outcome> {
    if let Some(Expectation::Unsupported(why)) = expectation_for(backend, &check.name) {
        return Some(Outcome::Unsupported(why.into()));
    }
    match (&check.run, collectives) {
        (CheckBody::Device(_), _) => None,
        (CheckBody::Collectives { ranks, .. }, Some(c)) => c.unavailable(*ranks),
        (CheckBody::Collectives { .. }, None) => {
            Some(Outcome::Unsupported("no multi-device context".into()))
        }
    }
}

fn run_one(
    backend: &str,
    device: &Arc<dyn Device>,
    collectives: Option<&Collectives>,
    check: &Check,
) -> CheckReport {
    let start = Instant::now();
    if let Some(outcome) = precheck(backend, collectives, check) {
        return CheckReport {
            name: check.name.clone(),
            outcome,
            duration: Duration::ZERO,
        };
    }
    let exp = expectation_for(backend, &check.name);
    let result = guarded(device, collectives, check);
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
    let collectives = checks
        .iter()
        .any(|c| matches!(c.run, CheckBody::Collectives { .. }))
        .then(|| collectives_context(backend, ordinal, &device));
    let results = checks
        .iter()
        .map(|c| {
            let r = run_one(backend.name(), &device, collectives.as_ref(), c);
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
        Ok(device) => {
            let checks = all_checks();
            let collectives = checks
                .iter()
                .any(|c| matches!(c.run, CheckBody::Collectives { .. }))
                .then(|| Arc::new(collectives_context(backend.as_ref(), 0, &device)));
            checks
                .into_iter()
                .map(|c| {
                    let trial_name = format!("{name}::{}", c.name);
                    // Checks that cannot run here are listed as ignored, with why.
                    match precheck(name, collectives.as_deref(), &c) {
                        Some(Outcome::Skipped(why)) => {
                            return Trial::test(trial_name, || Ok(()))
                                .with_ignored_flag(true)
                                .with_kind(format!("skipped: {why}"));
                        }
                        Some(Outcome::Unsupported(why)) => {
                            return Trial::test(trial_name, || Ok(()))
                                .with_ignored_flag(true)
                                .with_kind(format!("unsupported: {why}"));
                        }
                        _ => {}
                    }
                    let d = device.clone();
                    let coll = collectives.clone();
                    let bname = name.to_string();
                    Trial::test(trial_name, move || {
                        let r = run_one(&bname, &d, coll.as_deref(), &c);
                        match r.outcome {
                            Outcome::Passed
                            | Outcome::ExpectedFailure(_)
                            | Outcome::Unsupported(_) => Ok(()),
                            other => Err(Failed::from(format!("{}: {other:?}", c.name))),
                        }
                    })
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xthunk_core::host::HostBackend;

    #[test]
    fn collective_checks_run_on_the_devices_there_are() {
        // Two devices, the second under test: 1 and 2 ranks run, 3 and 4 are skipped with why.
        let report = run(
            &HostBackend::with_devices(2),
            1,
            Some("collectives/all_gather_f32_"),
        );
        let table = report.table(true);
        assert_eq!(report.counts(), [2, 0, 0, 0, 0, 2], "{table}");
        assert!(
            table.contains("needs 3 devices; backend host has 2"),
            "{table}"
        );
        assert!(report.ok() && !report.skipped(), "{table}");
    }

    /// The host backend under another name: a backend without a clique provider.
    struct Unnamed(HostBackend);

    impl Backend for Unnamed {
        fn name(&self) -> &'static str {
            "unnamed"
        }
        fn probe(&self) -> xthunk_core::Result<xthunk_core::backend::BackendInfo> {
            self.0.probe()
        }
        fn device(&self, ordinal: usize) -> xthunk_core::Result<Arc<dyn Device>> {
            self.0.device(ordinal)
        }
    }

    #[test]
    fn collective_checks_without_a_provider_are_unsupported_with_why() {
        let report = run(
            &Unnamed(HostBackend::with_devices(4)),
            0,
            Some("collectives/all_gather_f32_"),
        );
        let table = report.table(false);
        assert_eq!(report.counts(), [0, 0, 4, 0, 0, 0], "{table}");
        assert!(report.ok(), "{table}");
        assert!(
            table.contains("no clique provider for backend `unnamed`")
                && table.contains("and 3 more checks"),
            "{table}"
        );
        // The single-device checks still run.
        let report = run(&Unnamed(HostBackend::new()), 0, Some("copy/odd_offsets"));
        assert_eq!(report.counts(), [1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn checks_skipped_for_one_reason_share_a_line() {
        let report = run(&HostBackend::new(), 0, Some("collectives/all_reduce_max_"));
        // 8 dtypes on 1 rank pass; 8 on each of 2, 3 and 4 ranks are skipped.
        assert_eq!(report.counts(), [8, 0, 0, 0, 0, 24]);
        let table = report.table(false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(
            lines[1].contains("needs 2 devices") && lines[1].contains("and 7 more checks"),
            "{table}"
        );
        assert_eq!(report.table(true).lines().count(), 34);
    }
}
