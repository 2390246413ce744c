//! What an open group (`ncclGroupStart` … `ncclGroupEnd`) holds for its end: the calling
//! thread's group depth, its deferred stream operations and its initializations to wait for.

use super::comm::{Clique, Comm};
use super::types::{Part, SlotKey};
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
