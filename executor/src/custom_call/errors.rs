//! The errors of custom calls: a handler's own ([`HandlerError`]) and those of loading,
//! registering, resolving and calling ([`CustomCallError`]).

use crate::ir::ThunkPath;
use std::path::PathBuf;

/// A handler's own error, or a typed decoding error naming what it decoded.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// An attribute is missing or of another type than the handler reads.
    #[error("attribute `{name}`: {message}")]
    Attribute { name: String, message: String },
    /// An operand or result is not what the handler takes.
    #[error("{which}: {message}")]
    Buffer { which: String, message: String },
    /// The handler failed.
    #[error("{0}")]
    Failed(String),
    /// A backend call the handler made failed.
    #[error(transparent)]
    Runtime(#[from] crate::Error),
}

impl HandlerError {
    pub fn failed(message: impl Into<String>) -> Self {
        HandlerError::Failed(message.into())
    }
}

/// Errors of custom calls: loading plugins, registering, resolving at load, calling.
#[derive(Debug, thiserror::Error)]
pub enum CustomCallError {
    /// No handler is registered for the target on the device's backend.
    #[error(
        "thunk {path}: custom call `{target}` has no handler on backend `{backend}` \
         (registered there: {registered})"
    )]
    MissingHandler {
        path: ThunkPath,
        target: String,
        backend: String,
        /// The registered targets, comma-separated, or `none`.
        registered: String,
    },
    /// A call does not match what its handler takes.
    #[error("thunk {path}: custom call `{target}`: {message}")]
    Mismatch {
        path: ThunkPath,
        target: String,
        message: String,
    },
    /// The handler failed (at issue, or in the stream's order on the host).
    #[error("custom call `{target}` failed: {source}")]
    Failed {
        target: String,
        #[source]
        source: Box<HandlerError>,
    },
    /// A target registered twice on one backend.
    #[error("custom call target `{target}` is already registered on backend `{backend}`")]
    Duplicate { backend: String, target: String },
    /// A plugin could not be loaded or registered its handlers wrongly.
    #[error("custom-call plugin {}: {message}", file.display())]
    Plugin { file: PathBuf, message: String },
}

/// What kind of failure a custom-call error is, for the bindings' error classes: what is
/// known when a program is loaded is not an execution error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CustomCallKind {
    /// No handler for a target on the device's backend.
    Unsupported,
    /// A call does not match its handler (attributes, buffers).
    Program,
    /// A plugin file that cannot be loaded or does not register properly.
    Unavailable,
    /// A target registered twice.
    InvalidArgument,
    /// A handler failed while running.
    Execution,
}

impl CustomCallError {
    pub fn kind(&self) -> CustomCallKind {
        match self {
            CustomCallError::MissingHandler { .. } => CustomCallKind::Unsupported,
            CustomCallError::Mismatch { .. } => CustomCallKind::Program,
            CustomCallError::Plugin { .. } => CustomCallKind::Unavailable,
            CustomCallError::Duplicate { .. } => CustomCallKind::InvalidArgument,
            CustomCallError::Failed { .. } => CustomCallKind::Execution,
        }
    }

    /// The kind of the custom-call error `e` carries, if it carries one.
    pub fn kind_of(e: &crate::Error) -> Option<CustomCallKind> {
        match e {
            crate::Error::CustomCall(b) => b.downcast_ref::<CustomCallError>().map(Self::kind),
            _ => None,
        }
    }
}

/// The core error carries a custom-call error boxed as a plain error (the error row imports
/// nothing of this one); its message and causes are this error's own.
impl From<CustomCallError> for crate::Error {
    fn from(e: CustomCallError) -> Self {
        crate::Error::CustomCall(Box::new(e))
    }
}
