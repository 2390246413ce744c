//! `async_start` / `async_done`: a body run asynchronously on another stream class.

use super::{ListName, Scope, Thunk, ThunkKind};
use crate::ir::ThunkPath;
use crate::ir::verify::{ThunkChecker, ValidationError, err};

/// Which stream class an async scope runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncKind {
    /// Another compute stream.
    Compute,
    /// The communication stream (collectives).
    Communication,
}

impl AsyncKind {
    pub const fn name(self) -> &'static str {
        match self {
            AsyncKind::Compute => "compute",
            AsyncKind::Communication => "communication",
        }
    }
}

/// Starts `body` asynchronously on another stream of the given kind, after the work it
/// depends on. Must be matched by an `AsyncDone` with the same id later in the same list.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncStartThunk {
    pub id: u32,
    pub kind: AsyncKind,
    pub body: Vec<Thunk>,
}

/// Later work that depends on the matching `AsyncStart`'s body waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncDoneThunk {
    pub id: u32,
}

impl ThunkKind for AsyncStartThunk {
    fn name(&self) -> &'static str {
        "async_start"
    }

    fn nested(&self) -> Vec<(ListName, &[Thunk])> {
        vec![(ListName::field("body"), self.body.as_slice())]
    }

    fn scope(&self) -> Scope {
        Scope::AsyncStart {
            id: self.id,
            kind: self.kind,
        }
    }

    fn validate(&self, cx: &mut ThunkChecker<'_>, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "async_start")?;
        if !cx.new_async_id(self.id) {
            return Err(err(
                path,
                "id",
                format!("async id {} is used twice", self.id),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "async_start id={} on {} stream ({} thunks)",
            self.id,
            self.kind.name(),
            self.body.len()
        )
    }
}

impl ThunkKind for AsyncDoneThunk {
    fn name(&self) -> &'static str {
        "async_done"
    }

    fn scope(&self) -> Scope {
        Scope::AsyncDone { id: self.id }
    }

    fn validate(&self, cx: &mut ThunkChecker<'_>, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "async_done")
    }

    fn describe(&self) -> String {
        format!("async_done id={}", self.id)
    }
}
