//! Vendor-neutral error codes of the emulator's core, and their values in each API.
//!
//! The CUDA values are those of cudarc's `CUresult` (a `#[repr(u32)]` Rust enum in the caller:
//! returning a value it does not declare would be undefined behaviour there, so only values
//! present in the CUDA 12.0 enum are ever returned).

use crate::diag::{self, Kind};

/// What went wrong, independent of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    InvalidValue,
    OutOfMemory,
    NotInitialized,
    NoDevice,
    InvalidDevice,
    InvalidImage,
    InvalidPtx,
    NoBinaryForGpu,
    InvalidContext,
    InvalidHandle,
    NotFound,
    NotReady,
    IllegalAddress,
    /// A kernel access through a pointer not aligned to its element type (CUDA's own code;
    /// HIP has none and reports an illegal address).
    MisalignedAddress,
    /// A launch shape beyond the device's limits (HIP's own code; CUDA says invalid value).
    InvalidConfiguration,
    LaunchOutOfResources,
    LaunchFailed,
    NotPermitted,
    NotSupported,
    CaptureUnsupported,
    CaptureInvalidated,
    CaptureUnmatched,
    CaptureUnjoined,
    CaptureWrongThread,
    CaptureIsolation,
    CaptureImplicit,
    CapturedEvent,
    GraphExecUpdateFailure,
    IllegalState,
    Unknown,
}

/// An error with the diagnostic already recorded (if it deserved one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmuError {
    pub code: Code,
    pub message: String,
}

pub type EmuResult<T> = Result<T, EmuError>;

impl EmuError {
    /// An error that records a diagnostic of `kind` for `call`.
    pub fn new(code: Code, kind: Kind, call: &str, message: impl Into<String>) -> EmuError {
        let message = message.into();
        diag::record(kind, call, message.clone());
        EmuError { code, message }
    }

    /// An error that records nothing (`NotReady`, or one already recorded).
    pub fn quiet(code: Code, message: impl Into<String>) -> EmuError {
        EmuError {
            code,
            message: message.into(),
        }
    }
}

/// `CUresult` values (cuda.h, CUDA 12.0).
pub mod cu {
    pub const SUCCESS: u32 = 0;
    pub const INVALID_VALUE: u32 = 1;
    pub const OUT_OF_MEMORY: u32 = 2;
    pub const NOT_INITIALIZED: u32 = 3;
    pub const NO_DEVICE: u32 = 100;
    pub const INVALID_DEVICE: u32 = 101;
    pub const INVALID_IMAGE: u32 = 200;
    pub const INVALID_CONTEXT: u32 = 201;
    pub const NO_BINARY_FOR_GPU: u32 = 209;
    pub const INVALID_PTX: u32 = 218;
    pub const INVALID_HANDLE: u32 = 400;
    pub const ILLEGAL_STATE: u32 = 401;
    pub const NOT_FOUND: u32 = 500;
    pub const NOT_READY: u32 = 600;
    pub const ILLEGAL_ADDRESS: u32 = 700;
    pub const LAUNCH_OUT_OF_RESOURCES: u32 = 701;
    pub const MISALIGNED_ADDRESS: u32 = 716;
    pub const LAUNCH_FAILED: u32 = 719;
    pub const NOT_PERMITTED: u32 = 800;
    pub const NOT_SUPPORTED: u32 = 801;
    pub const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
    pub const STREAM_CAPTURE_INVALIDATED: u32 = 901;
    pub const STREAM_CAPTURE_UNMATCHED: u32 = 903;
    pub const STREAM_CAPTURE_UNJOINED: u32 = 904;
    pub const STREAM_CAPTURE_ISOLATION: u32 = 905;
    pub const STREAM_CAPTURE_IMPLICIT: u32 = 906;
    pub const CAPTURED_EVENT: u32 = 907;
    pub const STREAM_CAPTURE_WRONG_THREAD: u32 = 908;
    pub const GRAPH_EXEC_UPDATE_FAILURE: u32 = 910;
    pub const UNKNOWN: u32 = 999;

