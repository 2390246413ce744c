//! Vendor result codes, mapped to xthunk errors in this one place: every error names the
//! library call, the code's symbolic name and its number; and the backend's `Unavailable` and
//! `Unsupported` errors.

use cudarc::driver::sys::CUresult;
use xthunk_core::Error;

/// The backend name in every error.
pub(crate) const BACKEND: &str = "cuda";

/// A driver call's result as an error naming the call, the code and its name.
pub(crate) fn cu(call: &str, r: CUresult) -> Result<(), Error> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(cu_error(call, r))
    }
}

/// The error for a failed driver call.
pub(crate) fn cu_error(call: &str, r: CUresult) -> Error {
    Error::backend(BACKEND, call, cu_describe(r))
}

/// `CUDA_ERROR_NO_DEVICE (100)`.
pub(crate) fn cu_describe(r: CUresult) -> String {
    format!("{r:?} ({})", r as u32)
}

/// An NVRTC status code as an error message: `NVRTC_ERROR_COMPILATION (6)`.
pub(crate) fn nvrtc_describe(code: i32) -> String {
    let name = match code {
        0 => "NVRTC_SUCCESS",
        1 => "NVRTC_ERROR_OUT_OF_MEMORY",
        2 => "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
        3 => "NVRTC_ERROR_INVALID_INPUT",
        4 => "NVRTC_ERROR_INVALID_PROGRAM",
        5 => "NVRTC_ERROR_INVALID_OPTION",
        6 => "NVRTC_ERROR_COMPILATION",
        7 => "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        8 => "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        9 => "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        10 => "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        11 => "NVRTC_ERROR_INTERNAL_ERROR",
        12 => "NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
        13 => "NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED",
        14 => "NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED",
        15 => "NVRTC_ERROR_PCH_CREATE",
        16 => "NVRTC_ERROR_CANCELLED",
        _ => "unknown NVRTC status",
    };
    format!("{name} ({code})")
}

/// A failed NVRTC call as an error.
pub(crate) fn nvrtc_error(call: &str, code: i32) -> Error {
    Error::backend(BACKEND, call, nvrtc_describe(code))
}

/// A cuBLAS status code: `CUBLAS_STATUS_INVALID_VALUE (7)`.
pub(crate) fn cublas_describe(code: i32) -> String {
    let name = match code {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "unknown cuBLAS status",
    };
    format!("{name} ({code})")
}

/// A cuBLAS call's status as a result.
pub(crate) fn cublas(call: &str, code: i32) -> Result<(), Error> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::backend(BACKEND, call, cublas_describe(code)))
    }
}

/// `Unavailable { backend: "cuda", reason }`.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    xthunk_gpu::errors::unavailable(BACKEND, reason)
}

/// `Unsupported { backend: "cuda", feature }`.
pub(crate) fn unsupported(feature: impl Into<String>) -> Error {
    xthunk_gpu::errors::unsupported(BACKEND, feature)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_name_themselves() {
        assert_eq!(
            cu_describe(CUresult::CUDA_ERROR_NO_DEVICE),
            "CUDA_ERROR_NO_DEVICE (100)"
        );
        assert_eq!(nvrtc_describe(6), "NVRTC_ERROR_COMPILATION (6)");
        assert_eq!(cublas_describe(7), "CUBLAS_STATUS_INVALID_VALUE (7)");
        let e = cu("cuMemAlloc_v2", CUresult::CUDA_ERROR_OUT_OF_MEMORY)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("cuMemAlloc_v2") && e.contains("CUDA_ERROR_OUT_OF_MEMORY (2)"),
            "{e}"
        );
    }
}
