//! `while`: `loop { cond; if !pred { break }; body }`, or a body run a promised number of times.

use super::kind::{Checker, Nested, ThunkKind, read};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, ListName, Slice, ThunkPath};

/// `loop { cond; if !pred { break }; body }`. `pred` is a 1-byte pred written by `cond`.
/// With `trip_count`, the body runs exactly that many times and `cond` is not run (the
/// count is a promise the producer makes, as in XLA), so the host never waits on the
/// device; without it, `pred` is copied to pinned host memory after every `cond`.
///
/// `T` is the element of its thunk lists: a program's is [`super::WhileThunk`], with
/// [`super::Thunk`]s.
#[derive(Clone, Debug, PartialEq)]
pub struct While<T> {
    pub cond: Vec<T>,
    pub pred: Slice,
    pub body: Vec<T>,
    pub trip_count: Option<u64>,
}

impl<T> ThunkKind for While<T> {
    fn name(&self) -> &'static str {
        "while"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![read(self.pred)]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        if let Some(n) = self.trip_count
            && n > i64::MAX as u64
        {
            return Err(err(
                path,
                "trip_count",
                format!(
                    "{n} is larger than the largest supported count {}",
                    i64::MAX
                ),
            ));
        }
        let pred = &self.pred;
        cx.slice(pred, path, "pred", false)?;
        if pred.size != 1 {
            return Err(err(
                path,
                "pred",
                format!("must be a 1-byte pred, the slice has {} bytes", pred.size),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let pred = self.pred;
        match self.trip_count {
            Some(n) => format!(
                "while trip_count={n} pred={pred} r (body {} thunks)",
                self.body.len()
            ),
            None => format!(
                "while pred={pred} r (cond {} thunks, body {} thunks)",
                self.cond.len(),
                self.body.len()
            ),
        }
    }
}

impl<T> Nested<T> for While<T> {
    fn nested(&self) -> Vec<(ListName, &[T])> {
        vec![
            (ListName::field("cond"), self.cond.as_slice()),
            (ListName::field("body"), self.body.as_slice()),
        ]
    }
}
