//! Vendor result codes, mapped to xthunk errors in this one place: every error names the
//! library call, the code's symbolic name and its number. Codes are plain integers (the
//! `hipError_t`, `hiprtcResult`, `amd_comgr_status_t` and `rocblas_status` values of the
//! headers), so a code a newer library adds is reported by number, never misread. Also the
//! backend's `Unavailable` and `Unsupported` errors, and [`CompileError`] (why the runtime
//! compiler made no code object) with its mapping to xthunk errors.

use crate::sys;
use xthunk_core::Error;

/// The backend name in every error.
pub(crate) const BACKEND: &str = "rocm";

/// Name and message of a `hipError_t` (values from `hip_runtime_api.h`, ROCm 5.2 and 6.x).
/// Public only for the crate's integration tests.
#[doc(hidden)]
pub fn hip_error_info(code: sys::hipError_t) -> (&'static str, &'static str) {
    match code {
        0 => ("hipSuccess", "success"),
        1 => (
            "hipErrorInvalidValue",
            "an argument is null or out of range",
        ),
        2 => ("hipErrorOutOfMemory", "out of memory"),
        3 => ("hipErrorNotInitialized", "the runtime is not initialized"),
        4 => ("hipErrorDeinitialized", "the runtime is shutting down"),
        5 => ("hipErrorProfilerDisabled", "profiler disabled"),
        6 => ("hipErrorProfilerNotInitialized", "profiler not initialized"),
        7 => ("hipErrorProfilerAlreadyStarted", "profiler already started"),
        8 => ("hipErrorProfilerAlreadyStopped", "profiler already stopped"),
        9 => (
            "hipErrorInvalidConfiguration",
            "invalid launch configuration",
        ),
        12 => ("hipErrorInvalidPitchValue", "invalid pitch"),
        13 => ("hipErrorInvalidSymbol", "invalid symbol"),
        17 => ("hipErrorInvalidDevicePointer", "invalid device pointer"),
        21 => ("hipErrorInvalidMemcpyDirection", "invalid copy direction"),
        35 => (
            "hipErrorInsufficientDriver",
            "the driver is too old for this runtime",
        ),
        52 => (
            "hipErrorMissingConfiguration",
            "missing launch configuration",
        ),
        53 => ("hipErrorPriorLaunchFailure", "an earlier launch failed"),
        98 => ("hipErrorInvalidDeviceFunction", "invalid device function"),
        100 => ("hipErrorNoDevice", "no AMD GPU"),
        101 => (
            "hipErrorInvalidDevice",
            "invalid device (or no usable AMD GPU)",
        ),
        200 => ("hipErrorInvalidImage", "invalid code object"),
        201 => ("hipErrorInvalidContext", "invalid context"),
        202 => ("hipErrorContextAlreadyCurrent", "context already current"),
        205 => ("hipErrorMapFailed", "mapping failed"),
        206 => ("hipErrorUnmapFailed", "unmapping failed"),
        207 => ("hipErrorArrayIsMapped", "array is mapped"),
        208 => ("hipErrorAlreadyMapped", "already mapped"),
        209 => (
            "hipErrorNoBinaryForGpu",
            "the code object has no code for this GPU",
        ),
        210 => ("hipErrorAlreadyAcquired", "already acquired"),
        211 => ("hipErrorNotMapped", "not mapped"),
        212 => ("hipErrorNotMappedAsArray", "not mapped as an array"),
        213 => ("hipErrorNotMappedAsPointer", "not mapped as a pointer"),
        214 => ("hipErrorECCNotCorrectable", "uncorrectable ECC error"),
        215 => ("hipErrorUnsupportedLimit", "unsupported limit"),
        216 => ("hipErrorContextAlreadyInUse", "context already in use"),
        217 => ("hipErrorPeerAccessUnsupported", "peer access unsupported"),
        218 => ("hipErrorInvalidKernelFile", "invalid kernel file"),
        219 => ("hipErrorInvalidGraphicsContext", "invalid graphics context"),
        300 => ("hipErrorInvalidSource", "invalid source"),
        301 => ("hipErrorFileNotFound", "file not found"),
        302 => (
            "hipErrorSharedObjectSymbolNotFound",
            "symbol not found in the code object",
        ),
        303 => (
            "hipErrorSharedObjectInitFailed",
            "code object initialization failed",
        ),
        304 => ("hipErrorOperatingSystem", "operating system call failed"),
        400 => ("hipErrorInvalidHandle", "invalid handle"),
        401 => ("hipErrorIllegalState", "a resource is not in a valid state"),
        500 => ("hipErrorNotFound", "not found"),
        600 => ("hipErrorNotReady", "not ready"),
        700 => (
            "hipErrorIllegalAddress",
            "illegal memory access on the device",
        ),
        701 => ("hipErrorLaunchOutOfResources", "launch out of resources"),
        702 => ("hipErrorLaunchTimeOut", "launch timed out"),
        704 => (
            "hipErrorPeerAccessAlreadyEnabled",
            "peer access already enabled",
        ),
        705 => ("hipErrorPeerAccessNotEnabled", "peer access not enabled"),
        708 => ("hipErrorSetOnActiveProcess", "set on active process"),
        709 => ("hipErrorContextIsDestroyed", "context destroyed"),
        710 => ("hipErrorAssert", "a kernel assertion failed"),
        712 => (
            "hipErrorHostMemoryAlreadyRegistered",
            "host memory already registered",
        ),
        713 => (
            "hipErrorHostMemoryNotRegistered",
            "host memory not registered",
        ),
        719 => ("hipErrorLaunchFailure", "a kernel faulted on the device"),
        720 => (
            "hipErrorCooperativeLaunchTooLarge",
            "cooperative launch too large",
        ),
        801 => ("hipErrorNotSupported", "not supported by this runtime"),
        900 => (
            "hipErrorStreamCaptureUnsupported",
            "operation not permitted while the stream is capturing",
        ),
        901 => (
            "hipErrorStreamCaptureInvalidated",
            "the capture was invalidated by an earlier error",
        ),
        902 => ("hipErrorStreamCaptureMerge", "capture merge"),
        903 => (
            "hipErrorStreamCaptureUnmatched",
            "the capture was not begun on this stream",
        ),
        904 => ("hipErrorStreamCaptureUnjoined", "capture fork not joined"),
        905 => (
            "hipErrorStreamCaptureIsolation",
            "capture isolation violated",
        ),
        906 => (
            "hipErrorStreamCaptureImplicit",
            "implicit capture dependency",
        ),
        907 => (
            "hipErrorCapturedEvent",
            "event recorded in a capturing stream",
        ),
        908 => (
            "hipErrorStreamCaptureWrongThread",
            "capture ended on another thread",
        ),
        910 => ("hipErrorGraphExecUpdateFailure", "graph update failed"),
        999 => ("hipErrorUnknown", "unknown error"),
        1052 => ("hipErrorRuntimeMemory", "HSA runtime memory call failed"),
        1053 => ("hipErrorRuntimeOther", "HSA runtime call failed"),
        _ => ("unknown hipError_t", "unknown error code"),
    }
}

