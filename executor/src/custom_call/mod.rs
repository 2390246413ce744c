//! Custom calls: the handlers behind `CustomCall` thunks, the one registry every backend
//! shares (keyed by backend name, then target), the typed view a handler gets of its call,
//! the C ABI (`include/xthunk_ffi.h`) and the plugins that register C handlers.
//!
//! A handler is called when its thunk is *issued*, with the stream the thunk runs on. It does
//! its work in that stream's order: on a GPU by enqueueing on the native stream
//! ([`Call::native_stream`]: a `CUstream` or `hipStream_t`), on the host through
//! [`Call::enqueue_host`]. A C handler on the host gets
//! a null stream and is itself enqueued on the host stream. A handler that is
//! [command-buffer compatible](Traits::command_buffer_compatible) is issued while a command
//! buffer records, so its work is captured (CUDA/HIP graphs, host replays) and replayed without
//! calling it again; any other handler splits the command buffer around it at load.
//!
//! Modules: `call` (the typed view of one call and attribute decoding), `registry` (the
//! registry and the load-time checks), `ffi` (the C ABI's structures and the adapter that
//! calls a C handler), `plugin` (loading shared libraries that register C handlers).

mod call;
mod ffi;
mod plugin;
mod registry;

pub use call::{Call, CallBuffer, FromAttr};
pub use ffi::{
    XTHUNK_FFI_API_VERSION, XTHUNK_FFI_REGISTER_SYMBOL, XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE,
    XTHUNK_FFI_VERSION_SYMBOL,
};
pub use plugin::{Plugin, load_plugin};
pub use registry::{AttrType, HandlerSignature, Registry, registry};

use crate::ir::ThunkPath;
use std::path::PathBuf;

/// What a handler declares about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traits {
    /// The handler's work may be recorded into a command buffer and replayed without calling
    /// the handler again (its work depends only on the call's buffers and attributes). A
    /// handler without it splits a command buffer around its call.
    pub command_buffer_compatible: bool,
}

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

/// A custom-call handler: the Rust way in (C handlers are adapted to it).
pub trait Handler: Send + Sync {
    /// Issues the call on `call.stream()` (see the module documentation).
    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError>;

    /// Capture into command buffers; not compatible by default.
    fn traits(&self) -> Traits {
        Traits::default()
    }

    /// Called for every call of the handler (`call`, at `path`) when a program is loaded onto
    /// `device`, before anything runs (load modules, plan work: nothing a stream capture
    /// forbids is then done at issue). Nothing, by default.
    fn prepare(
        &self,
        device: &dyn crate::backend::Device,
        call: &crate::ir::CustomCallThunk,
        path: &ThunkPath,
    ) -> Result<(), HandlerError> {
        let _ = (device, call, path);
        Ok(())
    }

    /// What the handler takes, checked for every call at load (nothing runs when a call does
    /// not match). Anything, by default.
    fn signature(&self) -> HandlerSignature {
        HandlerSignature::default()
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

/// The core error carries a custom-call error boxed as a plain error (the error row imports
/// nothing of this one); its message and causes are this error's own.
impl From<CustomCallError> for crate::Error {
    fn from(e: CustomCallError) -> Self {
        crate::Error::CustomCall(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::CustomCallError;
    use std::error::Error as _;

    #[test]
    fn a_custom_call_error_in_the_core_error_keeps_its_message_causes_and_type() {
        let e: crate::Error = CustomCallError::Failed {
            target: "t".into(),
            source: Box::new(super::HandlerError::failed("boom")),
        }
        .into();
        assert_eq!(e.to_string(), "custom call `t` failed: boom");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("boom"));
        let inner = match &e {
            crate::Error::CustomCall(inner) => inner.downcast_ref::<CustomCallError>(),
            _ => None,
        };
        assert!(
            matches!(inner, Some(CustomCallError::Failed { .. })),
            "{e:?}"
        );
    }
}
