//! The HIP runtime API (`libamdhip64.so`), from `hip_runtime_api.h` (ROCm 5.2, Debian's
//! `libamdhip64-dev`) and ROCm 6's `hipDeviceProp_tR0600` layout. No `hiprtc*` symbol is
//! exported: compilation stays with the real hipRTC.
//!
//! Devices report `XTHUNK_EMU_GFX` (gfx90a by default), warp size 64, runtime version
//! 6.3.42134, and the name "xthunk emulated AMD device".

#![allow(non_snake_case, clippy::too_many_arguments)]

use crate::context::{self, Ctx};
use crate::copy::{self, Dir};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, guard, hip, invalid};
use crate::ffi::{put, string};
use crate::memory::{self, MemKind};
use crate::stream::{self, EVENTS, EXECS, GRAPHS, STREAMS, StreamCore, StreamKind};
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::Arc;

pub type HipError = c_int;
pub type Handle = usize;

/// `HIP_VERSION` reported by `hipRuntimeGetVersion` / `hipDriverGetVersion` (6.3.42134).
pub const RUNTIME_VERSION: c_int = 60_342_134;
/// Compute units reported.
pub const CU_COUNT: c_int = 16;

thread_local! {
    static LAST_ERROR: Cell<HipError> = const { Cell::new(0) };
}

fn api(call: &str, f: impl FnOnce() -> EmuResult<()>) -> HipError {
    let r = match guard(call, f) {
        Ok(()) => hip::SUCCESS,
        Err(e) => e.code.hip(),
    };
    if r != hip::SUCCESS && r != hip::NOT_READY {
        LAST_ERROR.with(|l| l.set(r));
    }
    r
}

fn ctx(call: &str) -> EmuResult<Arc<Ctx>> {
    context::hip_ctx(call)
}

