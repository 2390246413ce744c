//! The CLI's error type. `main` prints it as one line, `error: ` followed by the whole source
//! chain joined by `: `, and exits with status 1.

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
    /// A command-line value that parsed but does not make sense for this program.
    #[error("{0}")]
    Usage(String),
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
    fn chain_is_joined_once() {
        let e = Outer(std::io::Error::other("inner\nproblem"));
        assert_eq!(one_line(&e), "outer: inner problem");
        let e = Repeats(std::io::Error::other("inner"));
        assert_eq!(one_line(&e), "outer: inner");
    }
}
