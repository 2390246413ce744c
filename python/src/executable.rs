//! `xthunk.Executable`: a program loaded onto one device, its signature, and running it with
//! numpy arrays or device arrays (the GIL released while it runs), on one device or SPMD on
//! several.

use crate::arrays;
use crate::device::Device;
use crate::device_array::DeviceArray;
use crate::errors::{XResult, invalid};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;
use std::time::Duration;
use xthunk::core::collectives::Timeouts;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::TensorSpec;
use xthunk::{Backend, Buffer, DeviceMemory, ExecuteOptions, LoadedExecutable};

/// A parameter or output: `name`, `dtype` (numpy's name), `shape`.
#[pyclass(module = "xthunk", frozen, name = "TensorSpec")]
pub struct PyTensorSpec {
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    dtype: &'static str,
    dims: Vec<u64>,
}

#[pymethods]
impl PyTensorSpec {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.dims)
    }
    fn __repr__(&self) -> String {
        format!(
            "TensorSpec({:?}, {}, {:?})",
            self.name, self.dtype, self.dims
        )
    }
}

fn spec(s: &TensorSpec) -> PyTensorSpec {
    PyTensorSpec {
        name: s.name.clone(),
        dtype: arrays::numpy_name(s.dtype),
        dims: s.dims.clone(),
    }
}

/// A program loaded onto one device (`Runtime.load`).
#[pyclass(module = "xthunk", frozen)]
pub struct Executable {
    pub(crate) loaded: Arc<LoadedExecutable>,
    pub(crate) rt: Arc<xthunk::Runtime>,
    pub(crate) backend: Arc<dyn Backend>,
}

/// One parameter's memory for a run: uploaded for this run, or a caller's device array.
enum Param {
    Fresh(Buffer),
    Device(Arc<Buffer>),
}

impl Param {
    fn memory(&self) -> &dyn DeviceMemory {
        match self {
            Param::Fresh(b) => b.as_ref(),
            Param::Device(b) => b.as_ref().as_ref(),
        }
    }
}

impl Executable {
    fn sig(&self) -> &xthunk::ir::Signature {
        &self.loaded.executable().signature
    }

