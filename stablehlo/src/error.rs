//! The one error of the reader: where (line:column), which operation was being read, and what
//! was wrong.

use crate::ast::Pos;
use thiserror::Error;

/// Why a text could not be read (or a `dense` value not decoded). Every variant names the
/// position and the operation being read (`module` outside any operation).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ParseError {
    /// The text is not what MLIR's grammar (or the op's pretty form) allows here.
    #[error("{pos}: {message} (reading {op})")]
    Syntax {
        pos: Pos,
        op: String,
        message: String,
    },
    /// Regions, types, attributes or locations nested deeper than the reader's limit.
    #[error("{pos}: nested deeper than {limit} levels (reading {op})")]
    TooDeep { pos: Pos, op: String, limit: usize },
    /// Something larger than the reader's caps (input size, element count, decoded bytes).
    #[error("{pos}: {what} exceeds the limit of {limit} (reading {op})")]
    TooLarge {
        pos: Pos,
        op: String,
        what: String,
        limit: u64,
    },
    /// A `dense` or `dense_resource` value that does not fit its type (count, range, format).
    #[error("{pos}: {message} (reading {op})")]
    Dense {
        pos: Pos,
        op: String,
        message: String,
    },
    /// The reader's or importer's own thread (see `stack.rs`) could not run.
    #[error("{message}")]
    Thread { message: String },
}

impl ParseError {
    /// Where the error is.
    pub fn pos(&self) -> Pos {
        match self {
            ParseError::Syntax { pos, .. }
            | ParseError::TooDeep { pos, .. }
            | ParseError::TooLarge { pos, .. }
            | ParseError::Dense { pos, .. } => *pos,
            ParseError::Thread { .. } => Pos::default(),
        }
    }

    /// The operation being read.
    pub fn op(&self) -> &str {
        match self {
            ParseError::Syntax { op, .. }
            | ParseError::TooDeep { op, .. }
            | ParseError::TooLarge { op, .. }
            | ParseError::Dense { op, .. } => op,
            ParseError::Thread { .. } => "",
        }
    }
}

/// `text` with control characters and line separators escaped (`\n`, `\u{2028}`), so that
/// names quoted from the input keep an error on one line.
pub(crate) fn one_line(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if needs_escape(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}')
}
