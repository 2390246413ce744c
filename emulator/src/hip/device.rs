//! Initialization and devices: `hipInit`, versions, the current device, names, attributes,
//! memory size, compute capability, and the ROCm 5 / ROCm 6 device property structs.

use super::{CU_COUNT, HipError, RUNTIME_VERSION, api, ctx};
use crate::context;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream;
use std::ffi::{c_char, c_int, c_uint, c_void};

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
        unsafe {
            crate::ffi::copy_str(
                name,
                len.max(0) as usize,
                &context::Api::Hip.device_label(dev),
                C,
            )
        }
    })
}

/// `hipDeviceGetAttribute` values (hipDeviceAttribute_t, the same in ROCm 5.2 and 6).
fn attribute(attr: c_int, dev: c_int) -> Option<c_int> {
    let l = &crate::limits::HIP;
    let pools = || c_int::from(crate::config::get().memory_pools);
    let int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    Some(match attr {
        3 => 1,                                        // CanMapHostMemory
        5 => 1_700_000,                                // ClockRate (kHz)
        8 => 1,                                        // ConcurrentKernels
        9 => 1,                                        // ConcurrentManagedAccess
        10 => 1,                                       // CooperativeLaunch
        16 => 0,                                       // Integrated
        19 => 8 * 1024 * 1024,                         // L2CacheSize
        23 => 9,                                       // ComputeCapabilityMajor
        24 => 1,                                       // ManagedMemory
        26..=28 => int(l.block[(attr - 26) as usize]), // MaxBlockDimX/Y/Z
        29..=31 => int(l.grid[(attr - 29) as usize]),  // MaxGridDimX/Y/Z
        56 => int(l.threads_per_block),                // MaxThreadsPerBlock
        57 => 2048,                                    // MaxThreadsPerMultiProcessor
        59 => 4096,                                    // MemoryBusWidth
        60 => 1_600_000,                               // MemoryClockRate
        61 => 0,                                       // ComputeCapabilityMinor
        63 => CU_COUNT,                                // MultiprocessorCount
        65 => 0,                                       // PageableMemoryAccess
        67 => dev + 1,                                 // PciBusId
        68 | 69 => 0,                                  // PciDeviceId, PciDomainID
        71 => 65536,                                   // MaxRegistersPerBlock
        74 => int(l.shared_per_block),                 // MaxSharedMemoryPerBlock
        75 => 64 * 1024,                               // SharedMemPerBlockOptin
        76 => 64 * 1024,                               // SharedMemPerMultiprocessor
        83 => 64 * 1024,                               // TotalConstantMemory
        84 => {
            // TotalGlobalMem (an int: saturates)
            crate::config::get().memory.min(i32::MAX as u64) as c_int
        }
        85 => 1,            // UnifiedAddressing
        87 => 64,           // WarpSize
        88 => pools(),      // MemoryPoolsSupported
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
        let name = context::Api::Hip.device_label(dev);
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
