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
//! calls a C handler), `plugin` (loading shared libraries that register C handlers),
//! `handler` (the `Handler` trait and its `Traits`), `signature` (what a handler takes,
//! checked at load), `errors` (`HandlerError`, `CustomCallError`).

mod call;
mod errors;
mod ffi;
mod handler;
mod plugin;
mod registry;
mod signature;

pub use call::{Call, CallBuffer, FromAttr};
pub use errors::{CustomCallError, CustomCallKind, HandlerError};
pub use ffi::{
    XTHUNK_FFI_API_VERSION, XTHUNK_FFI_REGISTER_SYMBOL, XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE,
    XTHUNK_FFI_VERSION_SYMBOL,
};
pub use handler::{Handler, Traits};
pub use plugin::{Plugin, load_plugin};
pub use registry::{Registry, registry};
pub use signature::{AttrType, HandlerSignature};

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
