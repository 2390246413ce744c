//! The failure of a check ([`CheckFailure`]): what differed, a backend error, or why the
//! check is unsupported.

/// A failed check: what differed.
#[derive(Debug, thiserror::Error)]
pub enum CheckFailure {
    #[error("{0}")]
    Mismatch(String),
    #[error("backend error: {0}")]
    Backend(#[from] xthunk_core::Error),
    #[error("unsupported: {0}")]
    Unsupported(String),
}
