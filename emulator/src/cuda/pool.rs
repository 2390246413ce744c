//! Stream-ordered allocation: memory pools (`cuDeviceGetDefaultMemPool`, `cuMemPoolCreate`,
//! attributes, trimming) and `cuMemAllocAsync` / `cuMemAllocFromPoolAsync` /
//! `cuMemFreeAsync`, as [`crate::pool`] emulates them.

use super::{CUresult, Cuda, DevPtr, Handle, api};
use crate::context;
use crate::error::invalid;
use crate::pool;
use std::ffi::{c_int, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool_out: *mut Handle, dev: c_int) -> CUresult {
    const C: &str = "cuDeviceGetDefaultMemPool";
    api(C, || {
        context::check_device(dev, C)?;
        let c = context::current(C)?;
        if c.device != dev {
            return Err(invalid(
                C,
                format!(
                    "device {dev}: the emulator keeps a default pool per context, and the \
                     current context is of device {}",
                    c.device
                ),
            ));
        }
        // SAFETY: the caller's out-pointer.
        unsafe { pool::get_default(&c, pool_out, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut Handle, props: *const c_void) -> CUresult {
    const C: &str = "cuMemPoolCreate";
    api(C, || {
        let c = context::current(C)?;
        // SAFETY: the caller's out-pointer and `CUmemPoolProps`, whose first fields are four
        // `int`s.
        unsafe { pool::create_from_props(&c, pool, props.cast(), C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: Handle) -> CUresult {
    const C: &str = "cuMemPoolDestroy";
    api(C, || pool::destroy(pool, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> CUresult {
    const C: &str = "cuMemPoolSetAttribute";
    // SAFETY: the caller's value, of the attribute's type.
    api(C, || unsafe {
        pool::set_attribute_from(pool, attr, value, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> CUresult {
    const C: &str = "cuMemPoolGetAttribute";
    // SAFETY: the caller's out-pointer, of the attribute's type.
    api(C, || unsafe {
        pool::get_attribute_into(pool, attr, value, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: Handle, min_bytes_to_keep: usize) -> CUresult {
    const C: &str = "cuMemPoolTrimTo";
    api(C, || pool::trim_to(pool, min_bytes_to_keep as u64, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut DevPtr,
    bytesize: usize,
    h_stream: Handle,
) -> CUresult {
    const C: &str = "cuMemAllocAsync";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        pool::allocate_into::<Cuda, _>(dptr, bytesize, None, h_stream, |p| p as DevPtr, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut DevPtr,
    bytesize: usize,
    pool: Handle,
    h_stream: Handle,
) -> CUresult {
    const C: &str = "cuMemAllocFromPoolAsync";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        pool::allocate_into::<Cuda, _>(dptr, bytesize, Some(pool), h_stream, |p| p as DevPtr, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: DevPtr, h_stream: Handle) -> CUresult {
    const C: &str = "cuMemFreeAsync";
    api(C, || pool::free_on::<Cuda>(dptr as usize, h_stream, C))
}
