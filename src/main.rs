//! The `xthunk` command: run, inspect and convert thunk programs, list devices, and run the
//! conformance suite.

mod cli {
    pub mod bench;
    pub mod compile;
    pub mod conformance;
    pub mod convert;
    pub mod devices;
    pub mod error;
    pub mod inspect;
    pub mod job;
    pub mod launch;
    pub mod npy;
    pub mod outfiles;
    pub mod run;
    pub mod tensor;
}

use clap::{ArgAction, Parser, Subcommand};
use cli::error::{CliError, CliResult, one_line};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  any error (one line `error: ...` on stderr), or a failed conformance check
  2  `conformance` could not run any requested backend (each printed as SKIPPED with its
     reason), or a command-line usage error

Logging goes to stderr: -v info, -vv debug, -vvv trace; RUST_LOG (e.g.
RUST_LOG=xthunk_core=debug) overrides -v.";

const RUN_AFTER_HELP: &str = "\
Inputs are .npy files whose dtype and shape must equal the parameter's:
  pred '|b1', i8 '|i1', u8 '|u1', i32 '<i4', i64 '<i8', f16 '<f2', f32 '<f4', f64 '<f8'.
bfloat16 has no numpy dtype: a bf16 parameter takes its raw bits as '<u2' (or a 2-byte void
'V2'), and a bf16 output is written as '<u2' (view it with a.view(ml_dtypes.bfloat16)).

Parameters without --input get seeded random values: floats uniform in [-1, 1), signed
integers in [-8, 8), u8 in [0, 16), pred 0 or 1.

With --output-dir, NAME.npy is written for every output only after the whole run succeeded,
each through a temporary file and a rename: never a partial file. Characters other than
[A-Za-z0-9_.-] in an output name become '_'.";

const CONFORMANCE_AFTER_HELP: &str = "\
Exit status:
  0  every backend that ran passed
  1  a check failed (or passed while declared an expected failure), or an error
  2  no requested backend could run (each printed as SKIPPED with its reason)";

