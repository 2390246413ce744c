//! `xthunk.Executable`: a program loaded onto one device, its signature, and running it with
//! numpy arrays or device arrays (the GIL released while it runs; a blocking run checks for
//! signals every 50 ms and is cancelled by a `KeyboardInterrupt`), on one device or SPMD on
//! several, blocking or asynchronously (`execute_async`, an `xthunk.Execution`).

use crate::arrays;
use crate::device::Device;
use crate::device_array::DeviceArray;
use crate::errors::{XResult, invalid};
use crate::execution::{Outputs, PyExecution, deadline, interruptible};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;
use std::time::Duration;
use xthunk::core::collectives::Timeouts;
use xthunk::core::executor::{Execution, ExecutorConfig, RunBuffers};
use xthunk::ir::TensorSpec;
use xthunk::{Backend, Buffer, CancelToken, DeviceMemory, ExecuteOptions, LoadedExecutable};

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
pub(crate) enum Param {
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

/// One output's memory for a run: allocated for it, a donated parameter's, or the caller's
/// (`out=`).
pub(crate) enum Output {
    Fresh(Buffer),
    Shared(Arc<Buffer>),
    Given(Py<DeviceArray>, Arc<Buffer>),
}

impl Output {
    fn memory(&self) -> &dyn DeviceMemory {
        match self {
            Output::Fresh(b) => b.as_ref(),
            Output::Shared(b) | Output::Given(_, b) => b.as_ref().as_ref(),
        }
    }
}

/// A run's parameters and outputs, checked and uploaded, ready to execute.
pub(crate) struct Prepared {
    params: Vec<Param>,
    pub(crate) outputs: Vec<Output>,
}

/// An asynchronous run's outputs, made into `run`'s dict when its result is asked for.
struct Finished {
    exe: Py<Executable>,
    outputs: Vec<Output>,
    keep_on_device: bool,
}

impl Outputs for Finished {
    fn into_dict(self: Box<Self>, py: Python<'_>) -> XResult<Py<PyDict>> {
        let exe = self.exe.bind(py).get();
        Ok(exe
            .result_dict(py, self.outputs, self.keep_on_device)?
            .unbind())
    }
}

impl RunBuffers for Prepared {
    fn buffers(&self) -> (Vec<&dyn DeviceMemory>, Vec<&dyn DeviceMemory>) {
        let p = self.params.iter().map(Param::memory).collect();
        let o = self.outputs.iter().map(Output::memory).collect();
        (p, o)
    }
}

impl Executable {
    /// `{output name: array}` of a finished run's outputs.
    pub(crate) fn result_dict<'py>(
        &self,
        py: Python<'py>,
        outputs: Vec<Output>,
        keep_on_device: bool,
    ) -> XResult<Bound<'py, PyDict>> {
        let results = self.results(py, outputs, keep_on_device)?;
        let d = PyDict::new(py);
        for (s, r) in self.sig().outputs.iter().zip(results) {
            d.set_item(&s.name, r)?;
        }
        Ok(d)
    }

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

    /// Why memory `m` cannot be `s`'s buffer as it is (a view off the program's alignment or
    /// shorter than its allocation), or `None`.
    fn misfit(&self, s: &TensorSpec, m: &dyn DeviceMemory) -> XResult<Option<String>> {
        let exe = self.loaded.executable();
        let a = exe
            .allocations
            .get(s.allocation as usize)
            .ok_or_else(|| invalid(format!("`{}` has no allocation", s.name)))?;
        Ok(
            if a.alignment > 0 && !m.ptr().0.is_multiple_of(a.alignment) {
                Some(format!(
                    "its memory at {} is not aligned to the program's {} bytes",
                    m.ptr(),
                    a.alignment
                ))
            } else if m.size() < a.size {
                Some(format!(
                    "it has {} bytes, the program's buffer {}",
                    m.size(),
                    a.size
                ))
            } else {
                None
            },
        )
    }

    fn param(&self, s: &TensorSpec, value: &Bound<'_, PyAny>, shared: bool) -> XResult<Param> {
        if let Ok(d) = value.cast::<DeviceArray>() {
            let d = d.get();
            self.same_device(&s.name, d)?;
            xthunk::embed::check_array(s, d.dtype, &d.dims)?;
            let Some(why) = self.misfit(s, d.memory())? else {
                return Ok(Param::Device(d.buffer.clone()));
            };
            // A view the program cannot take in place (`why`): copied on the device for this
            // run.
            if shared {
                return Err(invalid(format!(
                    "donate: `{}` cannot be donated: {why} (a view at an offset; donate its \
                     base, or a copy)",
                    s.name
                ))
                .into());
            }
            let buf = self.allocate(s)?;
            let stream = self.loaded.device().create_stream()?;
            stream.copy(d.buffer.ptr(), buf.ptr(), d.data_bytes()?)?;
            stream.synchronize()?;
            return Ok(Param::Fresh(buf));
        }
        let arr = arrays::contiguous(value)?;
        let bytes = arrays::check(s, &arr)?;
        let buf = self.allocate(s)?;
        self.loaded.device().copy_from_host(bytes, buf.ptr())?;
        Ok(if shared {
            Param::Device(Arc::new(buf))
        } else {
            Param::Fresh(buf)
        })
    }

    /// Runs once, blocking (a `KeyboardInterrupt` cancels it); the outputs' memory. See
    /// [`Self::prepare`] for `donate` and `out`.
    fn execute(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyDict>,
        donate: &[String],
        out: Option<&Bound<'_, PyDict>>,
        deadline: Option<Duration>,
    ) -> XResult<Vec<Output>> {
        let prepared = self.prepare(inputs, donate, out)?;
        let (token, caught) = interruptible();
        let opts = ExecuteOptions {
            deadline,
            cancel: Some(token),
            ..Default::default()
        };
        let loaded = &self.loaded;
        // Owned by the run: after a deadline, the memory outlives the work it abandoned.
        match py.detach(|| loaded.execute_owned(prepared, opts)) {
            Ok(prepared) => Ok(prepared.outputs),
            // A signal handler's exception (`KeyboardInterrupt`) cancelled it: raised as is.
            Err(e) => match caught.take() {
                Some(interrupt) => Err(interrupt.into()),
                None => Err(e.into()),
            },
        }
    }

    /// A run's memory: parameters checked and uploaded (or the caller's device arrays),
    /// outputs allocated. `donate` names parameters whose memory becomes their aliased
    /// output's; `out` gives outputs' memory (`DeviceArray`s) by name.
    pub(crate) fn prepare(
        &self,
        inputs: &Bound<'_, PyDict>,
        donate: &[String],
        out: Option<&Bound<'_, PyDict>>,
    ) -> XResult<Prepared> {
        let exe = self.loaded.executable();
        let sig = self.sig();
        // Per output, the parameter donated to it.
        let mut donated_to: Vec<Option<usize>> = vec![None; sig.outputs.len()];
        let mut shared = vec![false; sig.parameters.len()];
        for name in donate {
            let Some(p) = sig.parameters.iter().position(|p| &p.name == name) else {
                return Err(invalid(format!(
                    "donate: `{}` has no parameter `{name}` (its parameters: {})",
                    exe.name,
                    self.parameter_names()
                ))
                .into());
            };
            let Some(a) = exe.aliases.iter().find(|a| a.parameter as usize == p) else {
                return Err(invalid(format!(
                    "donate: parameter `{name}` of `{}` is aliased to no output, so it cannot \
                     be donated (aliased: {})",
                    exe.name,
                    self.alias_names()
                ))
                .into());
            };
            donated_to[a.output as usize] = Some(p);
            shared[p] = true;
        }
        let values = self.inputs(inputs)?;
        let params = sig
            .parameters
            .iter()
            .zip(&values)
            .zip(&shared)
            .map(|((s, v), shared)| self.param(s, v, *shared))
            .collect::<XResult<Vec<_>>>()?;
        let given = self.given_outputs(out)?;
        let outputs = sig
            .outputs
            .iter()
            .zip(donated_to)
            .zip(given)
            .map(|((s, d), g)| match (d, g) {
                (Some(p), None) => match &params[p] {
                    Param::Device(b) => Ok(Output::Shared(b.clone())),
                    Param::Fresh(_) => Ok(Output::Fresh(self.allocate(s)?)),
                },
                (Some(p), Some(_)) => Err(invalid(format!(
                    "output `{}` is in `out` but parameter `{}`, donated, is aliased to it",
                    s.name, sig.parameters[p].name
                ))
                .into()),
                (None, Some(g)) => Ok(g),
                (None, None) => Ok(Output::Fresh(self.allocate(s)?)),
            })
            .collect::<XResult<Vec<_>>>()?;
        Ok(Prepared { params, outputs })
    }

    /// The `out=` dict's `DeviceArray`s, per output (checked: names, device, dtype, shape).
    fn given_outputs(&self, out: Option<&Bound<'_, PyDict>>) -> XResult<Vec<Option<Output>>> {
        let sig = self.sig();
        let mut given: Vec<Option<Output>> = sig.outputs.iter().map(|_| None).collect();
        let Some(out) = out else {
            return Ok(given);
        };
        for (k, v) in out.iter() {
            let name: String = k.extract()?;
            let Some(i) = sig.outputs.iter().position(|o| o.name == name) else {
                let names: Vec<&str> = sig.outputs.iter().map(|o| o.name.as_str()).collect();
                return Err(invalid(format!(
                    "out: `{}` has no output `{name}` (its outputs: {})",
                    self.loaded.executable().name,
                    names.join(", ")
                ))
                .into());
            };
            let d = v.cast::<DeviceArray>().map_err(|_| {
                invalid(format!(
                    "out[`{name}`] is a {}, not an xthunk.DeviceArray",
                    v.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?;
            let a = d.get();
            self.same_device(&name, a)?;
            xthunk::embed::check_array(&sig.outputs[i], a.dtype, &a.dims)?;
            if let Some(why) = self.misfit(&sig.outputs[i], a.memory())? {
                return Err(invalid(format!(
                    "out[`{name}`] cannot be written in place: {why} (a view at an offset)"
                ))
                .into());
            }
            given[i] = Some(Output::Given(d.clone().unbind(), a.buffer.clone()));
        }
        Ok(given)
    }

    fn same_device(&self, name: &str, d: &DeviceArray) -> XResult<()> {
        let dev = self.loaded.device();
        if d.device.backend_name() != dev.backend_name()
            || d.device.info().ordinal != dev.info().ordinal
        {
            return Err(invalid(format!(
                "`{name}` is on {} device {}, the executable on {} device {}",
                d.device.backend_name(),
                d.device.info().ordinal,
                dev.backend_name(),
                dev.info().ordinal
            ))
            .into());
        }
        Ok(())
    }

    /// `out <- param` for every alias, for messages.
    fn alias_names(&self) -> String {
        let exe = self.loaded.executable();
        let sig = &exe.signature;
        let v: Vec<String> = exe
            .aliases
            .iter()
            .map(|a| {
                format!(
                    "{} <- {}",
                    sig.outputs[a.output as usize].name, sig.parameters[a.parameter as usize].name
                )
            })
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    pub(crate) fn results<'py>(
        &self,
        py: Python<'py>,
        outputs: Vec<Output>,
        keep_on_device: bool,
    ) -> XResult<Vec<Bound<'py, PyAny>>> {
        let device = self.loaded.device();
        self.sig()
            .outputs
            .iter()
            .zip(outputs)
            .map(|(s, o)| {
                let d = match o {
                    Output::Given(given, _) => {
                        let given = given.into_bound(py);
                        return if keep_on_device {
                            Ok(given.into_any())
                        } else {
                            given.get().to_numpy(py)
                        };
                    }
                    Output::Fresh(b) => {
                        DeviceArray::new(b, device.clone(), s.dtype, s.dims.clone())
                    }
                    Output::Shared(buffer) => DeviceArray {
                        buffer,
                        device: device.clone(),
                        dtype: s.dtype,
                        dims: s.dims.clone(),
                    },
                };
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
    /// `{output name: parameter name}`: the outputs that may reuse a parameter's memory
    /// (`run(..., donate=[parameter name])`).
    #[getter]
    fn aliases<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let exe = self.loaded.executable();
        let d = PyDict::new(py);
        for a in &exe.aliases {
            let (o, p) = (
                exe.signature.outputs.get(a.output as usize),
                exe.signature.parameters.get(a.parameter as usize),
            );
            if let (Some(o), Some(p)) = (o, p) {
                d.set_item(&o.name, &p.name)?;
            }
        }
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
        let outputs = self.execute(py, &arrays, &[], None, None)?;
        let mut results = self.results(py, outputs, false)?;
        if results.len() == 1
            && let Some(r) = results.pop()
        {
            return Ok(r);
        }
        Ok(PyTuple::new(py, results)?.into_any())
    }

    /// Runs with `{name: array}` (numpy arrays or `DeviceArray`s); returns `{name: array}`:
    /// numpy arrays, or `DeviceArray`s that stay on the device with `keep_on_device=True`.
    /// `donate`: parameter names whose memory becomes their aliased output's (a donated
    /// `DeviceArray` then holds the output); `out`: `{output name: DeviceArray}` written in
    /// place (returned as the same objects with `keep_on_device=True`); `deadline`: seconds
    /// after which the run fails with `DeadlineExceededError`. A `KeyboardInterrupt` (Ctrl-C)
    /// cancels the run at its next check point and is raised.
    #[pyo3(signature = (inputs, *, keep_on_device = false, donate = vec![], out = None, deadline = None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Bound<'py, PyDict>,
        keep_on_device: bool,
        donate: Vec<String>,
        out: Option<Bound<'py, PyDict>>,
        deadline: Option<f64>,
    ) -> XResult<Bound<'py, PyDict>> {
        let limit = self::deadline(deadline)?;
        let outputs = self.execute(py, &inputs, &donate, out.as_ref(), limit)?;
        self.result_dict(py, outputs, keep_on_device)
    }

    /// `run` started on a thread of its own: returns at once with an `xthunk.Execution`
    /// (awaitable; `result(timeout=None)`, `done()`, `cancel()`), whose result is what `run`
    /// returns. The inputs are checked and uploaded before it returns; device arrays passed
    /// in, donated or in `out` belong to the run until it completes.
    #[pyo3(signature = (inputs, *, keep_on_device = false, donate = vec![], out = None, deadline = None))]
    fn execute_async<'py>(
        slf: &Bound<'py, Self>,
        inputs: Bound<'py, PyDict>,
        keep_on_device: bool,
        donate: Vec<String>,
        out: Option<Bound<'py, PyDict>>,
        deadline: Option<f64>,
    ) -> XResult<PyExecution> {
        let this = slf.get();
        let limit = self::deadline(deadline)?;
        let prepared = this.prepare(&inputs, &donate, out.as_ref())?;
        let cancel = CancelToken::new();
        let opts = ExecuteOptions {
            deadline: limit,
            cancel: Some(cancel.clone()),
            ..Default::default()
        };
        let loaded = this.loaded.clone();
        let exe = slf.clone().unbind();
        let exec = Execution::spawn(cancel, move || {
            let prepared = loaded.execute_owned(prepared, opts)?;
            let done: Box<dyn Outputs> = Box::new(Finished {
                exe,
                outputs: prepared.outputs,
                keep_on_device,
            });
            Ok(done)
        })?;
        Ok(PyExecution::new(exec))
    }

    /// SPMD: the program on devices `0..len(inputs)` of this executable's backend, one thread
    /// per rank, collectives among them; `inputs[rank]` is that rank's `{name: array}`.
    /// Returns one `{name: numpy array}` per rank, or with `keep_on_device=True` one
    /// `{name: DeviceArray}` per rank, each on its rank's device. A collective that waits
    /// `timeout` seconds for a peer fails.
    #[pyo3(signature = (inputs, *, timeout = 60.0, keep_on_device = false))]
    fn run_spmd<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyDict>>,
        timeout: f64,
        keep_on_device: bool,
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
        if keep_on_device {
            let buffers = py.detach(|| {
                xthunk::core::executor::spmd::run_program_on_devices(
                    program,
                    &devices,
                    cliques,
                    &per_rank,
                    &ExecutorConfig::default(),
                    &ExecuteOptions::default(),
                )
            })?;
            return buffers
                .into_iter()
                .zip(&devices)
                .map(|(outputs, device)| {
                    let d = PyDict::new(py);
                    for (s, b) in sig.outputs.iter().zip(outputs) {
                        let a = DeviceArray::new(b, device.clone(), s.dtype, s.dims.clone());
                        d.set_item(&s.name, Bound::new(py, a)?)?;
                    }
                    Ok(d)
                })
                .collect();
        }
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
