//! `command_buffer` ↔ `CommandBufferThunk`.

use super::super::fields::{ListFrom, ListTo, Loc};
use crate::{ProtoError, pb};
use xthunk_core::ir::CommandBufferThunk;

pub(super) fn to(c: &CommandBufferThunk, list_to: ListTo) -> pb::CommandBufferThunk {
    pb::CommandBufferThunk {
        body: list_to(&c.body),
    }
}

pub(super) fn from(
    c: &pb::CommandBufferThunk,
    loc: &Loc<'_>,
    list_from: ListFrom,
) -> Result<CommandBufferThunk, ProtoError> {
    Ok(CommandBufferThunk {
        body: list_from(&c.body, loc, "body")?,
    })
}
