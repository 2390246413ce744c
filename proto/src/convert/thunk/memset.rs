//! `memset` ↔ `MemsetThunk`: the pattern as a width and a value that must fit it.

use super::super::fields::slice_to;
use super::super::fields::{Loc, slice_from};
use crate::{ProtoError, pb};
use xthunk_core::ir::{MemsetPattern, MemsetThunk};

pub(super) fn to(m: &MemsetThunk) -> pb::MemsetThunk {
    let (width, value) = match m.pattern {
        MemsetPattern::U8(v) => (pb::MemsetWidth::U8, u32::from(v)),
        MemsetPattern::U16(v) => (pb::MemsetWidth::U16, u32::from(v)),
        MemsetPattern::U32(v) => (pb::MemsetWidth::U32, v),
    };
    pb::MemsetThunk {
        dst: slice_to(&m.dst),
        width: width as i32,
        value,
    }
}

pub(super) fn from(m: &pb::MemsetThunk, loc: &Loc<'_>) -> Result<MemsetThunk, ProtoError> {
    let dst = slice_from(&m.dst, loc, "dst")?;
    let too_wide = |bits: u32| {
        loc.invalid(
            "value",
            format!("{:#x} does not fit the {bits}-bit pattern", m.value),
        )
    };
    let pattern = match pb::MemsetWidth::try_from(m.width) {
        Ok(pb::MemsetWidth::U8) => {
            MemsetPattern::U8(u8::try_from(m.value).map_err(|_| too_wide(8))?)
        }
        Ok(pb::MemsetWidth::U16) => {
            MemsetPattern::U16(u16::try_from(m.value).map_err(|_| too_wide(16))?)
        }
        Ok(pb::MemsetWidth::U32) => MemsetPattern::U32(m.value),
        Ok(pb::MemsetWidth::Unspecified) => {
            return Err(loc.invalid(
                "width",
                "the pattern width is unspecified (expected MEMSET_WIDTH_U8, MEMSET_WIDTH_U16 or MEMSET_WIDTH_U32)",
            ));
        }
        Err(_) => {
            return Err(loc.invalid("width", format!("unknown pattern width value {}", m.width)));
        }
    };
    Ok(MemsetThunk { dst, pattern })
}
