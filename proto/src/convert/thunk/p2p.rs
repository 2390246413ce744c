//! `send` / `recv` ↔ `SendThunk` / `RecvThunk`.

use super::super::fields::{Loc, dtype_from, slice_from};
use super::super::fields::{dtype_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::{RecvThunk, SendThunk};

pub(super) fn send_to(s: &SendThunk) -> pb::SendThunk {
    pb::SendThunk {
        src: slice_to(&s.src),
        dtype: dtype_to(s.dtype) as i32,
        peer: s.peer,
    }
}

pub(super) fn recv_to(r: &RecvThunk) -> pb::RecvThunk {
    pb::RecvThunk {
        dst: slice_to(&r.dst),
        dtype: dtype_to(r.dtype) as i32,
        peer: r.peer,
    }
}

pub(super) fn send_from(c: &pb::SendThunk, loc: &Loc<'_>) -> Result<SendThunk, ProtoError> {
    Ok(SendThunk {
        src: slice_from(&c.src, loc, "src")?,
        dtype: dtype_from(c.dtype, loc, "dtype")?,
        peer: c.peer,
    })
}

pub(super) fn recv_from(c: &pb::RecvThunk, loc: &Loc<'_>) -> Result<RecvThunk, ProtoError> {
    Ok(RecvThunk {
        dst: slice_from(&c.dst, loc, "dst")?,
        dtype: dtype_from(c.dtype, loc, "dtype")?,
        peer: c.peer,
    })
}
