//! Hand-written declarations of the HIP runtime, hipRTC, comgr and rocBLAS C APIs.
//!
//! Written from the vendor headers (Debian's `libamdhip64-dev` 5.2: `/usr/include/hip/
//! hip_runtime_api.h`, `hiprtc.h`; `libamd-comgr-dev`: `/usr/include/amd_comgr.h`; ROCm 6's
//! `hip_runtime_api.h` for the `R0600` device properties; rocBLAS' `rocblas-types.h` and
//! `rocblas-functions.h`). Nothing here is linked: the function pointer types are filled in at
//! run time by the tables of [`crate::loader`].
//!
//! Handles are opaque pointers; enums are plain integers (a C enum is an `int` on every ABI
//! ROCm supports), so an unknown value from a newer library is never undefined behaviour.
//! `tests/layout.rs` compiles the headers with gcc and checks every constant and offset below.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

// ---- HIP runtime ---------------------------------------------------------------------------

/// `hipError_t`.
pub type hipError_t = c_int;
/// `hipDevice_t`.
pub type hipDevice_t = c_int;
/// `hipStream_t` (`struct ihipStream_t*`).
pub type hipStream_t = *mut c_void;
/// `hipEvent_t` (`struct ihipEvent_t*`).
pub type hipEvent_t = *mut c_void;
/// `hipModule_t` (`struct ihipModule_t*`).
pub type hipModule_t = *mut c_void;
/// `hipFunction_t` (`struct ihipModuleSymbol_t*`).
pub type hipFunction_t = *mut c_void;
/// `hipGraph_t` (`struct ihipGraph*`).
pub type hipGraph_t = *mut c_void;
/// `hipGraphExec_t` (`struct hipGraphExec*`).
pub type hipGraphExec_t = *mut c_void;
/// `hipGraphNode_t` (`struct hipGraphNode*`).
pub type hipGraphNode_t = *mut c_void;
/// `hipDeviceptr_t` (`void*`).
pub type hipDeviceptr_t = *mut c_void;
/// `hipDeviceAttribute_t`.
pub type hipDeviceAttribute_t = c_int;
/// `hipMemcpyKind`.
pub type hipMemcpyKind = c_int;
/// `hipStreamCaptureMode`.
pub type hipStreamCaptureMode = c_int;
/// `hipStreamCaptureStatus`.
pub type hipStreamCaptureStatus = c_int;

pub const hipSuccess: hipError_t = 0;
pub const hipErrorNoDevice: hipError_t = 100;
pub const hipErrorInvalidDevice: hipError_t = 101;
pub const hipErrorNotReady: hipError_t = 600;
pub const hipErrorStreamCaptureUnsupported: hipError_t = 900;
pub const hipErrorStreamCaptureInvalidated: hipError_t = 901;

/// `hipMemcpyDeviceToDevice`.
pub const hipMemcpyDeviceToDevice: hipMemcpyKind = 3;
/// `hipMemcpyDefault`: direction inferred from the pointers (unified addressing).
pub const hipMemcpyDefault: hipMemcpyKind = 4;

/// `hipHostMallocPortable`.
pub const hipHostMallocPortable: c_uint = 0x1;
/// `hipHostMallocMapped`.
pub const hipHostMallocMapped: c_uint = 0x2;
/// `hipMemAttachGlobal`.
pub const hipMemAttachGlobal: c_uint = 0x1;
/// `hipStreamNonBlocking`: no implicit ordering with the null stream (which would break
/// stream capture).
pub const hipStreamNonBlocking: c_uint = 0x1;
/// `hipEventDisableTiming`.
pub const hipEventDisableTiming: c_uint = 0x2;
/// `hipStreamCaptureModeThreadLocal`: only the capturing thread is kept from calls that are
/// unsafe during capture (other threads may allocate, synchronize, …).
pub const hipStreamCaptureModeThreadLocal: hipStreamCaptureMode = 1;

/// `hipDeviceAttributeManagedMemory` (the same value in ROCm 5 and ≥ 6).
pub const hipDeviceAttributeManagedMemory: hipDeviceAttribute_t = 24;
/// `hipDeviceAttributeMultiprocessorCount`.
pub const hipDeviceAttributeMultiprocessorCount: hipDeviceAttribute_t = 63;
/// `hipDeviceAttributeWarpSize`.
pub const hipDeviceAttributeWarpSize: hipDeviceAttribute_t = 87;
/// `hipDeviceAttributeMemoryPoolsSupported` (the same value in ROCm 5.2 and ≥ 6).
pub const hipDeviceAttributeMemoryPoolsSupported: hipDeviceAttribute_t = 88;

