//! `async_start` / `async_done`: a body run asynchronously on another stream class (the
//! class, [`super::AsyncKind`], is in `kind.rs` beside the [`super::Scope`] naming it).

use super::kind::{AsyncKind, Checker, Nested, Scope, ThunkKind};
use crate::ir::error::{ValidationError, err};
use crate::ir::{ListName, ThunkPath};

/// Starts `body` asynchronously on another stream of the given kind, after the work it
/// depends on. Must be matched by an `AsyncDone` with the same id later in the same list.
///
/// `T` is the element of its thunk lists: a program's is [`super::AsyncStartThunk`], with
/// [`super::Thunk`]s.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncStart<T> {
    pub id: u32,
    pub kind: AsyncKind,
    pub body: Vec<T>,
}

/// Later work that depends on the matching `AsyncStart`'s body waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncDoneThunk {
    pub id: u32,
}

impl<T> ThunkKind for AsyncStart<T> {
    fn name(&self) -> &'static str {
        "async_start"
    }

    fn scope(&self) -> Scope {
        Scope::AsyncStart {
            id: self.id,
            kind: self.kind,
        }
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
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

impl<T> Nested<T> for AsyncStart<T> {
    fn nested(&self) -> Vec<(ListName, &[T])> {
        vec![(ListName::field("body"), self.body.as_slice())]
    }
}

impl ThunkKind for AsyncDoneThunk {
    fn name(&self) -> &'static str {
        "async_done"
    }

    fn scope(&self) -> Scope {
        Scope::AsyncDone { id: self.id }
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "async_done")
    }

    fn describe(&self) -> String {
        format!("async_done id={}", self.id)
    }
}

impl<T> Nested<T> for AsyncDoneThunk {}
