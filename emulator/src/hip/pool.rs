//! Stream-ordered allocation: memory pools (`hipDeviceGetDefaultMemPool`,
//! `hipMemPoolCreate`, attributes, trimming) and `hipMallocAsync` / `hipMallocFromPoolAsync`
//! / `hipFreeAsync`, as [`crate::pool`] emulates them.

use super::{Handle, Hip, HipError, api};
use crate::context;
use crate::pool;
use std::ffi::{c_int, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetDefaultMemPool(
    mem_pool: *mut Handle,
    device: c_int,
) -> HipError {
    const C: &str = "hipDeviceGetDefaultMemPool";
    api(C, || {
        let c = context::hip_ctx_of(device, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { pool::get_default(&c, mem_pool, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolCreate(
    mem_pool: *mut Handle,
    pool_props: *const c_void,
) -> HipError {
    const C: &str = "hipMemPoolCreate";
    api(C, || {
        if pool_props.is_null() {
            return Err(crate::error::invalid(C, "`pool_props` is a null pointer"));
        }
        // SAFETY: `hipMemPoolProps` starts with four `int`s: the location id is the fourth.
        let dev = unsafe { *pool_props.cast::<c_int>().add(3) };
        let c = context::hip_ctx_of(dev, C)?;
        // SAFETY: the caller's out-pointer and properties.
        unsafe { pool::create_from_props(&c, mem_pool, pool_props.cast(), C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolDestroy(mem_pool: Handle) -> HipError {
    const C: &str = "hipMemPoolDestroy";
    api(C, || pool::destroy(mem_pool, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolSetAttribute(
    mem_pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> HipError {
    const C: &str = "hipMemPoolSetAttribute";
    // SAFETY: the caller's value, of the attribute's type.
    api(C, || unsafe {
        pool::set_attribute_from(mem_pool, attr, value, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolGetAttribute(
    mem_pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> HipError {
    const C: &str = "hipMemPoolGetAttribute";
    // SAFETY: the caller's out-pointer, of the attribute's type.
    api(C, || unsafe {
        pool::get_attribute_into(mem_pool, attr, value, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolTrimTo(mem_pool: Handle, min_bytes_to_hold: usize) -> HipError {
    const C: &str = "hipMemPoolTrimTo";
    api(C, || pool::trim_to(mem_pool, min_bytes_to_hold as u64, C))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: Handle,
) -> HipError {
    const C: &str = "hipMallocAsync";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        pool::allocate_into::<Hip, _>(dev_ptr, size, None, stream, |p| p as *mut c_void, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocFromPoolAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    mem_pool: Handle,
    stream: Handle,
) -> HipError {
    const C: &str = "hipMallocFromPoolAsync";
    // SAFETY: the caller's out-pointer.
    api(C, || unsafe {
        pool::allocate_into::<Hip, _>(
            dev_ptr,
            size,
            Some(mem_pool),
            stream,
            |p| p as *mut c_void,
            C,
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFreeAsync(dev_ptr: *mut c_void, stream: Handle) -> HipError {
    const C: &str = "hipFreeAsync";
    api(C, || {
        if dev_ptr.is_null() {
            // HIP frees NULL as a no-op (it allocates NULL for 0 bytes).
            return Ok(());
        }
        pool::free_on::<Hip>(dev_ptr as usize, stream, C)
    })
}
