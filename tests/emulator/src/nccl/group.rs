//! Groups (`ncclGroupStart` / `ncclGroupEnd`): initializations and operations issued inside
//! a group are deferred to its end, where each stream gets one operation holding its parts.

use super::comm::{Comm, join, wait_joined};
use super::slot::{Part, SlotKey, issue};
use super::{INVALID_USAGE, NcclResult, SUCCESS, api, fail};
use crate::context::Ctx;
use crate::diag::Kind;
use crate::stream::StreamCore;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    pub(super) static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// A deferred `ncclCommInitRank`: (out-pointer, nranks, id, rank, context).
pub(super) type DeferredInit = (usize, usize, [u8; 128], usize, Arc<Ctx>);
/// One rank's part of a slot, as queued.
pub(super) type QueuedPart = (Arc<Comm>, SlotKey, Part);

#[derive(Default)]
pub(super) struct Group {
    pub(super) depth: usize,
    /// Deferred stream operations: (comm, stream, slot, part).
    pub(super) ops: Vec<(Arc<Comm>, Arc<StreamCore>, SlotKey, Part)>,
    /// Deferred initializations: (out-pointer, nranks, id, rank, ctx).
    pub(super) inits: Vec<DeferredInit>,
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    const C: &str = "ncclGroupEnd";
    api(C, || {
        let (ops, inits) = match GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return None;
            }
            g.depth -= 1;
            if g.depth > 0 {
                return Some((vec![], vec![]));
            }
            Some((std::mem::take(&mut g.ops), std::mem::take(&mut g.inits)))
        }) {
            Some(x) => x,
            None => {
                return fail(
                    INVALID_USAGE,
                    C,
                    Kind::InvalidState,
                    "ncclGroupEnd without ncclGroupStart",
                );
            }
        };
        for (_, nranks, id, rank, ctx) in &inits {
            if let Err(r) = join(*id, *nranks, *rank, ctx.clone(), C) {
                return r;
            }
        }
        for (out, _, id, rank, _) in &inits {
            match wait_joined(*id, *rank, C) {
                // SAFETY: the out-pointer given to the deferred ncclCommInitRank.
                Ok(h) => unsafe { *(*out as *mut usize) = h },
                Err(r) => return r,
            }
        }
        // One stream operation per stream, holding all its parts.
        let mut by_stream: Vec<(Arc<StreamCore>, Vec<QueuedPart>)> = vec![];
        for (comm, s, key, part) in ops {
            match by_stream.iter_mut().find(|(x, _)| Arc::ptr_eq(x, &s)) {
                Some((_, v)) => v.push((comm, key, part)),
                None => by_stream.push((s, vec![(comm, key, part)])),
            }
        }
        for (s, parts) in by_stream {
            if let Err(r) = issue(&s, parts, C) {
                return r;
            }
        }
        SUCCESS
    })
}
