//! Streams and events: creation, synchronization, queries, cross-stream waits, capture,
//! host functions, event records and timing.

use super::{CUresult, Cuda, Handle, api, stream_of};
use crate::context;
use crate::driver;
use crate::error::invalid;
use crate::ffi::put;
use crate::stream::{self, EVENTS};
use std::ffi::{c_int, c_uint, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuStreamCreate";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_stream::<Cuda>(ph, flags, "phStream", C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut Handle,
    flags: c_uint,
    _priority: c_int,
) -> CUresult {
    const C: &str = "cuStreamCreateWithPriority";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::create_stream::<Cuda>(ph, flags, "phStream", C)
    })
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
    api(C, || driver::query_stream::<Cuda>(s, C))
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
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        driver::end_capture::<Cuda>(s, graph, "phGraph", C)
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
    api(C, || driver::launch_host_func::<Cuda>(s, f, data, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuEventCreate";
    api(C, || {
        let c = context::current(C)?;
        if flags & !0x7 != 0 || (flags & 4 != 0 && flags & 2 == 0) {
            return Err(invalid(C, format!("bad event flags {flags:#x}")));
        }
        // SAFETY: the caller's out-pointer.
        unsafe { driver::create_event(&c, ph, flags, "phEvent", C) }
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventRecord(e: Handle, s: Handle) -> CUresult {
    const C: &str = "cuEventRecord";
    api(C, || driver::record_event::<Cuda>(e, s, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventRecordWithFlags(e: Handle, s: Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuEventRecordWithFlags";
    api(C, || {
        if flags > 1 {
            return Err(invalid(C, format!("unknown flags {flags:#x}")));
        }
        driver::record_event::<Cuda>(e, s, C)
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
    api(C, || driver::query_event(e, C))
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
