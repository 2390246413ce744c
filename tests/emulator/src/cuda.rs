//! The CUDA driver API (`libcuda.so.1`), as declared by cudarc's generated bindings for CUDA
//! 12.0 (`cudarc/src/driver/sys/mod.rs`): handles are pointers, `CUdeviceptr` is a 64-bit
//! address, `CUresult` an unsigned enum.
//!
//! Devices report compute capability `XTHUNK_EMU_SM` (9.0 by default), driver version 12.9,
//! and the name "xthunk emulated NVIDIA device".

#![allow(non_snake_case, clippy::too_many_arguments)]

use crate::context::{self, Ctx};
use crate::copy::{self, Dir};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, cu, guard, invalid};
use crate::ffi::{put, string};
use crate::memory::{self, MemKind};
use crate::stream::{self, EVENTS, EXECS, GRAPHS, STREAMS, StreamCore, StreamKind};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::Arc;

pub type CUresult = u32;
/// `CUdeviceptr`.
pub type DevPtr = c_ulonglong;
/// Opaque handles (`CUcontext`, `CUstream`, …).
pub type Handle = usize;

/// The driver version reported (CUDA 12.9).
pub const DRIVER_VERSION: c_int = 12090;

fn api(call: &str, f: impl FnOnce() -> EmuResult<()>) -> CUresult {
    match guard(call, f) {
        Ok(()) => cu::SUCCESS,
        Err(e) => e.code.cu(),
    }
}

