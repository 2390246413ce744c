//! Running the checks: the locks that keep exclusive and collective checks apart, what may
//! run where, one check's outcome, the whole suite ([`run`]) and its `libtest-mimic` trials
//! ([`trials`]).

use crate::check::{Check, CheckBody};
use crate::context::Collectives;
use crate::context::collectives_context;
use crate::expect::{self, Expectation, Expectations};
use crate::failure::CheckFailure;
use crate::report::{CheckReport, Outcome, Report};
use crate::util::panic_message;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Device};
use xthunk_core::collectives::CliqueFactory;

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

/// What the suite runs on: a backend, the [`CliqueFactory`] of its devices (none: its
/// collective checks are unsupported) and expectations declared by check name (see
/// [`crate::expect`] for those decided from the device and the clique provider).
#[derive(Clone)]
pub struct Subject {
    pub backend: Arc<dyn Backend>,
    pub cliques: Option<Arc<dyn CliqueFactory>>,
    pub declared: Expectations,
}

impl Subject {
    /// `backend`, without cliques or declarations.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Subject {
            backend,
            cliques: None,
            declared: Expectations::new(),
        }
    }

    /// With collectives through `factory`'s clique providers.
    pub fn with_cliques(mut self, factory: Arc<dyn CliqueFactory>) -> Self {
        self.cliques = Some(factory);
        self
    }

    /// With `declared` expectations.
    pub fn with_expectations(mut self, declared: Expectations) -> Self {
        self.declared = declared;
        self
    }

    fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// Opens the device under test, or says why the backend is unavailable.
    fn open(&self, ordinal: usize) -> xthunk_core::Result<Arc<dyn Device>> {
        let info = self.backend.probe()?;
        if info.devices.is_empty() {
            return Err(xthunk_core::Error::Unavailable {
                backend: self.name().into(),
                reason: "no device found".into(),
            });
        }
        self.backend.device(ordinal)
    }

    /// The [`Collectives`] context, when one of `checks` needs it.
    fn collectives(
        &self,
        ordinal: usize,
        device: &Arc<dyn Device>,
        checks: &[Check],
    ) -> Option<Collectives> {
        checks
            .iter()
            .any(|c| matches!(c.run, CheckBody::Collectives { .. }))
            .then(|| {
                collectives_context(
                    self.backend.as_ref(),
                    self.cliques.as_deref(),
                    ordinal,
                    device,
                )
            })
    }

    /// What holds for `check` on this subject's backend.
    fn expectation(&self, collectives: Option<&Collectives>, check: &Check) -> Option<Expectation> {
        expect::expectation(&self.declared, collectives, check)
    }
}

