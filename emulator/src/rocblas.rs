//! rocBLAS (`librocblas.so.4`): handles, streams, pointer mode, version, and gemm
//! (`rocblas_gemm_ex`, `rocblas_gemm_strided_batched_ex`, `rocblas_sgemm`, `rocblas_dgemm`),
//! from `rocblas-types.h` / `rocblas-functions.h`. `rocblas_gemm_ex` computes
//! `D = alpha op(A) op(B) + beta C` with separate C and D. Gemm runs on the host
//! ([`crate::gemm`]); what rocBLAS shares with cuBLAS is [`crate::blas`].

#![allow(non_camel_case_types, clippy::too_many_arguments)]

use crate::blas::{self, Arg, BLAS_HANDLES, GemmArgs};
use crate::context;
use crate::error::{Code, EmuError, EmuResult, guard, invalid};
use crate::ffi::put;
use crate::gemm::{Elt, GemmOp};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

pub type rocblas_status = c_int;

pub const SUCCESS: rocblas_status = 0;
pub const INVALID_HANDLE: rocblas_status = 1;
pub const NOT_IMPLEMENTED: rocblas_status = 2;
pub const INVALID_POINTER: rocblas_status = 3;
pub const INVALID_SIZE: rocblas_status = 4;
pub const MEMORY_ERROR: rocblas_status = 5;
pub const INTERNAL_ERROR: rocblas_status = 6;
pub const INVALID_VALUE: rocblas_status = 11;

/// The version reported by `rocblas_get_version_string`.
pub const VERSION: &str = "4.3.0.xthunk-emulator";

fn status(e: &EmuError) -> rocblas_status {
    match e.code {
        Code::InvalidHandle => INVALID_HANDLE,
        Code::NotSupported => NOT_IMPLEMENTED,
        Code::InvalidValue => INVALID_SIZE,
        Code::IllegalAddress => INVALID_POINTER,
        Code::OutOfMemory => MEMORY_ERROR,
        _ => INTERNAL_ERROR,
    }
}

fn api(call: &str, f: impl FnOnce() -> Result<(), rocblas_status>) -> rocblas_status {
    match guard(call, || Ok(f())) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(s)) => s,
        Err(e) => status(&e),
    }
}

/// Maps a core error to its status.
fn st<T>(r: EmuResult<T>) -> Result<T, rocblas_status> {
    r.map_err(|e| status(&e))
}

