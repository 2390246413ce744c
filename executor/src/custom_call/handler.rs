//! The [`Handler`] trait (the Rust way in; C handlers are adapted to it) and the [`Traits`] a
//! handler declares.

use super::call::Call;
use super::errors::HandlerError;
use super::signature::HandlerSignature;
use crate::ir::ThunkPath;

/// What a handler declares about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traits {
    /// The handler's work may be recorded into a command buffer and replayed without calling
    /// the handler again (its work depends only on the call's buffers and attributes). A
    /// handler without it splits a command buffer around its call.
    pub command_buffer_compatible: bool,
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
