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

pub const OPEN: &[Known] = &[
    Known {
        pattern: &[
            "panic at core/src/ir/types.rs",
            "attempt to multiply with overflow",
        ],
        issue: "issue 18: checked arithmetic (Dim3::count)",
    },
    Known {
        pattern: &[
            "panic at ",
            "npyz",
            "read.rs",
            "attempt to multiply with overflow",
        ],
        issue: "issue 18: npy header (npyz multiplies the shape unchecked)",
    },
    Known {
        pattern: &["property: text round trip loses NaN payloads"],
        issue: "issue 18: text-format NaNs",
    },
];

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