    /// `(value, name, description)` for `cuGetErrorName` / `cuGetErrorString`.
    pub const NAMES: &[(u32, &str, &str)] = &[
        (SUCCESS, "CUDA_SUCCESS\0", "no error\0"),
        (
            INVALID_VALUE,
            "CUDA_ERROR_INVALID_VALUE\0",
            "invalid argument\0",
        ),
        (
            OUT_OF_MEMORY,
            "CUDA_ERROR_OUT_OF_MEMORY\0",
            "out of memory\0",
        ),
        (
            NOT_INITIALIZED,
            "CUDA_ERROR_NOT_INITIALIZED\0",
            "initialization error\0",
        ),
        (
            NO_DEVICE,
            "CUDA_ERROR_NO_DEVICE\0",
            "no CUDA-capable device is detected\0",
        ),
        (
            INVALID_DEVICE,
            "CUDA_ERROR_INVALID_DEVICE\0",
            "invalid device ordinal\0",
        ),
        (
            INVALID_IMAGE,
            "CUDA_ERROR_INVALID_IMAGE\0",
            "device kernel image is invalid\0",
        ),
        (
            INVALID_CONTEXT,
            "CUDA_ERROR_INVALID_CONTEXT\0",
            "invalid device context\0",
        ),
        (
            NO_BINARY_FOR_GPU,
            "CUDA_ERROR_NO_BINARY_FOR_GPU\0",
            "no kernel image is available for execution on the device\0",
        ),
        (
            INVALID_PTX,
            "CUDA_ERROR_INVALID_PTX\0",
            "a PTX JIT compilation failed\0",
        ),
        (
            INVALID_HANDLE,
            "CUDA_ERROR_INVALID_HANDLE\0",
            "invalid resource handle\0",
        ),
        (
            ILLEGAL_STATE,
            "CUDA_ERROR_ILLEGAL_STATE\0",
            "the operation cannot be performed in the present state\0",
        ),
        (
            NOT_FOUND,
            "CUDA_ERROR_NOT_FOUND\0",
            "named symbol not found\0",
        ),
        (NOT_READY, "CUDA_ERROR_NOT_READY\0", "device not ready\0"),
        (
            ILLEGAL_ADDRESS,
            "CUDA_ERROR_ILLEGAL_ADDRESS\0",
            "an illegal memory access was encountered\0",
        ),
        (
            LAUNCH_OUT_OF_RESOURCES,
            "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES\0",
            "too many resources requested for launch\0",
        ),
        (
            MISALIGNED_ADDRESS,
            "CUDA_ERROR_MISALIGNED_ADDRESS\0",
            "misaligned address\0",
        ),
        (
            LAUNCH_FAILED,
            "CUDA_ERROR_LAUNCH_FAILED\0",
            "unspecified launch failure\0",
        ),
        (
            NOT_PERMITTED,
            "CUDA_ERROR_NOT_PERMITTED\0",
            "operation not permitted\0",
        ),
        (
            NOT_SUPPORTED,
            "CUDA_ERROR_NOT_SUPPORTED\0",
            "operation not supported\0",
        ),
        (
            STREAM_CAPTURE_UNSUPPORTED,
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\0",
            "operation not permitted when stream is capturing\0",
        ),
        (
            STREAM_CAPTURE_INVALIDATED,
            "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\0",
            "operation failed due to a previous error during capture\0",
        ),
        (
            STREAM_CAPTURE_UNMATCHED,
            "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED\0",
            "capture was not initiated in this stream\0",
        ),
        (
            STREAM_CAPTURE_UNJOINED,
            "CUDA_ERROR_STREAM_CAPTURE_UNJOINED\0",
            "capturing stream has unjoined work\0",
        ),
        (
            STREAM_CAPTURE_ISOLATION,
            "CUDA_ERROR_STREAM_CAPTURE_ISOLATION\0",
            "dependency created on uncaptured work in another stream\0",
        ),
        (
            STREAM_CAPTURE_IMPLICIT,
            "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT\0",
            "operation would make the legacy stream depend on a capturing blocking stream\0",
        ),
        (
            CAPTURED_EVENT,
            "CUDA_ERROR_CAPTURED_EVENT\0",
            "operation not permitted on an event last recorded in a capturing stream\0",
        ),
        (
            STREAM_CAPTURE_WRONG_THREAD,
            "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD\0",
            "attempt to terminate a thread-local capture sequence from another thread\0",
        ),
        (
            GRAPH_EXEC_UPDATE_FAILURE,
            "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE\0",
            "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update\0",
        ),
        (UNKNOWN, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
    ];
}

/// `hipError_t` values (hip_runtime_api.h).
pub mod hip {
    pub const SUCCESS: i32 = 0;
    pub const INVALID_VALUE: i32 = 1;
    pub const OUT_OF_MEMORY: i32 = 2;
    pub const NOT_INITIALIZED: i32 = 3;
    pub const INVALID_CONFIGURATION: i32 = 9;
    pub const INVALID_DEVICE_POINTER: i32 = 17;
    pub const INVALID_MEMCPY_DIRECTION: i32 = 21;
    pub const NO_DEVICE: i32 = 100;
    pub const INVALID_DEVICE: i32 = 101;
    pub const INVALID_IMAGE: i32 = 200;
    pub const INVALID_CONTEXT: i32 = 201;
    pub const NO_BINARY_FOR_GPU: i32 = 209;
    pub const INVALID_KERNEL_FILE: i32 = 218;
    pub const INVALID_HANDLE: i32 = 400;
    pub const ILLEGAL_STATE: i32 = 401;
    pub const NOT_FOUND: i32 = 500;
    pub const NOT_READY: i32 = 600;
    pub const ILLEGAL_ADDRESS: i32 = 700;
    pub const LAUNCH_OUT_OF_RESOURCES: i32 = 701;
    pub const LAUNCH_FAILURE: i32 = 719;
    pub const NOT_SUPPORTED: i32 = 801;
    pub const STREAM_CAPTURE_UNSUPPORTED: i32 = 900;
    pub const STREAM_CAPTURE_INVALIDATED: i32 = 901;
    pub const STREAM_CAPTURE_UNMATCHED: i32 = 903;
    pub const STREAM_CAPTURE_UNJOINED: i32 = 904;
    pub const STREAM_CAPTURE_ISOLATION: i32 = 905;
    pub const STREAM_CAPTURE_IMPLICIT: i32 = 906;
    pub const CAPTURED_EVENT: i32 = 907;
    pub const STREAM_CAPTURE_WRONG_THREAD: i32 = 908;
    pub const GRAPH_EXEC_UPDATE_FAILURE: i32 = 910;
    pub const UNKNOWN: i32 = 999;