    /// Refuses names that are not parameters, and finds every parameter's value.
    fn inputs<'py>(&self, inputs: &Bound<'py, PyDict>) -> XResult<Vec<Bound<'py, PyAny>>> {
        let sig = self.sig();
        for key in inputs.keys() {
            let k: String = key.extract()?;
            if !sig.parameters.iter().any(|p| p.name == k) {
                return Err(invalid(format!(
                    "`{}` has no parameter `{k}` (its parameters: {})",
                    self.loaded.executable().name,
                    self.parameter_names()
                ))
                .into());
            }
        }
        sig.parameters
            .iter()
            .map(|p| {
                inputs.get_item(&p.name)?.ok_or_else(|| {
                    invalid(format!(
                        "missing input `{}` ({}{:?}) of `{}`",
                        p.name,
                        p.dtype,
                        p.dims,
                        self.loaded.executable().name
                    ))
                    .into()
                })
            })
            .collect()
    }

    fn parameter_names(&self) -> String {
        let names: Vec<&str> = self
            .sig()
            .parameters
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        names.join(", ")
    }

    fn allocate(&self, s: &TensorSpec) -> XResult<Buffer> {
        let exe = self.loaded.executable();
        let a = exe
            .allocations
            .get(s.allocation as usize)
            .ok_or_else(|| invalid(format!("`{}` has no allocation", s.name)))?;
        Ok(self
            .loaded
            .device()
            .allocate(a.size, a.alignment, a.memory_space)?)
    }

    fn param(&self, s: &TensorSpec, value: &Bound<'_, PyAny>) -> XResult<Param> {
        if let Ok(d) = value.cast::<DeviceArray>() {
            let d = d.get();
            let dev = self.loaded.device();
            if d.device.backend_name() != dev.backend_name()
                || d.device.info().ordinal != dev.info().ordinal
            {
                return Err(invalid(format!(
                    "`{}` is on {} device {}, the executable on {} device {}",
                    s.name,
                    d.device.backend_name(),
                    d.device.info().ordinal,
                    dev.backend_name(),
                    dev.info().ordinal
                ))
                .into());
            }
            xthunk::embed::check_array(s, d.dtype, &d.dims)?;
            return Ok(Param::Device(d.buffer.clone()));
        }
        let arr = arrays::contiguous(value)?;
        let bytes = arrays::check(s, &arr)?;
        let buf = self.allocate(s)?;
        self.loaded.device().copy_from_host(bytes, buf.ptr())?;
        Ok(Param::Fresh(buf))
    }

    /// Runs once; the outputs as device buffers.
    fn execute(&self, py: Python<'_>, inputs: &Bound<'_, PyDict>) -> XResult<Vec<Buffer>> {
        let values = self.inputs(inputs)?;
        let params = self
            .sig()
            .parameters
            .iter()
            .zip(&values)
            .map(|(s, v)| self.param(s, v))
            .collect::<XResult<Vec<_>>>()?;
        let outputs = self
            .sig()
            .outputs
            .iter()
            .map(|s| self.allocate(s))
            .collect::<XResult<Vec<_>>>()?;
        let p: Vec<&dyn DeviceMemory> = params.iter().map(Param::memory).collect();
        let o: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref()).collect();
        let loaded = &self.loaded;
        py.detach(|| loaded.execute(&p, &o, &ExecuteOptions::default()))?;
        Ok(outputs)
    }

    fn results<'py>(
        &self,
        py: Python<'py>,
        outputs: Vec<Buffer>,
        keep_on_device: bool,
    ) -> XResult<Vec<Bound<'py, PyAny>>> {
        let device = self.loaded.device();
        self.sig()
            .outputs
            .iter()
            .zip(outputs)
            .map(|(s, b)| {
                let d = DeviceArray::new(b, device.clone(), s.dtype, s.dims.clone());
                if keep_on_device {
                    Ok(Bound::new(py, d)?.into_any())
                } else {
                    d.to_numpy(py)
                }
            })
            .collect()
    }
}

