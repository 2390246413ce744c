//! Conditional nodes in host graphs: a condition is a cell of the graph being recorded;
//! set-condition work reads the predicate, index or counter from host memory and writes the
//! cell on the stream's worker when it runs; an `If` node replays its body once when the
//! cell is nonzero, a `While` node while it is (the body sets it again at its end). Bodies
//! are recorded by swapping the stream's capture list, so they nest.
//!
//! The loop runs in the stream's worker with no round trip to the issuing thread, as a
//! conditional node runs on a GPU without the host.

use super::memory::Region;
use crate::backend::{ConditionHandle, ConditionalKind, DevicePtr, HostWork, SetCondition, Stream};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// What conditional nodes need of the host stream that records them: its capture list, the
/// condition cells of the recording, its checked memory regions and its work queue.
/// `HostStream` implements it (`stream.rs`) and its `Stream` methods `create_condition`,
/// `set_condition` and `capture_conditional` call the functions below.
pub(super) trait Recorder {
    /// The list work is recorded into while capturing; `None` when not capturing.
    fn capture_list(&self) -> &Mutex<Option<Vec<HostWork>>>;
    /// The condition cells of the graph being recorded, indexed by [`ConditionHandle`].
    fn conditions(&self) -> &Mutex<Vec<Arc<AtomicU32>>>;
    /// `len` bytes at `ptr`, checked against the live allocations (kept alive by the region).
    fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region>;
    /// Queues `f` in stream order, or records it when capturing.
    fn work(&self, f: impl Fn() -> Result<()> + Send + Sync + 'static) -> Result<()>;
}

/// The most conditions one recording may create.
const MAX_CONDITIONS: usize = 1 << 16;

fn not_capturing(what: &str) -> Error {
    Error::InvalidArgument(format!("{what} outside a graph capture"))
}

/// The cell of `h` in the recording of `s`.
fn cell(s: &impl Recorder, h: ConditionHandle) -> Result<Arc<AtomicU32>> {
    let conditions = s.conditions().lock();
    usize::try_from(h.0)
        .ok()
        .and_then(|i| conditions.get(i))
        .cloned()
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "condition {} does not belong to this stream's recording",
                h.0
            ))
        })
}

pub(super) fn create(s: &impl Recorder) -> Result<ConditionHandle> {
    if s.capture_list().lock().is_none() {
        return Err(not_capturing("a condition created"));
    }
    let mut conditions = s.conditions().lock();
    if conditions.len() >= MAX_CONDITIONS {
        return Err(Error::InvalidArgument(format!(
            "more than {MAX_CONDITIONS} conditions in one recording"
        )));
    }
    conditions.push(Arc::new(AtomicU32::new(0)));
    Ok(ConditionHandle(conditions.len() as u64 - 1))
}

pub(super) fn set(s: &impl Recorder, h: ConditionHandle, how: SetCondition) -> Result<()> {
    if s.capture_list().lock().is_none() {
        return Err(not_capturing("a condition set"));
    }
    let c = cell(s, h)?;
    match how {
        SetCondition::Pred { pred: ptr } | SetCondition::Branch { index: ptr, .. } => {
            let len = match how {
                SetCondition::Branch { pred: false, .. } => 4,
                _ => 1,
            };
            let r = s.region(ptr, len)?;
            s.work(move || {
                let mut b = [0u8; 4];
                // SAFETY: the region lies inside a live allocation it keeps alive and holds
                // `len` ≤ 4 bytes; stream order makes the read see the work before it.
                unsafe { std::ptr::copy_nonoverlapping(r.ptr(), b.as_mut_ptr(), r.len()) };
                c.store(how.value(&b[..r.len()], 0), Ordering::SeqCst);
                Ok(())
            })
        }
        SetCondition::TripsBelow { counter, .. } => {
            let r = s.region(counter, 8)?;
            s.work(move || {
                let p = r.ptr();
                let mut b = [0u8; 8];
                // SAFETY: 8 bytes inside a live allocation the region keeps alive; stream
                // order gives this work exclusive access to them.
                unsafe { std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), 8) };
                let n = u64::from_le_bytes(b);
                c.store(how.value(&[], n), Ordering::SeqCst);
                let next = n.saturating_add(1).to_le_bytes();
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(next.as_ptr(), p, 8) };
                Ok(())
            })
        }
    }
}

pub(super) fn capture<S: Recorder + Stream>(
    s: &S,
    kind: ConditionalKind,
    h: ConditionHandle,
    body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
) -> Result<()> {
    let c = cell(s, h)?;
    let outer = s
        .capture_list()
        .lock()
        .replace(vec![])
        .ok_or_else(|| not_capturing("a conditional node recorded"))?;
    let recorded = body(s);
    let inner: Vec<HostWork> = s.capture_list().lock().replace(outer).unwrap_or_default();
    recorded?;
    let inner = Arc::new(inner);
    s.work(move || {
        let run = || -> Result<()> {
            for op in inner.iter() {
                op()?;
            }
            Ok(())
        };
        match kind {
            ConditionalKind::If => {
                if c.load(Ordering::SeqCst) != 0 {
                    run()?;
                }
            }
            ConditionalKind::While => {
                while c.load(Ordering::SeqCst) != 0 {
                    run()?;
                }
            }
        }
        Ok(())
    })
}