/// xthunk: a vendor-neutral GPU runtime for serializable thunk programs.
#[derive(Debug, Parser)]
#[command(name = "xthunk", version, about, after_help = AFTER_HELP)]
struct Cli {
    /// More logging on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides it.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program (.txtpb or .pb) and print a summary of its outputs.
    #[command(after_help = RUN_AFTER_HELP)]
    Run {
        /// The program file (.txtpb text or .pb binary).
        program: PathBuf,
        /// auto (cuda, then rocm, then host), or a backend name (host, cuda, rocm).
        #[arg(long, default_value = "auto")]
        backend: String,
        /// Device ordinal within the backend.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// A parameter's value from a .npy file, as NAME=FILE.npy (repeatable).
        #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
        inputs: Vec<(String, PathBuf)>,
        /// Write NAME.npy for every output into this directory (created if missing).
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// Seed of the random values of parameters without --input.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// How many times to execute (the outputs are those of the last execution).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        iterations: u32,
        /// Fail if one execution takes longer than this many seconds.
        #[arg(long, value_name = "SECS", value_parser = parse_deadline)]
        deadline: Option<Duration>,
        /// Run the program SPMD on this many devices (ranks 0..N-1, one thread each), with
        /// collectives among them; parameters without --input get per-rank random values.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        devices: u32,
        /// A collective whose peers have not all arrived after this many seconds fails,
        /// naming the missing ranks (a warning names them after a sixth of it).
        #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_deadline)]
        collective_timeout: Duration,
    },
    /// Print a readable listing of a program: signature, allocations, modules, thunk tree.
    Inspect {
        /// The program file (.txtpb or .pb).
        program: PathBuf,
    },
    /// Convert a program between text (.txtpb) and binary (.pb), by extension; validates it.
    Convert {
        /// The program to read.
        input: PathBuf,
        /// The file to write (atomically: a temporary file, then a rename).
        output: PathBuf,
    },
    /// Compile every portable kernel module ahead of time for GPU targets (sm_80, sm_90,
    /// compute_90 for PTX, gfx90a, ...) and store the images in the program beside the
    /// portable source; needs only the compiler (NVRTC, hipRTC), no GPU.
    Compile {
        /// The program to read.
        program: PathBuf,
        /// A target (repeatable): sm_NN / compute_NN (CUDA) or gfxNNN (AMD).
        #[arg(long = "target", required = true)]
        targets: Vec<String>,
        /// The program to write (.pb or .txtpb).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// List every backend of this build: available (version, devices) or why not.
    Devices,
    /// Start N local processes of one job: ranks 0..N-1, each this xthunk binary running
    /// COMMAND (after `--`) with XTHUNK_RANK, XTHUNK_WORLD_SIZE, XTHUNK_COORDINATOR and
    /// XTHUNK_JOB_ID set; every output line is prefixed with `[rank R]`.
    #[command(after_help = cli::launch::AFTER_HELP)]
    Launch {
        /// How many processes (ranks).
        #[arg(short = 'n', long = "nprocs", value_name = "N")]
        #[arg(value_parser = cli::launch::parse_nprocs)]
        nprocs: usize,
        /// Where the ranks meet: `local`, or `etcd://HOST:PORT[,HOST:PORT...]`.
        #[arg(long, default_value = "local", value_parser = cli::launch::parse_coordinator)]
        coordinator: xthunk_core::distributed::CoordinatorSpec,
        /// The job id, the same for every rank and unique among the jobs sharing the
        /// coordinator (default: a new one).
        #[arg(long)]
        job_id: Option<String>,
        /// Seconds the other ranks get to exit on their own after one failed, before they are
        /// killed.
        #[arg(long, value_name = "SECS", default_value = "3")]
        #[arg(value_parser = cli::launch::parse_grace)]
        grace: Duration,
        /// The xthunk command every rank runs, after `--` (e.g. `-- run program.txtpb`).
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
    /// Run the conformance suite on a backend (default: every backend of this build).
    #[command(after_help = CONFORMANCE_AFTER_HELP)]
    Conformance {
        /// Only this backend (host, cuda, rocm).
        #[arg(long)]
        backend: Option<String>,
        /// Device ordinal within the backend.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Only checks whose name contains this string (e.g. `kernels/`, `gemm`).
        #[arg(long)]
        filter: Option<String>,
        /// List every check, passed ones included.
        #[arg(long)]
        verbose_table: bool,
    },
    /// Run the benchmarks (executor overhead, command buffers, copy bandwidth, gemm, streams)
    /// against baselines measured in the same run, and print one table.
    Bench {
        /// auto (cuda, then rocm, then host), or a backend name (host, cuda, rocm).
        #[arg(long, default_value = "auto")]
        backend: String,
        /// Device ordinal within the backend.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Only benchmarks whose name contains this string (e.g. `gemm`, `copy`).
        #[arg(long)]
        filter: Option<String>,
        /// Fewer rounds (a smoke run).
        #[arg(long)]
        quick: bool,
        /// Also write the results as JSON to this file (atomically).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE.npy, got `{s}`")),
    }
}

fn parse_deadline(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, got `{s}`"))?;
    if secs <= 0.0 {
        return Err(format!("the deadline must be positive, got {s}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("deadline {s}: {e}"))
}

fn init_logging(verbose: u8) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
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
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(true)
        .try_init();
}

fn dispatch(cli: Cli, out: &mut dyn Write) -> CliResult<u8> {
    match cli.command {
        Command::Run {
            program,
            backend,
            device,
            inputs,
            output_dir,
            seed,
            iterations,
            deadline,
            devices,
            collective_timeout,
        } => {
            let args = cli::run::RunArgs {
                program,
                backend,
                device,
                inputs,
                output_dir,
                seed,
                iterations,
                deadline,
                devices,
                collective_timeout,
            };
            cli::run::run(&args, out)?;
        }
        Command::Inspect { program } => {
            let exe =
                xthunk::proto::load_file(&program).map_err(|e| CliError::program(&program, e))?;
            out.write_all(cli::inspect::listing(&exe).as_bytes())?;
        }
        Command::Convert { input, output } => cli::convert::convert(&input, &output, out)?,
        Command::Compile {
            program,
            targets,
            output,
        } => cli::compile::compile(&program, &targets, &output, out)?,
        Command::Devices => cli::devices::devices(&xthunk::Runtime::new(), out)?,
        Command::Launch {
            nprocs,
            coordinator,
            job_id,
            grace,
            command,
        } => {
            let args = cli::launch::LaunchArgs {
                nprocs,
                coordinator,
                job_id,
                grace,
                command,
            };
            return cli::launch::launch(&args, out);
        }
        Command::Conformance {
            backend,
            device,
            filter,
            verbose_table,
        } => {
            let args = cli::conformance::ConformanceArgs {
                backend,
                device,
                filter,
                verbose_table,
            };
            return cli::conformance::conformance(
                &xthunk::Runtime::with_host_devices(xthunk_conformance::MAX_RANKS),
                &args,
                out,
            );
        }
        Command::Bench {
            backend,
            device,
            filter,
            quick,
            json,
        } => {
            let args = cli::bench::BenchArgs {
                backend,
                device,
                filter,
                quick,
                json,
            };
            return cli::bench::bench(&xthunk::Runtime::new(), &args, out);
        }
    }
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = dispatch(cli, &mut out).and_then(|code| {
        out.flush().map_err(CliError::Stdout)?;
        Ok(code)
    });
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`xthunk inspect p.txtpb | head`): not an error.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

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
