//! The CLI's error type. `main` prints it as one line, `error: ` followed by the whole source
//! chain joined by `: `, and exits with [`CliError::exit_code`]: 2 for a usage error (the
//! command line does not fit the program or the machine), 1 for everything else.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use xthunk::proto::ProtoError;

/// Everything a CLI command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The runtime failed: backend selection, loading, execution.
    #[error(transparent)]
    Core(#[from] xthunk::Error),
    /// A program file could not be read, parsed, validated or written.
    #[error("{}", path.display())]
    Program {
        path: PathBuf,
        #[source]
        source: ProtoError,
    },
    /// A program file error that already names its file (I/O errors).
    #[error(transparent)]
    ProgramIo(ProtoError),
    /// A file (other than a program) could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An `.npy` input does not fit its parameter, or cannot be read.
    #[error("input `{name}` from {}: {message}", path.display())]
    Npy {
        name: String,
        path: PathBuf,
        message: String,
    },
    /// Writing to standard output failed (a closed pipe is not reported).
    #[error("writing to standard output: {0}")]
    Stdout(#[source] std::io::Error),
    /// A failure explained by its message alone (exit 1). Despite its name, not a usage
    /// error: those are [`CliError::CommandLine`].
    #[error("{0}")]
    Usage(String),
    /// A usage error (exit 2, as clap's own): a command-line value that parsed but does not
    /// fit this program or this machine (an unknown `--input` name, an `--output-dir` that is
    /// a file, a file extension of no known format, an unknown backend or target, a device
    /// that does not exist).
    #[error("{0}")]
    CommandLine(String),
    /// A host buffer sized by the program or a file could not be had (`what` names it: the
    /// random input of a parameter, an `.npy` file's data, with its size).
    #[error("{what}: {source}")]
    HostMemory {
        what: String,
        #[source]
        source: super::tensor::HostAllocError,
    },
}

impl CliError {
    /// Wraps a [`ProtoError`] about the program file `path`.
    pub fn program(path: &Path, source: ProtoError) -> Self {
        match source {
            e @ ProtoError::Io { .. } => CliError::ProgramIo(e),
            e @ ProtoError::UnknownFormat { .. } => CliError::ProgramIo(e),
            source => CliError::Program {
                path: path.to_path_buf(),
                source,
            },
        }
    }

    /// Wraps an I/O error about `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        CliError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The process's exit status for this error: 2 for a usage error, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::CommandLine(_) | CliError::ProgramIo(ProtoError::UnknownFormat { .. }) => 2,
            _ => 1,
        }
    }

    /// True for a write to a closed standard output (`xthunk inspect p.txtpb | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Stdout(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl From<std::io::Error> for CliError {
    /// Bare I/O errors in commands come from writing their report to standard output.
    fn from(e: std::io::Error) -> Self {
        CliError::Stdout(e)
    }
}

pub type CliResult<T> = Result<T, CliError>;

/// One line: the error and every source below it, joined by `: `. A source whose text is
/// already part of the line (many errors print their source themselves) is not repeated;
/// line breaks inside messages become spaces.
pub fn one_line(e: &dyn StdError) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn usage_errors_exit_2_and_failures_1() {
        assert_eq!(CliError::CommandLine("x".into()).exit_code(), 2);
        let unknown = xthunk::proto::Format::from_path(Path::new("p.json")).unwrap_err();
        assert_eq!(
            CliError::program(Path::new("p.json"), unknown).exit_code(),
            2
        );
        assert_eq!(CliError::Usage("x".into()).exit_code(), 1);
        let io = std::io::Error::other("gone");
        assert_eq!(CliError::io(Path::new("f"), io).exit_code(), 1);
    }

    #[test]
    fn chain_is_joined_once() {
        let e = Outer(std::io::Error::other("inner\nproblem"));
        assert_eq!(one_line(&e), "outer: inner problem");
        let e = Repeats(std::io::Error::other("inner"));
        assert_eq!(one_line(&e), "outer: inner");
    }
}