/// Whether `check` can run here: `Some(outcome)` (unsupported, too few devices, no clique
/// provider) when it cannot.
fn precheck(
    expectation: Option<&Expectation>,
    collectives: Option<&Collectives>,
    check: &Check,
) -> Option<Outcome> {
    if let Some(Expectation::Unsupported(why)) = expectation {
        return Some(Outcome::Unsupported(why.clone()));
    }
    if let Some(Err(why)) = check.requires.map(|r| r()) {
        return Some(Outcome::Skipped(why));
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
    subject: &Subject,
    device: &Arc<dyn Device>,
    collectives: Option<&Collectives>,
    check: &Check,
) -> CheckReport {
    let start = Instant::now();
    let exp = subject.expectation(collectives, check);
    if let Some(outcome) = precheck(exp.as_ref(), collectives, check) {
        return CheckReport {
            name: check.name.clone(),
            outcome,
            duration: Duration::ZERO,
        };
    }
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

/// Probes the subject's backend and runs every check whose name contains `filter` on its
/// device `ordinal`; when the backend is unavailable, every check is reported as skipped with
/// why.
pub fn run(subject: &Subject, ordinal: usize, filter: Option<&str>) -> Report {
    run_observed(subject, ordinal, filter, &mut |_, _| {})
}

/// [`run`], telling `seen` how many checks there are (`(0, n)` first) and each one finished
/// (`(i, n)` after the `i`-th), e.g. for a progress bar.
pub fn run_observed(
    subject: &Subject,
    ordinal: usize,
    filter: Option<&str>,
    seen: &mut dyn FnMut(usize, usize),
) -> Report {
    let checks: Vec<Check> = crate::checks::all()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
        .collect();
    run_checks_observed(subject, ordinal, &checks, seen)
}

/// [`run`] with these checks (e.g. [`crate::checks::user_kernel_checks`] of another module).
pub fn run_checks(subject: &Subject, ordinal: usize, checks: &[Check]) -> Report {
    run_checks_observed(subject, ordinal, checks, &mut |_, _| {})
}

fn run_checks_observed(
    subject: &Subject,
    ordinal: usize,
    checks: &[Check],
    seen: &mut dyn FnMut(usize, usize),
) -> Report {
    let device = match subject.open(ordinal) {
        Ok(d) => d,
        Err(e) => {
            let reason = e.to_string();
            return Report {
                backend: subject.name().into(),
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
        }
    };
    let collectives = subject.collectives(ordinal, &device, checks);
    let n = checks.len();
    seen(0, n);
    let results = checks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let r = run_one(subject, &device, collectives.as_ref(), c);
            tracing::info!(check = %c.name, outcome = r.outcome.label(), "conformance");
            seen(i + 1, n);
            r
        })
        .collect();
    Report {
        backend: subject.name().into(),
        device: device.info().name.clone(),
        emulated: device.info().emulated,
        results,
    }
}

/// The suite as `libtest-mimic` trials for a `cargo test` target (harness = false), on device
/// 0: an unavailable backend yields ignored trials whose kind carries the reason; so do checks
/// that cannot run here (unsupported, too few devices). A failure or an XPASS fails the trial.
pub fn trials(subject: Subject) -> Vec<libtest_mimic::Trial> {
    trials_of(subject, crate::checks::all())
}

/// [`trials`] of these checks.
pub(crate) fn trials_of(subject: Subject, checks: Vec<Check>) -> Vec<libtest_mimic::Trial> {
    use libtest_mimic::{Failed, Trial};
    let name = subject.name();
    let ignored = |trial_name: String, kind: String| {
        Trial::test(trial_name, || Ok(()))
            .with_ignored_flag(true)
            .with_kind(kind)
    };
    let device = match subject.open(0) {
        Ok(d) => d,
        Err(e) => {
            let reason = e.to_string();
            eprintln!("conformance: backend {name} skipped: {reason}");
            return checks
                .into_iter()
                .map(|c| ignored(format!("{name}::{}", c.name), format!("skipped: {reason}")))
                .collect();
        }
    };
    let collectives = subject.collectives(0, &device, &checks).map(Arc::new);
    let subject = Arc::new(subject);
    checks
        .into_iter()
        .map(|c| {
            let trial_name = format!("{name}::{}", c.name);
            // Checks that cannot run here are listed as ignored, with why.
            let exp = subject.expectation(collectives.as_deref(), &c);
            match precheck(exp.as_ref(), collectives.as_deref(), &c) {
                Some(Outcome::Skipped(why)) => {
                    return ignored(trial_name, format!("skipped: {why}"));
                }
                Some(Outcome::Unsupported(why)) => {
                    return ignored(trial_name, format!("unsupported: {why}"));
                }
                _ => {}
            }
            let (subject, d, coll) = (subject.clone(), device.clone(), collectives.clone());
            Trial::test(trial_name, move || {
                let r = run_one(&subject, &d, coll.as_deref(), &c);
                match r.outcome {
                    Outcome::Passed | Outcome::ExpectedFailure(_) | Outcome::Unsupported(_) => {
                        Ok(())
                    }
                    other => Err(Failed::from(format!("{}: {other:?}", c.name))),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CheckFailure, Provoked};
    use xthunk_core::collectives::{CliqueKey, CliqueProvider, Communicator, Timeouts, Undetected};
    use xthunk_core::host::{HostBackend, HostCliqueFactory, HostCliqueProvider};

    /// The host backend with `n` devices and its cliques.
    fn host(n: usize) -> Subject {
        Subject::new(Arc::new(HostBackend::with_devices(n)))
            .with_cliques(Arc::new(HostCliqueFactory))
    }

    #[test]
    fn collective_checks_run_on_the_devices_there_are() {
        // Two devices, the second under test: 1 and 2 ranks run, 3 and 4 are skipped with why.
        let report = run(&host(2), 1, Some("collectives/all_gather_f32_"));
        let table = report.table(true);
        assert_eq!(report.counts(), [2, 0, 0, 0, 0, 2], "{table}");
        assert!(
            table.contains("needs 3 devices; backend host has 2"),
            "{table}"
        );
        assert!(report.ok() && !report.skipped(), "{table}");
    }

    #[test]
    fn collective_checks_without_a_provider_are_unsupported_with_why() {
        let no_cliques = Subject::new(Arc::new(HostBackend::with_devices(4)));
        let report = run(&no_cliques, 0, Some("collectives/all_gather_f32_"));
        let table = report.table(false);
        assert_eq!(report.counts(), [0, 0, 4, 0, 0, 0], "{table}");
        assert!(report.ok(), "{table}");
        assert!(
            table.contains("no clique provider for backend `host`")
                && table.contains("and 3 more checks"),
            "{table}"
        );
        // The single-device checks still run.
        let no_cliques = Subject::new(Arc::new(HostBackend::new()));
        let report = run(&no_cliques, 0, Some("copy/odd_offsets"));
        assert_eq!(report.counts(), [1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_failing_factory_is_the_reason() {
        let failing =
            |_: &[Arc<dyn Device>], _: Timeouts| -> xthunk_core::Result<Arc<dyn CliqueProvider>> {
                Err(xthunk_core::Error::InvalidArgument("no library".into()))
            };
        let subject =
            Subject::new(Arc::new(HostBackend::with_devices(2))).with_cliques(Arc::new(failing));
        let report = run(&subject, 0, Some("collectives/all_gather_f32_2ranks"));
        let table = report.table(false);
        assert_eq!(report.counts(), [0, 0, 1, 0, 0, 0], "{table}");
        assert!(
            table.contains("collectives: no host clique provider: invalid argument: no library"),
            "{table}"
        );
    }

    #[test]
    fn checks_skipped_for_one_reason_share_a_line() {
        let report = run(&host(1), 0, Some("collectives/all_reduce_max_"));
        // Every collective dtype on 1 rank passes; each on 2, 3 and 4 ranks is skipped.
        let n = xthunk_core::ir::COLLECTIVE_DTYPES.len();
        assert_eq!(report.counts(), [n, 0, 0, 0, 0, 3 * n]);
        let table = report.table(false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(
            lines[1].contains("needs 2 devices")
                && lines[1].contains(&format!("and {} more checks", n - 1)),
            "{table}"
        );
        // The header, every check and the summary.
        assert_eq!(report.table(true).lines().count(), 4 * n + 2);
    }

    /// Two checks of a made-up area: one passes, one fails.
    fn pass_and_fail() -> Vec<Check> {
        vec![
            Check::new("test/passes", |_| Ok(())),
            Check::new("test/fails", |_| {
                Err(CheckFailure::Mismatch("1 != 2".into()))
            }),
        ]
    }

    #[test]
    fn an_expected_failure_that_passes_is_xpass_and_fails_the_run() {
        let subject =
            host(1).with_expectations(Expectations::new().expected_failure("test/", "a known gap"));
        let report = run_checks(&subject, 0, &pass_and_fail());
        let table = report.table(false);
        assert_eq!(report.counts(), [0, 0, 0, 1, 1, 0], "{table}");
        assert!(!report.ok(), "an XPASS fails the run:\n{table}");
        assert_eq!(report.results[0].outcome.label(), "XPASS");
        assert!(
            table.contains("XPASS")
                && table.contains("declared as expected failure (a known gap) but passed"),
            "{table}"
        );
        assert_eq!(report.results[1].outcome.label(), "xfail");
        assert!(table.contains("a known gap: 1 != 2"), "{table}");
        // Without the declaration: one pass, one failure.
        let report = run_checks(&host(1), 0, &pass_and_fail());
        assert_eq!(report.counts(), [1, 1, 0, 0, 0, 0]);

        // As trials: the XPASS fails, the expected failure passes (the log goes to a file, so
        // that this test's output holds no `FAILED` line).
        let log = std::env::temp_dir().join(format!(
            "xthunk-conformance-xpass-{}.log",
            std::process::id()
        ));
        let args = libtest_mimic::Arguments {
            test_threads: Some(1),
            logfile: Some(log.display().to_string()),
            ..Default::default()
        };
        let conclusion = libtest_mimic::run(&args, trials_of(subject, pass_and_fail()));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        assert_eq!(
            (conclusion.num_passed, conclusion.num_failed),
            (1, 1),
            "{text}"
        );
        assert!(
            text.contains("test host::test/passes ... FAILED")
                && text.contains("test/passes: UnexpectedPass(\"declared as expected failure"),
            "{text}"
        );
    }

    #[test]
    fn declared_unsupported_checks_are_not_run() {
        let subject =
            host(1).with_expectations(Expectations::new().unsupported("test/fails", "not here"));
        let report = run_checks(&subject, 0, &pass_and_fail());
        assert_eq!(report.counts(), [1, 0, 1, 0, 0, 0]);
        assert_eq!(
            report.results[1].outcome,
            Outcome::Unsupported("not here".into())
        );
    }

    /// The host's cliques, claiming not to detect mismatches and missing ranks.
    struct Blind(HostCliqueProvider);

    impl CliqueProvider for Blind {
        fn num_ranks(&self) -> usize {
            self.0.num_ranks()
        }
        fn acquire(
            &self,
            key: &CliqueKey,
            global_rank: usize,
        ) -> xthunk_core::Result<Arc<dyn Communicator>> {
            self.0.acquire(key, global_rank)
        }
        fn split(
            &self,
            parent: &CliqueKey,
            global_rank: usize,
            color: Option<u64>,
        ) -> xthunk_core::Result<Option<Arc<dyn Communicator>>> {
            self.0.split(parent, global_rank, color)
        }
        fn evict_aborted(&self) -> Vec<CliqueKey> {
            self.0.evict_aborted()
        }
        fn undetected(&self) -> Undetected {
            Undetected {
                mismatch: Some("blind to mismatches"),
                missing_rank: Some("blind to missing ranks"),
            }
        }
    }

    #[test]
    fn failures_the_provider_does_not_detect_are_not_provoked() {
        let provoking: Vec<Check> = crate::checks::all()
            .into_iter()
            .filter(|c| c.provokes.is_some())
            .collect();
        let provoked: Vec<_> = provoking.iter().map(|c| c.provokes).collect();
        assert_eq!(
            provoked,
            [Some(Provoked::Mismatch), Some(Provoked::MissingRank)]
        );
        // The host provider detects both: the checks run and pass.
        let report = run_checks(&host(2), 0, &provoking);
        assert_eq!(
            report.counts(),
            [2, 0, 0, 0, 0, 0],
            "{}",
            report.table(true)
        );
        // A provider that does not is never made to hang: unsupported, with its reasons.
        let blind = |devices: &[Arc<dyn Device>],
                     timeouts: Timeouts|
         -> xthunk_core::Result<Arc<dyn CliqueProvider>> {
            Ok(Arc::new(Blind(HostCliqueProvider::new(
                devices.to_vec(),
                timeouts,
            )?)))
        };
        let subject =
            Subject::new(Arc::new(HostBackend::with_devices(2))).with_cliques(Arc::new(blind));
        let report = run_checks(&subject, 0, &provoking);
        let outcomes: Vec<_> = report.results.iter().map(|r| r.outcome.clone()).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Unsupported("blind to mismatches".into()),
                Outcome::Unsupported("blind to missing ranks".into())
            ]
        );
    }
}
