//! `sequence`: a nested list of thunks, run in order (scheduled in the enclosing list's place).

use super::{ListName, Scope, Thunk, ThunkKind};
use crate::ir::ThunkPath;
use crate::ir::verify::{ThunkChecker, ValidationError};

impl ThunkKind for Vec<Thunk> {
    fn name(&self) -> &'static str {
        "sequence"
    }

    fn nested(&self) -> Vec<(ListName, &[Thunk])> {
        vec![(ListName::field("thunks"), self.as_slice())]
    }

    fn scope(&self) -> Scope {
        Scope::Sequence
    }

    fn validate(&self, _: &mut ThunkChecker<'_>, _: &ThunkPath) -> Result<(), ValidationError> {
        Ok(())
    }

    fn describe(&self) -> String {
        format!("sequence ({} thunks)", self.len())
    }
}
