//! numpy arrays in and out: xthunk's element types as numpy dtypes (bf16 and the 8-bit floats
//! through `ml_dtypes`), a caller's array checked against a signature entry and read in place,
//! new arrays written in place.

use crate::errors::{XResult, invalid, unsupported};
use numpy::npyffi::objects::_PyArray_GET_ITEM_DATA;
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use xthunk::ir::{DType, TensorSpec};

/// numpy's functions and dtypes, looked up once (calls run many times a second).
static ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static EMPTY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DTYPES: [PyOnceLock<Py<PyAny>>; DType::ALL.len()] =
    [const { PyOnceLock::new() }; DType::ALL.len()];

/// numpy's name of an element type.
pub fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::Pred => "bool",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I16 => "int16",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::C64 => "complex64",
        DType::C128 => "complex128",
        DType::F8E4M3FN => "float8_e4m3fn",
        DType::F8E5M2 => "float8_e5m2",
    }
}

/// The element type of a numpy dtype name (`None` for one xthunk has not).
pub fn from_numpy_name(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| numpy_name(*d) == name)
}

/// A dtype given as xthunk's name (`"f32"`), numpy's (`"float32"`), or a numpy dtype / type.
pub fn parse_dtype(obj: &Bound<'_, PyAny>) -> XResult<DType> {
    let name: String = match obj.extract::<String>() {
        Ok(s) => s,
        Err(_) => {
            let np = obj.py().import("numpy")?;
            np.call_method1("dtype", (obj,))?
                .getattr("name")?
                .extract()?
        }
    };
    DType::from_name(&name)
        .or_else(|| from_numpy_name(&name))
        .ok_or_else(|| invalid(format!("unknown element type `{name}`")).into())
}

/// The numpy dtype object of `d` (bf16 and the 8-bit floats need `ml_dtypes`).
pub fn numpy_dtype<'py>(py: Python<'py>, d: DType) -> XResult<Bound<'py, PyAny>> {
    let slot = DType::ALL
        .iter()
        .position(|x| *x == d)
        .and_then(|i| DTYPES.get(i))
        .ok_or_else(|| invalid(format!("no numpy dtype for {d}")))?;
    let dtype = slot.get_or_try_init(py, || -> XResult<Py<PyAny>> {
        let np = py.import("numpy")?;
        let arg = if matches!(d, DType::BF16 | DType::F8E4M3FN | DType::F8E5M2) {
            let ml = py.import("ml_dtypes").map_err(|_| {
                unsupported(format!(
                    "{d} arrays need the ml_dtypes package (pip install ml_dtypes)"
                ))
            })?;
            ml.getattr(numpy_name(d))?
        } else {
            pyo3::types::PyString::new(py, numpy_name(d)).into_any()
        };
        Ok(np.call_method1("dtype", (arg,))?.unbind())
    })?;
    Ok(dtype.bind(py).clone())
}

/// A C-contiguous numpy array of `obj` (no conversion of its dtype: a wrong dtype is refused
/// by [`check`], never silently cast); `obj` itself when it is one.
pub fn contiguous<'py>(obj: &Bound<'py, PyAny>) -> XResult<Bound<'py, PyUntypedArray>> {
    if let Ok(arr) = obj.cast::<PyUntypedArray>()
        && arr.is_c_contiguous()
    {
        return Ok(arr.clone());
    }
    let py = obj.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("order", "C")?;
    let arr = ASARRAY
        .import(py, "numpy", "asarray")?
        .call((obj,), Some(&kwargs))?;
    Ok(arr
        .cast_into::<PyUntypedArray>()
        .map_err(|e| invalid(format!("not an array: {e}")))?)
}

/// The element type and shape of `arr`.
pub fn describe(arr: &Bound<'_, PyUntypedArray>) -> XResult<(DType, Vec<u64>)> {
    let descr = arr.dtype();
    let name: String = descr.getattr("name")?.extract()?;
    let dtype = from_numpy_name(&name)
        .ok_or_else(|| invalid(format!("arrays of {name} have no xthunk element type")))?;
    // xthunk's data is little-endian (the hosts it runs on are): a byte-swapped array is
    // refused rather than read wrongly.
    if descr.getattr("byteorder")?.extract::<String>()? == ">" {
        return Err(invalid(format!(
            "a big-endian array of {name}: convert it with a.astype(a.dtype.newbyteorder('='))"
        ))
        .into());
    }
    Ok((dtype, arr.shape().iter().map(|d| *d as u64).collect()))
}

