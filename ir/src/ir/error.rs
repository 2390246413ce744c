//! The IR's validation error, [`ValidationError`]: the thunk's path, the field and the message.

use super::path::ThunkPath;
use std::fmt;

/// A validation failure: where, which field, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// The thunk (empty for executable-level fields such as allocations).
    pub path: ThunkPath,
    /// The field, e.g. `src`, `args[2]`, `allocations[3].alignment`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            write!(f, "invalid program: {}: {}", self.field, self.message)
        } else {
            write!(
                f,
                "invalid program: thunk {}: {}: {}",
                self.path, self.field, self.message
            )
        }
    }
}

/// A validation error at `path`, in `field`.
pub(crate) fn err(
    path: &ThunkPath,
    field: impl Into<String>,
    message: impl Into<String>,
) -> ValidationError {
    ValidationError {
        path: path.clone(),
        field: field.into(),
        message: message.into(),
    }
}
