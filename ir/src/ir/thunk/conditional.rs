//! `conditional`: runs one branch chosen by an i32 or pred index.

use super::kind::{Checker, Nested, ThunkKind, read};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, DType, ListName, Slice, ThunkPath};

/// Runs one branch chosen by `index`: an i32 (branch `index`; an index out of range,
/// negative or too large, runs the last branch, as XLA does) or a pred (true runs
/// branch 0, false branch 1).
///
/// `T` is the element of its thunk lists: a program's is [`super::ConditionalThunk`], with
/// [`super::Thunk`]s.
#[derive(Clone, Debug, PartialEq)]
pub struct Conditional<T> {
    pub index: Slice,
    pub index_type: DType,
    pub branches: Vec<Vec<T>>,
}

/// The branch of `0..=last` an index of `index_type` read back as `bytes` selects.
pub fn select_branch(index_type: DType, last: usize, b: [u8; 8]) -> usize {
    if index_type == DType::Pred {
        if b[0] != 0 { 0 } else { 1 }
    } else {
        let i = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if i < 0 || i as usize > last {
            last
        } else {
            i as usize
        }
    }
}

impl<T> ThunkKind for Conditional<T> {
    fn name(&self) -> &'static str {
        "conditional"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![read(self.index)]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let (index, index_type, branches) = (&self.index, self.index_type, &self.branches);
        cx.slice(index, path, "index", false)?;
        let want = match index_type {
            DType::I32 => 4,
            DType::Pred => 1,
            other => {
                return Err(err(
                    path,
                    "index_type",
                    format!("must be i32 or pred, got {other}"),
                ));
            }
        };
        if index.size != want {
            return Err(err(
                path,
                "index",
                format!(
                    "a {index_type} index is {want} bytes, the slice has {}",
                    index.size
                ),
            ));
        }
        if branches.is_empty() {
            return Err(err(
                path,
                "branches",
                "a conditional needs at least one branch",
            ));
        }
        if index_type == DType::Pred && branches.len() != 2 {
            return Err(err(
                path,
                "branches",
                format!(
                    "a pred index selects between 2 branches, found {}",
                    branches.len()
                ),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "conditional index={} r ({}) ({} branches)",
            self.index,
            self.index_type,
            self.branches.len()
        )
    }
}

impl<T> Nested<T> for Conditional<T> {
    fn nested(&self) -> Vec<(ListName, &[T])> {
        self.branches
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    ListName {
                        field: "branches",
                        index: Some(i),
                    },
                    b.as_slice(),
                )
            })
            .collect()
    }
}
