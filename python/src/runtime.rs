//! `xthunk.Runtime` (a backend chosen at construction) and `xthunk.devices()`: loading
//! programs from a path, bytes or a built `Program`, and putting arrays on a device.

use crate::arrays;
use crate::builder::Program;
use crate::device::Device;
use crate::device_array::DeviceArray;
use crate::errors::{XResult, invalid};
use crate::executable::Executable;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};
use std::sync::Arc;
use xthunk::core::executor::{ExecutorConfig, Program as VerifiedProgram};
use xthunk::ir::MemorySpace;
use xthunk::{Backend, LoadedExecutable};

/// The most host devices a runtime may be asked for.
const MAX_HOST_DEVICES: usize = 1024;

/// The backends of this build, with one chosen: `Runtime(backend="auto", host_devices=1)`.
#[pyclass(module = "xthunk", frozen)]
pub struct Runtime {
    pub(crate) rt: Arc<xthunk::Runtime>,
    pub(crate) backend: Arc<dyn Backend>,
    skipped: Vec<String>,
}

#[pymethods]
impl Runtime {
    /// `backend`: "auto" (the first available: cuda, rocm, then host), "cuda", "rocm" or
    /// "host". `host_devices`: how many devices the host backend has (for SPMD on the CPU).
    #[new]
    #[pyo3(signature = (backend = "auto", host_devices = 1))]
    fn new(py: Python<'_>, backend: &str, host_devices: usize) -> XResult<Self> {
        if host_devices == 0 || host_devices > MAX_HOST_DEVICES {
            return Err(invalid(format!(
                "host_devices must be 1..={MAX_HOST_DEVICES}, got {host_devices}"
            ))
            .into());
        }
        let choice = xthunk::embed::backend_choice(backend);
        let (rt, backend, skipped) = py.detach(|| {
            let rt = xthunk::Runtime::with_host_devices(host_devices);
            rt.select(&choice).map(|(b, s)| (rt, b, s))
        })?;
        Ok(Runtime {
            rt: Arc::new(rt),
            backend,
            skipped,
        })
    }

    /// The chosen backend's name.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend.name()
    }

    /// Why the backends before the chosen one (in `auto` order) were skipped.
    #[getter]
    fn skipped(&self) -> Vec<String> {
        self.skipped.clone()
    }

    /// Device `ordinal` of the chosen backend.
    #[pyo3(signature = (ordinal = 0))]
    fn device(&self, ordinal: usize) -> XResult<Device> {
        Ok(Device {
            device: self.backend.device(ordinal)?,
        })
    }

    /// Loads a program onto device `device`: a path (`.txtpb` / `.pb` / `.mlir`, or a StableHLO
    /// portable artifact by content), the bytes of a program in either encoding, of StableHLO
    /// text or of a portable artifact (`jax.export`'s `serialize()`, or its
    /// `mlir_module_serialized`), StableHLO text as a `str`, or a `Program` from
    /// `ProgramBuilder.build()`.
    #[pyo3(signature = (program, device = 0))]
    fn load(
        slf: &Bound<'_, Self>,
        program: &Bound<'_, PyAny>,
        device: usize,
    ) -> XResult<Executable> {
        let py = slf.py();
        // Verified once, here; loaded without verifying again.
        let exe = if let Ok(p) = program.cast::<Program>() {
            VerifiedProgram::new(p.get().exe.clone()).map_err(xthunk::Error::from)?
        } else if let Ok(b) = program.cast::<PyBytes>() {
            xthunk::embed::load_program_bytes(b.as_bytes())?
        } else if let Ok(b) = program.cast::<PyByteArray>() {
            xthunk::embed::load_program_bytes(&b.to_vec())?
        } else if let Some(text) = program
            .cast::<PyString>()
            .ok()
            .map(|t| t.to_cow())
            .transpose()?
            .filter(|t| xthunk::program_file::looks_like_mlir(t))
        {
            // StableHLO text itself (a path never starts with `module`, `func.func`, ...).
            xthunk::embed::load_program_bytes(text.as_bytes())?
        } else if let Ok(path) = program.extract::<std::path::PathBuf>() {
            py.detach(|| xthunk::load_program(&path))?
        } else {
            return Err(invalid(format!(
                "load takes a path, bytes or a Program, not {}",
                program.get_type().name()?
            ))
            .into());
        };
        let this = slf.get();
        let dev = this.backend.device(device)?;
        let loaded = py.detach(|| {
            LoadedExecutable::load_program(dev, &exe, &ExecutorConfig::default(), None)
        })?;
        Ok(Executable {
            loaded: Arc::new(loaded),
            rt: this.rt.clone(),
            backend: this.backend.clone(),
        })
    }

    /// Copies a numpy array to device `device`, where it stays (a `DeviceArray`).
    #[pyo3(signature = (array, device = 0))]
    fn put(&self, array: &Bound<'_, PyAny>, device: usize) -> XResult<DeviceArray> {
        let arr = arrays::contiguous(array)?;
        let (dtype, dims) = arrays::describe(&arr)?;
        let size = arrays::nbytes(&arr)?;
        let bytes = arrays::bytes(&arr, size)?;
        let dev = self.backend.device(device)?;
        let buffer = dev.allocate(size, DeviceArray::ALIGNMENT, MemorySpace::Device)?;
        dev.copy_from_host(bytes, buffer.ptr())?;
        Ok(DeviceArray::new(buffer, dev, dtype, dims))
    }

    /// Copies an array exported through DLPack (host memory) to device `device`.
    #[pyo3(signature = (array, device = 0))]
    #[allow(clippy::wrong_self_convention)] // DLPack's name for the Python method
    fn from_dlpack(&self, array: &Bound<'_, PyAny>, device: usize) -> XResult<DeviceArray> {
        let dev = self.backend.device(device)?;
        DeviceArray::from_dlpack(array, dev)
    }

    fn __repr__(&self) -> String {
        format!("xthunk.Runtime(backend={:?})", self.backend.name())
    }
}

/// Every device of every available backend of this build, as dicts (`backend`, `ordinal`,
/// `name`, `vendor`, `arch`, `total_memory`, `compute_units`, `emulated`).
#[pyfunction]
pub fn devices(py: Python<'_>) -> XResult<Vec<Bound<'_, PyDict>>> {
    let statuses = py.detach(|| xthunk::Runtime::new().registry().probe_all());
    let mut out = Vec::new();
    for s in statuses {
        let Ok(info) = s.result else { continue };
        for d in info.devices {
            let dict = PyDict::new(py);
            dict.set_item("backend", s.name)?;
            dict.set_item("ordinal", d.ordinal)?;
            dict.set_item("name", d.name)?;
            dict.set_item("vendor", d.vendor.to_string())?;
            dict.set_item("arch", d.arch)?;
            dict.set_item("total_memory", d.total_memory)?;
            dict.set_item("compute_units", d.compute_units)?;
            dict.set_item("emulated", d.emulated)?;
            out.push(dict);
        }
    }
    Ok(out)
}

/// Loads the custom-call plugin at `path` (a shared library implementing
/// `include/xthunk_ffi.h`) into this process, as `xthunk run --plugin` does; its handlers serve
/// the programs loaded afterwards. Returns the `(backend, target)` pairs it registered (empty
/// when the file was loaded before).
#[pyfunction]
pub fn load_plugin(py: Python<'_>, path: std::path::PathBuf) -> XResult<Vec<(String, String)>> {
    let plugins = py
        .detach(|| xthunk::plugins::load_plugins(&[path]))
        .map_err(xthunk::Error::from)?;
    Ok(plugins.into_iter().flat_map(|p| p.targets).collect())
}
