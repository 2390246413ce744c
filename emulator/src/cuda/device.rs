//! Initialization and devices: `cuInit`, versions, device enumeration, names, attributes,
//! memory size, compute capability, UUIDs.

use super::{CUresult, DRIVER_VERSION, api};
use crate::context;
use crate::error::invalid;
use crate::ffi::put;
use std::ffi::{c_char, c_int, c_uint};

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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> CUresult {
    const C: &str = "cuDeviceGetName";
    api(C, || {
        context::cuda_initialized(C)?;
        context::check_device(dev, C)?;
        // SAFETY: `name` holds `len` bytes (the caller's contract).
        unsafe {
            crate::ffi::copy_str(
                name,
                len.max(0) as usize,
                &context::Api::Cuda.device_label(dev),
                C,
            )
        }
    })
}

/// Number of SMs reported.
pub const SM_COUNT: c_int = 16;

/// `cuDeviceGetAttribute` values; `None` for attributes the enum does not have.
fn attribute(attr: c_int, dev: c_int) -> Option<c_int> {
    let sm = crate::config::get().sm as c_int;
    let l = &crate::limits::CUDA;
    let int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    Some(match attr {
        1 => int(l.threads_per_block),
        2..=4 => int(l.block[(attr - 2) as usize]),
        5..=7 => int(l.grid[(attr - 5) as usize]),
        8 => int(l.shared_per_block),
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
        // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        115 => c_int::from(crate::config::get().memory_pools),
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
