//! Failures the fuzzers find that belong to issue-18 fixes under way elsewhere. A failure
//! matching an entry is counted and shown (one minimized input each) but does not fail a run, so that
//! the fuzz tests guard everything else meanwhile; `XTHUNK_FUZZ_STRICT=1` makes them failures
//! again. Each entry has a regression test marked `#[ignore = "issue 18: ..."]` beside the
//! fuzz test that found it. **Delete an entry (and the `ignore`) when its fix lands.**

/// One known, open failure: every part of `pattern` occurs in its description
/// (`panic at LOCATION: MESSAGE` or `property: ...`).
pub struct Known {
    pub pattern: &'static [&'static str],
    pub issue: &'static str,
}

/// None open: the Dim3 overflow, npyz's shape product and the text format's NaN payloads were
/// fixed by issue 18's other changes, and their regression tests run (no longer ignored).
pub const OPEN: &[Known] = &[];

/// The issue of a known open failure.
pub fn open_issue(what: &str) -> Option<&'static str> {
    if std::env::var("XTHUNK_FUZZ_STRICT").is_ok_and(|v| v == "1") {
        return None;
    }
    OPEN.iter()
        .find(|k| k.pattern.iter().all(|p| what.contains(p)))
        .map(|k| k.issue)
}

/// For the cargo-fuzz targets: a violated property is a crash (a panic), unless it is a known
/// open one. (Known open *panics* still crash there: libFuzzer aborts on any panic.)
pub fn fail(property: &str) {
    let what = format!("property: {property}");
    if open_issue(&what).is_none() {
        panic!("{what}");
    }
}
