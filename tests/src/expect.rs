//! What is unsupported or expected to fail, each with why: declared by check name on a
//! [`Subject`](crate::Subject) ([`Expectations`]), or decided here from what the clique provider
//! says of itself (its [`Undetected`](xthunk_core::collectives::Undetected) failures and
//! [`KnownGaps`], which it decides from its devices, e.g. their `emulated` flag) — never from
//! the backend's name, so a gap of the driver emulator never disables a check on a real GPU,
//! and a gap of one clique provider never disables it on another.

use crate::{Check, Collectives, Provoked};
use xthunk_core::collectives::KnownGaps;

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

/// Runs the multi-rank collective checks anyway where the clique provider declares them a gap
/// (see [`multi_rank_gap`]).
pub const RUN_EMULATED_RANKS: &str = "XTHUNK_CONFORMANCE_NCCL_RANKS";

/// What holds for `check` on `backend` (with `collectives`, for collective checks), first
/// match wins: the subject's `declared` expectations; a failure the check provokes that the
/// clique provider does not detect; a gap the clique provider declares of itself.
pub(crate) fn expectation(
    declared: &Expectations,
    backend: &str,
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
    multi_rank_gap(
        collectives.and_then(|c| c.known_gaps()).unwrap_or_default(),
        backend,
        check.ranks(),
        std::env::var_os(RUN_EMULATED_RANKS).is_some(),
    )
}

/// A check on more than one rank where the clique provider declares multi-rank collectives a
/// gap of its own ([`KnownGaps::multi_rank`], e.g. NCCL/RCCL on emulated devices) is
/// unsupported, unless `run_anyway` (from [`RUN_EMULATED_RANKS`]). Elsewhere it runs.
pub fn multi_rank_gap(
    gaps: KnownGaps,
    backend: &str,
    ranks: usize,
    run_anyway: bool,
) -> Option<Expectation> {
    let why = gaps.multi_rank.filter(|_| ranks > 1 && !run_anyway)?;
    Some(Expectation::Unsupported(format!(
        "multi-rank collective checks on {backend} are disabled: {why} (single-rank checks run)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multi_rank_gap_is_the_providers_declaration() {
        let declared = KnownGaps {
            multi_rank: Some("a poisoning failure"),
        };
        let gap = multi_rank_gap(declared, "cuda", 2, false);
        assert_eq!(
            gap,
            Some(Expectation::Unsupported(
                "multi-rank collective checks on cuda are disabled: a poisoning failure \
                 (single-rank checks run)"
                    .into()
            ))
        );
        // One rank, a provider without the gap, or the override: the check runs.
        assert_eq!(multi_rank_gap(declared, "cuda", 1, false), None);
        assert_eq!(multi_rank_gap(KnownGaps::default(), "cuda", 4, false), None);
        assert_eq!(multi_rank_gap(declared, "rocm", 4, true), None);
    }

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