/// `hipErrorNoDevice (100): no AMD GPU`.
pub(crate) fn hip_describe(code: sys::hipError_t) -> String {
    let (name, message) = hip_error_info(code);
    format!("{name} ({code}): {message}")
}

/// True for the codes that mean "this machine has no usable AMD GPU" when `hipInit` or
/// `hipGetDeviceCount` return them.
pub(crate) fn means_no_device(code: sys::hipError_t) -> bool {
    code == sys::hipErrorNoDevice || code == sys::hipErrorInvalidDevice
}

/// True for the codes that mean "this operation cannot be recorded into a graph".
pub(crate) fn is_capture_error(code: sys::hipError_t) -> bool {
    (900..=908).contains(&code)
}

/// A HIP call's result.
pub(crate) fn hip(call: &str, code: sys::hipError_t) -> Result<(), Error> {
    if code == sys::hipSuccess {
        Ok(())
    } else {
        Err(hip_error(call, code))
    }
}

/// The error for a failed HIP call; out-of-memory and capture failures keep their meaning.
pub(crate) fn hip_error(call: &str, code: sys::hipError_t) -> Error {
    if is_capture_error(code) {
        return Error::Unsupported {
            backend: BACKEND.into(),
            feature: format!(
                "`{call}` inside a HIP graph capture ({})",
                hip_describe(code)
            ),
        };
    }
    Error::backend(BACKEND, call, hip_describe(code))
}

/// `HIPRTC_ERROR_COMPILATION (6)`.
pub(crate) fn hiprtc_describe(code: sys::hiprtcResult) -> String {
    let name = match code {
        0 => "HIPRTC_SUCCESS",
        1 => "HIPRTC_ERROR_OUT_OF_MEMORY",
        2 => "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE",
        3 => "HIPRTC_ERROR_INVALID_INPUT",
        4 => "HIPRTC_ERROR_INVALID_PROGRAM",
        5 => "HIPRTC_ERROR_INVALID_OPTION",
        6 => "HIPRTC_ERROR_COMPILATION",
        7 => "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        8 => "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        9 => "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        10 => "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        11 => "HIPRTC_ERROR_INTERNAL_ERROR",
        100 => "HIPRTC_ERROR_LINKING",
        _ => "unknown hiprtcResult",
    };
    format!("{name} ({code})")
}

