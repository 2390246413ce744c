//! `xthunk.DeviceArray`: a typed buffer that stays on its device between runs; `numpy()`
//! copies it to the host, `__dlpack__` shares it without a copy where the memory is the
//! host's. Views (`reshape`, `a[i:j]`, layout-keeping `transpose`) share their base's memory
//! through a [`views::Window`] and keep it alive.

use crate::arrays;
use crate::device::Device;
use crate::dlpack;
use crate::errors::XResult;
use crate::views;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Arc;
use xthunk::ir::DType;
use xthunk::{Buffer, DeviceMemory};

/// A typed array in device memory.
#[pyclass(module = "xthunk", frozen)]
pub struct DeviceArray {
    pub(crate) buffer: Arc<Buffer>,
    pub(crate) device: Arc<dyn xthunk::Device>,
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<u64>,
}

impl DeviceArray {
    /// The alignment of buffers made for device arrays (at least any program's).
    pub const ALIGNMENT: u64 = 256;

    pub fn new(
        buffer: Buffer,
        device: Arc<dyn xthunk::Device>,
        dtype: DType,
        dims: Vec<u64>,
    ) -> Self {
        DeviceArray {
            buffer: Arc::new(buffer),
            device,
            dtype,
            dims,
        }
    }

    pub fn memory(&self) -> &dyn DeviceMemory {
        self.buffer.as_ref().as_ref()
    }

    /// A copy of an array exported through DLPack (host memory) in new memory of `device`.
    pub fn from_dlpack(obj: &Bound<'_, PyAny>, device: Arc<dyn xthunk::Device>) -> XResult<Self> {
        let (buffer, dtype, dims) = dlpack::import(obj, device.as_ref(), Self::ALIGNMENT)?;
        Ok(DeviceArray::new(buffer, device, dtype, dims))
    }

    /// The bytes its elements take (`nbytes` may be more for an allocation padded by a
    /// program).
    pub fn data_bytes(&self) -> XResult<u64> {
        views::elements(&self.dims)?
            .checked_mul(self.dtype.size() as u64)
            .ok_or_else(|| crate::errors::invalid("array size overflows 64 bits").into())
    }

    /// The same memory with other extents.
    fn with_dims(&self, dims: Vec<u64>) -> DeviceArray {
        DeviceArray {
            buffer: self.buffer.clone(),
            device: self.device.clone(),
            dtype: self.dtype,
            dims,
        }
    }

    /// Copies the array into a new numpy array.
    pub fn to_numpy<'py>(&self, py: Python<'py>) -> XResult<Bound<'py, PyAny>> {
        let arr = arrays::empty(py, self.dtype, &self.dims)?;
        let (device, ptr) = (self.device.clone(), self.buffer.ptr());
        // SAFETY: `arr` is new; nothing else sees it until it is returned.
        unsafe {
            arrays::fill(&arr, |dst| {
                py.detach(|| device.copy_to_host(ptr, dst))?;
                Ok(())
            })?
        };
        Ok(arr.into_any())
    }
}

