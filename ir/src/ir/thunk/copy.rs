//! `copy`: `dst = src` (equal sizes, no overlap).

use super::kind::{Checker, Nested, ThunkKind, TraceCost, read, write};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, Slice, ThunkPath};
use serde_json::{Map, Value};

/// Copy `src` to `dst` (equal sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CopyThunk {
    pub src: Slice,
    pub dst: Slice,
}

impl ThunkKind for CopyThunk {
    fn name(&self) -> &'static str {
        "copy"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![read(self.src), write(self.dst)]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let (src, dst) = (&self.src, &self.dst);
        cx.slice(src, path, "src", false)?;
        cx.slice(dst, path, "dst", true)?;
        if src.size != dst.size {
            return Err(err(
                path,
                "dst",
                format!("copy of {} bytes into a slice of {}", src.size, dst.size),
            ));
        }
        if src.overlaps(dst) {
            return Err(err(path, "dst", format!("overlaps the source {src}")));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("copy {} -> {}", self.src, self.dst)
    }

    fn trace(&self, _: &mut Map<String, Value>) -> TraceCost {
        TraceCost {
            bytes: self.src.size.saturating_mul(2),
            ..TraceCost::default()
        }
    }
}

impl<T> Nested<T> for CopyThunk {}
