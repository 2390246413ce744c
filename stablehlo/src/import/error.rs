//! The importer's error: every refusal and failure names its position and operation.

use crate::ast::{Op, Pos};
use crate::error::ParseError;
use xthunk_tensor::GraphError;

/// Why a module could not be imported: each names the position and the operation.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// The text could not be read.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A portable artifact (MLIR bytecode, a `jax.export` file) could not be read.
    #[error(transparent)]
    Bytecode(#[from] crate::bytecode::BytecodeError),
    /// An op, attribute or type outside what xthunk supports.
    #[error("{pos}: unsupported: {what} (in {op})")]
    Unsupported { what: String, pos: Pos, op: String },
    /// The op's operands or attributes break its rule (as xthunk-tensor checks it), or the
    /// program is not a well-formed one (no `main`, a result type that disagrees).
    #[error("{pos}: {message} (in {op})")]
    Invalid {
        message: String,
        pos: Pos,
        op: String,
    },
}

impl ImportError {
    pub(crate) fn unsupported(op: &Op, what: impl Into<String>) -> Self {
        ImportError::Unsupported {
            what: crate::error::one_line(&what.into()),
            pos: op.pos,
            op: op.name.clone(),
        }
    }

    pub(crate) fn invalid(op: &Op, message: impl Into<String>) -> Self {
        ImportError::Invalid {
            message: crate::error::one_line(&message.into()),
            pos: op.pos,
            op: op.name.clone(),
        }
    }

    pub(crate) fn graph(op: &Op, e: GraphError) -> Self {
        match e {
            GraphError::Unsupported { reason, .. } => Self::unsupported(op, reason),
            e => Self::invalid(op, e.to_string()),
        }
    }

    /// Where the error is.
    pub fn pos(&self) -> Pos {
        match self {
            ImportError::Parse(e) => e.pos(),
            ImportError::Bytecode(_) => Pos::default(),
            ImportError::Unsupported { pos, .. } | ImportError::Invalid { pos, .. } => *pos,
        }
    }
}