/// An invalid-value status with a diagnostic.
fn bad_value(call: &str, msg: String) -> rocblas_status {
    invalid(call, msg);
    INVALID_VALUE
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_create_handle(handle: *mut usize) -> rocblas_status {
    const C: &str = "rocblas_create_handle";
    api(C, || {
        if handle.is_null() {
            invalid(C, "`handle` is a null pointer");
            return Err(INVALID_POINTER);
        }
        let c = st(context::hip_ctx(C))?;
        let h = blas::create_handle(c);
        // SAFETY: the caller's out-pointer (checked non-null).
        st(unsafe { put(handle, h, "handle", C) })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rocblas_destroy_handle(handle: usize) -> rocblas_status {
    const C: &str = "rocblas_destroy_handle";
    api(C, || st(BLAS_HANDLES.remove(handle, C)).map(|_| ()))
}

#[unsafe(no_mangle)]
pub extern "C" fn rocblas_set_stream(handle: usize, stream: usize) -> rocblas_status {
    const C: &str = "rocblas_set_stream";
    api(C, || {
        let h = st(BLAS_HANDLES.get(handle, C))?;
        st(crate::stream::resolve(&h.ctx, stream, C))?;
        *h.stream.lock() = stream;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_get_stream(handle: usize, stream: *mut usize) -> rocblas_status {
    const C: &str = "rocblas_get_stream";
    api(C, || {
        let h = st(BLAS_HANDLES.get(handle, C))?;
        let s = *h.stream.lock();
        // SAFETY: the caller's out-pointer.
        st(unsafe { put(stream, s, "stream", C) })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rocblas_set_pointer_mode(handle: usize, mode: c_int) -> rocblas_status {
    const C: &str = "rocblas_set_pointer_mode";
    api(C, || {
        let h = st(BLAS_HANDLES.get(handle, C))?;
        if mode != 0 && mode != 1 {
            return Err(bad_value(C, format!("unknown pointer mode {mode}")));
        }
        h.pointer_mode.store(mode as u32, Ordering::SeqCst);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_get_pointer_mode(
    handle: usize,
    mode: *mut c_int,
) -> rocblas_status {
    const C: &str = "rocblas_get_pointer_mode";
    api(C, || {
        let h = st(BLAS_HANDLES.get(handle, C))?;
        let m = h.pointer_mode.load(Ordering::SeqCst) as c_int;
        // SAFETY: the caller's out-pointer.
        st(unsafe { put(mode, m, "mode", C) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_get_version_string_size(len: *mut usize) -> rocblas_status {
    const C: &str = "rocblas_get_version_string_size";
    // SAFETY: the caller's out-pointer.
    api(C, || st(unsafe { put(len, VERSION.len() + 1, "len", C) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_get_version_string(
    buf: *mut c_char,
    len: usize,
) -> rocblas_status {
    const C: &str = "rocblas_get_version_string";
    api(C, || {
        if len < VERSION.len() + 1 {
            invalid(C, format!("the buffer needs {} bytes", VERSION.len() + 1));
            return Err(INVALID_SIZE);
        }
        // SAFETY: `buf` holds `len` bytes (the caller's contract).
        st(unsafe { crate::ffi::copy_str(buf, len, VERSION, C) })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn rocblas_status_to_string(s: rocblas_status) -> *const c_char {
    let t: &str = match s {
        SUCCESS => "rocblas_status_success\0",
        INVALID_HANDLE => "rocblas_status_invalid_handle\0",
        NOT_IMPLEMENTED => "rocblas_status_not_implemented\0",
        INVALID_POINTER => "rocblas_status_invalid_pointer\0",
        INVALID_SIZE => "rocblas_status_invalid_size\0",
        MEMORY_ERROR => "rocblas_status_memory_error\0",
        INTERNAL_ERROR => "rocblas_status_internal_error\0",
        INVALID_VALUE => "rocblas_status_invalid_value\0",
        _ => "rocblas_status_unknown\0",
    };
    t.as_ptr().cast()
}

/// `rocblas_operation`: none, transpose, conjugate transpose (= transpose for real types).
fn op(v: c_int, call: &str) -> Result<bool, rocblas_status> {
    match v {
        111 => Ok(false),
        112 | 113 => Ok(true),
        o => Err(bad_value(call, format!("unknown rocblas_operation {o}"))),
    }
}

/// `rocblas_datatype`.
fn dtype(v: c_int, call: &str) -> Result<Elt, rocblas_status> {
    match v {
        150 => Ok(Elt::F16),
        151 => Ok(Elt::F32),
        152 => Ok(Elt::F64),
        168 => Ok(Elt::BF16),
        t => {
            blas::bad_types(call, format!("rocblas_datatype {t} is not emulated"));
            Err(NOT_IMPLEMENTED)
        }
    }
}

/// # Safety
/// `alpha`/`beta` as [`GemmArgs::describe`] requires.
unsafe fn gemm_call(g: GemmArgs, name: &str) -> Result<(), rocblas_status> {
    let h = st(BLAS_HANDLES.get(g.handle, name))?;
    let (ta, tb) = (op(g.trans[0], name)?, op(g.trans[1], name)?);
    let (at, bt, ct, dt) = (
        dtype(g.a.ty, name)?,
        dtype(g.b.ty, name)?,
        dtype(g.c.ty, name)?,
        dtype(g.d.ty, name)?,
    );
    let compute = dtype(g.compute, name)?;
    let compute64 = compute == Elt::F64;
    let ok = at == bt
        && ct == dt
        && match (at, ct, compute) {
            (Elt::F64, Elt::F64, Elt::F64) => true,
            (Elt::F32, Elt::F32, Elt::F32) => true,
            (Elt::F16 | Elt::BF16, c, Elt::F32) => c == at || c == Elt::F32,
            _ => false,
        };
    if !ok {
        blas::bad_types(
            name,
            format!(
                "A {at:?}, B {bt:?}, C {ct:?}, D {dt:?}, compute {compute:?} is not a supported combination"
            ),
        );
        return Err(NOT_IMPLEMENTED);
    }
    if g.c.ptr == g.d.ptr && g.c.ld != g.d.ld {
        return Err(bad_value(
            name,
            "C and D are the same matrix with different ldc/ldd".into(),
        ));
    }
    let device = h.pointer_mode.load(Ordering::SeqCst) == 1;
    // SAFETY: forwarded from the caller. Its only error is a null alpha or beta.
    let desc = unsafe { g.describe((ta, tb), at, ct, compute64, device, name) }
        .map_err(|_| INVALID_POINTER)?;
    let op = st(GemmOp::prepare(desc, name))?;
    st(blas::enqueue(&h, op, name))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_gemm_ex(
    handle: usize,
    trans_a: c_int,
    trans_b: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    beta: *const c_void,
    c: *const c_void,
    c_type: c_int,
    ldc: c_int,
    d: *mut c_void,
    d_type: c_int,
    ldd: c_int,
    compute_type: c_int,
    _algo: c_int,
    _solution_index: i32,
    _flags: u32,
) -> rocblas_status {
    const C: &str = "rocblas_gemm_ex";
    api(C, || {
        let call = GemmArgs {
            handle,
            trans: [trans_a, trans_b],
            m,
            n,
            k,
            alpha,
            beta,
            a: Arg::new(a as usize, lda, 0, a_type),
            b: Arg::new(b as usize, ldb, 0, b_type),
            c: Arg::new(c as usize, ldc, 0, c_type),
            d: Arg::new(d as usize, ldd, 0, d_type),
            batch: 1,
            compute: compute_type,
        };
        // SAFETY: rocBLAS's contract for alpha/beta.
        unsafe { gemm_call(call, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rocblas_gemm_strided_batched_ex(
    handle: usize,
    trans_a: c_int,
    trans_b: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    stride_a: i64,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    stride_b: i64,
    beta: *const c_void,
    c: *const c_void,
    c_type: c_int,
    ldc: c_int,
    stride_c: i64,
    d: *mut c_void,
    d_type: c_int,
    ldd: c_int,
    stride_d: i64,
    batch_count: c_int,
    compute_type: c_int,
    _algo: c_int,
    _solution_index: i32,
    _flags: u32,
) -> rocblas_status {
    const C: &str = "rocblas_gemm_strided_batched_ex";
    api(C, || {
        let call = GemmArgs {
            handle,
            trans: [trans_a, trans_b],
            m,
            n,
            k,
            alpha,
            beta,
            a: Arg::new(a as usize, lda, stride_a, a_type),
            b: Arg::new(b as usize, ldb, stride_b, b_type),
            c: Arg::new(c as usize, ldc, stride_c, c_type),
            d: Arg::new(d as usize, ldd, stride_d, d_type),
            batch: batch_count,
            compute: compute_type,
        };
        // SAFETY: rocBLAS's contract for alpha/beta.
        unsafe { gemm_call(call, C) }
    })
}

// `rocblas_datatype_f32_r` / `_f64_r`, computed in the same type.
blas::single_type_gemm!(rocblas_sgemm, f32, rocblas_status, 151, 151);
blas::single_type_gemm!(rocblas_dgemm, f64, rocblas_status, 152, 152);
