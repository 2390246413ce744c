//! Streams and events: creation, synchronization, queries, cross-stream waits, host
//! functions, event records and timing, stream capture.

use super::{Handle, Hip, HipError, api, ctx, stream_of};
use crate::driver;
use crate::error::{EmuResult, invalid};
use crate::ffi::put;
use crate::stream::{self, EVENTS};
use std::ffi::{c_int, c_uint, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreate(s: *mut Handle) -> HipError {
    const C: &str = "hipStreamCreate";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_stream::<Hip>(s, 0, "stream", C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(s: *mut Handle, flags: c_uint) -> HipError {
    const C: &str = "hipStreamCreateWithFlags";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_stream::<Hip>(s, flags, "stream", C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithPriority(
    s: *mut Handle,
    flags: c_uint,
    _p: c_int,
) -> HipError {
    const C: &str = "hipStreamCreateWithPriority";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_stream::<Hip>(s, flags, "stream", C)
    })
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
    api(C, || driver::query_stream::<Hip>(s, C))
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
    api(C, || driver::launch_host_func::<Hip>(s, f, data, C))
}

/// # Safety
/// `out` must be null or valid for writing a handle.
unsafe fn event_create(out: *mut Handle, flags: c_uint, call: &str) -> EmuResult<()> {
    let c = ctx(call)?;
    if flags & !(0x7 | 0x4000_0000 | 0x8000_0000) != 0 {
        return Err(invalid(call, format!("bad event flags {flags:#x}")));
    }
    // SAFETY: forwarded from the caller.
    unsafe { driver::create_event(&c, out, flags, "event", call) }
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
    api(C, || driver::record_event::<Hip>(e, s, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventSynchronize(e: Handle) -> HipError {
    const C: &str = "hipEventSynchronize";
    api(C, || stream::synchronize_event(&EVENTS.get(e, C)?, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventQuery(e: Handle) -> HipError {
    const C: &str = "hipEventQuery";
    api(C, || driver::query_event(e, C))
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
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::end_capture::<Hip>(s, graph, "pGraph", C)
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