#[pymethods]
impl Executable {
    /// The program's name.
    #[getter]
    fn name(&self) -> String {
        self.loaded.executable().name.clone()
    }
    #[getter]
    fn parameters(&self) -> Vec<PyTensorSpec> {
        self.sig().parameters.iter().map(spec).collect()
    }
    #[getter]
    fn outputs(&self) -> Vec<PyTensorSpec> {
        self.sig().outputs.iter().map(spec).collect()
    }
    /// `{"parameters": [TensorSpec...], "outputs": [TensorSpec...]}`.
    #[getter]
    fn signature<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("parameters", self.parameters())?;
        d.set_item("outputs", self.outputs())?;
        Ok(d)
    }
    #[getter]
    fn device(&self) -> Device {
        Device {
            device: self.loaded.device().clone(),
        }
    }

    /// `exe(x=..., w=...)`: runs with numpy (or device) arrays by parameter name; the output
    /// as a numpy array, or a tuple of them in signature order when there are several.
    #[pyo3(signature = (**arrays))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        arrays: Option<Bound<'py, PyDict>>,
    ) -> XResult<Bound<'py, PyAny>> {
        let arrays = arrays.unwrap_or_else(|| PyDict::new(py));
        let outputs = self.execute(py, &arrays)?;
        let mut results = self.results(py, outputs, false)?;
        if results.len() == 1 {
            if let Some(r) = results.pop() {
                return Ok(r);
            }
        }
        Ok(PyTuple::new(py, results)?.into_any())
    }

    /// Runs with `{name: array}` (numpy arrays or `DeviceArray`s); returns `{name: array}`:
    /// numpy arrays, or `DeviceArray`s that stay on the device with `keep_on_device=True`.
    #[pyo3(signature = (inputs, *, keep_on_device = false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Bound<'py, PyDict>,
        keep_on_device: bool,
    ) -> XResult<Bound<'py, PyDict>> {
        let outputs = self.execute(py, &inputs)?;
        let results = self.results(py, outputs, keep_on_device)?;
        let d = PyDict::new(py);
        for (s, r) in self.sig().outputs.iter().zip(results) {
            d.set_item(&s.name, r)?;
        }
        Ok(d)
    }

    /// SPMD: the program on devices `0..len(inputs)` of this executable's backend, one thread
    /// per rank, collectives among them; `inputs[rank]` is that rank's `{name: array}`.
    /// Returns one `{name: numpy array}` per rank. A collective that waits `timeout` seconds
    /// for a peer fails.
    #[pyo3(signature = (inputs, *, timeout = 60.0))]
    fn run_spmd<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyDict>>,
        timeout: f64,
    ) -> XResult<Vec<Bound<'py, PyDict>>> {
        if !(timeout.is_finite() && timeout > 0.0 && timeout <= 86_400.0) {
            return Err(invalid(format!(
                "timeout must be in (0, 86400] seconds, got {timeout}"
            ))
            .into());
        }
        let sig = self.sig();
        let mut per_rank: Vec<Vec<Vec<u8>>> = Vec::with_capacity(inputs.len());
        for (rank, d) in inputs.iter().enumerate() {
            let values = self.inputs(d).map_err(|e| with_rank(py, e, rank))?;
            let mut bytes = Vec::with_capacity(values.len());
            for (s, v) in sig.parameters.iter().zip(&values) {
                let arr = arrays::contiguous(v)?;
                let b = arrays::check(s, &arr).map_err(|e| with_rank(py, e, rank))?;
                bytes.push(b.to_vec());
            }
            per_rank.push(bytes);
        }
        let devices = xthunk::embed::devices(self.backend.as_ref(), inputs.len())?;
        let t = Duration::from_secs_f64(timeout);
        let (cliques, off) = xthunk::embed::spmd_cliques(
            &self.rt,
            self.backend.as_ref(),
            &devices,
            Timeouts::new(t / 6, t),
        )?;
        if let Some(why) = off {
            let msg = format!(
                "xthunk: collectives are off on backend {}: {why}",
                self.backend.name()
            );
            let msg = std::ffi::CString::new(msg.replace('\0', "?")).unwrap_or_default();
            let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
            PyErr::warn(py, &category, &msg, 1)?;
        }
        let program = self.loaded.program();
        let results = py.detach(|| {
            xthunk::core::executor::spmd::run_program(
                program,
                &devices,
                cliques,
                &per_rank,
                1,
                &ExecutorConfig::default(),
                &ExecuteOptions::default(),
            )
        })?;
        results
            .iter()
            .map(|r| {
                let d = PyDict::new(py);
                for (s, bytes) in sig.outputs.iter().zip(&r.outputs) {
                    let arr = arrays::empty(py, s.dtype, &s.dims)?;
                    // SAFETY: `arr` is new; nothing else sees it yet.
                    unsafe {
                        arrays::fill(&arr, |dst| {
                            if dst.len() != bytes.len() {
                                return Err(
                                    invalid(format!("output `{}`: size mismatch", s.name)).into()
                                );
                            }
                            dst.copy_from_slice(bytes);
                            Ok(())
                        })?
                    };
                    d.set_item(&s.name, arr)?;
                }
                Ok(d)
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "xthunk.Executable({:?} on {} {}: {} parameters, {} outputs)",
            self.loaded.executable().name,
            self.loaded.device().backend_name(),
            self.loaded.device().info().ordinal,
            self.sig().parameters.len(),
            self.sig().outputs.len()
        )
    }
}

/// The error of rank `rank`'s inputs, naming the rank.
fn with_rank(py: Python<'_>, e: crate::errors::XErr, rank: usize) -> crate::errors::XErr {
    let e: PyErr = e.into();
    let msg = format!("rank {rank}: {}", e.value(py));
    invalid(msg).into()
}
