//! Contexts: primary contexts (retain/release), created contexts, the per-thread current
//! context stack, context synchronization.

use super::{CUresult, Handle, api};
use crate::context::{self, Ctx};
use crate::diag::Kind;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream;
use std::ffi::{c_int, c_uint};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: c_int) -> CUresult {
    const C: &str = "cuDevicePrimaryCtxRetain";
    api(C, || {
        if pctx.is_null() {
            return Err(invalid(C, "`pctx` is a null pointer"));
        }
        let h = context::primary_retain(dev, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(pctx, h, "pctx", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CUresult {
    const C: &str = "cuDevicePrimaryCtxRelease_v2";
    api(C, || context::primary_release(dev, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: c_int) -> CUresult {
    // SAFETY: same contract.
    unsafe { cuDevicePrimaryCtxRelease_v2(dev) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    const C: &str = "cuDevicePrimaryCtxGetState";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        let (f, a) = context::primary_state(dev);
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(flags, f, "flags", C)?;
            put(active, a as c_int, "active", C)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut Handle, _flags: c_uint, dev: c_int) -> CUresult {
    const C: &str = "cuCtxCreate_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        let (h, _) = Ctx::create(context::Api::Cuda, dev, C)?;
        context::push_current(h, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(pctx, h, "pctx", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: Handle) -> CUresult {
    const C: &str = "cuCtxDestroy_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        let c = context::CONTEXTS.get(ctx, C)?;
        c.destroy(ctx, C);
        if context::current_handle() == ctx {
            context::pop_current();
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    const C: &str = "cuCtxSetCurrent";
    api(C, || {
        context::cuda_initialized(C)?;
        context::set_current(ctx, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut Handle) -> CUresult {
    const C: &str = "cuCtxGetCurrent";
    api(C, || {
        context::cuda_initialized(C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(pctx, context::current_handle(), "pctx", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut c_int) -> CUresult {
    const C: &str = "cuCtxGetDevice";
    api(C, || {
        let c = context::current(C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(dev, c.device, "device", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: Handle) -> CUresult {
    const C: &str = "cuCtxPushCurrent_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        context::push_current(ctx, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut Handle) -> CUresult {
    const C: &str = "cuCtxPopCurrent_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        let h = context::pop_current().ok_or_else(|| {
            EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                "no current context",
            )
        })?;
        if !pctx.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe { put(pctx, h, "pctx", C)? };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    const C: &str = "cuCtxSynchronize";
    api(C, || {
        let c = context::current(C)?;
        stream::check_capture_rules(C, Code::CaptureUnsupported)?;
        c.synchronize()
    })
}
