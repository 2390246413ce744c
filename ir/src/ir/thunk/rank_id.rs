//! `rank_id`: writes this device's global rank as an i32, for SPMD programs.

use super::kind::{Checker, Nested, ThunkKind, uses_line, write};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, Slice, ThunkPath};

/// Writes this device's global rank as an i32 into `dst` (4 bytes), for SPMD programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RankIdThunk {
    pub dst: Slice,
}

impl ThunkKind for RankIdThunk {
    fn name(&self) -> &'static str {
        "rank_id"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![write(self.dst)]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let dst = &self.dst;
        cx.slice(dst, path, "dst", true)?;
        if dst.size != 4 {
            return Err(err(
                path,
                "dst",
                format!(
                    "rank_id writes an i32 (4 bytes), the slice has {}",
                    dst.size
                ),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        uses_line(self)
    }
}

impl<T> Nested<T> for RankIdThunk {}
