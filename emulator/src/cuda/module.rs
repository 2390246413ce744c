//! Modules and launches: loading images (with the JIT log options), functions, their
//! attributes and parameter layouts, kernel launches.

use super::{CUresult, Cuda, Handle, api};
use crate::context;
use crate::driver;
use crate::error::{Code, EmuError, cu, guard, invalid};
use crate::ffi::put;
use std::ffi::{c_char, c_int, c_uint, c_void};

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
    // SAFETY: the caller's out-pointer and complete image.
    let r = guard(C, || unsafe {
        driver::load_module::<Cuda>(module, image, C)
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
                    "xthunk-emulator: module loaded (kernels run its carried portable source on the CPU)",
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
        // SAFETY: `name` is a NUL-terminated string; `f` the caller's out-pointer.
        unsafe { driver::get_function(f, m, name, ("name", "hfunc"), C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, f: Handle) -> CUresult {
    const C: &str = "cuFuncGetAttribute";
    api(C, || {
        let func = crate::launch::FUNCTIONS.get(f, C)?;
        let sm = crate::config::get().sm as c_int;
        let int = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
        let api = crate::context::Api::Cuda;
        let v = match attrib {
            // MAX_THREADS_PER_BLOCK, SHARED_SIZE_BYTES (static), CONST_SIZE_BYTES,
            // LOCAL_SIZE_BYTES, NUM_REGS, PTX_VERSION, BINARY_VERSION, CACHE_MODE_CA,
            // MAX_DYNAMIC_SHARED_SIZE_BYTES.
            0 => int(crate::limits::function_max_threads(api, &func.info)),
            1 => int(func.info.static_shared.unwrap_or(0)),
            2 | 3 => 0,
            4 => 32,
            5 | 6 => sm,
            7 => 0,
            8 => int(crate::limits::function_max_dynamic_shared(api, &func.info)),
            9 => -1,
            10..=20 => 0,
            a => return Err(invalid(C, format!("unknown function attribute {a}"))),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { put(pi, v, "pi", C) }
    })
}

/// `cuFuncGetParamInfo` (CUDA 12.4): the offset and size of parameter `index` of `f` in its
/// parameter buffer (the image's layout, else the C ABI's from the sizes of the carried
/// source's parameters); `CUDA_ERROR_INVALID_VALUE` past the last one, as the driver answers
/// (how a caller finds the count: no diagnostic then). `paramSize` may be null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    f: Handle,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    const C: &str = "cuFuncGetParamInfo";
    api(C, || {
        context::cuda_initialized(C)?;
        let func = crate::launch::FUNCTIONS.get(f, C)?;
        let Some(p) = func.params().get(index) else {
            return Err(EmuError::quiet(
                Code::InvalidValue,
                format!("`{}` has {} parameters", func.name, func.params().len()),
            ));
        };
        // SAFETY: the caller's out-pointers (`size` optional).
        unsafe {
            put(offset, p.offset, "paramOffset", C)?;
            if !size.is_null() {
                put(size, p.size, "paramSize", C)?;
            }
        }
        Ok(())
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
        let dims = (
            [grid_x, grid_y, grid_z],
            [block_x, block_y, block_z],
            shared,
        );
        // SAFETY: `params`/`extra` follow the launch API contract.
        unsafe { driver::launch_kernel::<Cuda>(f, dims, s, params, extra, C) }
    })
}
