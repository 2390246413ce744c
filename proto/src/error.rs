//! [`ProtoError`]: what can go wrong reading, writing or converting a program.

use std::path::PathBuf;
use xthunk_core::ir::{ThunkPath, ValidationError};

/// An error reading, writing or converting a program.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The binary encoding is malformed (truncated, not a program, nested too deeply, ...).
    #[error("cannot decode binary program: {source}")]
    Decode {
        #[source]
        source: prost::DecodeError,
    },
    /// The text encoding does not parse. `line` and `col` are 1-based (`col` counts
    /// characters).
    #[error("text program: line {line}, column {col}: {message}")]
    TextParse {
        line: usize,
        col: usize,
        message: String,
    },
    /// The message does not describe a program: a required field or oneof is missing, an enum
    /// is unspecified or unknown, a value is out of range. `path` is the thunk (the root path
    /// for executable-level fields such as `allocations[2].kind`).
    #[error("{}", describe_invalid(path, field, message))]
    Invalid {
        path: ThunkPath,
        field: String,
        message: String,
    },
    /// The program converted but failed validation.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// A program in another language (StableHLO text, `.mlir`) that its importer refused or
    /// could not lower; `message` gives the position (line:column) and the op where it has
    /// one. The facade crate imports such programs (`xthunk::load_program`); this crate only
    /// carries the error, so that every caller handles one error type.
    #[error("{format} program: {message}")]
    Import {
        format: &'static str,
        message: String,
    },
    /// There is no program: zero bytes, or text with nothing but whitespace and comments.
    #[error(
        "the program is empty ({what}): expected a binary program (.pb), its text form (.txtpb) or StableHLO text"
    )]
    Empty { what: &'static str },
    /// The file name does not tell the format.
    #[error(
        "{}: unknown program format (use .txtpb, .textproto or .pbtxt for text, .pb or .binpb for binary)",
        path.display()
    )]
    UnknownFormat { path: PathBuf },
}

fn describe_invalid(path: &ThunkPath, field: &str, message: &str) -> String {
    if path.is_root() {
        format!("invalid program: {field}: {message}")
    } else {
        format!("invalid program: thunk {path}: {field}: {message}")
    }
}

impl ProtoError {
    /// The thunk path of a conversion or validation error.
    pub fn thunk_path(&self) -> Option<&ThunkPath> {
        match self {
            ProtoError::Invalid { path, .. } => Some(path),
            ProtoError::Validation(v) => Some(&v.path),
            _ => None,
        }
    }

    /// The field of a conversion or validation error.
    pub fn field(&self) -> Option<&str> {
        match self {
            ProtoError::Invalid { field, .. } => Some(field),
            ProtoError::Validation(v) => Some(&v.field),
            _ => None,
        }
    }
}
