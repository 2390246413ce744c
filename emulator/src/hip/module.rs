//! Modules and launches: loading code objects, functions, kernel launches.

use super::{Handle, Hip, HipError, api};
use crate::driver;
use std::ffi::{c_char, c_int, c_uint, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLoadData(module: *mut Handle, image: *const c_void) -> HipError {
    const C: &str = "hipModuleLoadData";
    // SAFETY: the caller's out-pointer and complete code object.
    api(C, || unsafe {
        driver::load_module::<Hip>(module, image, C)
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
    // SAFETY: `name` is NUL-terminated; `f` the caller's out-pointer.
    api(C, || unsafe {
        driver::get_function(f, m, name, ("kname", "function"), C)
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
        let dims = (
            [grid_x, grid_y, grid_z],
            [block_x, block_y, block_z],
            shared,
        );
        // SAFETY: `params`/`extra` follow the launch API contract.
        unsafe { driver::launch_kernel::<Hip>(f, dims, s, params, extra, C) }
    })
}
