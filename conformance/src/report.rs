//! The outcome of each check and the report of a run: counts and the plain-text table.

use std::time::Duration;

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
    /// Unless `verbose`, checks skipped or unsupported for the same reason share one line (the
    /// first one's, with the count of the others).
    pub fn table(&self, verbose: bool) -> String {
        let mut same_reason: std::collections::HashMap<(&str, &str), usize> = Default::default();
        if !verbose {
            for r in &self.results {
                if let Outcome::Skipped(m) | Outcome::Unsupported(m) = &r.outcome {
                    *same_reason
                        .entry((r.outcome.label(), m.as_str()))
                        .or_default() += 1;
                }
            }
        }
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
                Outcome::Skipped(m) | Outcome::Unsupported(m) => {
                    match same_reason.get_mut(&(r.outcome.label(), m.as_str())) {
                        // Already shown on the line of the first check with this reason.
                        Some(0) => continue,
                        Some(n) if *n > 1 => {
                            let others = *n - 1;
                            *n = 0;
                            format!(
                                "{m} (and {others} more check{} for this reason)",
                                if others == 1 { "" } else { "s" }
                            )
                        }
                        _ => m.clone(),
                    }
                }
                Outcome::Failed(m) | Outcome::ExpectedFailure(m) | Outcome::UnexpectedPass(m) => {
                    m.clone()
                }
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
