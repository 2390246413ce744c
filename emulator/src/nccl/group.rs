//! Groups (`ncclGroupStart` / `ncclGroupEnd`): initializations and operations issued inside
//! a group are deferred to its end, where each stream gets one operation holding its parts.
//! Initializations in a group register their rank at once and are waited for at the end
//! (non-blocking ones are not: the end then returns `ncclInProgress`).

use super::comm::{Clique, Comm};
use super::init::finish_group_inits;
use super::slot::{Part, SlotKey, issue};
use super::{IN_PROGRESS, INVALID_USAGE, NcclResult, SUCCESS, api, fail};
use crate::diag::Kind;
use crate::stream::StreamCore;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    pub(super) static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// An `ncclCommInitRank` waited for at the group's end: (out-pointer, handle, clique, rank,
/// blocking).
pub(super) type DeferredInit = (usize, usize, Arc<Clique>, usize, bool);
/// One rank's part of a slot, as queued.
pub(super) type QueuedPart = (Arc<Comm>, SlotKey, Part);

#[derive(Default)]
pub(super) struct Group {
    pub(super) depth: usize,
    /// Deferred stream operations: (comm, stream, slot, part).
    pub(super) ops: Vec<(Arc<Comm>, Arc<StreamCore>, SlotKey, Part)>,
    /// Initializations to wait for.
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
        let inits = finish_group_inits(inits, C);
        if inits != SUCCESS && inits != IN_PROGRESS {
            return inits;
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
        inits
    })
}
