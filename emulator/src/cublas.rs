//! cuBLAS (`libcublas.so.12` / `.13`): handles, streams, pointer and math modes, and gemm
//! (`cublasGemmEx`, `cublasGemmStridedBatchedEx`, `cublasSgemm_v2`, `cublasDgemm_v2`), from
//! `cublas_api.h` (cuBLAS 12). Gemm runs on the host ([`crate::gemm`]); what cuBLAS shares
//! with rocBLAS is [`crate::blas`].

#![allow(non_snake_case, clippy::too_many_arguments)]

use crate::blas::{self, Arg, BLAS_HANDLES, GemmArgs};
use crate::context;
use crate::error::{Code, EmuError, EmuResult, guard, invalid};
use crate::ffi::put;
use crate::gemm::{Elt, GemmOp};
use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::Ordering;

pub type Status = c_int;

pub const SUCCESS: Status = 0;
pub const NOT_INITIALIZED: Status = 1;
pub const ALLOC_FAILED: Status = 3;
pub const INVALID_VALUE: Status = 7;
pub const ARCH_MISMATCH: Status = 8;
pub const MAPPING_ERROR: Status = 11;
pub const EXECUTION_FAILED: Status = 13;
pub const INTERNAL_ERROR: Status = 14;
pub const NOT_SUPPORTED: Status = 15;

/// cuBLAS 12.9.0 (`CUBLAS_VERSION` encoding).
pub const VERSION: c_int = 120900;

fn status(e: &EmuError) -> Status {
    match e.code {
        Code::InvalidValue => INVALID_VALUE,
        Code::NotSupported => NOT_SUPPORTED,
        Code::InvalidHandle | Code::InvalidContext | Code::NotInitialized => NOT_INITIALIZED,
        Code::OutOfMemory => ALLOC_FAILED,
        Code::IllegalAddress => EXECUTION_FAILED,
        Code::CaptureUnsupported
        | Code::CaptureInvalidated
        | Code::CaptureImplicit
        | Code::CaptureIsolation => EXECUTION_FAILED,
        _ => INTERNAL_ERROR,
    }
}

