//! `sequence`: a nested list of thunks, run in order (scheduled in the enclosing list's place).

use super::kind::{Checker, Nested, Scope, ThunkKind};
use crate::ir::error::ValidationError;
use crate::ir::{ListName, ThunkPath};

impl<T> ThunkKind for Vec<T> {
    fn name(&self) -> &'static str {
        "sequence"
    }

    fn scope(&self) -> Scope {
        Scope::Sequence
    }

    fn validate(&self, _: &mut dyn Checker, _: &ThunkPath) -> Result<(), ValidationError> {
        Ok(())
    }

    fn describe(&self) -> String {
        format!("sequence ({} thunks)", self.len())
    }
}

impl<T> Nested<T> for Vec<T> {
    fn nested(&self) -> Vec<(ListName, &[T])> {
        vec![(ListName::field("thunks"), self.as_slice())]
    }
}
