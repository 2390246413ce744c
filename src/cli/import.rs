//! `xthunk import`: a StableHLO program (`.mlir`, as JAX prints it) imported and lowered into
//! an xthunk program file; with `--target`, its kernels compiled ahead of time as `compile`
//! does (the same code: `compile` reads `.mlir` too).

use super::compile::{CompileArgs, compile};
use super::convert::{ConvertArgs, convert};
use super::error::{CliError, CliResult};
use std::io::Write;
use std::path::PathBuf;

/// `xthunk import` as parsed (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The StableHLO program to read (`.mlir`).
    pub program: PathBuf,
    /// The program to write (.pb or .txtpb).
    #[arg(short, long)]
    pub output: PathBuf,
    /// A target to compile the kernels for (repeatable), as `compile` takes them: sm_NN /
    /// compute_NN (CUDA) or gfxNNN (AMD). Without one the program carries portable source.
    #[arg(long = "target")]
    pub targets: Vec<String>,
}

/// Imports `program` and writes it to `output` (compiled for the targets, if any).
pub fn import(args: &ImportArgs, out: &mut dyn Write) -> CliResult<()> {
    if !xthunk::program_file::is_stablehlo_file(&args.program) {
        return Err(CliError::CommandLine(format!(
            "{}: `import` reads StableHLO (text .mlir, or a portable artifact: VHLO bytecode \
             or jax.export's serialized bytes); other programs: `convert`",
            args.program.display()
        )));
    }
    if args.targets.is_empty() {
        convert(
            &ConvertArgs {
                input: args.program.clone(),
                output: args.output.clone(),
            },
            out,
        )
    } else {
        compile(
            &CompileArgs {
                program: args.program.clone(),
                targets: args.targets.clone(),
                output: Some(args.output.clone()),
                check: false,
            },
            out,
        )
    }
}
