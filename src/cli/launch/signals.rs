//! The launcher's stop signals (SIGTERM, SIGINT, SIGHUP: a scheduler's cancel, Ctrl-C, a
//! closed terminal), read by signal-hook's thread rather than a hand-written handler, and
//! sending a signal to a rank.
//!
//! What the launcher does with them (forward, wait the grace, kill, clean up, one line, exit
//! 128 + the signal) is in [`super::ranks::run_ranks`] and [`super::launch`].

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::ffi::c_int;

/// The signals that stop a launch.
pub const STOP_SIGNALS: [c_int; 3] = [SIGTERM, SIGINT, SIGHUP];

/// The launcher's stop signals from the moment it is made (their default action, ending the
/// launcher at once, is off while it lives: a signal waits until [`StopSignals::pending`]).
pub struct StopSignals(Signals);

impl StopSignals {
    pub fn install() -> std::io::Result<StopSignals> {
        Signals::new(STOP_SIGNALS).map(StopSignals)
    }

    /// The first stop signal received since the last call, if any (never blocks).
    pub fn pending(&mut self) -> Option<c_int> {
        self.0.pending().next()
    }
}

/// What the ranks are sent when the launcher gets `signal`: SIGINT stays SIGINT (what a
/// Ctrl-C at a terminal sends the ranks too); SIGTERM and SIGHUP become SIGTERM (the ranks
/// have no terminal: a hangup means "stop" to them).
pub fn forwarded(signal: c_int) -> c_int {
    if signal == SIGINT { SIGINT } else { SIGTERM }
}

/// `SIGTERM`, `SIGINT`, …, or `signal N`.
pub fn name(signal: c_int) -> String {
    signal_hook::low_level::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), str::to_string)
}

/// Sends `signal` to the process `pid` (a rank this launcher started and has not reaped, so
/// the pid is still its own).
pub fn send(pid: u32, signal: c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    // SAFETY: kill takes two integers and touches no memory of this process; the pid is a
    // child this launcher has not reaped (it cannot have been reused).
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The exit status of a launch that `signal` ended: 128 + the signal, as a shell reports a
/// process killed by it.
pub fn exit_code(signal: c_int) -> u8 {
    u8::try_from(128 + signal).unwrap_or(255)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn names_codes_and_what_the_ranks_get() {
        assert_eq!(name(SIGTERM), "SIGTERM");
        assert_eq!(name(SIGINT), "SIGINT");
        assert_eq!(name(SIGHUP), "SIGHUP");
        assert_eq!(exit_code(SIGTERM), 143);
        assert_eq!(exit_code(SIGINT), 130);
        assert_eq!(exit_code(SIGHUP), 129);
        assert_eq!(forwarded(SIGHUP), SIGTERM);
        assert_eq!(forwarded(SIGINT), SIGINT);
        assert_eq!(forwarded(SIGTERM), SIGTERM);
    }
}
