//! `xthunk convert`: between the text (`.txtpb`) and binary (`.pb`) program formats.

use super::error::{CliError, CliResult};
use std::io::Write;
use std::path::PathBuf;

/// `xthunk convert` as parsed (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// The program to read.
    pub input: PathBuf,
    /// The file to write (atomically: a temporary file, then a rename).
    pub output: PathBuf,
}

/// Reads and validates `input`, then writes `output` atomically (temporary file + rename); the
/// formats follow the extensions.
pub fn convert(args: &ConvertArgs, out: &mut dyn Write) -> CliResult<()> {
    let (input, output) = (args.input.as_path(), args.output.as_path());
    // Fail on an unknown output extension before reading anything.
    xthunk::proto::Format::from_path(output).map_err(|e| CliError::program(output, e))?;
    let exe = xthunk::load_file(input).map_err(|e| CliError::program(input, e))?;
    xthunk::proto::save_file(output, &exe).map_err(|e| CliError::program(output, e))?;
    writeln!(
        out,
        "wrote {} ({}, {} thunks)",
        output.display(),
        exe.name,
        exe.thunk_count()
    )?;
    Ok(())
}
