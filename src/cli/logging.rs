//! Logging on stderr: the human format (`-v` levels, `RUST_LOG`) or `--log-format json`, one
//! JSON object per line with the current span and the list of spans around it (execute, rank,
//! thunk, collective, clique, compile); and a failed command's error as an event whose
//! `causes` field holds its whole source chain.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Readable lines.
    #[default]
    Human,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

/// Installs the subscriber: `verbose` sets the default level (RUST_LOG overrides it).
pub fn init(verbose: u8, format: LogFormat) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).unwrap_or_else(|e| {
            eprintln!("xthunk: warning: ignoring RUST_LOG={v:?}: {e}");
            EnvFilter::new(default)
        }),
        _ => EnvFilter::new(default),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let _ = match format {
        LogFormat::Human => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}

/// Every message of `e`'s source chain, outermost first.
pub fn cause_chain(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        out.push(s.to_string());
        next = s.source();
    }
    out
}

/// With the JSON format, logs a failed command's error as one event: `error` (the whole
/// one-line message) and `causes` (its source chain as a JSON list).
pub fn log_failure(format: LogFormat, message: &str, e: &(dyn std::error::Error + 'static)) {
    if format != LogFormat::Json {
        return;
    }
    let causes = serde_json::to_string(&cause_chain(e)).unwrap_or_default();
    tracing::error!(target: "xthunk", error = message, causes = %causes, "command failed");
}

/// Prints `error: {text}` as one line on stderr in a single write, so that a line another
/// writer of the process prints at the same moment (the driver emulator's diagnostics, which
/// have their own standard library and lock) cannot land inside it; `eprintln!` would write
/// the pieces one by one.
pub fn print_error_line(text: &str) {
    use std::io::Write as _;
    let line = format!("error: {text}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Prints `args` as one line on stderr in a single write, as [`print_error_line`], and never
/// panics: a write that fails (the rank's launcher is gone and its pipe closed) is dropped,
/// where `eprintln!` would panic (exit status 101).
pub fn note(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let line = format!("{args}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
