//! Condition handles of conditional graph nodes (`cuGraphConditionalHandleCreate`): their
//! table, read when a node uses one, when a graph is instantiated or destroyed, and when a
//! graph launch takes their default values.

use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// A condition handle's state.
pub struct Condition {
    pub ctx_id: u64,
    /// The graph it was created for.
    pub graph: usize,
    pub default: u32,
    pub assign_default: bool,
    /// The node using it (one at most).
    pub(super) used_by: Mutex<Option<usize>>,
}

pub(super) static CONDITIONS: Mutex<Option<HashMap<u64, Arc<Condition>>>> = Mutex::new(None);
/// The live condition `handle`.
pub(super) fn condition(handle: u64, call: &str) -> EmuResult<Arc<Condition>> {
    CONDITIONS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&handle).cloned())
        .ok_or_else(|| {
            EmuError::new(
                Code::InvalidValue,
                Kind::InvalidHandle,
                call,
                format!("{handle:#x} is not a live conditional handle"),
            )
        })
}