/// Checks `arr` against `spec` (dtype and shape, like the CLI's inputs) and returns its bytes
/// in place (valid while `arr` lives and is not resized).
pub fn check<'a>(spec: &TensorSpec, arr: &'a Bound<'_, PyUntypedArray>) -> XResult<&'a [u8]> {
    // The common case without building strings: the dtype the parameter has.
    let expected = numpy_dtype(arr.py(), spec.dtype).ok();
    let same = expected.is_some_and(|e| {
        e.cast::<numpy::PyArrayDescr>()
            .is_ok_and(|e| arr.dtype().is_equiv_to(e))
    });
    let (dtype, dims) = if same {
        (spec.dtype, arr.shape().iter().map(|d| *d as u64).collect())
    } else {
        let name: String = arr.dtype().getattr("name")?.extract()?;
        if from_numpy_name(&name).is_none() {
            let what = if name == "object" {
                "a Python object that is not an array of numbers (None, a mixed list, ...)"
            } else {
                "an array"
            };
            return Err(invalid(format!(
                "`{}` must be {}{:?}, got {what}: arrays of {name} have no xthunk element type",
                spec.name, spec.dtype, spec.dims
            ))
            .into());
        }
        describe(arr)?
    };
    let size = xthunk::embed::check_array(spec, dtype, &dims)?;
    bytes(arr, size)
}

/// The byte size of `arr` (its elements times its element size, checked).
pub fn nbytes(arr: &Bound<'_, PyUntypedArray>) -> XResult<u64> {
    arr.shape()
        .iter()
        .try_fold(arr.dtype().itemsize() as u64, |a, d| {
            a.checked_mul(*d as u64)
        })
        .ok_or_else(|| invalid("array too large").into())
}

/// The `size` bytes of a C-contiguous array.
pub fn bytes<'a>(arr: &'a Bound<'_, PyUntypedArray>, size: u64) -> XResult<&'a [u8]> {
    if !arr.is_c_contiguous() {
        return Err(invalid("internal: array not contiguous").into());
    }
    let size = usize::try_from(size).map_err(|_| invalid("array too large"))?;
    if size == 0 {
        return Ok(&[]);
    }
    // SAFETY: a live numpy array object (the bound reference keeps it alive).
    let data = unsafe { (*_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).data } as *const u8;
    // SAFETY: a C-contiguous array of `size` bytes (its dtype and shape were checked to give
    // exactly `size`); it lives as long as the borrow of `arr`.
    Ok(unsafe { std::slice::from_raw_parts(data, size) })
}

/// A new, uninitialised C-contiguous numpy array for `spec`.
pub fn empty<'py>(
    py: Python<'py>,
    dtype: DType,
    dims: &[u64],
) -> XResult<Bound<'py, PyUntypedArray>> {
    let shape: Vec<u64> = dims.to_vec();
    let arr = EMPTY
        .import(py, "numpy", "empty")?
        .call1((shape, numpy_dtype(py, dtype)?))?;
    Ok(arr
        .cast_into::<PyUntypedArray>()
        .map_err(|e| invalid(format!("numpy.empty: {e}")))?)
}

/// Fills an array made by [`empty`] through `f`, which gets its bytes.
///
/// # Safety
/// Nothing else reads or writes `arr`'s memory while `f` runs.
pub unsafe fn fill<R>(
    arr: &Bound<'_, PyUntypedArray>,
    f: impl FnOnce(&mut [u8]) -> XResult<R>,
) -> XResult<R> {
    let size = usize::try_from(nbytes(arr)?).map_err(|_| invalid("array too large"))?;
    if size == 0 {
        return f(&mut []);
    }
    // SAFETY: a live numpy array object.
    let data = unsafe { (*_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).data } as *mut u8;
    // SAFETY: a fresh C-contiguous array of `size` bytes, not shared (the caller's contract).
    f(unsafe { std::slice::from_raw_parts_mut(data, size) })
}
