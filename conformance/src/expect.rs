//! What is unsupported or expected to fail, each with why: declared by check name on a
//! [`Subject`](crate::Subject) ([`Expectations`]), or decided here from what the clique provider
//! says of itself (its [`Undetected`](xthunk_core::collectives::Undetected) failures) — never
//! from the backend's name, so a gap of one clique provider never disables a check on another.

use crate::check::{Check, Provoked};
use crate::context::Collectives;

/// What is declared about a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expectation {
    /// Not run; reported as unsupported with the reason.
    Unsupported(String),
    /// Run; a failure is reported as expected (xfail), a pass as XPASS (a failure of the run:
    /// the declaration is out of date).
    ExpectedFailure(String),
}

/// Expectations by check name: an exact name, or a prefix ending in `/` (`gemm/`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectations {
    entries: Vec<(String, Expectation)>,
}

impl Expectations {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the checks matching `pattern` unsupported, because `why`.
    pub fn unsupported(mut self, pattern: impl Into<String>, why: impl Into<String>) -> Self {
        self.entries
            .push((pattern.into(), Expectation::Unsupported(why.into())));
        self
    }

    /// Declares the checks matching `pattern` expected to fail, because `why`.
    pub fn expected_failure(mut self, pattern: impl Into<String>, why: impl Into<String>) -> Self {
        self.entries
            .push((pattern.into(), Expectation::ExpectedFailure(why.into())));
        self
    }

    /// The first declaration matching the check `name`.
    pub fn for_check(&self, name: &str) -> Option<&Expectation> {
        self.entries
            .iter()
            .find(|(pat, _)| pat == name || (pat.ends_with('/') && name.starts_with(pat.as_str())))
            .map(|(_, e)| e)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What holds for `check` (with `collectives`, for collective checks), first
/// match wins: the subject's `declared` expectations; a failure the check provokes that the
/// clique provider does not detect.
pub(crate) fn expectation(
    declared: &Expectations,
    collectives: Option<&Collectives>,
    check: &Check,
) -> Option<Expectation> {
    if let Some(e) = declared.for_check(&check.name) {
        return Some(e.clone());
    }
    if let (Some(provoked), Some(undetected)) =
        (check.provokes, collectives.and_then(|c| c.undetected()))
    {
        let why = match provoked {
            Provoked::Mismatch => undetected.mismatch,
            Provoked::MissingRank => undetected.missing_rank,
        };
        if let Some(why) = why {
            return Some(Expectation::Unsupported(why.into()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_match_by_name_or_prefix() {
        let e = Expectations::new()
            .unsupported("gemm/", "no gemm")
            .expected_failure("copy/odd_offsets", "odd");
        assert_eq!(
            e.for_check("gemm/f16_nt_odd"),
            Some(&Expectation::Unsupported("no gemm".into()))
        );
        assert_eq!(
            e.for_check("copy/odd_offsets"),
            Some(&Expectation::ExpectedFailure("odd".into()))
        );
        assert_eq!(e.for_check("copy/odd"), None);
        assert_eq!(e.for_check("gemmx/a"), None);
    }
}
