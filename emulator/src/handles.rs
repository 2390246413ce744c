//! Opaque handles (`CUstream`, `hipEvent_t`, `cublasHandle_t`, …): never dereferenced, only
//! looked up, so a stale or foreign handle is a clean `INVALID_HANDLE` with a diagnostic
//! saying what it was (destroyed, of another kind, or unknown), never a crash.
//!
//! A handle is `tag << 48 | serial << 4`: above every canonical user-space address (so it can
//! be told from a pointer), unique per kind, and never reused.

use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Kinds of handle, with their tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandleKind {
    Context = 0x11,
    Stream = 0x12,
    Event = 0x13,
    Module = 0x14,
    Function = 0x15,
    Graph = 0x16,
    GraphExec = 0x17,
    GraphNode = 0x18,
    Blas = 0x19,
    Comm = 0x1a,
    MemPool = 0x1b,
}

impl HandleKind {
    pub fn name(self) -> &'static str {
        match self {
            HandleKind::Context => "context",
            HandleKind::Stream => "stream",
            HandleKind::Event => "event",
            HandleKind::Module => "module",
            HandleKind::Function => "function",
            HandleKind::Graph => "graph",
            HandleKind::GraphExec => "executable graph",
            HandleKind::GraphNode => "graph node",
            HandleKind::Blas => "BLAS handle",
            HandleKind::Comm => "communicator",
            HandleKind::MemPool => "memory pool",
        }
    }

    fn from_tag(tag: usize) -> Option<HandleKind> {
        use HandleKind::*;
        [
            Context, Stream, Event, Module, Function, Graph, GraphExec, GraphNode, Blas, Comm,
            MemPool,
        ]
        .into_iter()
        .find(|k| *k as usize == tag)
    }
}

/// The kind a handle value claims to be, if it looks like an emulator handle.
pub fn kind_of(handle: usize) -> Option<HandleKind> {
    if handle & 0xf != 0 {
        return None;
    }
    HandleKind::from_tag(handle >> 48)
}

struct Inner<T> {
    next: usize,
    live: HashMap<usize, Arc<T>>,
    dead: HashSet<usize>,
}

/// Live objects of one kind, by handle.
pub struct Table<T> {
    kind: HandleKind,
    inner: Mutex<Option<Inner<T>>>,
}

impl<T> Table<T> {
    pub const fn new(kind: HandleKind) -> Self {
        Table {
            kind,
            inner: Mutex::new(None),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner<T>) -> R) -> R {
        let mut g = self.inner.lock();
        let inner = g.get_or_insert_with(|| Inner {
            next: 1,
            live: HashMap::new(),
            dead: HashSet::new(),
        });
        f(inner)
    }

    /// Registers `obj` and returns its new handle.
    pub fn insert(&self, obj: Arc<T>) -> usize {
        let tag = self.kind as usize;
        self.with(|i| {
            let h = (tag << 48) | (i.next << 4);
            i.next += 1;
            i.live.insert(h, obj);
            h
        })
    }

    /// The object of a handle, or an `INVALID_HANDLE` error naming what the handle was.
    pub fn get(&self, handle: usize, call: &str) -> EmuResult<Arc<T>> {
        let r = self.with(|i| match i.live.get(&handle) {
            Some(o) => Ok(o.clone()),
            None => Err(i.dead.contains(&handle)),
        });
        r.map_err(|was_destroyed| self.bad(handle, was_destroyed, call))
    }

    /// Like [`get`](Self::get), without recording a diagnostic when missing.
    pub fn try_get(&self, handle: usize) -> Option<Arc<T>> {
        self.with(|i| i.live.get(&handle).cloned())
    }

    /// Removes a handle (it stays known as destroyed).
    pub fn remove(&self, handle: usize, call: &str) -> EmuResult<Arc<T>> {
        let r = self.with(|i| match i.live.remove(&handle) {
            Some(o) => {
                // Destroyed handles are remembered for better messages; bounded, so that a
                // long run creating and destroying millions of events stays small.
                if i.dead.len() >= 1 << 20 {
                    i.dead.clear();
                }
                i.dead.insert(handle);
                Ok(o)
            }
            None => Err(i.dead.contains(&handle)),
        });
        r.map_err(|was_destroyed| self.bad(handle, was_destroyed, call))
    }

    /// Every live object (for leak reports).
    pub fn all(&self) -> Vec<(usize, Arc<T>)> {
        self.with(|i| i.live.iter().map(|(h, o)| (*h, o.clone())).collect())
    }

    /// The handles of the live objects `keep` selects (e.g. those of one context).
    pub fn handles_where(&self, keep: impl Fn(&T) -> bool) -> Vec<usize> {
        self.with(|i| {
            i.live
                .iter()
                .filter(|(_, o)| keep(o))
                .map(|(h, _)| *h)
                .collect()
        })
    }

    fn bad(&self, handle: usize, was_destroyed: bool, call: &str) -> EmuError {
        let what = self.kind.name();
        let msg = if handle == 0 {
            format!("null {what} handle")
        } else if was_destroyed {
            format!("{what} {handle:#x} was already destroyed")
        } else {
            match kind_of(handle) {
                Some(k) if k != self.kind => {
                    format!(
                        "{handle:#x} is a handle of kind `{}`, not `{what}`",
                        k.name()
                    )
                }
                _ => format!("{handle:#x} is not a {what} handle"),
            }
        };
        EmuError::new(Code::InvalidHandle, Kind::InvalidHandle, call, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_checked_and_typed() {
        let t: Table<u32> = Table::new(HandleKind::Stream);
        let h = t.insert(Arc::new(7));
        assert_eq!(kind_of(h), Some(HandleKind::Stream));
        assert_eq!(t.get(h, "t").map(|v| *v), Ok(7));
        assert!(t.remove(h, "t").is_ok());
        let e = t.get(h, "t").err().map(|e| e.message).unwrap_or_default();
        assert!(e.contains("already destroyed"), "{e}");
        let ev = (HandleKind::Event as usize) << 48 | 16;
        let e = t.get(ev, "t").err().map(|e| e.message).unwrap_or_default();
        assert!(e.contains("of kind `event`, not `stream`"), "{e}");
        let _ = crate::diag::take();
    }
}