/// `AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT (2)`.
pub(crate) fn comgr_describe(code: sys::amd_comgr_status_t) -> String {
    let name = match code {
        0 => "AMD_COMGR_STATUS_SUCCESS",
        1 => "AMD_COMGR_STATUS_ERROR",
        2 => "AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT",
        3 => "AMD_COMGR_STATUS_ERROR_OUT_OF_RESOURCES",
        _ => "unknown amd_comgr_status_t",
    };
    format!("{name} ({code})")
}

/// `rocblas_status_invalid_size (4)`.
pub(crate) fn rocblas_describe(code: sys::rocblas_status) -> String {
    let name = match code {
        0 => "rocblas_status_success",
        1 => "rocblas_status_invalid_handle",
        2 => "rocblas_status_not_implemented",
        3 => "rocblas_status_invalid_pointer",
        4 => "rocblas_status_invalid_size",
        5 => "rocblas_status_memory_error",
        6 => "rocblas_status_internal_error",
        7 => "rocblas_status_perf_degraded",
        8 => "rocblas_status_size_query_mismatch",
        9 => "rocblas_status_size_increased",
        10 => "rocblas_status_size_unchanged",
        11 => "rocblas_status_invalid_value",
        12 => "rocblas_status_continue",
        13 => "rocblas_status_check_numerics_fail",
        14 => "rocblas_status_excluded_from_build",
        15 => "rocblas_status_arch_mismatch",
        _ => "unknown rocblas_status",
    };
    format!("{name} ({code})")
}

/// A rocBLAS call's status.
pub(crate) fn rocblas(call: &str, code: sys::rocblas_status) -> Result<(), Error> {
    if code == sys::rocblas_status_success {
        Ok(())
    } else {
        Err(Error::backend(BACKEND, call, rocblas_describe(code)))
    }
}

/// `Unavailable { backend: "rocm", reason }`.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    xthunk_gpu::errors::unavailable(BACKEND, reason)
}

/// `Unsupported { backend: "rocm", feature }`.
pub(crate) fn unsupported(feature: impl Into<String>) -> Error {
    xthunk_gpu::errors::unsupported(BACKEND, feature)
}

/// Why a compilation did not produce a code object.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CompileError {
    /// hipRTC or comgr could not be loaded.
    #[error("hipRTC is unavailable: {0}")]
    Unavailable(String),
    /// The target is not a well-formed gfx target.
    #[error("invalid AMD GPU target `{target}`: {reason}")]
    InvalidTarget { target: String, reason: String },
    /// comgr does not list the target: compiling would abort the process on ROCm 5.2.
    #[error(
        "target `{target}` is not supported by this ROCm (comgr {comgr} lists: {known}); refusing to compile it (hipRTC would abort on an unknown target)"
    )]
    UnsupportedTarget {
        target: String,
        comgr: String,
        known: String,
    },
    /// hipRTC failed; `log` is its compile log.
    #[error("hipRTC {call} failed for module `{module}` on {target}: {status}\n{log}")]
    Compilation {
        /// The module compiled (its `#line` name), `portable source` when unnamed.
        module: String,
        call: String,
        status: String,
        target: String,
        log: String,
    },
    /// hipRTC returned something that is not a code object for the target.
    #[error("hipRTC returned a bad code object for {target}: {reason}")]
    BadOutput { target: String, reason: String },
}

impl From<CompileError> for Error {
    fn from(e: CompileError) -> Error {
        match e {
            CompileError::Unavailable(reason) => Error::Unavailable {
                backend: BACKEND.into(),
                reason: format!("hipRTC: {reason}"),
            },
            CompileError::InvalidTarget { .. } => Error::InvalidArgument(e.to_string()),
            CompileError::UnsupportedTarget { .. } => Error::Unsupported {
                backend: BACKEND.into(),
                feature: e.to_string(),
            },
            CompileError::Compilation { ref call, .. } => {
                Error::backend(BACKEND, &call.clone(), e.to_string())
            }
            CompileError::BadOutput { .. } => {
                Error::backend(BACKEND, "hiprtcGetCode", e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_name_themselves() {
        assert_eq!(hip_describe(100), "hipErrorNoDevice (100): no AMD GPU");
        assert!(hip_describe(101).starts_with("hipErrorInvalidDevice (101)"));
        assert!(hip_describe(12345).starts_with("unknown hipError_t (12345)"));
        assert!(means_no_device(100) && means_no_device(101) && !means_no_device(2));
        assert_eq!(hiprtc_describe(6), "HIPRTC_ERROR_COMPILATION (6)");
        assert_eq!(
            comgr_describe(2),
            "AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT (2)"
        );
        assert_eq!(rocblas_describe(4), "rocblas_status_invalid_size (4)");
        let e = hip("hipMalloc", 2)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("hipMalloc") && e.contains("hipErrorOutOfMemory (2)"),
            "{e}"
        );
        assert!(matches!(
            hip_error("hipMemsetD32Async", 900),
            Error::Unsupported { .. }
        ));
        assert!(rocblas("rocblas_gemm_ex", 0).is_ok());
    }
}
