//! `ragged_all_to_all` ↔ `RaggedAllToAllThunk`.

use super::super::fields::{Loc, dtype_from, slice_from};
use super::super::fields::{dtype_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::RaggedAllToAllThunk;

pub(super) fn to(r: &RaggedAllToAllThunk) -> pb::RaggedAllToAllThunk {
    pb::RaggedAllToAllThunk {
        operand: slice_to(&r.operand),
        output: slice_to(&r.output),
        input_offsets: slice_to(&r.input_offsets),
        send_sizes: slice_to(&r.send_sizes),
        output_offsets: slice_to(&r.output_offsets),
        recv_sizes: slice_to(&r.recv_sizes),
        dtype: dtype_to(r.dtype) as i32,
        index_dtype: dtype_to(r.index_dtype) as i32,
        row_elements: r.row_elements,
        groups: r
            .groups
            .iter()
            .map(|g| pb::ReplicaGroup { ranks: g.clone() })
            .collect(),
    }
}

pub(super) fn from(
    c: &pb::RaggedAllToAllThunk,
    loc: &Loc<'_>,
) -> Result<RaggedAllToAllThunk, ProtoError> {
    if c.row_elements == 0 {
        return Err(loc.invalid("row_elements", "0 elements per row (at least 1)"));
    }
    Ok(RaggedAllToAllThunk {
        operand: slice_from(&c.operand, loc, "operand")?,
        output: slice_from(&c.output, loc, "output")?,
        input_offsets: slice_from(&c.input_offsets, loc, "input_offsets")?,
        send_sizes: slice_from(&c.send_sizes, loc, "send_sizes")?,
        output_offsets: slice_from(&c.output_offsets, loc, "output_offsets")?,
        recv_sizes: slice_from(&c.recv_sizes, loc, "recv_sizes")?,
        dtype: dtype_from(c.dtype, loc, "dtype")?,
        index_dtype: dtype_from(c.index_dtype, loc, "index_dtype")?,
        row_elements: c.row_elements,
        groups: c.groups.iter().map(|g| g.ranks.clone()).collect(),
    })
}
