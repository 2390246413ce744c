//! `memset`: fill `dst` with a repeated 1-, 2- or 4-byte pattern.

use super::kind::{Checker, Nested, ThunkKind, TraceCost, write};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, Slice, ThunkPath};
use serde_json::{Map, Value};

/// Byte pattern of a memset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemsetPattern {
    U8(u8),
    U16(u16),
    U32(u32),
}

impl MemsetPattern {
    /// Width of the repeated pattern in bytes.
    pub const fn width(&self) -> u64 {
        match self {
            MemsetPattern::U8(_) => 1,
            MemsetPattern::U16(_) => 2,
            MemsetPattern::U32(_) => 4,
        }
    }
}

/// Fill `dst` with a repeated pattern (size a multiple of the pattern width).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemsetThunk {
    pub dst: Slice,
    pub pattern: MemsetPattern,
}

impl ThunkKind for MemsetThunk {
    fn name(&self) -> &'static str {
        "memset"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![write(self.dst)]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let dst = &self.dst;
        cx.slice(dst, path, "dst", true)?;
        let w = self.pattern.width();
        if !dst.size.is_multiple_of(w) || !dst.offset.is_multiple_of(w) {
            return Err(err(
                path,
                "dst",
                format!("{dst} is not aligned to the {w}-byte pattern width"),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let p = match self.pattern {
            MemsetPattern::U8(v) => format!("u8:{v:#04x}"),
            MemsetPattern::U16(v) => format!("u16:{v:#06x}"),
            MemsetPattern::U32(v) => format!("u32:{v:#010x}"),
        };
        format!("memset {} pattern={p}", self.dst)
    }

    fn trace(&self, _: &mut Map<String, Value>) -> TraceCost {
        TraceCost {
            bytes: self.dst.size,
            ..TraceCost::default()
        }
    }
}

impl<T> Nested<T> for MemsetThunk {}
