//! `command_buffer` ↔ `CommandBufferThunk`.

use super::super::fields::Loc;
use super::{list_from, list_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::CommandBufferThunk;

pub(super) fn to(c: &CommandBufferThunk) -> pb::CommandBufferThunk {
    pb::CommandBufferThunk {
        body: list_to(&c.body),
    }
}

pub(super) fn from(
    c: &pb::CommandBufferThunk,
    loc: &Loc<'_>,
) -> Result<CommandBufferThunk, ProtoError> {
    Ok(CommandBufferThunk {
        body: list_from(&c.body, loc, "body")?,
    })
}
