//! Error objects (`XthunkError`: a status code, a message, the cause chain), the guard every
//! entry point runs under (`catch_unwind`: a panic becomes an error), and argument checks.

use std::any::Any;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use xthunk::Error;
use xthunk::core::custom_call::{CustomCallError, CustomCallKind};
use xthunk::proto::ProtoError;

/// What kind of failure an error is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XthunkStatus {
    Ok = 0,
    /// A caller passed something inconsistent (NULL, wrong count, size, dtype or shape).
    InvalidArgument = 1,
    /// A backend's library or device is not there.
    Unavailable = 2,
    /// The device does not support something the program needs.
    Unsupported = 3,
    /// The program does not read, decode or validate.
    InvalidProgram = 4,
    /// An allocation failed, or the program needs more memory than the device has.
    OutOfMemory = 5,
    /// Running failed (a kernel, a vendor call, a collective).
    Execution = 6,
    /// A file could not be read or written.
    Io = 7,
    /// A bug in xthunk (a caught panic).
    Internal = 8,
    /// The run was cancelled (`xthunk_event_cancel`): it stopped between thunks.
    Cancelled = 9,
    /// The run did not finish before its deadline (`XthunkRunOptions::deadline_ms`).
    DeadlineExceeded = 10,
}

/// An error: code, message and causes (outermost first). Freed with `xthunk_error_free`.
#[derive(Clone)]
pub struct XthunkError {
    code: XthunkStatus,
    message: CString,
    causes: Vec<CString>,
}

fn c_string(s: String) -> CString {
    // Interior NULs would cut the message short: shown as U+FFFD instead.
    CString::new(s.replace('\0', "\u{fffd}")).unwrap_or_default()
}

impl XthunkError {
    pub(crate) fn new(code: XthunkStatus, message: impl Into<String>) -> Self {
        XthunkError {
            code,
            message: c_string(message.into()),
            causes: Vec::new(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(XthunkStatus::InvalidArgument, message)
    }

    fn with_causes(mut self, e: &(dyn std::error::Error + 'static)) -> Self {
        self.causes = xthunk::embed::causes(e).into_iter().map(c_string).collect();
        self
    }

    fn panic(payload: Box<dyn Any + Send>) -> Self {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Self::new(
            XthunkStatus::Internal,
            format!("internal error (a bug in xthunk): {what}"),
        )
    }
}

impl From<Error> for XthunkError {
    fn from(e: Error) -> Self {
        XthunkError::from_ref(&e)
    }
}

impl XthunkError {
    /// The error object of `e` (its code, message and causes).
    pub(crate) fn from_ref(e: &Error) -> Self {
        XthunkError::new(code_of(e), e.to_string()).with_causes(e)
    }
}

fn code_of(e: &Error) -> XthunkStatus {
    match e {
        Error::InvalidArgument(_) => XthunkStatus::InvalidArgument,
        Error::Unavailable { .. } => XthunkStatus::Unavailable,
        Error::Unsupported { .. } => XthunkStatus::Unsupported,
        Error::Invalid(_) => XthunkStatus::InvalidProgram,
        Error::OutOfMemory { .. } | Error::ProgramMemory { .. } => XthunkStatus::OutOfMemory,
        Error::Cancelled { .. } => XthunkStatus::Cancelled,
        Error::DeadlineExceeded { .. } => XthunkStatus::DeadlineExceeded,
        Error::Thunk { source, .. } => code_of(source),
        Error::CustomCall(_) => match CustomCallError::kind_of(e) {
            Some(CustomCallKind::Unsupported) => XthunkStatus::Unsupported,
            Some(CustomCallKind::Program) => XthunkStatus::InvalidProgram,
            Some(CustomCallKind::Unavailable) => XthunkStatus::Unavailable,
            Some(CustomCallKind::InvalidArgument) => XthunkStatus::InvalidArgument,
            Some(CustomCallKind::Execution) | None => XthunkStatus::Execution,
        },
        _ => XthunkStatus::Execution,
    }
}

impl From<ProtoError> for XthunkError {
    fn from(e: ProtoError) -> Self {
        let code = match e {
            ProtoError::Io { .. } => XthunkStatus::Io,
            _ => XthunkStatus::InvalidProgram,
        };
        XthunkError::new(code, e.to_string()).with_causes(&e)
    }
}

pub(crate) type Result<T> = std::result::Result<T, XthunkError>;

/// Runs `f` as an entry point: NULL on success, else the error (a panic included) as a new
/// error object.
pub(crate) fn guard(f: impl FnOnce() -> Result<()>) -> *mut XthunkError {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return ptr::null_mut(),
        Ok(Err(e)) => e,
        Err(p) => XthunkError::panic(p),
    };
    Box::into_raw(Box::new(e))
}

/// Runs an infallible getter; `fallback` on a panic.
pub(crate) fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// `p` as a reference, or an error naming `what` when it is NULL.
///
/// # Safety
/// `p` is NULL or points at a live `T`.
pub(crate) unsafe fn arg<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: the caller passes NULL or a live handle (the ABI's contract).
    unsafe { p.as_ref() }.ok_or_else(|| XthunkError::invalid(format!("{what} is NULL")))
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(XthunkError::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated (the ABI's contract).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| XthunkError::invalid(format!("{what} is not UTF-8")))
}

/// Writes `value` to the out-pointer `out` (checked for NULL first).
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(
    out: *mut T,
    what: &str,
    value: impl FnOnce() -> Result<T>,
) -> Result<()> {
    if out.is_null() {
        return Err(XthunkError::invalid(format!("{what} is NULL")));
    }
    let v = value()?;
    // SAFETY: non-NULL and valid for a write (the ABI's contract).
    unsafe { out.write(v) };
    Ok(())
}

/// The error's kind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_error_code(error: *const XthunkError) -> XthunkStatus {
    guard_value(XthunkStatus::InvalidArgument, || {
        // SAFETY: NULL or a live error (the ABI's contract).
        match unsafe { error.as_ref() } {
            Some(e) => e.code,
            None => XthunkStatus::Ok,
        }
    })
}

/// The error's message (valid until the error is freed; "" for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_error_message(error: *const XthunkError) -> *const c_char {
    guard_value(c"".as_ptr(), || {
        // SAFETY: NULL or a live error (the ABI's contract).
        match unsafe { error.as_ref() } {
            Some(e) => e.message.as_ptr(),
            None => c"".as_ptr(),
        }
    })
}

/// How many causes the error has (each a deeper reason of the one before).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_error_cause_count(error: *const XthunkError) -> usize {
    guard_value(0, || {
        // SAFETY: NULL or a live error (the ABI's contract).
        unsafe { error.as_ref() }.map_or(0, |e| e.causes.len())
    })
}

/// Cause `index` (0 = the outermost) of the error; NULL when out of range.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_error_cause(
    error: *const XthunkError,
    index: usize,
) -> *const c_char {
    guard_value(ptr::null(), || {
        // SAFETY: NULL or a live error (the ABI's contract).
        unsafe { error.as_ref() }
            .and_then(|e| e.causes.get(index))
            .map_or(ptr::null(), |c| c.as_ptr())
    })
}

/// Frees an error (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_error_free(error: *mut XthunkError) {
    guard_value((), || {
        if !error.is_null() {
            // SAFETY: a live error from this library, freed once (the ABI's contract).
            drop(unsafe { Box::from_raw(error) });
        }
    })
}