/// The stream a handle names (NULL / `hipStreamPerThread`: the current device's null stream).
fn stream_of(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>> {
    if h == 0 || h == stream::STREAM_PER_THREAD {
        return Ok(ctx(call)?.legacy.clone());
    }
    STREAMS.get(h, call)
}

/// The device name: `xthunk emulated AMD device` (with the ordinal when there are several).
pub fn hip_device_name(dev: c_int) -> String {
    if context::device_count() > 1 {
        format!("{} {dev}", context::Api::Hip.device_name())
    } else {
        context::Api::Hip.device_name().to_string()
    }
}

// ---- initialization and devices ------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn hipInit(flags: c_uint) -> HipError {
    const C: &str = "hipInit";
    api(C, || {
        if flags != 0 {
            return Err(invalid(C, format!("flags must be 0, got {flags}")));
        }
        if context::device_count() == 0 {
            return Err(EmuError::quiet(Code::NoDevice, "no emulated device"));
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipRuntimeGetVersion(v: *mut c_int) -> HipError {
    const C: &str = "hipRuntimeGetVersion";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        put(v, RUNTIME_VERSION, "runtimeVersion", C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDriverGetVersion(v: *mut c_int) -> HipError {
    const C: &str = "hipDriverGetVersion";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { put(v, RUNTIME_VERSION, "driverVersion", C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> HipError {
    const C: &str = "hipGetDeviceCount";
    api(C, || {
        let n = context::device_count();
        // SAFETY: the caller's out-pointer.
        unsafe { put(count, n, "count", C)? };
        if n == 0 {
            return Err(EmuError::quiet(Code::NoDevice, "no emulated device"));
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn hipSetDevice(dev: c_int) -> HipError {
    const C: &str = "hipSetDevice";
    api(C, || context::hip_set_device(dev, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevice(dev: *mut c_int) -> HipError {
    const C: &str = "hipGetDevice";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        put(dev, context::hip_current_device(), "deviceId", C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGet(dev: *mut c_int, ordinal: c_int) -> HipError {
    const C: &str = "hipDeviceGet";
    api(C, || {
        context::check_device(ordinal, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(dev, ordinal, "device", C) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn hipDeviceSynchronize() -> HipError {
    const C: &str = "hipDeviceSynchronize";
    api(C, || {
        let c = ctx(C)?;
        stream::check_capture_rules(C, Code::CaptureUnsupported)?;
        c.synchronize()
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn hipDeviceReset() -> HipError {
    const C: &str = "hipDeviceReset";
    api(C, || context::hip_reset(C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> HipError {
    const C: &str = "hipDeviceGetName";
    api(C, || {
        context::check_device(dev, C)?;
        // SAFETY: `name` holds `len` bytes (the caller's contract).
        unsafe { crate::ffi::copy_str(name, len.max(0) as usize, &hip_device_name(dev), C) }
    })
}

/// `hipDeviceGetAttribute` values (hipDeviceAttribute_t, the same in ROCm 5.2 and 6).
fn attribute(attr: c_int, dev: c_int) -> Option<c_int> {
    Some(match attr {
        3 => 1,                // CanMapHostMemory
        5 => 1_700_000,        // ClockRate (kHz)
        8 => 1,                // ConcurrentKernels
        9 => 1,                // ConcurrentManagedAccess
        10 => 1,               // CooperativeLaunch
        16 => 0,               // Integrated
        19 => 8 * 1024 * 1024, // L2CacheSize
        23 => 9,               // ComputeCapabilityMajor
        24 => 1,               // ManagedMemory
        26..=28 => 1024,       // MaxBlockDimX/Y/Z
        29..=31 => i32::MAX,   // MaxGridDimX/Y/Z
        56 => 1024,            // MaxThreadsPerBlock
        57 => 2048,            // MaxThreadsPerMultiProcessor
        59 => 4096,            // MemoryBusWidth
        60 => 1_600_000,       // MemoryClockRate
        61 => 0,               // ComputeCapabilityMinor
        63 => CU_COUNT,        // MultiprocessorCount
        65 => 0,               // PageableMemoryAccess
        67 => dev + 1,         // PciBusId
        68 | 69 => 0,          // PciDeviceId, PciDomainID
        71 => 65536,           // MaxRegistersPerBlock
        74 => 64 * 1024,       // MaxSharedMemoryPerBlock
        75 => 64 * 1024,       // SharedMemPerBlockOptin
        76 => 64 * 1024,       // SharedMemPerMultiprocessor
        83 => 64 * 1024,       // TotalConstantMemory
        84 => {
            // TotalGlobalMem (an int: saturates)
            crate::config::get().memory.min(i32::MAX as u64) as c_int
        }
        85 => 1,            // UnifiedAddressing
        87 => 64,           // WarpSize
        10000 => 1_700_000, // ClockInstructionRate
        10002 => 64 * 1024, // MaxSharedMemoryPerMultiprocessor
        10003 => 910,       // GcnArch
        10012 => 0,         // AsicRevision
        a if (0..100).contains(&a) || (10000..10020).contains(&a) => 0,
        _ => return None,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetAttribute(
    value: *mut c_int,
    attr: c_int,
    dev: c_int,
) -> HipError {
    const C: &str = "hipDeviceGetAttribute";
    api(C, || {
        context::check_device(dev, C)?;
        let v = attribute(attr, dev)
            .ok_or_else(|| invalid(C, format!("unknown device attribute {attr}")))?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(value, v, "pi", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, dev: c_int) -> HipError {
    const C: &str = "hipDeviceTotalMem";
    api(C, || {
        context::check_device(dev, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(bytes, crate::config::get().memory as usize, "bytes", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: c_int,
) -> HipError {
    const C: &str = "hipDeviceComputeCapability";
    api(C, || {
        context::check_device(dev, C)?;
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(major, 9, "major", C)?;
            put(minor, 0, "minor", C)
        }
    })
}

/// Offsets of the fields filled in each `hipDeviceProp_t` layout.
struct PropLayout {
    size: usize,
    total_global_mem: usize,
    shared_mem_per_block: usize,
    regs_per_block: usize,
    warp_size: usize,
    max_threads_per_block: usize,
    max_threads_dim: usize,
    max_grid_size: usize,
    clock_rate: usize,
    total_const_mem: usize,
    major: usize,
    minor: usize,
    multi_processor_count: usize,
    l2_cache_size: usize,
    max_threads_per_mp: usize,
    can_map_host_memory: usize,
    gcn_arch_name: usize,
    managed_memory: usize,
    concurrent_managed_access: usize,
}

/// ROCm 5 `hipDeviceProp_t` (792 bytes; offsets from gcc on Debian's 5.2 header).
const R0000: PropLayout = PropLayout {
    size: 792,
    total_global_mem: 256,
    shared_mem_per_block: 264,
    regs_per_block: 272,
    warp_size: 276,
    max_threads_per_block: 280,
    max_threads_dim: 284,
    max_grid_size: 296,
    clock_rate: 308,
    total_const_mem: 320,
    major: 328,
    minor: 332,
    multi_processor_count: 336,
    l2_cache_size: 340,
    max_threads_per_mp: 344,
    can_map_host_memory: 388,
    gcn_arch_name: 396,
    managed_memory: 772,
    concurrent_managed_access: 780,
};

/// ROCm 6 `hipDeviceProp_tR0600` (1472 bytes; offsets from gcc on the transcribed header in
/// backend-rocm/tests/fixtures).
const R0600: PropLayout = PropLayout {
    size: 1472,
    total_global_mem: 288,
    shared_mem_per_block: 296,
    regs_per_block: 304,
    warp_size: 308,
    max_threads_per_block: 320,
    max_threads_dim: 324,
    max_grid_size: 336,
    clock_rate: 348,
    total_const_mem: 352,
    major: 360,
    minor: 364,
    multi_processor_count: 388,
    l2_cache_size: 616,
    max_threads_per_mp: 624,
    can_map_host_memory: 400,
    gcn_arch_name: 1160,
    managed_memory: 652,
    concurrent_managed_access: 676,
};

/// Fills a device property struct of layout `l`.
///
/// # Safety
/// `p` must be valid for writing `l.size` bytes.
unsafe fn fill_props(p: *mut u8, l: &PropLayout, dev: c_int) {
    let cfg = crate::config::get();
    // SAFETY: every offset below is inside the `l.size` bytes the caller provides, and fields
    // are written unaligned as the types the header declares.
    unsafe {
        std::ptr::write_bytes(p, 0, l.size);
        let name = hip_device_name(dev);
        let n = name.len().min(255);
        std::ptr::copy_nonoverlapping(name.as_ptr(), p, n);
        let w32 = |off: usize, v: i32| p.add(off).cast::<i32>().write_unaligned(v);
        let wsz = |off: usize, v: usize| p.add(off).cast::<usize>().write_unaligned(v);
        wsz(l.total_global_mem, cfg.memory as usize);
        wsz(l.shared_mem_per_block, 64 * 1024);
        w32(l.regs_per_block, 65536);
        w32(l.warp_size, 64);
        w32(l.max_threads_per_block, 1024);
        for i in 0..3 {
            w32(l.max_threads_dim + 4 * i, 1024);
            w32(l.max_grid_size + 4 * i, i32::MAX);
        }
        w32(l.clock_rate, 1_700_000);
        wsz(l.total_const_mem, 64 * 1024);
        w32(l.major, 9);
        w32(l.minor, 0);
        w32(l.multi_processor_count, CU_COUNT);
        w32(l.l2_cache_size, 8 * 1024 * 1024);
        w32(l.max_threads_per_mp, 2048);
        w32(l.can_map_host_memory, 1);
        let g = cfg.gfx.as_bytes();
        std::ptr::copy_nonoverlapping(g.as_ptr(), p.add(l.gcn_arch_name), g.len().min(255));
        w32(l.managed_memory, 1);
        w32(l.concurrent_managed_access, 1);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceProperties(prop: *mut c_void, dev: c_int) -> HipError {
    const C: &str = "hipGetDeviceProperties";
    api(C, || {
        context::check_device(dev, C)?;
        if prop.is_null() {
            return Err(invalid(C, "`prop` is a null pointer"));
        }
        // SAFETY: `prop` is a ROCm 5 `hipDeviceProp_t` (the caller's contract).
        unsafe { fill_props(prop.cast(), &R0000, dev) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevicePropertiesR0600(prop: *mut c_void, dev: c_int) -> HipError {
    const C: &str = "hipGetDevicePropertiesR0600";
    api(C, || {
        context::check_device(dev, C)?;
        if prop.is_null() {
            return Err(invalid(C, "`prop` is a null pointer"));
        }
        // SAFETY: `prop` is a ROCm 6 `hipDeviceProp_tR0600` (the caller's contract).
        unsafe { fill_props(prop.cast(), &R0600, dev) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipError {
    const C: &str = "hipMemGetInfo";
    api(C, || {
        let c = ctx(C)?;
        let used = memory::live_bytes(c.id);
        // SAFETY: the caller's out-pointers.
        unsafe {
            put(free, c.memory().saturating_sub(used) as usize, "free", C)?;
            put(total, c.memory() as usize, "total", C)
        }
    })
}

// ---- errors --------------------------------------------------------------------------------

fn error_text(e: HipError, name: bool) -> *const c_char {
    let s = hip::NAMES
        .iter()
        .find(|(v, _, _)| *v == e)
        .map(|(_, n, d)| if name { *n } else { *d })
        .unwrap_or(if name {
            "hipErrorUnknown\0"
        } else {
            "unknown error\0"
        });
    s.as_ptr().cast()
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorName(e: HipError) -> *const c_char {
    error_text(e, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorString(e: HipError) -> *const c_char {
    error_text(e, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetLastError() -> HipError {
    LAST_ERROR.with(|l| l.replace(hip::SUCCESS))
}

#[unsafe(no_mangle)]
pub extern "C" fn hipPeekAtLastError() -> HipError {
    LAST_ERROR.with(|l| l.get())
}

// ---- memory --------------------------------------------------------------------------------

/// Allocates (`size` 0 gives NULL, as HIP does).
///
/// # Safety
/// `out` must be null or valid for writing a pointer.
unsafe fn alloc(
    out: *mut *mut c_void,
    size: usize,
    kind: MemKind,
    call: &'static str,
) -> EmuResult<()> {
    if out.is_null() {
        return Err(invalid(call, "`ptr` is a null pointer"));
    }
    let c = ctx(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    let p = if size == 0 {
        0
    } else {
        memory::allocate(c.id, c.memory(), size, kind, call)?
    };
    // SAFETY: forwarded from the caller (checked non-null).
    unsafe { put(out, p as *mut c_void, "ptr", call) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipError {
    const C: &str = "hipMalloc";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { alloc(ptr, size, MemKind::Device, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostMalloc(
    ptr: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> HipError {
    const C: &str = "hipHostMalloc";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe { alloc(ptr, size, MemKind::Pinned, C) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocManaged(
    ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> HipError {
    const C: &str = "hipMallocManaged";
    api(C, || {
        if flags != 1 && flags != 2 {
            return Err(invalid(
                C,
                format!("flags must be hipMemAttachGlobal or hipMemAttachHost, got {flags}"),
            ));
        }
        // SAFETY: the caller's out-pointer.
        unsafe { alloc(ptr, size, MemKind::Managed, C) }
    })
}

fn free(p: *mut c_void, kinds: &[MemKind], call: &str) -> EmuResult<()> {
    let c = ctx(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    if p.is_null() {
        return Ok(());
    }
    // hipFree synchronizes the device.
    let _ = c.synchronize();
    memory::free(p as usize, kinds, call).map(|_| ())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFree(p: *mut c_void) -> HipError {
    const C: &str = "hipFree";
    api(C, || free(p, &[MemKind::Device, MemKind::Managed], C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostFree(p: *mut c_void) -> HipError {
    const C: &str = "hipHostFree";
    api(C, || free(p, &[MemKind::Pinned], C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    dev_ptr: *mut *mut c_void,
    host: *mut c_void,
    flags: c_uint,
) -> HipError {
    const C: &str = "hipHostGetDevicePointer";
    api(C, || {
        if flags != 0 {
            return Err(invalid(C, format!("flags must be 0, got {flags}")));
        }
        match memory::allocation_containing(host as usize) {
            Some(a) if a.kind == MemKind::Pinned => {
                // SAFETY: the caller's out-pointer.
                unsafe { put(dev_ptr, host, "devPtr", C) }
            }
            _ => Err(invalid(
                C,
                format!("{host:p} is not memory from hipHostMalloc"),
            )),
        }
    })
}

/// `hipMemcpyKind` to the sides' kinds.
fn kind(k: c_int, call: &str) -> EmuResult<Dir> {
    Ok(match k {
        0 => copy::HTOH,
        1 => copy::HTOD,
        2 => copy::DTOH,
        3 => copy::DTOD,
        4 => copy::ANY,
        k => {
            return Err(EmuError::new(
                Code::InvalidValue,
                Kind::InvalidValue,
                call,
                format!("unknown hipMemcpyKind {k}"),
            ));
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    k: c_int,
) -> HipError {
    const C: &str = "hipMemcpy";
    api(C, || {
        let d = kind(k, C)?;
        copy::copy_sync(&*ctx(C)?, dst as usize, src as usize, n, d, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoD(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    const C: &str = "hipMemcpyHtoD";
    api(C, || {
        copy::copy_sync(&*ctx(C)?, dst as usize, src as usize, n, copy::HTOD, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    const C: &str = "hipMemcpyDtoH";
    api(C, || {
        copy::copy_sync(&*ctx(C)?, dst as usize, src as usize, n, copy::DTOH, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    k: c_int,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyAsync";
    api(C, || {
        let d = kind(k, C)?;
        copy::copy_async(&stream_of(s, C)?, dst as usize, src as usize, n, d, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyHtoDAsync";
    api(C, || {
        copy::copy_async(
            &stream_of(s, C)?,
            dst as usize,
            src as usize,
            n,
            copy::HTOD,
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyDtoHAsync";
    api(C, || {
        copy::copy_async(
            &stream_of(s, C)?,
            dst as usize,
            src as usize,
            n,
            copy::DTOH,
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoDAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    s: Handle,
) -> HipError {
    const C: &str = "hipMemcpyDtoDAsync";
    api(C, || {
        copy::copy_async(
            &stream_of(s, C)?,
            dst as usize,
            src as usize,
            n,
            copy::DTOD,
            C,
        )
    })
}

fn memset(
    dst: *mut c_void,
    width: usize,
    v: u32,
    n: usize,
    s: Option<Handle>,
    call: &str,
) -> HipError {
    api(call, || {
        let st = match s {
            Some(h) => stream_of(h, call)?,
            None => ctx(call)?.legacy.clone(),
        };
        copy::memset(&st, dst as usize, width, v, n, call)?;
        if s.is_none() {
            // The synchronous forms complete before returning.
            if let Some(c) = st.ctx() {
                stream::legacy_barrier(&c, call)?;
            }
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> HipError {
    memset(dst, 1, value as u8 as u32, size, None, "hipMemset")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetAsync(
    dst: *mut c_void,
    value: c_int,
    size: usize,
    s: Handle,
) -> HipError {
    memset(dst, 1, value as u8 as u32, size, Some(s), "hipMemsetAsync")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD8(dst: *mut c_void, value: u8, n: usize) -> HipError {
    memset(dst, 1, value as u32, n, None, "hipMemsetD8")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD16(dst: *mut c_void, value: u16, n: usize) -> HipError {
    memset(dst, 2, value as u32, n, None, "hipMemsetD16")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD32(dst: *mut c_void, value: c_int, n: usize) -> HipError {
    memset(dst, 4, value as u32, n, None, "hipMemsetD32")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD8Async(
    dst: *mut c_void,
    value: u8,
    n: usize,
    s: Handle,
) -> HipError {
    memset(dst, 1, value as u32, n, Some(s), "hipMemsetD8Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD16Async(
    dst: *mut c_void,
    value: u16,
    n: usize,
    s: Handle,
) -> HipError {
    memset(dst, 2, value as u32, n, Some(s), "hipMemsetD16Async")
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD32Async(
    dst: *mut c_void,
    value: c_int,
    n: usize,
    s: Handle,
) -> HipError {
    memset(dst, 4, value as u32, n, Some(s), "hipMemsetD32Async")
}

// ---- streams and events --------------------------------------------------------------------

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

// ---- modules and launches ------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLoadData(module: *mut Handle, image: *const c_void) -> HipError {
    const C: &str = "hipModuleLoadData";
    api(C, || {
        let c = ctx(C)?;
        if module.is_null() {
            return Err(invalid(C, "`module` is a null pointer"));
        }
        // SAFETY: `image` is a complete code object (the caller's contract).
        let h = unsafe { crate::launch::load_module(&c, image, C)? };
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(module, h, "module", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    _num_options: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> HipError {
    // SAFETY: same contract (HIP ignores the JIT options for code objects).
    unsafe { hipModuleLoadData(module, image) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleUnload(m: Handle) -> HipError {
    const C: &str = "hipModuleUnload";
    api(C, || crate::launch::unload_module(m, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleGetFunction(
    f: *mut Handle,
    m: Handle,
    name: *const c_char,
) -> HipError {
    const C: &str = "hipModuleGetFunction";
    api(C, || {
        // SAFETY: NUL-terminated (the caller's contract).
        let name = unsafe { string(name, "kname", C)? };
        if f.is_null() {
            return Err(invalid(C, "`function` is a null pointer"));
        }
        let h = crate::launch::get_function(m, &name, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(f, h, "function", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLaunchKernel(
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
) -> HipError {
    const C: &str = "hipModuleLaunchKernel";
    api(C, || {
        let func = crate::launch::FUNCTIONS.get(f, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != func.ctx_id {
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                format!("`{}` belongs to another device than the stream", func.name),
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
                crate::launch::HIP_EXTRA,
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphCreate(g: *mut Handle, flags: c_uint) -> HipError {
    const C: &str = "hipGraphCreate";
    api(C, || {
        let c = ctx(C)?;
        if flags != 0 {
            return Err(invalid(C, "flags must be 0"));
        }
        let h = GRAPHS.insert(Arc::new(stream::GraphCore {
            ctx_id: c.id,
            nodes: vec![],
        }));
        // SAFETY: the caller's out-pointer.
        unsafe { put(g, h, "pGraph", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiate(
    exec: *mut Handle,
    graph: Handle,
    error_node: *mut Handle,
    log: *mut c_char,
    log_size: usize,
) -> HipError {
    const C: &str = "hipGraphInstantiate";
    api(C, || {
        let g = GRAPHS.get(graph, C)?;
        if exec.is_null() {
            return Err(invalid(C, "`pGraphExec` is a null pointer"));
        }
        let h = stream::instantiate(&g);
        if !error_node.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe { put(error_node, 0, "pErrorNode", C)? };
        }
        if !log.is_null() && log_size > 0 {
            // SAFETY: `log` holds `log_size` bytes (the caller's contract).
            unsafe { *log = 0 };
        }
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(exec, h, "pGraphExec", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiateWithFlags(
    exec: *mut Handle,
    graph: Handle,
    _flags: c_ulonglong,
) -> HipError {
    // SAFETY: same contract, no error node or log.
    unsafe { hipGraphInstantiate(exec, graph, std::ptr::null_mut(), std::ptr::null_mut(), 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphLaunch(exec: Handle, s: Handle) -> HipError {
    const C: &str = "hipGraphLaunch";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let st = stream_of(s, C)?;
        if st.ctx_id != e.ctx_id {
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                C,
                "the graph belongs to another device than the stream",
            ));
        }
        stream::launch_graph(&e, &st, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphGetNodes(
    graph: Handle,
    nodes: *mut Handle,
    num: *mut usize,
) -> HipError {
    const C: &str = "hipGraphGetNodes";
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
            *num = cap.min(g.nodes.len());
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphDestroy(graph: Handle) -> HipError {
    const C: &str = "hipGraphDestroy";
    api(C, || GRAPHS.remove(graph, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecDestroy(exec: Handle) -> HipError {
    const C: &str = "hipGraphExecDestroy";
    api(C, || EXECS.remove(exec, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecUpdate(
    exec: Handle,
    graph: Handle,
    error_node: *mut Handle,
    result: *mut c_int,
) -> HipError {
    const C: &str = "hipGraphExecUpdate";
    api(C, || {
        let e = EXECS.get(exec, C)?;
        let g = GRAPHS.get(graph, C)?;
        let r = stream::update_exec(&e, &g);
        let (code, node, err) = match r {
            Ok(()) => (0, 0, None),
            Err((code, idx, msg)) => (
                code,
                idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
                Some(msg),
            ),
        };
        // SAFETY: the caller's (optional) out-pointers.
        unsafe {
            if !error_node.is_null() {
                put(error_node, node, "hErrorNode_out", C)?;
            }
            if !result.is_null() {
                put(result, code as c_int, "updateResult_out", C)?;
            }
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