/// Layout of the ROCm 5 `hipDeviceProp_t` (filled by `hipGetDeviceProperties`).
pub mod props_r0000 {
    /// `sizeof(hipDeviceProp_t)` in ROCm 5.2.
    pub const SIZE: usize = 792;
    /// `offsetof(hipDeviceProp_t, gcnArchName)`.
    pub const GCN_ARCH_NAME: usize = 396;
}

/// Layout of ROCm ≥ 6's `hipDeviceProp_tR0600` (filled by `hipGetDevicePropertiesR0600`).
pub mod props_r0600 {
    /// `sizeof(hipDeviceProp_tR0600)`.
    pub const SIZE: usize = 1472;
    /// `offsetof(hipDeviceProp_tR0600, gcnArchName)`.
    pub const GCN_ARCH_NAME: usize = 1160;
}

/// Length of `gcnArchName` in both layouts.
pub const GCN_ARCH_NAME_LEN: usize = 256;

/// The buffer handed to either `hipGetDeviceProperties*`: larger than both layouts, so a
/// library writing a few more fields than its header says still stays inside it.
pub const PROPS_BUFFER_SIZE: usize = 4096;

// The field lies inside each layout, and the buffer holds both layouts.
const _: () = assert!(props_r0000::GCN_ARCH_NAME + GCN_ARCH_NAME_LEN <= props_r0000::SIZE);
const _: () = assert!(props_r0600::GCN_ARCH_NAME + GCN_ARCH_NAME_LEN <= props_r0600::SIZE);
const _: () =
    assert!(PROPS_BUFFER_SIZE >= props_r0000::SIZE && PROPS_BUFFER_SIZE >= props_r0600::SIZE);
const _: () = assert!(PROPS_BUFFER_SIZE.is_multiple_of(8));

pub type hipInit_t = unsafe extern "C" fn(flags: c_uint) -> hipError_t;
pub type hipVersion_t = unsafe extern "C" fn(version: *mut c_int) -> hipError_t;
pub type hipGetDeviceCount_t = unsafe extern "C" fn(count: *mut c_int) -> hipError_t;
pub type hipSetDevice_t = unsafe extern "C" fn(device: c_int) -> hipError_t;
pub type hipDeviceSynchronize_t = unsafe extern "C" fn() -> hipError_t;
pub type hipGetErrorName_t = unsafe extern "C" fn(error: hipError_t) -> *const c_char;
pub type hipDeviceGetName_t =
    unsafe extern "C" fn(name: *mut c_char, len: c_int, device: hipDevice_t) -> hipError_t;
pub type hipDeviceGetAttribute_t = unsafe extern "C" fn(
    value: *mut c_int,
    attr: hipDeviceAttribute_t,
    device: c_int,
) -> hipError_t;
pub type hipDeviceTotalMem_t =
    unsafe extern "C" fn(bytes: *mut usize, device: hipDevice_t) -> hipError_t;
/// `hipGetDeviceProperties` / `hipGetDevicePropertiesR0600`: the struct is passed as raw
/// bytes (see [`props_r0000`], [`props_r0600`]).
pub type hipGetDeviceProperties_t =
    unsafe extern "C" fn(prop: *mut c_void, device: c_int) -> hipError_t;

pub type hipMalloc_t = unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize) -> hipError_t;

// ---- stream-ordered allocation (ROCm >= 5.1) ------------------------------------------------

/// `hipMemPool_t` (`struct ihipMemPoolHandle_t*`).
pub type hipMemPool_t = *mut c_void;
/// `hipMemPoolAttr`.
pub type hipMemPoolAttr = c_int;
/// `hipMemPoolAttrReleaseThreshold` (value type `uint64_t`).
pub const hipMemPoolAttrReleaseThreshold: hipMemPoolAttr = 0x4;
/// `hipMemAllocationTypePinned`.
pub const hipMemAllocationTypePinned: c_int = 0x1;
/// `hipMemLocationTypeDevice`.
pub const hipMemLocationTypeDevice: c_int = 1;