fn api(call: &str, f: impl FnOnce() -> EmuResult<()>) -> Status {
    match guard(call, f) {
        Ok(()) => SUCCESS,
        Err(e) => status(&e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasCreate_v2(handle: *mut usize) -> Status {
    const C: &str = "cublasCreate_v2";
    api(C, || {
        let c = context::current(C)?;
        if handle.is_null() {
            return Err(invalid(C, "`handle` is a null pointer"));
        }
        let h = blas::create_handle(c);
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(handle, h, "handle", C) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDestroy_v2(handle: usize) -> Status {
    const C: &str = "cublasDestroy_v2";
    api(C, || BLAS_HANDLES.remove(handle, C).map(|_| ()))
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetStream_v2(handle: usize, stream: usize) -> Status {
    const C: &str = "cublasSetStream_v2";
    api(C, || {
        let h = BLAS_HANDLES.get(handle, C)?;
        crate::stream::resolve(&h.ctx, stream, C)?;
        *h.stream.lock() = stream;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetStream_v2(handle: usize, stream: *mut usize) -> Status {
    const C: &str = "cublasGetStream_v2";
    api(C, || {
        let h = BLAS_HANDLES.get(handle, C)?;
        let s = *h.stream.lock();
        // SAFETY: the caller's out-pointer.
        unsafe { put(stream, s, "streamId", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetVersion_v2(handle: usize, version: *mut c_int) -> Status {
    const C: &str = "cublasGetVersion_v2";
    api(C, || {
        BLAS_HANDLES.get(handle, C)?;
        // SAFETY: the caller's out-pointer.
        unsafe { put(version, VERSION, "version", C) }
    })
}

/// `cublasGetProperty(MAJOR_VERSION | MINOR_VERSION | PATCH_LEVEL)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetProperty(ty: c_int, value: *mut c_int) -> Status {
    const C: &str = "cublasGetProperty";
    api(C, || {
        let v = match ty {
            0 => VERSION / 10000,
            1 => VERSION / 100 % 100,
            2 => VERSION % 100,
            t => return Err(invalid(C, format!("unknown property {t}"))),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { put(value, v, "value", C) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetPointerMode_v2(handle: usize, mode: c_int) -> Status {
    const C: &str = "cublasSetPointerMode_v2";
    api(C, || {
        let h = BLAS_HANDLES.get(handle, C)?;
        if mode != 0 && mode != 1 {
            return Err(invalid(C, format!("unknown pointer mode {mode}")));
        }
        h.pointer_mode.store(mode as u32, Ordering::SeqCst);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetPointerMode_v2(handle: usize, mode: *mut c_int) -> Status {
    const C: &str = "cublasGetPointerMode_v2";
    api(C, || {
        let h = BLAS_HANDLES.get(handle, C)?;
        let m = h.pointer_mode.load(Ordering::SeqCst) as c_int;
        // SAFETY: the caller's out-pointer.
        unsafe { put(mode, m, "mode", C) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetMathMode(handle: usize, mode: c_int) -> Status {
    const C: &str = "cublasSetMathMode";
    api(C, || {
        let h = BLAS_HANDLES.get(handle, C)?;
        h.math_mode.store(mode as u32, Ordering::SeqCst);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetMathMode(handle: usize, mode: *mut c_int) -> Status {
    const C: &str = "cublasGetMathMode";
    api(C, || {
        let h = BLAS_HANDLES.get(handle, C)?;
        let m = h.math_mode.load(Ordering::SeqCst) as c_int;
        // SAFETY: the caller's out-pointer.
        unsafe { put(mode, m, "mode", C) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetWorkspace_v2(handle: usize, ws: *mut c_void, size: usize) -> Status {
    const C: &str = "cublasSetWorkspace_v2";
    api(C, || {
        BLAS_HANDLES.get(handle, C)?;
        crate::memory::check(ws as usize, size, "workspace", C, Code::InvalidValue)?;
        Ok(())
    })
}

/// `cublasGetStatusName` / `cublasGetStatusString`.
fn status_text(s: Status, name: bool) -> *const c_char {
    let (n, d): (&str, &str) = match s {
        SUCCESS => ("CUBLAS_STATUS_SUCCESS\0", "success\0"),
        NOT_INITIALIZED => (
            "CUBLAS_STATUS_NOT_INITIALIZED\0",
            "the library was not initialized\0",
        ),
        ALLOC_FAILED => (
            "CUBLAS_STATUS_ALLOC_FAILED\0",
            "the resource allocation failed\0",
        ),
        INVALID_VALUE => (
            "CUBLAS_STATUS_INVALID_VALUE\0",
            "an invalid numeric value was used as an argument\0",
        ),
        ARCH_MISMATCH => (
            "CUBLAS_STATUS_ARCH_MISMATCH\0",
            "an absent device architectural feature is required\0",
        ),
        MAPPING_ERROR => (
            "CUBLAS_STATUS_MAPPING_ERROR\0",
            "an access to GPU memory space failed\0",
        ),
        EXECUTION_FAILED => (
            "CUBLAS_STATUS_EXECUTION_FAILED\0",
            "the GPU program failed to execute\0",
        ),
        INTERNAL_ERROR => (
            "CUBLAS_STATUS_INTERNAL_ERROR\0",
            "an internal operation failed\0",
        ),
        NOT_SUPPORTED => (
            "CUBLAS_STATUS_NOT_SUPPORTED\0",
            "the functionality requested is not supported\0",
        ),
        _ => ("CUBLAS_STATUS_UNKNOWN\0", "unknown status\0"),
    };
    if name { n } else { d }.as_ptr().cast()
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStatusName(s: Status) -> *const c_char {
    status_text(s, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStatusString(s: Status) -> *const c_char {
    status_text(s, false)
}

/// `cublasOperation_t`: N, T, C (C is T for real types).
fn op(v: c_int, call: &str) -> EmuResult<bool> {
    match v {
        0 => Ok(false),
        1 | 2 => Ok(true),
        o => Err(invalid(call, format!("unknown cublasOperation_t {o}"))),
    }
}

/// `cudaDataType`.
fn dtype(v: c_int, call: &str) -> EmuResult<Elt> {
    match v {
        0 => Ok(Elt::F32),
        1 => Ok(Elt::F64),
        2 => Ok(Elt::F16),
        14 => Ok(Elt::BF16),
        t => Err(blas::bad_types(
            call,
            format!("cudaDataType {t} is not emulated (f32, f64, f16, bf16 are)"),
        )),
    }
}

/// Checks the type combination; returns whether compute is f64.
fn types(a: Elt, b: Elt, c: Elt, compute: c_int, call: &str) -> EmuResult<bool> {
    let compute64 = match compute {
        68 | 69 | 74 | 75 | 77 => false,
        70 | 71 => true,
        64 | 65 => {
            return Err(blas::bad_types(
                call,
                "CUBLAS_COMPUTE_16F is not emulated (only 32F and 64F)".into(),
            ));
        }
        t => return Err(invalid(call, format!("unknown cublasComputeType_t {t}"))),
    };
    let ok = a == b
        && match (a, c, compute64) {
            (Elt::F64, Elt::F64, true) => true,
            (Elt::F32, Elt::F32, false) => true,
            (Elt::F16 | Elt::BF16, cc, false) => cc == a || cc == Elt::F32,
            _ => false,
        };
    if !ok {
        return Err(blas::bad_types(
            call,
            format!(
                "A {a:?}, B {b:?}, C {c:?} with compute {compute} is not a supported combination"
            ),
        ));
    }
    Ok(compute64)
}

/// # Safety
/// `alpha`/`beta` as [`GemmArgs::describe`] requires.
unsafe fn gemm_call(g: GemmArgs, name: &str) -> EmuResult<()> {
    let h = BLAS_HANDLES.get(g.handle, name)?;
    let (ta, tb) = (op(g.trans[0], name)?, op(g.trans[1], name)?);
    let (at, bt, ct) = (
        dtype(g.a.ty, name)?,
        dtype(g.b.ty, name)?,
        dtype(g.c.ty, name)?,
    );
    let compute64 = types(at, bt, ct, g.compute, name)?;
    let device = h.pointer_mode.load(Ordering::SeqCst) == 1;
    // SAFETY: forwarded from the caller.
    let desc = unsafe { g.describe((ta, tb), at, ct, compute64, device, name)? };
    let op = GemmOp::prepare(desc, name)?;
    blas::enqueue(&h, op, name)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGemmEx(
    handle: usize,
    transa: c_int,
    transb: c_int,
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
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    compute: c_int,
    _algo: c_int,
) -> Status {
    const C: &str = "cublasGemmEx";
    api(C, || {
        let call = GemmArgs {
            handle,
            trans: [transa, transb],
            m,
            n,
            k,
            alpha,
            beta,
            a: Arg::new(a as usize, lda, 0, a_type),
            b: Arg::new(b as usize, ldb, 0, b_type),
            c: Arg::new(c as usize, ldc, 0, c_type),
            d: Arg::new(c as usize, ldc, 0, c_type),
            batch: 1,
            compute,
        };
        // SAFETY: cuBLAS's contract for alpha/beta.
        unsafe { gemm_call(call, C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGemmStridedBatchedEx(
    handle: usize,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    stride_a: c_longlong,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    stride_b: c_longlong,
    beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    ldc: c_int,
    stride_c: c_longlong,
    batch: c_int,
    compute: c_int,
    _algo: c_int,
) -> Status {
    const C: &str = "cublasGemmStridedBatchedEx";
    api(C, || {
        let call = GemmArgs {
            handle,
            trans: [transa, transb],
            m,
            n,
            k,
            alpha,
            beta,
            a: Arg::new(a as usize, lda, stride_a, a_type),
            b: Arg::new(b as usize, ldb, stride_b, b_type),
            c: Arg::new(c as usize, ldc, stride_c, c_type),
            d: Arg::new(c as usize, ldc, stride_c, c_type),
            batch,
            compute,
        };
        // SAFETY: cuBLAS's contract for alpha/beta.
        unsafe { gemm_call(call, C) }
    })
}

// `cudaDataType` R_32F / R_64F with `CUBLAS_COMPUTE_32F` / `_64F`.
blas::single_type_gemm!(cublasSgemm_v2, f32, Status, 0, 68);
blas::single_type_gemm!(cublasDgemm_v2, f64, Status, 1, 70);
