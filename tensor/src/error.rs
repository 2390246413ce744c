//! The crate's errors: [`GraphError`] when an operation is added with operands its rule
//! refuses, [`LowerError`] when a valid graph cannot be lowered.

use xthunk_core::ir::ValidationError;

/// An operation refused when it is added to a graph: the op and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The operands, attributes or types break the op's rule.
    #[error("{op}: {message}")]
    Invalid { op: &'static str, message: String },
    /// A valid operation with something the graph does not take (the op and what).
    #[error("{op}: not supported: {reason}")]
    Unsupported { op: &'static str, reason: String },
    /// A value of another graph (or of none) was passed.
    #[error("{op}: value %{value} is not a value of graph `{graph}`")]
    UnknownValue {
        op: &'static str,
        value: u32,
        graph: String,
    },
}

/// A graph that cannot be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// Something the lowering does not do yet (the op and what).
    #[error("{op}: not supported: {reason}")]
    Unsupported { op: &'static str, reason: String },
    /// The graph is incomplete (no results, a region of the wrong signature, …).
    #[error("graph `{graph}`: {message}")]
    Graph { graph: String, message: String },
    /// The lowered program fails the IR's validation (a bug of the lowering).
    #[error("the lowered program fails validation: {0}")]
    Invalid(#[from] ValidationError),
}

pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> GraphError {
    GraphError::Invalid {
        op,
        message: message.into(),
    }
}