#[pymethods]
impl DeviceArray {
    /// numpy's name of the element type.
    #[getter]
    fn dtype(&self) -> &'static str {
        arrays::numpy_name(self.dtype)
    }
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.dims)
    }
    #[getter]
    fn nbytes(&self) -> u64 {
        self.buffer.size()
    }
    #[getter]
    fn device(&self) -> Device {
        Device {
            device: self.device.clone(),
        }
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.dims.len()
    }
    /// The number of elements.
    #[getter]
    fn size(&self) -> XResult<u64> {
        views::elements(&self.dims)
    }
    fn __len__(&self) -> PyResult<usize> {
        match self.dims.first() {
            Some(&d) => usize::try_from(d)
                .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("extent too large")),
            None => Err(pyo3::exceptions::PyTypeError::new_err(
                "len() of a 0-d device array",
            )),
        }
    }
    /// A view with other extents (the same elements, the same memory): `a.reshape(2, 3)`,
    /// `a.reshape((2, -1))`.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> XResult<DeviceArray> {
        let shape: Vec<i64> = match shape.len() {
            1 => {
                let s = shape.get_item(0)?;
                match s.extract::<i64>() {
                    Ok(d) => vec![d],
                    Err(_) => s.extract().map_err(|_| {
                        crate::errors::invalid(format!(
                            "reshape: shape must be integers or a tuple of them, got a {}",
                            s.get_type()
                                .name()
                                .map(|n| n.to_string())
                                .unwrap_or_default()
                        ))
                    })?,
                }
            }
            _ => shape.extract().map_err(|_| {
                crate::errors::invalid("reshape: shape must be integers or a tuple of them")
            })?,
        };
        let n = views::elements(&self.dims)?;
        let dims = views::reshape(&self.dims, n, &shape)?;
        Ok(self.with_dims(dims))
    }
    /// `a[2:5]`, `a[1]`, `a[0, 1:3]`, `a[..., :]`: a view sharing the memory (an offset into
    /// it). Strided selections (steps, slicing an inner axis after an outer one) are refused
    /// with `UnsupportedError`.
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> XResult<DeviceArray> {
        let ix = views::index(&self.dims, key)?;
        let item = self.dtype.size() as u64;
        let offset = ix
            .offset
            .checked_mul(item)
            .ok_or_else(|| crate::errors::invalid("index offset overflows 64 bits"))?;
        let size = views::elements(&ix.dims)?
            .checked_mul(item)
            .ok_or_else(|| crate::errors::invalid("view size overflows 64 bits"))?;
        let window = views::Window::new(self.buffer.clone(), offset, size)?;
        Ok(DeviceArray {
            buffer: Arc::new(Box::new(window)),
            device: self.device.clone(),
            dtype: self.dtype,
            dims: ix.dims,
        })
    }
    /// A view with the axes permuted (reversed without `axes`), where that keeps the layout
    /// (only axes of extent 1 move); otherwise `UnsupportedError` (it would need a copy).
    #[pyo3(signature = (*axes))]
    fn transpose(&self, axes: &Bound<'_, PyTuple>) -> XResult<DeviceArray> {
        let axes: Vec<i64> = match axes.len() {
            1 => {
                let a = axes.get_item(0)?;
                match a.extract::<i64>() {
                    Ok(d) => vec![d],
                    Err(_) => a.extract().map_err(|_| {
                        crate::errors::invalid(
                            "transpose: axes must be integers or a tuple of them",
                        )
                    })?,
                }
            }
            _ => axes.extract().map_err(|_| {
                crate::errors::invalid("transpose: axes must be integers or a tuple of them")
            })?,
        };
        Ok(self.with_dims(views::transpose(&self.dims, &axes)?))
    }
    /// `transpose()`.
    #[getter(T)]
    fn t(&self) -> XResult<DeviceArray> {
        Ok(self.with_dims(views::transpose(&self.dims, &[])?))
    }
    /// A copy on the host, as a numpy array.
    fn numpy<'py>(&self, py: Python<'py>) -> XResult<Bound<'py, PyAny>> {
        self.to_numpy(py)
    }
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> XResult<Bound<'py, PyAny>> {
        let _ = copy; // always a copy: the memory may not be the host's
        let arr = self.to_numpy(py)?;
        Ok(match dtype {
            Some(d) => arr.call_method1("astype", (d,))?,
            None => arr,
        })
    }
    /// DLPack: the array's memory, shared (no copy), for `numpy.from_dlpack` and others.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> XResult<Bound<'py, PyAny>> {
        // Runs are synchronous: the memory is ready for any stream. A consumer that names a
        // `max_version` of 1 or more gets DLPack 1.0's versioned tensor, others the legacy one.
        let _ = (stream, dl_device);
        let versioned = match max_version {
            Some(v) => v.extract::<(u32, u32)>().is_ok_and(|(major, _)| major >= 1),
            None => false,
        };
        let tensor = dlpack::Tensor {
            buffer: &self.buffer,
            device: self.device.as_ref(),
            dtype: self.dtype,
            dims: &self.dims,
        };
        dlpack::export(py, tensor, copy == Some(true), versioned)
    }
    fn __dlpack_device__(&self) -> XResult<(i32, i32)> {
        dlpack::device_of(self.device.as_ref())
    }
    fn __repr__(&self) -> String {
        format!(
            "xthunk.DeviceArray({}{:?} on {} {})",
            self.dtype,
            self.dims,
            self.device.backend_name(),
            self.device.info().ordinal
        )
    }
}
