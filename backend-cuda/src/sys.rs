//! The C declarations of the CUDA driver, NVRTC and cuBLAS APIs.
//!
//! - The **driver**: cudarc's generated bindings (`cudarc::driver::sys`, loaded with `dlopen`
//!   at run time), re-exported here whole, plus the flag values this crate passes (cudarc
//!   declares them as enums; the driver takes plain `unsigned int` flags).
//! - **NVRTC**: written from `nvrtc.h` of CUDA 12.9 (the PyPI wheel `nvidia-cuda-nvrtc-cu12`):
//!   `int` status codes, `nvrtcProgram` an opaque pointer, sizes `size_t`.
//! - **cuBLAS**: written from cuBLAS 12's `cublas_api.h` and `library_types.h` (enum values
//!   checked against cudarc's generated bindings).
//!
//! Nothing here is linked: the NVRTC and cuBLAS function pointer types are filled in at run
//! time by the tables of [`crate::loader`]. Handles are opaque pointers; enums are plain
//! integers (a C enum is an `int` on every ABI CUDA supports).

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

pub use cudarc::driver::sys::*;
use std::ffi::{c_char, c_int, c_longlong, c_void};

// ---- driver flags -------------------------------------------------------------------------

/// `CU_MEM_ATTACH_GLOBAL`.
pub const CU_MEM_ATTACH_GLOBAL: u32 = 1;
/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: u32 = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: u32 = 2;

// ---- NVRTC (libnvrtc.so.*) ----------------------------------------------------------------

/// `nvrtcResult`.
pub type nvrtcResult = c_int;
/// `nvrtcProgram` (`struct _nvrtcProgram*`).
pub type nvrtcProgram = *mut c_void;

pub type nvrtcVersion_t = unsafe extern "C" fn(*mut c_int, *mut c_int) -> nvrtcResult;
pub type nvrtcCreateProgram_t = unsafe extern "C" fn(
    *mut nvrtcProgram,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> nvrtcResult;
pub type nvrtcCompileProgram_t =
    unsafe extern "C" fn(nvrtcProgram, c_int, *const *const c_char) -> nvrtcResult;
/// `nvrtcGetProgramLogSize`, `nvrtcGetCUBINSize`, `nvrtcGetPTXSize`.
pub type nvrtcGetSize_t = unsafe extern "C" fn(nvrtcProgram, *mut usize) -> nvrtcResult;
/// `nvrtcGetProgramLog`, `nvrtcGetCUBIN`, `nvrtcGetPTX`.
pub type nvrtcGet_t = unsafe extern "C" fn(nvrtcProgram, *mut c_char) -> nvrtcResult;
pub type nvrtcDestroyProgram_t = unsafe extern "C" fn(*mut nvrtcProgram) -> nvrtcResult;
pub type nvrtcGetErrorString_t = unsafe extern "C" fn(nvrtcResult) -> *const c_char;
pub type nvrtcGetNumSupportedArchs_t = unsafe extern "C" fn(*mut c_int) -> nvrtcResult;
pub type nvrtcGetSupportedArchs_t = unsafe extern "C" fn(*mut c_int) -> nvrtcResult;

// ---- cuBLAS (libcublas.so.*) --------------------------------------------------------------

/// `cublasHandle_t` (`struct cublasContext*`).
pub type cublasHandle_t = *mut c_void;
/// `cublasStatus_t`.
pub type cublasStatus_t = c_int;

pub type cublasCreate_v2_t = unsafe extern "C" fn(*mut cublasHandle_t) -> cublasStatus_t;
pub type cublasDestroy_v2_t = unsafe extern "C" fn(cublasHandle_t) -> cublasStatus_t;
pub type cublasSetStream_v2_t = unsafe extern "C" fn(cublasHandle_t, CUstream) -> cublasStatus_t;
pub type cublasGetVersion_v2_t = unsafe extern "C" fn(cublasHandle_t, *mut c_int) -> cublasStatus_t;
#[allow(clippy::type_complexity)]
pub type cublasGemmEx_t = unsafe extern "C" fn(
    cublasHandle_t,
    c_int,         // transa
    c_int,         // transb
    c_int,         // m
    c_int,         // n
    c_int,         // k
    *const c_void, // alpha
    *const c_void, // A
    c_int,         // Atype
    c_int,         // lda
    *const c_void, // B
    c_int,         // Btype
    c_int,         // ldb
    *const c_void, // beta
    *mut c_void,   // C
    c_int,         // Ctype
    c_int,         // ldc
    c_int,         // computeType
    c_int,         // algo
) -> cublasStatus_t;
#[allow(clippy::type_complexity)]
pub type cublasGemmStridedBatchedEx_t = unsafe extern "C" fn(
    cublasHandle_t,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    c_longlong, // strideA
    *const c_void,
    c_int,
    c_int,
    c_longlong, // strideB
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_longlong, // strideC
    c_int,      // batchCount
    c_int,
    c_int,
) -> cublasStatus_t;

pub const CUBLAS_OP_N: c_int = 0;
pub const CUBLAS_OP_T: c_int = 1;
pub const CUDA_R_32F: c_int = 0;
pub const CUDA_R_64F: c_int = 1;
pub const CUDA_R_16F: c_int = 2;
pub const CUDA_R_16BF: c_int = 14;
pub const CUBLAS_COMPUTE_32F: c_int = 68;
pub const CUBLAS_COMPUTE_64F: c_int = 70;
pub const CUBLAS_GEMM_DEFAULT: c_int = -1;