    /// `(value, name, description)` for `hipGetErrorName` / `hipGetErrorString`.
    pub const NAMES: &[(i32, &str, &str)] = &[
        (SUCCESS, "hipSuccess\0", "no error\0"),
        (
            INVALID_VALUE,
            "hipErrorInvalidValue\0",
            "invalid argument\0",
        ),
        (OUT_OF_MEMORY, "hipErrorOutOfMemory\0", "out of memory\0"),
        (
            NOT_INITIALIZED,
            "hipErrorNotInitialized\0",
            "initialization error\0",
        ),
        (
            INVALID_CONFIGURATION,
            "hipErrorInvalidConfiguration\0",
            "invalid configuration argument\0",
        ),
        (
            INVALID_DEVICE_POINTER,
            "hipErrorInvalidDevicePointer\0",
            "invalid device pointer\0",
        ),
        (
            INVALID_MEMCPY_DIRECTION,
            "hipErrorInvalidMemcpyDirection\0",
            "invalid copy direction for memcpy\0",
        ),
        (
            NO_DEVICE,
            "hipErrorNoDevice\0",
            "no ROCm-capable device is detected\0",
        ),
        (
            INVALID_DEVICE,
            "hipErrorInvalidDevice\0",
            "invalid device ordinal\0",
        ),
        (
            INVALID_IMAGE,
            "hipErrorInvalidImage\0",
            "device kernel image is invalid\0",
        ),
        (
            INVALID_CONTEXT,
            "hipErrorInvalidContext\0",
            "invalid device context\0",
        ),
        (
            NO_BINARY_FOR_GPU,
            "hipErrorNoBinaryForGpu\0",
            "no kernel image is available for execution on the device\0",
        ),
        (
            INVALID_KERNEL_FILE,
            "hipErrorInvalidKernelFile\0",
            "invalid kernel file\0",
        ),
        (
            INVALID_HANDLE,
            "hipErrorInvalidHandle\0",
            "invalid resource handle\0",
        ),
        (
            ILLEGAL_STATE,
            "hipErrorIllegalState\0",
            "the operation cannot be performed in the present state\0",
        ),
        (NOT_FOUND, "hipErrorNotFound\0", "named symbol not found\0"),
        (NOT_READY, "hipErrorNotReady\0", "device not ready\0"),
        (
            ILLEGAL_ADDRESS,
            "hipErrorIllegalAddress\0",
            "an illegal memory access was encountered\0",
        ),
        (
            LAUNCH_OUT_OF_RESOURCES,
            "hipErrorLaunchOutOfResources\0",
            "too many resources requested for launch\0",
        ),
        (
            LAUNCH_FAILURE,
            "hipErrorLaunchFailure\0",
            "unspecified launch failure\0",
        ),
        (
            NOT_SUPPORTED,
            "hipErrorNotSupported\0",
            "operation not supported\0",
        ),
        (
            STREAM_CAPTURE_UNSUPPORTED,
            "hipErrorStreamCaptureUnsupported\0",
            "operation not permitted when stream is capturing\0",
        ),
        (
            STREAM_CAPTURE_INVALIDATED,
            "hipErrorStreamCaptureInvalidated\0",
            "operation failed due to a previous error during capture\0",
        ),
        (
            STREAM_CAPTURE_UNMATCHED,
            "hipErrorStreamCaptureUnmatched\0",
            "capture was not initiated in this stream\0",
        ),
        (
            STREAM_CAPTURE_UNJOINED,
            "hipErrorStreamCaptureUnjoined\0",
            "capturing stream has unjoined work\0",
        ),
        (
            STREAM_CAPTURE_ISOLATION,
            "hipErrorStreamCaptureIsolation\0",
            "dependency created on uncaptured work in another stream\0",
        ),
        (
            STREAM_CAPTURE_IMPLICIT,
            "hipErrorStreamCaptureImplicit\0",
            "operation would make the legacy stream depend on a capturing blocking stream\0",
        ),
        (
            CAPTURED_EVENT,
            "hipErrorCapturedEvent\0",
            "operation not permitted on an event last recorded in a capturing stream\0",
        ),
        (
            STREAM_CAPTURE_WRONG_THREAD,
            "hipErrorStreamCaptureWrongThread\0",
            "attempt to terminate a thread-local capture sequence from another thread\0",
        ),
        (
            GRAPH_EXEC_UPDATE_FAILURE,
            "hipErrorGraphExecUpdateFailure\0",
            "the graph update was not performed\0",
        ),
        (UNKNOWN, "hipErrorUnknown\0", "unknown error\0"),
    ];
}

impl Code {
    /// The `CUresult` value.
    pub fn cu(self) -> u32 {
        match self {
            Code::InvalidValue => cu::INVALID_VALUE,
            Code::OutOfMemory => cu::OUT_OF_MEMORY,
            Code::NotInitialized => cu::NOT_INITIALIZED,
            Code::NoDevice => cu::NO_DEVICE,
            Code::InvalidDevice => cu::INVALID_DEVICE,
            Code::InvalidImage => cu::INVALID_IMAGE,
            Code::InvalidPtx => cu::INVALID_PTX,
            Code::NoBinaryForGpu => cu::NO_BINARY_FOR_GPU,
            Code::InvalidContext => cu::INVALID_CONTEXT,
            Code::InvalidHandle => cu::INVALID_HANDLE,
            Code::NotFound => cu::NOT_FOUND,
            Code::NotReady => cu::NOT_READY,
            Code::IllegalAddress => cu::ILLEGAL_ADDRESS,
            Code::MisalignedAddress => cu::MISALIGNED_ADDRESS,
            Code::InvalidConfiguration => cu::INVALID_VALUE,
            Code::LaunchOutOfResources => cu::LAUNCH_OUT_OF_RESOURCES,
            Code::LaunchFailed => cu::LAUNCH_FAILED,
            Code::NotPermitted => cu::NOT_PERMITTED,
            Code::NotSupported => cu::NOT_SUPPORTED,
            Code::CaptureUnsupported => cu::STREAM_CAPTURE_UNSUPPORTED,
            Code::CaptureInvalidated => cu::STREAM_CAPTURE_INVALIDATED,
            Code::CaptureUnmatched => cu::STREAM_CAPTURE_UNMATCHED,
            Code::CaptureUnjoined => cu::STREAM_CAPTURE_UNJOINED,
            Code::CaptureWrongThread => cu::STREAM_CAPTURE_WRONG_THREAD,
            Code::CaptureIsolation => cu::STREAM_CAPTURE_ISOLATION,
            Code::CaptureImplicit => cu::STREAM_CAPTURE_IMPLICIT,
            Code::CapturedEvent => cu::CAPTURED_EVENT,
            Code::GraphExecUpdateFailure => cu::GRAPH_EXEC_UPDATE_FAILURE,
            Code::IllegalState => cu::ILLEGAL_STATE,
            Code::Unknown => cu::UNKNOWN,
        }
    }

