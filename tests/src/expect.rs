//! What is unsupported or expected to fail, each with why: declared by check name on a
//! [`Subject`](crate::Subject) ([`Expectations`]), or decided here from what the device and the
//! clique provider say of themselves (the `emulated` flag of [`DeviceInfo`], the provider's
//! [`Undetected`](xthunk_core::collectives::Undetected) failures) — never from the backend's
//! name, so a gap of the driver emulator never disables a check on a real GPU, and a gap of one
//! clique provider never disables it on another.

use crate::{Check, Collectives, Provoked};
use xthunk_core::backend::DeviceInfo;

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

/// Runs the multi-rank collective checks on emulated devices anyway (see [`emulated_gap`]).
pub const RUN_EMULATED_RANKS: &str = "XTHUNK_CONFORMANCE_NCCL_RANKS";

/// What holds for `check` on the device `device` (with `collectives`, for collective checks),
/// first match wins: the subject's `declared` expectations; a failure the check provokes that
/// the clique provider does not detect; a known gap of the driver emulator on emulated devices.
pub(crate) fn expectation(
    declared: &Expectations,
    device: &DeviceInfo,
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
    emulated_gap(
        device,
        backend,
        check.ranks(),
        std::env::var_os(RUN_EMULATED_RANKS).is_some(),
    )
}

/// The driver emulator's known gap: on an emulated device, the collective checks on more than
/// one rank are unsupported (unless `run_anyway`, from [`RUN_EMULATED_RANKS`]). On real GPUs they
/// run.
///
/// Through the emulator's NCCL, `collectives/all_to_all_i8_2ranks` (1-byte blocks) fails; the
/// failure leaves a sticky launch error on the contexts of devices 0 and 1, so later 2-rank
/// checks fail and 3- and 4-rank checks wait at clique init for ranks that already gave up
/// (until the terminate timeout). nccl/tests/provider.rs covers 2- and 4-rank NCCL/RCCL on the
/// emulator through the executor.
pub fn emulated_gap(
    device: &DeviceInfo,
    backend: &str,
    ranks: usize,
    run_anyway: bool,
) -> Option<Expectation> {
    (device.emulated && ranks > 1 && !run_anyway).then(|| {
        Expectation::Unsupported(format!(
            "multi-rank collective checks on {backend} are disabled: an emulated NCCL all-to-all \
             failure poisons later checks (single-rank checks run)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xthunk_core::backend::Vendor;

    fn device(emulated: bool) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "test device".into(),
            vendor: Vendor::Nvidia,
            arch: "sm_90".into(),
            total_memory: 1 << 30,
            compute_units: 1,
            emulated,
        }
    }

    #[test]
    fn the_emulator_gap_is_decided_by_the_emulated_flag() {
        let gap = emulated_gap(&device(true), "cuda", 2, false);
        assert!(
            matches!(&gap, Some(Expectation::Unsupported(m)) if m.contains("multi-rank collective checks on cuda")),
            "{gap:?}"
        );
        // One rank, a real device, or the override: the check runs.
        assert_eq!(emulated_gap(&device(true), "cuda", 1, false), None);
        assert_eq!(emulated_gap(&device(false), "cuda", 4, false), None);
        assert_eq!(emulated_gap(&device(true), "rocm", 4, true), None);
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
