//! xthunk's errors as Python exceptions: the classes live in `xthunk/errors.py`; each raised
//! exception carries xthunk's message, `causes` (the cause chain, outermost first) and, as
//! `__cause__`, the same chain as exceptions.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use xthunk::Error;
use xthunk::core::custom_call::{CustomCallError, CustomCallKind};
use xthunk::proto::ProtoError;

/// The exception class an error is raised as (a name in `xthunk.errors`).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    InvalidArgument,
    Unavailable,
    Unsupported,
    Program,
    OutOfMemory,
    Execution,
    Cancelled,
    DeadlineExceeded,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::InvalidArgument => "InvalidArgumentError",
            Kind::Unavailable => "UnavailableError",
            Kind::Unsupported => "UnsupportedError",
            Kind::Program => "ProgramError",
            Kind::OutOfMemory => "OutOfMemoryError",
            Kind::Execution => "ExecutionError",
            Kind::Cancelled => "CancelledError",
            Kind::DeadlineExceeded => "DeadlineExceededError",
        }
    }
}

fn kind_of(e: &Error) -> Kind {
    match e {
        Error::InvalidArgument(_) => Kind::InvalidArgument,
        Error::Unavailable { .. } => Kind::Unavailable,
        Error::Unsupported { .. } => Kind::Unsupported,
        Error::Invalid(_) => Kind::Program,
        Error::OutOfMemory { .. } | Error::ProgramMemory { .. } => Kind::OutOfMemory,
        Error::Cancelled { .. } => Kind::Cancelled,
        Error::DeadlineExceeded { .. } => Kind::DeadlineExceeded,
        Error::Thunk { source, .. } => kind_of(source),
        Error::CustomCall(_) => match CustomCallError::kind_of(e) {
            Some(CustomCallKind::Unsupported) => Kind::Unsupported,
            Some(CustomCallKind::Program) => Kind::Program,
            Some(CustomCallKind::Unavailable) => Kind::Unavailable,
            Some(CustomCallKind::InvalidArgument) => Kind::InvalidArgument,
            Some(CustomCallKind::Execution) | None => Kind::Execution,
        },
        _ => Kind::Execution,
    }
}

/// A Python exception of class `kind` with `message` and the causes of `source`.
pub fn raise(
    kind: Kind,
    message: String,
    source: Option<&(dyn std::error::Error + 'static)>,
) -> PyErr {
    Python::attach(|py| {
        build(py, kind, message, source)
            .unwrap_or_else(|e| PyRuntimeError::new_err(format!("xthunk: {e}")))
    })
}

fn build(
    py: Python<'_>,
    kind: Kind,
    message: String,
    source: Option<&(dyn std::error::Error + 'static)>,
) -> PyResult<PyErr> {
    let errors = py.import("xthunk.errors")?;
    let causes = source.map(xthunk::embed::causes).unwrap_or_default();
    let exc = errors.getattr(kind.class())?.call1((message,))?;
    exc.setattr("causes", PyList::new(py, &causes)?)?;
    // `__cause__`: the chain as plain XthunkErrors, innermost last.
    let base = errors.getattr("XthunkError")?;
    let mut inner: Option<Bound<'_, PyAny>> = None;
    for c in causes.iter().rev() {
        let e = base.call1((c.as_str(),))?;
        e.setattr("causes", PyList::empty(py))?;
        if let Some(i) = inner.take() {
            e.setattr("__cause__", i)?;
        }
        inner = Some(e);
    }
    if let Some(i) = inner {
        exc.setattr("__cause__", i)?;
    }
    Ok(PyErr::from_value(exc))
}

/// An `InvalidArgumentError` with `message`.
pub fn invalid(message: impl Into<String>) -> PyErr {
    raise(Kind::InvalidArgument, message.into(), None)
}

/// An `UnsupportedError` with `message`.
pub fn unsupported(message: impl Into<String>) -> PyErr {
    raise(Kind::Unsupported, message.into(), None)
}

/// Converts xthunk's errors (`?` in the bindings).
pub struct XErr(PyErr);

impl From<XErr> for PyErr {
    fn from(e: XErr) -> Self {
        e.0
    }
}

impl From<Error> for XErr {
    fn from(e: Error) -> Self {
        XErr(raise(kind_of(&e), e.to_string(), Some(&e)))
    }
}

impl From<ProtoError> for XErr {
    fn from(e: ProtoError) -> Self {
        let kind = match e {
            ProtoError::Io { .. } => Kind::InvalidArgument,
            _ => Kind::Program,
        };
        XErr(raise(kind, e.to_string(), Some(&e)))
    }
}

impl From<PyErr> for XErr {
    fn from(e: PyErr) -> Self {
        XErr(e)
    }
}

impl From<xthunk::ir::ValidationError> for XErr {
    fn from(e: xthunk::ir::ValidationError) -> Self {
        XErr(raise(Kind::Program, e.to_string(), Some(&e)))
    }
}

pub type XResult<T> = Result<T, XErr>;
