//! `xthunk.DeviceArray`: a typed buffer that stays on its device between runs; `numpy()`
//! copies it to the host, `__dlpack__` shares it without a copy where the memory is the
//! host's.

use crate::arrays;
use crate::device::Device;
use crate::dlpack;
use crate::errors::XResult;
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
