//! Memory: device, managed and page-locked allocations, frees, synchronous and asynchronous
//! copies, memsets, pointer attributes.

use super::{CUresult, DevPtr, Handle, api, stream_of};
use crate::context;
use crate::copy::{self, Dir};
use crate::error::{Code, EmuResult, invalid};
use crate::ffi::put;
use crate::memory::{self, MemKind};
use crate::stream;
use std::ffi::{c_int, c_uint, c_void};

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