    /// The `hipError_t` value.
    pub fn hip(self) -> i32 {
        match self {
            Code::InvalidValue => hip::INVALID_VALUE,
            Code::OutOfMemory => hip::OUT_OF_MEMORY,
            Code::NotInitialized => hip::NOT_INITIALIZED,
            Code::NoDevice => hip::NO_DEVICE,
            Code::InvalidDevice => hip::INVALID_DEVICE,
            Code::InvalidImage => hip::INVALID_IMAGE,
            Code::InvalidPtx => hip::INVALID_KERNEL_FILE,
            Code::NoBinaryForGpu => hip::NO_BINARY_FOR_GPU,
            Code::InvalidContext => hip::INVALID_CONTEXT,
            Code::InvalidHandle => hip::INVALID_HANDLE,
            Code::NotFound => hip::NOT_FOUND,
            Code::NotReady => hip::NOT_READY,
            Code::IllegalAddress | Code::MisalignedAddress => hip::ILLEGAL_ADDRESS,
            Code::InvalidConfiguration => hip::INVALID_CONFIGURATION,
            Code::LaunchOutOfResources => hip::LAUNCH_OUT_OF_RESOURCES,
            Code::LaunchFailed => hip::LAUNCH_FAILURE,
            Code::NotPermitted | Code::NotSupported => hip::NOT_SUPPORTED,
            Code::CaptureUnsupported => hip::STREAM_CAPTURE_UNSUPPORTED,
            Code::CaptureInvalidated => hip::STREAM_CAPTURE_INVALIDATED,
            Code::CaptureUnmatched => hip::STREAM_CAPTURE_UNMATCHED,
            Code::CaptureUnjoined => hip::STREAM_CAPTURE_UNJOINED,
            Code::CaptureWrongThread => hip::STREAM_CAPTURE_WRONG_THREAD,
            Code::CaptureIsolation => hip::STREAM_CAPTURE_ISOLATION,
            Code::CaptureImplicit => hip::STREAM_CAPTURE_IMPLICIT,
            Code::CapturedEvent => hip::CAPTURED_EVENT,
            Code::GraphExecUpdateFailure => hip::GRAPH_EXEC_UPDATE_FAILURE,
            Code::IllegalState => hip::ILLEGAL_STATE,
            Code::Unknown => hip::UNKNOWN,
        }
    }
}

/// Runs an exported function's body with panics caught: a panic (a bug in the emulator)
/// becomes `Code::Unknown` with a diagnostic instead of aborting the host process.
pub fn guard<T>(call: &str, f: impl FnOnce() -> EmuResult<T>) -> EmuResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(no message)".into());
            Err(EmuError::new(
                Code::Unknown,
                Kind::Unsupported,
                call,
                format!("internal error in the emulator (panic): {msg}"),
            ))
        }
    }
}

/// Shorthand for an invalid-value error.
pub fn invalid(call: &str, message: impl Into<String>) -> EmuError {
    EmuError::new(Code::InvalidValue, Kind::InvalidValue, call, message)
}

/// Shorthand for an unsupported-feature error.
pub fn unsupported(call: &str, message: impl Into<String>) -> EmuError {
    EmuError::new(Code::NotSupported, Kind::Unsupported, call, message)
}
