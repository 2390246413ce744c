//! Streams and events: creation, synchronization, queries, cross-stream waits, host
//! functions, event records and timing, stream capture.

use super::{Handle, HipError, api, ctx, stream_of};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::ffi::put;
use crate::stream::{self, EVENTS, StreamKind};
use std::ffi::{c_int, c_uint, c_void};

/// # Safety
/// `out` must be null or valid for writing a handle.
unsafe fn stream_create(out: *mut Handle, flags: c_uint, call: &str) -> EmuResult<()> {
    let c = ctx(call)?;
    let kind = match flags {
        0 => StreamKind::Blocking,
        1 => StreamKind::NonBlocking,
        f => return Err(invalid(call, format!("unknown stream flags {f:#x}"))),
    };
    if out.is_null() {
        return Err(invalid(call, "`stream` is a null pointer"));
    }
    let h = stream::create_stream(&c, kind, call)?;
    // SAFETY: forwarded from the caller (checked non-null).
    unsafe { put(out, h, "stream", call) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreate(s: *mut Handle) -> HipError {
    const C: &str = "hipStreamCreate";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { stream_create(s, 0, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(s: *mut Handle, flags: c_uint) -> HipError {
    const C: &str = "hipStreamCreateWithFlags";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { stream_create(s, flags, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithPriority(
    s: *mut Handle,
    flags: c_uint,
    _p: c_int,
) -> HipError {
    const C: &str = "hipStreamCreateWithPriority";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { stream_create(s, flags, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamDestroy(s: Handle) -> HipError {
    const C: &str = "hipStreamDestroy";
    api(C, || stream::destroy_stream(s, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamSynchronize(s: Handle) -> HipError {
    const C: &str = "hipStreamSynchronize";
    api(C, || stream::synchronize_stream(&stream_of(s, C)?, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamQuery(s: Handle) -> HipError {
    const C: &str = "hipStreamQuery";
    api(C, || {
        if stream::query_stream(&stream_of(s, C)?, C)? {
            Ok(())
        } else {
            Err(EmuError::quiet(Code::NotReady, "work pending"))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamWaitEvent(s: Handle, e: Handle, flags: c_uint) -> HipError {
    const C: &str = "hipStreamWaitEvent";
    api(C, || {
        if flags != 0 {
            return Err(invalid(C, format!("flags must be 0, got {flags}")));
        }
        stream::wait_event(&stream_of(s, C)?, &EVENTS.get(e, C)?, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipLaunchHostFunc(
    s: Handle,
    f: Option<stream::HostFn>,
    data: *mut c_void,
) -> HipError {
    const C: &str = "hipLaunchHostFunc";
    api(C, || {
        let st = stream_of(s, C)?;
        let f = f.ok_or_else(|| invalid(C, "`fn` is null"))?;
        stream::submit(
            &st,
            stream::Op::new(
                stream::Work::HostFn {
                    f,
                    data: data as usize,
                },
                C,
            ),
        )
        .map(|_| ())
    })
}

/// # Safety
/// `out` must be null or valid for writing a handle.
unsafe fn event_create(out: *mut Handle, flags: c_uint, call: &str) -> EmuResult<()> {
    let c = ctx(call)?;
    if flags & !(0x7 | 0x4000_0000 | 0x8000_0000) != 0 {
        return Err(invalid(call, format!("bad event flags {flags:#x}")));
    }
    if out.is_null() {
        return Err(invalid(call, "`event` is a null pointer"));
    }
    let h = stream::create_event(&c, flags);
    // SAFETY: forwarded from the caller (checked non-null).
    unsafe { put(out, h, "event", call) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreate(e: *mut Handle) -> HipError {
    const C: &str = "hipEventCreate";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { event_create(e, 0, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreateWithFlags(e: *mut Handle, flags: c_uint) -> HipError {
    const C: &str = "hipEventCreateWithFlags";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { event_create(e, flags, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventDestroy(e: Handle) -> HipError {
    const C: &str = "hipEventDestroy";
    api(C, || EVENTS.remove(e, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventRecord(e: Handle, s: Handle) -> HipError {
    const C: &str = "hipEventRecord";
    api(C, || {
        let ev = EVENTS.get(e, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != ev.ctx_id {
            return Err(EmuError::new(
                Code::InvalidHandle,
                Kind::InvalidHandle,
                C,
                "the event and the stream belong to different devices",
            ));
        }
        stream::record_event(&ev, &st, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventSynchronize(e: Handle) -> HipError {
    const C: &str = "hipEventSynchronize";
    api(C, || stream::synchronize_event(&EVENTS.get(e, C)?, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventQuery(e: Handle) -> HipError {
    const C: &str = "hipEventQuery";
    api(C, || {
        if stream::query_event(&EVENTS.get(e, C)?, C)? {
            Ok(())
        } else {
            Err(EmuError::quiet(Code::NotReady, "work pending"))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventElapsedTime(
    ms: *mut f32,
    start: Handle,
    stop: Handle,
) -> HipError {
    const C: &str = "hipEventElapsedTime";
    api(C, || {
        let t = stream::elapsed(&EVENTS.get(start, C)?, &EVENTS.get(stop, C)?, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(ms, t, "ms", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamBeginCapture(s: Handle, mode: c_int) -> HipError {
    const C: &str = "hipStreamBeginCapture";
    api(C, || {
        stream::begin_capture(&stream_of(s, C)?, mode as u32, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamEndCapture(s: Handle, graph: *mut Handle) -> HipError {
    const C: &str = "hipStreamEndCapture";
    api(C, || {
        if graph.is_null() {
            return Err(invalid(C, "`pGraph` is a null pointer"));
        }
        let r = stream::end_capture(&stream_of(s, C)?, C);
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(graph, *r.as_ref().unwrap_or(&0), "pGraph", C)? };
        r.map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamIsCapturing(s: Handle, status: *mut c_int) -> HipError {
    const C: &str = "hipStreamIsCapturing";
    api(C, || {
        let (v, _) = stream::capture_status(&stream_of(s, C)?);
        // SAFETY: the caller's out-pointer.
        unsafe { put(status, v as c_int, "pCaptureStatus", C) }
    })
}
