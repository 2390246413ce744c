//! Streams and events: creation, synchronization, queries, cross-stream waits, capture,
//! host functions, event records and timing.

use super::{CUresult, Handle, api, stream_of};
use crate::context;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::ffi::put;
use crate::stream::{self, EVENTS, StreamKind};
use std::ffi::{c_int, c_uint, c_void};

fn stream_create(ph: *mut Handle, flags: c_uint, call: &str) -> EmuResult<()> {
    let c = context::current(call)?;
    let kind = match flags {
        0 => StreamKind::Blocking,
        1 => StreamKind::NonBlocking,
        f => return Err(invalid(call, format!("unknown stream flags {f:#x}"))),
    };
    if ph.is_null() {
        return Err(invalid(call, "`phStream` is a null pointer"));
    }
    let h = stream::create_stream(&c, kind, call)?;
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(ph, h, "phStream", call) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuStreamCreate";
    api(C, || stream_create(ph, flags, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut Handle,
    flags: c_uint,
    _priority: c_int,
) -> CUresult {
    const C: &str = "cuStreamCreateWithPriority";
    api(C, || stream_create(ph, flags, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamDestroy_v2(s: Handle) -> CUresult {
    const C: &str = "cuStreamDestroy_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        stream::destroy_stream(s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamDestroy(s: Handle) -> CUresult {
    // SAFETY: same contract.
    unsafe { cuStreamDestroy_v2(s) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamSynchronize(s: Handle) -> CUresult {
    const C: &str = "cuStreamSynchronize";
    api(C, || stream::synchronize_stream(&stream_of(s, C)?, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamQuery(s: Handle) -> CUresult {
    const C: &str = "cuStreamQuery";
    api(C, || {
        if stream::query_stream(&stream_of(s, C)?, C)? {
            Ok(())
        } else {
            Err(EmuError::quiet(Code::NotReady, "work pending"))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamWaitEvent(s: Handle, e: Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuStreamWaitEvent";
    api(C, || {
        if flags > 1 {
            return Err(invalid(C, format!("unknown flags {flags:#x}")));
        }
        let st = stream_of(s, C)?;
        let ev = EVENTS.get(e, C)?;
        stream::wait_event(&st, &ev, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(s: Handle, mode: c_uint) -> CUresult {
    const C: &str = "cuStreamBeginCapture_v2";
    api(C, || stream::begin_capture(&stream_of(s, C)?, mode, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamEndCapture(s: Handle, graph: *mut Handle) -> CUresult {
    const C: &str = "cuStreamEndCapture";
    api(C, || {
        if graph.is_null() {
            return Err(invalid(C, "`phGraph` is a null pointer"));
        }
        let st = stream_of(s, C)?;
        let r = stream::end_capture(&st, C);
        // SAFETY: the caller's out-pointer (checked non-null); NULL on failure, as CUDA does.
        unsafe { put(graph, *r.as_ref().unwrap_or(&0), "phGraph", C)? };
        r.map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamIsCapturing(s: Handle, status: *mut c_uint) -> CUresult {
    const C: &str = "cuStreamIsCapturing";
    api(C, || {
        let st = stream_of(s, C)?;
        let (v, _) = stream::capture_status(&st);
        // SAFETY: the caller's out-pointer.
        unsafe { put(status, v, "captureStatus", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchHostFunc(
    s: Handle,
    f: Option<stream::HostFn>,
    data: *mut c_void,
) -> CUresult {
    const C: &str = "cuLaunchHostFunc";
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuEventCreate";
    api(C, || {
        let c = context::current(C)?;
        if flags & !0x7 != 0 || (flags & 4 != 0 && flags & 2 == 0) {
            return Err(invalid(C, format!("bad event flags {flags:#x}")));
        }
        if ph.is_null() {
            return Err(invalid(C, "`phEvent` is a null pointer"));
        }
        let h = stream::create_event(&c, flags);
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(ph, h, "phEvent", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventDestroy_v2(e: Handle) -> CUresult {
    const C: &str = "cuEventDestroy_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        EVENTS.remove(e, C).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventDestroy(e: Handle) -> CUresult {
    // SAFETY: same contract.
    unsafe { cuEventDestroy_v2(e) }
}

fn record(e: Handle, s: Handle, call: &str) -> EmuResult<()> {
    let ev = EVENTS.get(e, call)?;
    let st = stream_of(s, call)?;
    if st.ctx_id != ev.ctx_id {
        return Err(EmuError::new(
            Code::InvalidHandle,
            Kind::InvalidHandle,
            call,
            "the event and the stream belong to different contexts",
        ));
    }
    stream::record_event(&ev, &st, call)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventRecord(e: Handle, s: Handle) -> CUresult {
    const C: &str = "cuEventRecord";
    api(C, || record(e, s, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuEventRecordWithFlags";
    api(C, || {
        if flags > 1 {
            return Err(invalid(C, format!("unknown flags {flags:#x}")));
        }
        record(e, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventSynchronize(e: Handle) -> CUresult {
    const C: &str = "cuEventSynchronize";
    api(C, || stream::synchronize_event(&EVENTS.get(e, C)?, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventQuery(e: Handle) -> CUresult {
    const C: &str = "cuEventQuery";
    api(C, || {
        if stream::query_event(&EVENTS.get(e, C)?, C)? {
            Ok(())
        } else {
            Err(EmuError::quiet(Code::NotReady, "work pending"))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) -> CUresult {
    const C: &str = "cuEventElapsedTime";
    api(C, || {
        let t = stream::elapsed(&EVENTS.get(start, C)?, &EVENTS.get(end, C)?, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(ms, t, "pMilliseconds", C) }
    })
}