/// The stream a handle names (NULL and the special handles: the current context's legacy
/// stream).
fn stream_of(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>> {
    if h == 0 || h == stream::STREAM_LEGACY || h == stream::STREAM_PER_THREAD {
        return Ok(context::current(call)?.legacy.clone());
    }
    context::cuda_initialized(call)?;
    STREAMS.get(h, call)
}

fn ctx_of_stream(s: &StreamCore, call: &str) -> EmuResult<Arc<Ctx>> {
    s.ctx().ok_or_else(|| {
        EmuError::new(
            Code::InvalidContext,
            Kind::InvalidState,
            call,
            "the stream's context was destroyed",
        )
    })
}

// ---- initialization and devices ------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    api("cuInit", || context::cuda_init(flags, "cuInit"))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    const C: &str = "cuDriverGetVersion";
    // SAFETY: `v` is the caller's out-pointer.
    api(C, || unsafe { put(v, DRIVER_VERSION, "driverVersion", C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    const C: &str = "cuDeviceGetCount";
    api(C, || {
        context::cuda_initialized(C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(count, context::device_count(), "count", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> CUresult {
    const C: &str = "cuDeviceGet";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(ordinal, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(dev, ordinal, "device", C) }
    })
}

/// The device name: `xthunk emulated NVIDIA device` (with the ordinal when there are several).
pub fn cuda_device_name(dev: c_int) -> String {
    if context::device_count() > 1 {
        format!("{} {dev}", context::Api::Cuda.device_name())
    } else {
        context::Api::Cuda.device_name().to_string()
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    const C: &str = "cuDeviceGetName";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        // SAFETY: `name` holds `len` bytes (the caller's contract).
        unsafe { crate::ffi::copy_str(name, len.max(0) as usize, &cuda_device_name(dev), C) }
    })
}

/// Number of SMs reported.
pub const SM_COUNT: c_int = 16;

/// `cuDeviceGetAttribute` values; `None` for attributes the enum does not have.
fn attribute(attr: c_int, dev: c_int) -> Option<c_int> {
    let sm = crate::config::get().sm as c_int;
    Some(match attr {
        1 => 1024,
        2 | 3 => 1024,
        4 => 64,
        5 => i32::MAX,
        6 | 7 => 65535,
        8 => 48 * 1024,
        9 => 64 * 1024,
        10 => 32,
        11 => i32::MAX,
        12 => 65536,
        13 => 1_755_000,
        14 => 512,
        15 => 1,
        16 => SM_COUNT,
        17 | 18 => 0,
        19 => 1,
        20 => 0,
        30 => 512,
        31 => 1,
        32 => 0,
        33 => dev + 1,
        34 | 35 => 0,
        36 => 2_619_000,
        37 => 5120,
        38 => 50 * 1024 * 1024,
        39 => 2048,
        40 => 2,
        41 => 1,
        50 => 0,
        51 => 32,
        75 => sm / 10,
        76 => sm % 10,
        78..=80 => 1,
        81 => 228 * 1024,
        82 => 65536,
        83 => 1,
        84 | 85 => 0,
        86 => 0,
        87 => 2,
        88 => 0,
        89 | 90 => 1,
        91 => 0,
        95 => 1,
        96 => 0,
        97 => 227 * 1024,
        106 => 32,
        a if (1..120).contains(&a) => 0,
        _ => return None,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: c_int,
) -> CUresult {
    const C: &str = "cuDeviceGetAttribute";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        let v = attribute(attrib, dev)
            .ok_or_else(|| invalid(C, format!("unknown device attribute {attrib}")))?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(pi, v, "pi", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CUresult {
    const C: &str = "cuDeviceTotalMem_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        let m = crate::config::get().memory as usize;
        // SAFETY: the caller's out-pointer.
        unsafe { put(bytes, m, "bytes", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: c_int,
) -> CUresult {
    const C: &str = "cuDeviceComputeCapability";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        let sm = crate::config::get().sm as c_int;
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(major, sm / 10, "major", C)?;
            put(minor, sm % 10, "minor", C)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) -> CUresult {
    const C: &str = "cuDeviceGetUuid_v2";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        let mut u = *b"xthunk-emu-cuda\0";
        u[15] = dev as u8;
        // SAFETY: the caller's out-pointer (16 bytes).
        unsafe { put(uuid, u, "uuid", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) -> CUresult {
    // SAFETY: same contract.
    unsafe { cuDeviceGetUuid_v2(uuid, dev) }
}

// ---- contexts ------------------------------------------------------------------------------

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

// ---- memory --------------------------------------------------------------------------------

fn alloc(size: usize, kind: MemKind, call: &'static str) -> EmuResult<usize> {
    let c = context::current(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    if size == 0 {
        return Err(invalid(call, "0 bytes requested"));
    }
    memory::allocate(c.id, c.memory(), size, kind, call)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut DevPtr, bytesize: usize) -> CUresult {
    const C: &str = "cuMemAlloc_v2";
    api(C, || {
        if dptr.is_null() {
            return Err(invalid(C, "`dptr` is a null pointer"));
        }
        let p = alloc(bytesize, MemKind::Device, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(dptr, p as DevPtr, "dptr", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut DevPtr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuMemAllocManaged";
    api(C, || {
        if flags != 1 && flags != 2 {
            return Err(invalid(
                C,
                format!("flags must be CU_MEM_ATTACH_GLOBAL or _HOST, got {flags}"),
            ));
        }
        if dptr.is_null() {
            return Err(invalid(C, "`dptr` is a null pointer"));
        }
        let p = alloc(bytesize, MemKind::Managed, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(dptr, p as DevPtr, "dptr", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    const C: &str = "cuMemAllocHost_v2";
    api(C, || {
        if pp.is_null() {
            return Err(invalid(C, "`pp` is a null pointer"));
        }
        let p = alloc(bytesize, MemKind::Pinned, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(pp, p as *mut c_void, "pp", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuMemHostAlloc";
    api(C, || {
        if flags & !0x7 != 0 {
            return Err(invalid(C, format!("unknown flags {flags:#x}")));
        }
        if pp.is_null() {
            return Err(invalid(C, "`pp` is a null pointer"));
        }
        let p = alloc(bytesize, MemKind::Pinned, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(pp, p as *mut c_void, "pp", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut DevPtr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuMemHostGetDevicePointer_v2";
    api(C, || {
        context::current(C)?;
        if flags != 0 {
            return Err(invalid(C, format!("flags must be 0, got {flags}")));
        }
        match memory::allocation_containing(p as usize) {
            Some(a) if a.kind == MemKind::Pinned => {
                // SAFETY: the caller's out-pointer.
                unsafe { put(pdptr, p as DevPtr, "pdptr", C) }
            }
            _ => Err(invalid(
                C,
                format!("{p:p} is not page-locked memory from cuMemAllocHost/cuMemHostAlloc"),
            )),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: DevPtr) -> CUresult {
    const C: &str = "cuMemFree_v2";
    api(C, || {
        let c = context::current(C)?;
        stream::check_capture_rules(C, Code::CaptureUnsupported)?;
        if dptr == 0 {
            return Ok(());
        }
        // cuMemFree waits for the device (in practice; the backends rely on it).
        let _ = c.synchronize();
        memory::free(dptr as usize, &[MemKind::Device, MemKind::Managed], C).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    const C: &str = "cuMemFreeHost";
    api(C, || {
        let c = context::current(C)?;
        stream::check_capture_rules(C, Code::CaptureUnsupported)?;
        let _ = c.synchronize();
        memory::free(p as usize, &[MemKind::Pinned], C).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    const C: &str = "cuMemGetInfo_v2";
    api(C, || {
        let c = context::current(C)?;
        let used = memory::live_bytes(c.id);
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(free, c.memory().saturating_sub(used) as usize, "free", C)?;
            put(total, c.memory() as usize, "total", C)
        }
    })
}

fn sync_copy(dst: usize, src: usize, n: usize, dir: Dir, call: &str) -> EmuResult<()> {
    let c = context::current(call)?;
    copy::copy_sync(&c, dst, src, n, dir, call)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: DevPtr, src: *const c_void, n: usize) -> CUresult {
    const C: &str = "cuMemcpyHtoD_v2";
    api(C, || {
        sync_copy(dst as usize, src as usize, n, copy::HTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: DevPtr, n: usize) -> CUresult {
    const C: &str = "cuMemcpyDtoH_v2";
    api(C, || {
        sync_copy(dst as usize, src as usize, n, copy::DTOH, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: DevPtr, src: DevPtr, n: usize) -> CUresult {
    const C: &str = "cuMemcpyDtoD_v2";
    api(C, || {
        let c = context::current(C)?;
        copy::copy_async(&c.legacy, dst as usize, src as usize, n, copy::DTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpy(dst: DevPtr, src: DevPtr, n: usize) -> CUresult {
    const C: &str = "cuMemcpy";
    api(C, || sync_copy(dst as usize, src as usize, n, copy::ANY, C))
}

fn async_copy(dst: usize, src: usize, n: usize, dir: Dir, s: Handle, call: &str) -> EmuResult<()> {
    let st = stream_of(s, call)?;
    copy::copy_async(&st, dst, src, n, dir, call)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyAsync(dst: DevPtr, src: DevPtr, n: usize, s: Handle) -> CUresult {
    const C: &str = "cuMemcpyAsync";
    api(C, || {
        async_copy(dst as usize, src as usize, n, copy::ANY, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: DevPtr,
    src: *const c_void,
    n: usize,
    s: Handle,
) -> CUresult {
    const C: &str = "cuMemcpyHtoDAsync_v2";
    api(C, || {
        async_copy(dst as usize, src as usize, n, copy::HTOD, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: DevPtr,
    n: usize,
    s: Handle,
) -> CUresult {
    const C: &str = "cuMemcpyDtoHAsync_v2";
    api(C, || {
        async_copy(dst as usize, src as usize, n, copy::DTOH, s, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: DevPtr,
    src: DevPtr,
    n: usize,
    s: Handle,
) -> CUresult {
    const C: &str = "cuMemcpyDtoDAsync_v2";
    api(C, || {
        async_copy(dst as usize, src as usize, n, copy::DTOD, s, C)
    })
}

fn memset(dst: DevPtr, width: usize, v: u32, n: usize, s: Option<Handle>, call: &str) -> CUresult {
    api(call, || {
        let st = match s {
            Some(h) => stream_of(h, call)?,
            None => context::current(call)?.legacy.clone(),
        };
        copy::memset(&st, dst as usize, width, v, n, call)?;
        if s.is_none()
            && memory::allocation_containing(dst as usize)
                .is_some_and(|a| a.kind == MemKind::Pinned)
        {
            // Synchronous for pinned host memory.
            if let Some(c) = st.ctx() {
                stream::legacy_barrier(&c, call)?;
            }
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: DevPtr, uc: u8, n: usize) -> CUresult {
    memset(dst, 1, uc as u32, n, None, "cuMemsetD8_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: DevPtr, us: u16, n: usize) -> CUresult {
    memset(dst, 2, us as u32, n, None, "cuMemsetD16_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: DevPtr, ui: c_uint, n: usize) -> CUresult {
    memset(dst, 4, ui, n, None, "cuMemsetD32_v2")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8Async(dst: DevPtr, uc: u8, n: usize, s: Handle) -> CUresult {
    memset(dst, 1, uc as u32, n, Some(s), "cuMemsetD8Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD16Async(dst: DevPtr, us: u16, n: usize, s: Handle) -> CUresult {
    memset(dst, 2, us as u32, n, Some(s), "cuMemsetD16Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: DevPtr,
    ui: c_uint,
    n: usize,
    s: Handle,
) -> CUresult {
    memset(dst, 4, ui, n, Some(s), "cuMemsetD32Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: DevPtr,
) -> CUresult {
    const C: &str = "cuPointerGetAttribute";
    api(C, || {
        context::cuda_initialized(C)?;
        let a = memory::allocation_containing(ptr as usize)
            .ok_or_else(|| invalid(C, format!("{ptr:#x} is not in an emulated allocation")))?;
        let ctx_handle = context::CONTEXTS
            .all()
            .into_iter()
            .find(|(_, c)| c.id == a.ctx)
            .map(|(h, _)| h)
            .unwrap_or(0);
        let dev = context::by_id(a.ctx).map(|c| c.device).unwrap_or(0);
        // SAFETY: `data` points to storage of the attribute's type (the caller's contract).
        unsafe {
            match attribute {
                1 => put(data.cast::<Handle>(), ctx_handle, "data", C),
                2 => put(
                    data.cast::<c_uint>(),
                    if a.kind == MemKind::Pinned { 1 } else { 2 },
                    "data",
                    C,
                ),
                3 => put(data.cast::<DevPtr>(), ptr, "data", C),
                4 if a.kind != MemKind::Device => {
                    put(data.cast::<usize>(), ptr as usize, "data", C)
                }
                8 => put(
                    data.cast::<c_uint>(),
                    (a.kind == MemKind::Managed) as c_uint,
                    "data",
                    C,
                ),
                9 => put(data.cast::<c_int>(), dev, "data", C),
                11 => put(data.cast::<DevPtr>(), a.base as DevPtr, "data", C),
                12 => put(data.cast::<usize>(), a.size, "data", C),
                _ => Err(invalid(
                    C,
                    format!(
                        "pointer attribute {attribute} is not emulated for {}",
                        a.describe()
                    ),
                )),
            }
        }
    })
}

// ---- streams and events --------------------------------------------------------------------

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

// ---- modules and launches ------------------------------------------------------------------

/// `CU_JIT_INFO_LOG_BUFFER`, `…_SIZE_BYTES`, `CU_JIT_ERROR_LOG_BUFFER`, `…_SIZE_BYTES`.
const JIT_INFO_LOG: c_int = 3;
const JIT_INFO_LOG_SIZE: c_int = 4;
const JIT_ERROR_LOG: c_int = 5;
const JIT_ERROR_LOG_SIZE: c_int = 6;

/// Writes `msg` into the log buffer option pair `(buf, size)` if the caller gave one.
///
/// # Safety
/// `options` and `values` hold `n` entries, as `cuModuleLoadDataEx` requires.
unsafe fn write_log(
    n: usize,
    options: *const c_int,
    values: *mut *mut c_void,
    buf_opt: c_int,
    size_opt: c_int,
    msg: &str,
) {
    if n == 0 || options.is_null() || values.is_null() {
        return;
    }
    let (mut buf, mut size, mut size_idx) = (std::ptr::null_mut::<u8>(), 0usize, None);
    for i in 0..n {
        // SAFETY: `i < n` entries (the caller's contract).
        let (o, v) = unsafe { (*options.add(i), *values.add(i)) };
        if o == buf_opt {
            buf = v.cast();
        } else if o == size_opt {
            size = v as usize;
            size_idx = Some(i);
        }
    }
    if buf.is_null() || size == 0 {
        return;
    }
    let len = msg.len().min(size - 1);
    // SAFETY: the log buffer holds `size` bytes (the option contract); `len + 1 <= size`;
    // the size option slot is writable (the driver reports the length written there).
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf, len);
        *buf.add(len) = 0;
        if let Some(i) = size_idx {
            *values.add(i) = (len + 1) as *mut c_void;
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    num_options: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CUresult {
    const C: &str = "cuModuleLoadDataEx";
    let n = num_options as usize;
    let r = guard(C, || {
        let c = context::current(C)?;
        if module.is_null() {
            return Err(invalid(C, "`module` is a null pointer"));
        }
        // SAFETY: `image` is a complete image (the caller's contract).
        let h = unsafe { crate::launch::load_module(&c, image, C)? };
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(module, h, "module", C) }
    });
    match r {
        Ok(()) => {
            // SAFETY: `options`/`values` hold `n` entries (the caller's contract).
            unsafe {
                write_log(n, options, values, JIT_ERROR_LOG, JIT_ERROR_LOG_SIZE, "");
                write_log(
                    n,
                    options,
                    values,
                    JIT_INFO_LOG,
                    JIT_INFO_LOG_SIZE,
                    "xthunk-emulator: module loaded (kernels run as host implementations)",
                );
            }
            cu::SUCCESS
        }
        Err(e) => {
            let msg = format!("xthunk-emulator: {}", e.message);
            // SAFETY: as above.
            unsafe { write_log(n, options, values, JIT_ERROR_LOG, JIT_ERROR_LOG_SIZE, &msg) };
            e.code.cu()
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    // SAFETY: same contract, no options.
    unsafe { cuModuleLoadDataEx(module, image, 0, std::ptr::null_mut(), std::ptr::null_mut()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleUnload(m: Handle) -> CUresult {
    const C: &str = "cuModuleUnload";
    api(C, || {
        context::cuda_initialized(C)?;
        crate::launch::unload_module(m, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut Handle,
    m: Handle,
    name: *const c_char,
) -> CUresult {
    const C: &str = "cuModuleGetFunction";
    api(C, || {
        context::cuda_initialized(C)?;
        // SAFETY: `name` is a NUL-terminated string (the caller's contract).
        let name = unsafe { string(name, "name", C)? };
        if f.is_null() {
            return Err(invalid(C, "`hfunc` is a null pointer"));
        }
        let h = crate::launch::get_function(m, &name, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(f, h, "hfunc", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, f: Handle) -> CUresult {
    const C: &str = "cuFuncGetAttribute";
    api(C, || {
        crate::launch::FUNCTIONS.get(f, C)?;
        let sm = crate::config::get().sm as c_int;
        let v = match attrib {
            0 => 1024,
            1..=3 => 0,
            4 => 32,
            5 | 6 => sm,
            7 => 0,
            8 => 48 * 1024,
            9 => -1,
            10..=20 => 0,
            a => return Err(invalid(C, format!("unknown function attribute {a}"))),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { put(pi, v, "pi", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    s: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    const C: &str = "cuLaunchKernel";
    api(C, || {
        context::cuda_initialized(C)?;
        let func = crate::launch::FUNCTIONS.get(f, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != func.ctx_id {
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                format!("`{}` belongs to another context than the stream", func.name),
            ));
        }
        // SAFETY: `params`/`extra` follow the launch API contract.
        let launch = unsafe {
            crate::launch::prepare(
                &func,
                (
                    [grid_x, grid_y, grid_z],
                    [block_x, block_y, block_z],
                    shared,
                ),
                params,
                extra,
                crate::launch::CUDA_EXTRA,
                C,
            )?
        };
        let call = format!("{C}({})", func.name);
        stream::submit(
            &st,
            stream::Op::new(stream::Work::Kernel(Arc::new(launch)), &call),
        )
        .map(|_| ())
    })
}

// ---- graphs --------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(ph: *mut Handle, flags: c_uint) -> CUresult {
    const C: &str = "cuGraphCreate";
    api(C, || {
        let c = context::current(C)?;
        if flags != 0 {
            return Err(invalid(C, "flags must be 0"));
        }
        let h = GRAPHS.insert(Arc::new(stream::GraphCore {
            ctx_id: c.id,
            nodes: vec![],
        }));
        // SAFETY: the caller's out-pointer.
        unsafe { put(ph, h, "phGraph", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut Handle,
    graph: Handle,
    _flags: c_ulonglong,
) -> CUresult {
    const C: &str = "cuGraphInstantiateWithFlags";
    api(C, || {
        context::cuda_initialized(C)?;
        let g = GRAPHS.get(graph, C)?;
        if exec.is_null() {
            return Err(invalid(C, "`phGraphExec` is a null pointer"));
        }
        let h = stream::instantiate(&g);
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(exec, h, "phGraphExec", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphLaunch(exec: Handle, s: Handle) -> CUresult {
    const C: &str = "cuGraphLaunch";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != e.ctx_id {
            let _ = ctx_of_stream(&st, C)?;
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                "the graph belongs to another context than the stream",
            ));
        }
        stream::launch_graph(&e, &st, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetNodes(
    graph: Handle,
    nodes: *mut Handle,
    num: *mut usize,
) -> CUresult {
    const C: &str = "cuGraphGetNodes";
    api(C, || {
        let g = GRAPHS.get(graph, C)?;
        if num.is_null() {
            return Err(invalid(C, "`numNodes` is a null pointer"));
        }
        if nodes.is_null() {
            // SAFETY: the caller's out-pointer (checked non-null).
            return unsafe { put(num, g.nodes.len(), "numNodes", C) };
        }
        // SAFETY: `num` is valid (checked non-null); `nodes` holds `*num` entries.
        unsafe {
            let cap = *num;
            for i in 0..cap.min(g.nodes.len()) {
                *nodes.add(i) = stream::node_handle(graph, i);
            }
            for i in g.nodes.len()..cap {
                *nodes.add(i) = 0;
            }
            *num = cap.min(g.nodes.len());
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: Handle) -> CUresult {
    const C: &str = "cuGraphExecDestroy";
    api(C, || EXECS.remove(exec, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroy(graph: Handle) -> CUresult {
    const C: &str = "cuGraphDestroy";
    api(C, || GRAPHS.remove(graph, C).map(|_| ()))
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
pub struct UpdateResultInfo {
    pub result: c_uint,
    pub error_node: Handle,
    pub error_from_node: Handle,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(
    exec: Handle,
    graph: Handle,
    info: *mut UpdateResultInfo,
) -> CUresult {
    const C: &str = "cuGraphExecUpdate_v2";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let g = GRAPHS.get(graph, C)?;
        let r = stream::update_exec(&e, &g);
        let (result, node, err) = match r {
            Ok(()) => (0, 0, None),
            Err((code, idx, msg)) => (
                code,
                idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
                Some(msg),
            ),
        };
        if !info.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe {
                put(
                    info,
                    UpdateResultInfo {
                        result,
                        error_node: node,
                        error_from_node: node,
                    },
                    "resultInfo",
                    C,
                )?
            };
        }
        match err {
            None => Ok(()),
            Some(msg) => Err(EmuError::new(
                Code::GraphExecUpdateFailure,
                Kind::InvalidValue,
                C,
                msg,
            )),
        }
    })
}

/// `cuGraphExecUpdate`: the CUDA 11 form (CUDA 12 headers map the name to `_v2`, but drivers
/// still export it with this signature). Same semantics as [`cuGraphExecUpdate_v2`]; the
/// failing node and the `CUgraphExecUpdateResult` go to two separate optional out-pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate(
    exec: Handle,
    graph: Handle,
    error_node: *mut Handle,
    result_out: *mut c_uint,
) -> CUresult {
    const C: &str = "cuGraphExecUpdate";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let g = GRAPHS.get(graph, C)?;
        let (result, node, err) = match stream::update_exec(&e, &g) {
            Ok(()) => (0, 0, None),
            Err((code, idx, msg)) => (
                code,
                idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
                Some(msg),
            ),
        };
        if !error_node.is_null() {
            // SAFETY: the caller's (optional) out-pointer, checked non-null.
            unsafe { put(error_node, node, "hErrorNode_out", C)? };
        }
        if !result_out.is_null() {
            // SAFETY: the caller's (optional) out-pointer, checked non-null.
            unsafe { put(result_out, result, "updateResult_out", C)? };
        }
        match err {
            None => Ok(()),
            Some(msg) => Err(EmuError::new(
                Code::GraphExecUpdateFailure,
                Kind::InvalidValue,
                C,
                msg,
            )),
        }
    })
}

// ---- errors --------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(err: c_uint, p: *mut *const c_char) -> CUresult {
    error_text(err, p, true)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(err: c_uint, p: *mut *const c_char) -> CUresult {
    error_text(err, p, false)
}

fn error_text(err: c_uint, p: *mut *const c_char, name: bool) -> CUresult {
    let found = cu::NAMES.iter().find(|(v, _, _)| *v == err);
    if p.is_null() {
        return cu::INVALID_VALUE;
    }
    let s = found.map(|(_, n, d)| if name { *n } else { *d });
    // SAFETY: `p` is the caller's non-null out-pointer; the strings are static and
    // NUL-terminated.
    unsafe {
        *p = s.map(|s| s.as_ptr().cast()).unwrap_or(std::ptr::null());
    }
    if s.is_some() {
        cu::SUCCESS
    } else {
        cu::INVALID_VALUE
    }
}

/// `cuGetExportTable`: the driver's private tables. NVRTC looks this symbol up in whatever
/// `libcuda.so.1` the process can load (to learn about the driver) and handles an error, but
/// crashes when the symbol itself is missing; so it exists and reports that no table is
/// available.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetExportTable(
    table: *mut *const c_void,
    _id: *const c_void,
) -> CUresult {
    if !table.is_null() {
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *table = std::ptr::null() };
    }
    cu::NOT_FOUND
}
