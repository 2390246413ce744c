//! `async_start` / `async_done` ↔ `AsyncStartThunk` / `AsyncDoneThunk`.

use super::super::fields::{ListFrom, ListTo, Loc};
use crate::{ProtoError, pb};
use xthunk_core::ir::{AsyncDoneThunk, AsyncKind, AsyncStartThunk};

pub(super) fn start_to(a: &AsyncStartThunk, list_to: ListTo) -> pb::AsyncStartThunk {
    pb::AsyncStartThunk {
        id: a.id,
        kind: match a.kind {
            AsyncKind::Compute => pb::AsyncKind::Compute,
            AsyncKind::Communication => pb::AsyncKind::Communication,
        } as i32,
        body: list_to(&a.body),
    }
}

pub(super) fn done_to(d: &AsyncDoneThunk) -> pb::AsyncDoneThunk {
    pb::AsyncDoneThunk { id: d.id }
}

pub(super) fn start_from(
    a: &pb::AsyncStartThunk,
    loc: &Loc<'_>,
    list_from: ListFrom,
) -> Result<AsyncStartThunk, ProtoError> {
    Ok(AsyncStartThunk {
        id: a.id,
        kind: match pb::AsyncKind::try_from(a.kind) {
            Ok(pb::AsyncKind::Compute) => AsyncKind::Compute,
            Ok(pb::AsyncKind::Communication) => AsyncKind::Communication,
            Ok(pb::AsyncKind::Unspecified) => {
                return Err(loc.invalid("kind", "async kind is unspecified"));
            }
            Err(_) => {
                return Err(loc.invalid("kind", format!("unknown async kind {}", a.kind)));
            }
        },
        body: list_from(&a.body, loc, "body")?,
    })
}

pub(super) fn done_from(d: &pb::AsyncDoneThunk) -> AsyncDoneThunk {
    AsyncDoneThunk { id: d.id }
}
