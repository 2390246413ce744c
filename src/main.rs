//! The `xthunk` command: run, inspect and convert thunk programs, list devices, and run the
//! conformance suite.

mod cli {
    pub mod bench;
    pub mod compile;
    pub mod conformance;
    pub mod convert;
    pub mod custom_call;
    pub mod devices;
    pub mod error;
    pub mod import;
    pub mod inspect;
    pub mod job;
    pub mod job_cause;
    pub mod launch;
    pub mod logging;
    pub mod npy;
    pub mod outfiles;
    pub mod profile;
    pub mod progress;
    pub mod rank_stop;
    pub mod run;
    pub mod run_args;
    pub mod summary;
    pub mod tensor;
    pub mod trace;
}

use clap::{ArgAction, Parser, Subcommand};
use cli::error::{CliError, CliResult, one_line};
use std::io::Write;
use std::process::ExitCode;

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
  pred '|b1', i8 '|i1', u8 '|u1', i32 '<i4', i64 '<i8', f16 '<f2', f32 '<f4', f64 '<f8',
  c64 '<c8', c128 '<c16'.
bfloat16 has no numpy dtype: a bf16 parameter takes its raw bits as '<u2' (or a 2-byte void
'V2'), and a bf16 output is written as '<u2' (view it with a.view(ml_dtypes.bfloat16)).
The 8-bit floats f8e4m3fn and f8e5m2 likewise take '|u1' (or what np.save writes for
ml_dtypes' types, '<V1' and '<f1') and are written as '|u1'.

Parameters without --input get seeded random values: floats (and both parts of complex
values) uniform in [-1, 1), signed integers in [-8, 8), u8 in [0, 16), pred 0 or 1.

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
    /// Log format on stderr: human lines, or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = cli::logging::LogFormat::Human)]
    log_format: cli::logging::LogFormat,
    /// No progress bars (they are drawn only when stderr is a terminal anyway).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program (.txtpb or .pb) and print a summary of its outputs.
    #[command(after_help = RUN_AFTER_HELP)]
    Run(cli::run::RunArgs),
    /// Print a readable listing of a program: signature, allocations, modules, thunk tree.
    Inspect(cli::inspect::InspectArgs),
    /// Convert a program between text (.txtpb) and binary (.pb), by extension; validates it.
    Convert(cli::convert::ConvertArgs),
    /// Compile every portable kernel module ahead of time for GPU targets (sm_80, sm_90,
    /// compute_90 for PTX, gfx90a, ...) and store the images in the program beside the
    /// portable source; needs only the compiler (NVRTC, hipRTC), no GPU.
    Compile(cli::compile::CompileArgs),
    /// Import a StableHLO program (.mlir, as JAX prints it) into an xthunk program file
    /// (-o PROGRAM.pb); with --target, compile its kernels as `compile` does. (run, inspect,
    /// compile and profile also take .mlir directly.)
    Import(cli::import::ImportArgs),
    /// List every backend of this build: available (version, devices) or why not.
    Devices,
    /// Start N local processes of one job: ranks 0..N-1, each this xthunk binary running
    /// COMMAND (after `--`) with XTHUNK_RANK, XTHUNK_WORLD_SIZE, XTHUNK_COORDINATOR and
    /// XTHUNK_JOB_ID set; every output line is prefixed with `[rank R]`.
    #[command(after_help = cli::launch::AFTER_HELP)]
    Launch(cli::launch::LaunchArgs),
    /// Run the conformance suite on a backend (default: every backend of this build).
    #[command(after_help = CONFORMANCE_AFTER_HELP)]
    Conformance(cli::conformance::ConformanceArgs),
    /// Run the benchmarks (executor overhead, command buffers, copy bandwidth, gemm, streams)
    /// against baselines measured in the same run, and print one table.
    Bench(cli::bench::BenchArgs),
    /// Run a program with per-thunk timing and print where its step time goes: per thunk kind
    /// and for the slowest thunks, with achieved GB/s or TFLOP/s and the critical path.
    Profile(cli::profile::ProfileArgs),
    /// Join the Chrome JSON traces of a job's processes (`run --trace 't{rank}.json'`) into
    /// one file, their clocks aligned.
    TraceMerge(cli::trace::MergeArgs),
}

fn dispatch(cli: Cli, out: &mut dyn Write) -> CliResult<u8> {
    match cli.command {
        Command::Run(args) => cli::run::run(&args, out)?,
        Command::Inspect(args) => cli::inspect::inspect(&args, out)?,
        Command::Convert(args) => cli::convert::convert(&args, out)?,
        Command::Compile(args) => cli::compile::compile(&args, out)?,
        Command::Import(args) => cli::import::import(&args, out)?,
        Command::Profile(args) => cli::profile::profile(&args, out)?,
        Command::TraceMerge(args) => cli::trace::merge(&args, out)?,
        Command::Devices => cli::devices::devices(&xthunk::Runtime::new(), out)?,
        Command::Launch(args) => return cli::launch::launch(&args, out),
        Command::Conformance(args) => {
            return cli::conformance::conformance(
                &xthunk::Runtime::with_host_devices(xthunk_conformance::MAX_RANKS),
                &args,
                out,
            );
        }
        Command::Bench(args) => {
            // allreduce_sweep's ranks: host devices enough for them (2 unless --ranks).
            let host = args.ranks.unwrap_or(2).max(1);
            return cli::bench::bench(&xthunk::Runtime::with_host_devices(host), &args, out);
        }
    }
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    cli::logging::init(cli.verbose, log_format);
    cli::progress::set_quiet(cli.quiet);
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
            cli::logging::log_failure(log_format, &one_line(&e), &e);
            cli::logging::print_error_line(&one_line(&e));
            ExitCode::from(e.exit_code())
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
}
