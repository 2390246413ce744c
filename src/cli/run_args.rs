//! What `xthunk run` is asked ([`RunArgs`], its command-line arguments, also those of a
//! launched job's ranks) and the value parsers of its options.

use std::path::PathBuf;
use std::time::Duration;

/// Everything `xthunk run` was asked to do (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The program file (.txtpb text or .pb binary; StableHLO: .mlir text, or a portable
    /// artifact — VHLO bytecode or jax.export's serialized bytes — told by content).
    pub program: PathBuf,
    /// auto (cuda, then rocm, then host), or a backend name (host, cuda, rocm).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Device ordinal within the backend (default 0; in a job of several processes, the
    /// first device of this process, by default its local rank times --devices).
    #[arg(long)]
    pub device: Option<usize>,
    /// A parameter's value from a .npy file, as NAME=FILE.npy (repeatable). `{rank}` in FILE
    /// is replaced by each rank's number (`x=shard{rank}.npy`: rank 2 reads shard2.npy), with
    /// --devices N and in the ranks of a job.
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
    pub inputs: Vec<(String, PathBuf)>,
    /// Write NAME.npy for every output into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Seed of the random values of parameters without --input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How many times to execute (the outputs are those of the last execution).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Fail if one execution takes longer than this many seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_deadline)]
    pub deadline: Option<Duration>,
    /// Run the program SPMD on this many devices (ranks 0..N-1, one thread each), with
    /// collectives among them; parameters without --input get per-rank random values. In a
    /// job of P processes, each process drives N devices: P·N ranks in all.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub devices: u32,
    /// A collective whose peers have not all arrived after this many seconds fails,
    /// naming the missing ranks (a warning names them after a sixth of it).
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_deadline)]
    #[arg(env = "XTHUNK_COLLECTIVE_TIMEOUT")]
    pub collective_timeout: Duration,
    /// Give every temp a buffer of its own instead of sharing memory between temps whose
    /// live ranges cannot overlap (the temp plan `xthunk inspect` prints).
    #[arg(long)]
    pub no_temp_plan: bool,
    /// A custom-call plugin to load (a shared library exporting `xthunk_ffi_register`, see
    /// docs/custom-calls.md); repeatable. `XTHUNK_PLUGINS` (`:`-separated) adds more.
    #[arg(long = "plugin", value_name = "PATH")]
    pub plugins: Vec<PathBuf>,
    #[command(flatten)]
    pub trace: super::trace::TraceArgs,
}

impl RunArgs {
    /// The executor configuration the options ask for.
    pub(super) fn config(&self) -> xthunk::core::executor::ExecutorConfig {
        xthunk::core::executor::ExecutorConfig {
            plan_temps: !self.no_temp_plan,
            ..Default::default()
        }
    }
}

/// clap value parser of `--input`: `NAME=FILE.npy`.
pub fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE.npy, got `{s}`")),
    }
}

/// clap value parser of `--deadline` and `--collective-timeout`: positive seconds.
pub fn parse_deadline(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, got `{s}`"))?;
    if secs <= 0.0 {
        return Err(format!("the deadline must be positive, got {s}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("deadline {s}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_and_deadline_parsers() {
        assert_eq!(
            parse_input("x=a=b.npy"),
            Ok(("x".to_string(), PathBuf::from("a=b.npy")))
        );
        assert!(parse_input("x").is_err());
        assert!(parse_input("=f.npy").is_err());
        assert_eq!(parse_deadline("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_deadline("0").is_err());
        assert!(parse_deadline("-1").is_err());
        assert!(parse_deadline("nan").is_err());
        assert!(parse_deadline("inf").is_err());
    }
}
