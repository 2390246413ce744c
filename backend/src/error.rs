//! The core error type.

use crate::ir::{MemorySpace, ThunkPath, ValidationError};
use std::time::Duration;

/// Errors of the core runtime: backends, loading, execution.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A backend (its library or its device) is not there. `reason` says what was tried.
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable { backend: String, reason: String },
    /// The backend or device does not support a feature the program needs.
    #[error("`{backend}` does not support {feature}")]
    Unsupported { backend: String, feature: String },
    /// The program failed validation.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// An allocation failed.
    #[error("out of memory: could not allocate {requested} bytes of {space} memory on {device}")]
    OutOfMemory {
        device: String,
        requested: u64,
        space: MemorySpace,
    },
    /// A program needs more memory than its device has available (checked at load).
    #[error(
        "out of memory: the program needs {needed} bytes on {device} ({parts}), {available} available"
    )]
    ProgramMemory {
        device: String,
        needed: u64,
        /// What the bytes are: `N of temps, N of parameters and outputs, N of constants`.
        parts: String,
        available: u64,
    },
    /// A call into a backend (a vendor library, or the host runtime) failed.
    #[error("{backend}: {call} failed: {message}")]
    Backend {
        backend: String,
        call: String,
        message: String,
    },
    /// A module could not be loaded or a kernel found in it.
    #[error("module `{module}`: {message}")]
    Module { module: String, message: String },
    /// A kernel failed while running.
    #[error("kernel `{kernel}` failed: {message}")]
    Kernel { kernel: String, message: String },
    /// A caller passed something inconsistent (wrong buffer count, size, device, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An execution did not finish before its deadline.
    #[error("deadline of {deadline:?} exceeded; first pending thunks: {pending}")]
    DeadlineExceeded { deadline: Duration, pending: String },
    /// An execution was cancelled by its caller (a cancel token, `Execution::cancel`, the C
    /// API's `xthunk_event_cancel`, Python's `KeyboardInterrupt`): it stopped issuing at `at`
    /// and the work already issued finished.
    #[error("execution cancelled; it stopped at {at}")]
    Cancelled { at: String },
    /// Coordination with the other processes of a job failed (a dead rank, a timeout).
    #[error(transparent)]
    Distributed(#[from] crate::distributed::DistributedError),
    /// A custom call could not be resolved, loaded or run: the custom-call layer's
    /// `CustomCallError` (`xthunk_core::custom_call`), boxed as a plain error so that this row
    /// names nothing above it (`downcast_ref` recovers the type).
    #[error(transparent)]
    CustomCall(Box<dyn std::error::Error + Send + Sync>),
    /// A thunk failed; `path` names it.
    #[error("thunk {path} ({kind}): {source}")]
    Thunk {
        path: ThunkPath,
        kind: &'static str,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Shorthand for [`Error::Backend`].
    pub fn backend(backend: &str, call: &str, message: impl Into<String>) -> Self {
        Error::Backend {
            backend: backend.into(),
            call: call.into(),
            message: message.into(),
        }
    }

    /// The error inside any [`Error::Thunk`] wrappers (what a caller classifies by).
    pub fn innermost(&self) -> &Error {
        match self {
            Error::Thunk { source, .. } => source.innermost(),
            e => e,
        }
    }

    /// Whether the execution was cancelled (see [`Error::Cancelled`]), wrapped or not.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.innermost(), Error::Cancelled { .. })
    }

    /// Whether the execution ran past its deadline, wrapped or not.
    pub fn is_deadline_exceeded(&self) -> bool {
        matches!(self.innermost(), Error::DeadlineExceeded { .. })
    }

    /// Wraps this error with the thunk that caused it (once: an error that already names a
    /// thunk keeps the innermost path).
    pub fn at_thunk(self, path: &ThunkPath, kind: &'static str) -> Self {
        match self {
            e @ Error::Thunk { .. } => e,
            e => Error::Thunk {
                path: path.clone(),
                kind,
                source: Box::new(e),
            },
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