/// `hipMemPoolProps`: allocation type, handle types (0: none), location (type, device id),
/// the Windows security attributes, and 64 reserved bytes (ROCm ≥ 6 names the first 8
/// `maxSize`, where 0 means no limit).
#[repr(C)]
pub struct hipMemPoolProps {
    pub alloc_type: c_int,
    pub handle_types: c_int,
    pub location_type: c_int,
    pub location_id: c_int,
    pub win32_security_attributes: *mut c_void,
    pub reserved: [u8; 64],
}

pub type hipMemPoolCreate_t =
    unsafe extern "C" fn(pool: *mut hipMemPool_t, props: *const hipMemPoolProps) -> hipError_t;
pub type hipMemPoolDestroy_t = unsafe extern "C" fn(pool: hipMemPool_t) -> hipError_t;
pub type hipMemPoolSetAttribute_t = unsafe extern "C" fn(
    pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> hipError_t;
pub type hipMallocFromPoolAsync_t = unsafe extern "C" fn(
    ptr: *mut *mut c_void,
    size: usize,
    pool: hipMemPool_t,
    stream: hipStream_t,
) -> hipError_t;
pub type hipFreeAsync_t = unsafe extern "C" fn(ptr: *mut c_void, stream: hipStream_t) -> hipError_t;
pub type hipFree_t = unsafe extern "C" fn(ptr: *mut c_void) -> hipError_t;
pub type hipHostMalloc_t =
    unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t;
pub type hipHostFree_t = unsafe extern "C" fn(ptr: *mut c_void) -> hipError_t;
pub type hipHostGetDevicePointer_t = unsafe extern "C" fn(
    dev_ptr: *mut *mut c_void,
    host_ptr: *mut c_void,
    flags: c_uint,
) -> hipError_t;
pub type hipMallocManaged_t =
    unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t;

pub type hipMemcpy_t = unsafe extern "C" fn(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: hipMemcpyKind,
) -> hipError_t;
pub type hipMemcpyAsync_t = unsafe extern "C" fn(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> hipError_t;
pub type hipMemcpyDtoDAsync_t = unsafe extern "C" fn(
    dst: hipDeviceptr_t,
    src: hipDeviceptr_t,
    size: usize,
    stream: hipStream_t,
) -> hipError_t;
pub type hipMemsetD8Async_t = unsafe extern "C" fn(
    dst: hipDeviceptr_t,
    value: u8,
    count: usize,
    stream: hipStream_t,
) -> hipError_t;
pub type hipMemsetD16Async_t = unsafe extern "C" fn(
    dst: hipDeviceptr_t,
    value: u16,
    count: usize,
    stream: hipStream_t,
) -> hipError_t;
pub type hipMemsetD32Async_t = unsafe extern "C" fn(
    dst: hipDeviceptr_t,
    value: c_int,
    count: usize,
    stream: hipStream_t,
) -> hipError_t;

pub type hipStreamCreateWithFlags_t =
    unsafe extern "C" fn(stream: *mut hipStream_t, flags: c_uint) -> hipError_t;
pub type hipStreamDestroy_t = unsafe extern "C" fn(stream: hipStream_t) -> hipError_t;
pub type hipStreamSynchronize_t = unsafe extern "C" fn(stream: hipStream_t) -> hipError_t;
pub type hipStreamQuery_t = unsafe extern "C" fn(stream: hipStream_t) -> hipError_t;
pub type hipStreamWaitEvent_t =
    unsafe extern "C" fn(stream: hipStream_t, event: hipEvent_t, flags: c_uint) -> hipError_t;

pub type hipEventCreateWithFlags_t =
    unsafe extern "C" fn(event: *mut hipEvent_t, flags: c_uint) -> hipError_t;
pub type hipEventDestroy_t = unsafe extern "C" fn(event: hipEvent_t) -> hipError_t;
pub type hipEventRecord_t =
    unsafe extern "C" fn(event: hipEvent_t, stream: hipStream_t) -> hipError_t;
pub type hipEventSynchronize_t = unsafe extern "C" fn(event: hipEvent_t) -> hipError_t;
pub type hipEventQuery_t = unsafe extern "C" fn(event: hipEvent_t) -> hipError_t;
pub type hipEventElapsedTime_t =
    unsafe extern "C" fn(ms: *mut f32, start: hipEvent_t, stop: hipEvent_t) -> hipError_t;

pub type hipModuleLoadData_t =
    unsafe extern "C" fn(module: *mut hipModule_t, image: *const c_void) -> hipError_t;
pub type hipModuleUnload_t = unsafe extern "C" fn(module: hipModule_t) -> hipError_t;
pub type hipModuleGetFunction_t = unsafe extern "C" fn(
    function: *mut hipFunction_t,
    module: hipModule_t,
    name: *const c_char,
) -> hipError_t;
pub type hipModuleLaunchKernel_t = unsafe extern "C" fn(
    f: hipFunction_t,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: hipStream_t,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> hipError_t;

pub type hipStreamBeginCapture_t =
    unsafe extern "C" fn(stream: hipStream_t, mode: hipStreamCaptureMode) -> hipError_t;
pub type hipStreamEndCapture_t =
    unsafe extern "C" fn(stream: hipStream_t, graph: *mut hipGraph_t) -> hipError_t;
pub type hipGraphInstantiate_t = unsafe extern "C" fn(
    exec: *mut hipGraphExec_t,
    graph: hipGraph_t,
    error_node: *mut hipGraphNode_t,
    log_buffer: *mut c_char,
    buffer_size: usize,
) -> hipError_t;
pub type hipGraphLaunch_t =
    unsafe extern "C" fn(exec: hipGraphExec_t, stream: hipStream_t) -> hipError_t;
pub type hipGraphGetNodes_t = unsafe extern "C" fn(
    graph: hipGraph_t,
    nodes: *mut hipGraphNode_t,
    num_nodes: *mut usize,
) -> hipError_t;
pub type hipGraphDestroy_t = unsafe extern "C" fn(graph: hipGraph_t) -> hipError_t;
pub type hipGraphExecDestroy_t = unsafe extern "C" fn(exec: hipGraphExec_t) -> hipError_t;

/// `int xthunk_emu_version(void)`: the version of the control API of xthunk's driver emulator
/// (`emulator/src/control.rs`); present only there.
pub type xthunk_emu_version_t = unsafe extern "C" fn() -> c_int;

// ---- hipRTC (libhiprtc.so on ROCm >= 6, inside libamdhip64 on ROCm 5) -------------------

/// `hiprtcResult`.
pub type hiprtcResult = c_int;
/// `hiprtcProgram` (`struct _hiprtcProgram*`).
pub type hiprtcProgram = *mut c_void;

pub const HIPRTC_SUCCESS: hiprtcResult = 0;

pub type hiprtcVersion_t =
    unsafe extern "C" fn(major: *mut c_int, minor: *mut c_int) -> hiprtcResult;
pub type hiprtcCreateProgram_t = unsafe extern "C" fn(
    prog: *mut hiprtcProgram,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> hiprtcResult;
pub type hiprtcCompileProgram_t = unsafe extern "C" fn(
    prog: hiprtcProgram,
    num_options: c_int,
    options: *const *const c_char,
) -> hiprtcResult;
pub type hiprtcDestroyProgram_t = unsafe extern "C" fn(prog: *mut hiprtcProgram) -> hiprtcResult;
pub type hiprtcGetProgramLogSize_t =
    unsafe extern "C" fn(prog: hiprtcProgram, size: *mut usize) -> hiprtcResult;
pub type hiprtcGetProgramLog_t =
    unsafe extern "C" fn(prog: hiprtcProgram, log: *mut c_char) -> hiprtcResult;
pub type hiprtcGetCodeSize_t =
    unsafe extern "C" fn(prog: hiprtcProgram, size: *mut usize) -> hiprtcResult;
pub type hiprtcGetCode_t =
    unsafe extern "C" fn(prog: hiprtcProgram, code: *mut c_char) -> hiprtcResult;

// ---- comgr (libamd_comgr.so.2 / .3) -------------------------------------------------------

/// `amd_comgr_status_t`.
pub type amd_comgr_status_t = c_int;

pub const AMD_COMGR_STATUS_SUCCESS: amd_comgr_status_t = 0;

pub type amd_comgr_get_version_t = unsafe extern "C" fn(major: *mut usize, minor: *mut usize);
pub type amd_comgr_get_isa_count_t = unsafe extern "C" fn(count: *mut usize) -> amd_comgr_status_t;
pub type amd_comgr_get_isa_name_t =
    unsafe extern "C" fn(index: usize, isa_name: *mut *const c_char) -> amd_comgr_status_t;

// ---- rocBLAS (librocblas.so.*) --------------------------------------------------------------

/// `rocblas_status`.
pub type rocblas_status = c_int;
/// `rocblas_handle` (`struct _rocblas_handle*`).
pub type rocblas_handle = *mut c_void;
/// `rocblas_operation`.
pub type rocblas_operation = c_int;
/// `rocblas_datatype`.
pub type rocblas_datatype = c_int;
/// `rocblas_gemm_algo`.
pub type rocblas_gemm_algo = c_int;
/// `rocblas_pointer_mode`.
pub type rocblas_pointer_mode = c_int;
/// `rocblas_int` (32-bit in the LP64 builds ROCm ships).
pub type rocblas_int = i32;
/// `rocblas_stride`.
pub type rocblas_stride = i64;

pub const rocblas_status_success: rocblas_status = 0;
pub const rocblas_operation_none: rocblas_operation = 111;
pub const rocblas_operation_transpose: rocblas_operation = 112;
pub const rocblas_datatype_f16_r: rocblas_datatype = 150;
pub const rocblas_datatype_f32_r: rocblas_datatype = 151;
pub const rocblas_datatype_f64_r: rocblas_datatype = 152;
pub const rocblas_datatype_bf16_r: rocblas_datatype = 168;
pub const rocblas_gemm_algo_standard: rocblas_gemm_algo = 0;
pub const rocblas_pointer_mode_host: rocblas_pointer_mode = 0;

pub type rocblas_create_handle_t =
    unsafe extern "C" fn(handle: *mut rocblas_handle) -> rocblas_status;
pub type rocblas_destroy_handle_t = unsafe extern "C" fn(handle: rocblas_handle) -> rocblas_status;
pub type rocblas_set_stream_t =
    unsafe extern "C" fn(handle: rocblas_handle, stream: hipStream_t) -> rocblas_status;
pub type rocblas_set_pointer_mode_t =
    unsafe extern "C" fn(handle: rocblas_handle, mode: rocblas_pointer_mode) -> rocblas_status;
pub type rocblas_get_version_string_size_t =
    unsafe extern "C" fn(len: *mut usize) -> rocblas_status;
pub type rocblas_get_version_string_t =
    unsafe extern "C" fn(buf: *mut c_char, len: usize) -> rocblas_status;
pub type rocblas_gemm_ex_t = unsafe extern "C" fn(
    handle: rocblas_handle,
    trans_a: rocblas_operation,
    trans_b: rocblas_operation,
    m: rocblas_int,
    n: rocblas_int,
    k: rocblas_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: rocblas_datatype,
    lda: rocblas_int,
    b: *const c_void,
    b_type: rocblas_datatype,
    ldb: rocblas_int,
    beta: *const c_void,
    c: *const c_void,
    c_type: rocblas_datatype,
    ldc: rocblas_int,
    d: *mut c_void,
    d_type: rocblas_datatype,
    ldd: rocblas_int,
    compute_type: rocblas_datatype,
    algo: rocblas_gemm_algo,
    solution_index: i32,
    flags: u32,
) -> rocblas_status;
pub type rocblas_gemm_strided_batched_ex_t = unsafe extern "C" fn(
    handle: rocblas_handle,
    trans_a: rocblas_operation,
    trans_b: rocblas_operation,
    m: rocblas_int,
    n: rocblas_int,
    k: rocblas_int,
    alpha: *const c_void,
    a: *const c_void,
    a_type: rocblas_datatype,
    lda: rocblas_int,
    stride_a: rocblas_stride,
    b: *const c_void,
    b_type: rocblas_datatype,
    ldb: rocblas_int,
    stride_b: rocblas_stride,
    beta: *const c_void,
    c: *const c_void,
    c_type: rocblas_datatype,
    ldc: rocblas_int,
    stride_c: rocblas_stride,
    d: *mut c_void,
    d_type: rocblas_datatype,
    ldd: rocblas_int,
    stride_d: rocblas_stride,
    batch_count: rocblas_int,
    compute_type: rocblas_datatype,
    algo: rocblas_gemm_algo,
    solution_index: i32,
    flags: u32,
) -> rocblas_status;
