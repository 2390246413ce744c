//! Events: recording on a stream (or into a capture), synchronizing, querying, cross-stream
//! waits (which also fork a capture onto another stream), elapsed time.

use super::op::{Op, Stampable, Work};
use super::queue::{Owner, StreamCore, submit};
use super::record::Capture;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Instant;

pub static EVENTS: Table<EventCore> = Table::new(HandleKind::Event);

/// `CU_EVENT_DISABLE_TIMING` / `hipEventDisableTiming`.
pub const EVENT_DISABLE_TIMING: u32 = 2;

pub struct EventState {
    /// The stream and sequence number of the last record.
    rec: Option<(Arc<StreamCore>, u64)>,
    /// The capture the last record happened in.
    captured: Option<Arc<Capture>>,
    generation: u64,
    time: Option<Instant>,
}

pub struct EventCore {
    pub ctx_id: u64,
    pub flags: u32,
    state: Mutex<EventState>,
}

impl Stampable for EventCore {
    fn stamp(&self, generation: u64) {
        let mut s = self.state.lock();
        if s.generation == generation {
            s.time = Some(Instant::now());
        }
    }
}

pub fn create_event(ctx: &dyn Owner, flags: u32) -> usize {
    EVENTS.insert(Arc::new(EventCore {
        ctx_id: ctx.id(),
        flags,
        state: Mutex::new(EventState {
            rec: None,
            captured: None,
            generation: 0,
            time: None,
        }),
    }))
}

/// `cuEventRecord`.
pub fn record_event(e: &Arc<EventCore>, s: &Arc<StreamCore>, call: &str) -> EmuResult<()> {
    if let Some(c) = s.capture() {
        let mut st = e.state.lock();
        st.captured = Some(c);
        st.rec = None;
        st.generation += 1;
        return Ok(());
    }
    let generation = {
        let mut st = e.state.lock();
        st.generation += 1;
        st.captured = None;
        st.time = None;
        st.generation
    };
    let seq = submit(
        s,
        Op::new(
            Work::Stamp {
                event: e.clone(),
                generation,
            },
            call,
        ),
    )?;
    e.state.lock().rec = Some((s.clone(), seq));
    Ok(())
}

fn captured_event_error(call: &str) -> EmuError {
    EmuError::new(
        Code::CapturedEvent,
        Kind::InvalidState,
        call,
        "the event was last recorded in a capturing stream",
    )
}

/// The stream and sequence number of the event's last record (`None`: never recorded);
/// an event last recorded in a capture is refused.
fn last_record(e: &EventCore, call: &str) -> EmuResult<Option<(Arc<StreamCore>, u64)>> {
    let (rec, captured) = {
        let st = e.state.lock();
        (st.rec.clone(), st.captured.is_some())
    };
    if captured {
        return Err(captured_event_error(call));
    }
    Ok(rec)
}

/// `cuEventSynchronize`.
pub fn synchronize_event(e: &Arc<EventCore>, call: &str) -> EmuResult<()> {
    match last_record(e, call)? {
        Some((s, seq)) => s.wait_until(seq),
        None => Ok(()),
    }
}

/// `cuEventQuery`: `Ok(true)` when complete (releasing the work otherwise).
pub fn query_event(e: &Arc<EventCore>, call: &str) -> EmuResult<bool> {
    match last_record(e, call)? {
        Some((s, seq)) => {
            if s.marks().1 >= seq {
                Ok(true)
            } else {
                s.release(seq);
                Ok(false)
            }
        }
        None => Ok(true),
    }
}

/// `cuStreamWaitEvent`.
pub fn wait_event(s: &Arc<StreamCore>, e: &Arc<EventCore>, call: &str) -> EmuResult<()> {
    let (rec, captured) = {
        let st = e.state.lock();
        (st.rec.clone(), st.captured.clone())
    };
    if let Some(c) = captured {
        match s.capture() {
            Some(mine) if Arc::ptr_eq(&mine, &c) => return Ok(()),
            Some(_) => {
                return Err(EmuError::new(
                    Code::IllegalState,
                    Kind::InvalidState,
                    call,
                    "the stream is capturing into another graph than the event's",
                ));
            }
            None => {
                if c.is_ended() {
                    return Err(captured_event_error(call));
                }
                // Fork: the stream joins the capture.
                c.join(s.capture_slot());
                s.set_capture(Some(c));
                return Ok(());
            }
        }
    }
    let Some((target, seq)) = rec else {
        return Ok(());
    };
    if let Some(c) = s.capture() {
        if Arc::ptr_eq(&target, s) {
            return Ok(());
        }
        c.invalidate(call, "waiting on an event recorded outside the capture");
        return Err(EmuError::new(
            Code::CaptureIsolation,
            Kind::InvalidState,
            call,
            "a capturing stream cannot wait on an event recorded outside the capture",
        ));
    }
    if Arc::ptr_eq(&target, s) {
        return Ok(());
    }
    submit(s, Op::new(Work::Wait { target, seq }, call))?;
    Ok(())
}

/// `cuEventElapsedTime` in milliseconds.
pub fn elapsed(start: &Arc<EventCore>, end: &Arc<EventCore>, call: &str) -> EmuResult<f32> {
    if start.flags & EVENT_DISABLE_TIMING != 0 || end.flags & EVENT_DISABLE_TIMING != 0 {
        return Err(EmuError::new(
            Code::InvalidHandle,
            Kind::InvalidValue,
            call,
            "an event was created with timing disabled",
        ));
    }
    let t = |e: &Arc<EventCore>| -> EmuResult<Instant> {
        let st = e.state.lock();
        if st.rec.is_none() {
            return Err(EmuError::new(
                Code::InvalidHandle,
                Kind::InvalidValue,
                call,
                "an event was never recorded",
            ));
        }
        st.time
            .ok_or_else(|| EmuError::quiet(Code::NotReady, "the event has not completed"))
    };
    let (a, b) = (t(start)?, t(end)?);
    let ms = if b >= a {
        (b - a).as_secs_f64() * 1e3
    } else {
        -((a - b).as_secs_f64() * 1e3)
    };
    Ok(ms as f32)
}
