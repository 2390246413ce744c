//! Progress bars on stderr (indicatif) for long work: conformance checks, benchmarks, compiling
//! many modules, many `--iterations`, a job's ranks starting. Hidden when stderr is not a
//! terminal or with `--quiet`, so logs and tests see none of it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress bars.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether bars are drawn: stderr is a terminal and `--quiet` was not given.
pub fn shown() -> bool {
    !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// A bar of `len` steps labelled `what` (hidden where [`shown`] is false).
pub fn bar(len: u64, what: &str) -> ProgressBar {
    if !shown() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    b.set_style(style);
    b.set_prefix(what.to_string());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_hides_the_bars() {
        set_quiet(true);
        assert!(!shown());
        assert!(bar(10, "x").is_hidden());
        set_quiet(false);
    }
}
