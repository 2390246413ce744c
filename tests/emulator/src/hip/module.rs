//! Modules and launches: loading code objects, functions, kernel launches.

use super::{Handle, HipError, api, ctx, stream_of};
use crate::diag::Kind;
use crate::error::{Code, EmuError, invalid};
use crate::ffi::{put, string};
use crate::stream;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Arc;

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
