//! The errors every GPU backend builds the same way: `Unavailable` for a missing library or
//! device, `Unsupported` for a missing feature, each naming the backend.

use xthunk_core::Error;

/// `Unavailable { backend, reason }`.
pub fn unavailable(backend: &str, reason: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: backend.into(),
        reason: reason.into(),
    }
}

/// `Unsupported { backend, feature }`.
pub fn unsupported(backend: &str, feature: impl Into<String>) -> Error {
    Error::Unsupported {
        backend: backend.into(),
        feature: feature.into(),
    }
}
