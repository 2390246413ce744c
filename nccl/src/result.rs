//! `ncclResult_t` mapped to names, messages and xthunk errors, in this one place. Every error
//! names the library (`nccl` or `rccl`), the call, the code's symbolic name and its number, and
//! the library's own description of the last error when it has one.

use crate::sys;

/// The symbolic name and a short description of an `ncclResult_t` (values from `nccl.h`; RCCL
/// uses the same ones). A code a newer library adds is reported by number.
pub fn result_info(code: sys::ncclResult_t) -> (&'static str, &'static str) {
    match code {
        sys::ncclSuccess => ("ncclSuccess", "success"),
        sys::ncclUnhandledCudaError => (
            "ncclUnhandledCudaError",
            "a call to the GPU runtime failed (on NCCL: CUDA; on RCCL: HIP)",
        ),
        sys::ncclSystemError => (
            "ncclSystemError",
            "a system call failed (network, shared memory, threads)",
        ),
        sys::ncclInternalError => ("ncclInternalError", "internal error in the library"),
        sys::ncclInvalidArgument => (
            "ncclInvalidArgument",
            "an argument is invalid (null pointer, bad count, rank or type)",
        ),
        sys::ncclInvalidUsage => (
            "ncclInvalidUsage",
            "the library was used incorrectly (e.g. mismatched calls across ranks)",
        ),
        sys::ncclRemoteError => (
            "ncclRemoteError",
            "a remote peer failed or the connection to it broke",
        ),
        sys::ncclInProgress => (
            "ncclInProgress",
            "the operation is still in progress (non-blocking communicator)",
        ),
        sys::ncclTimeout => ("ncclTimeout", "the operation timed out"),
        _ => ("ncclResult?", "unknown result code"),
    }
}

/// `ncclInvalidArgument (4): an argument is invalid …`: the code's name, number and meaning.
pub fn describe_result(code: sys::ncclResult_t) -> String {
    let (name, message) = result_info(code);
    if name == "ncclResult?" {
        format!("unknown ncclResult_t {code}")
    } else {
        format!("{name} ({code}): {message}")
    }
}

/// True for results after which the communicator must be aborted (every error but an invalid
/// argument, which NCCL rejects before doing anything, and `ncclInProgress`).
pub fn is_fatal(code: sys::ncclResult_t) -> bool {
    !matches!(
        code,
        sys::ncclSuccess | sys::ncclInProgress | sys::ncclInvalidArgument
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_code_has_a_name() {
        for code in 0..=8 {
            let (name, _) = result_info(code);
            assert!(name.starts_with("nccl") && name != "ncclResult?", "{code}");
        }
        assert_eq!(result_info(sys::ncclInProgress).0, "ncclInProgress");
        assert_eq!(describe_result(42), "unknown ncclResult_t 42");
        assert!(describe_result(sys::ncclRemoteError).starts_with("ncclRemoteError (6): "));
        assert!(!is_fatal(sys::ncclInProgress));
        assert!(is_fatal(sys::ncclRemoteError));
    }
}
