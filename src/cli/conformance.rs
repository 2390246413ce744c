//! `xthunk conformance`: the conformance suite on one or every backend.

use super::error::{CliError, CliResult};
use std::io::Write;
use xthunk::Runtime;

/// Exit status: every backend that ran passed.
pub const EXIT_PASSED: u8 = 0;
/// Exit status: a check failed (or passed while declared as an expected failure).
pub const EXIT_FAILED: u8 = 1;
/// Exit status: no requested backend could run (every one was skipped).
pub const EXIT_SKIPPED: u8 = 2;

/// `xthunk conformance` as parsed (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// Only this backend (host, cuda, rocm).
    #[arg(long)]
    pub backend: Option<String>,
    /// Device ordinal within the backend.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Only checks whose name contains this string (e.g. `kernels/`, `gemm`).
    #[arg(long)]
    pub filter: Option<String>,
    /// List every check, passed ones included.
    #[arg(long)]
    pub verbose_table: bool,
}

/// Runs the suite; returns the exit status.
pub fn conformance(rt: &Runtime, args: &ConformanceArgs, out: &mut dyn Write) -> CliResult<u8> {
    if let Some(f) = &args.filter
        && !xthunk_conformance::all_checks()
            .iter()
            .any(|c| c.name.contains(f.as_str()))
    {
        return Err(CliError::Usage(format!(
            "no conformance check matches --filter `{f}` (names look like `kernels/add_f32`, `gemm/`, `memory/`)"
        )));
    }
    // By default every backend of this build, in the registry's order.
    let names: Vec<String> = match &args.backend {
        Some(b) => vec![b.clone()],
        None => rt
            .registry()
            .names()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let mut ran = 0usize;
    let mut failed = false;
    for name in &names {
        let Some(backend) = rt.registry().get(name) else {
            return Err(CliError::Usage(format!(
                "unknown backend `{name}` (this build has: {})",
                rt.registry().names().join(", ")
            )));
        };
        // The clique provider registered with the backend, injected into the suite.
        let subject = xthunk_conformance::Subject {
            cliques: rt.collectives(name).cliques,
            ..xthunk_conformance::Subject::new(backend.clone())
        };
        let bar = super::progress::bar(0, &format!("conformance {name}"));
        let report = xthunk_conformance::run_observed(
            &subject,
            args.device,
            args.filter.as_deref(),
            &mut |i, n| {
                bar.set_length(n as u64);
                bar.set_position(i as u64);
            },
        );
        bar.finish_and_clear();
        if report.skipped() {
            // Every check carries the same reason: the backend is unavailable.
            writeln!(
                out,
                "conformance: backend {name} SKIPPED: {} ({} checks not run)",
                report.device,
                report.results.len()
            )?;
            continue;
        }
        out.write_all(report.table(args.verbose_table).as_bytes())?;
        ran += 1;
        failed |= !report.ok();
    }
    Ok(if failed {
        EXIT_FAILED
    } else if ran == 0 {
        EXIT_SKIPPED
    } else {
        EXIT_PASSED
    })
}
