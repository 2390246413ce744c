//! `xthunk.Device`: one device of one backend, as `Runtime.device()`, `DeviceArray.device` and
//! `Executable.device` return it. A leaf: the classes that name it do not import each other
//! through it.

use pyo3::prelude::*;
use std::sync::Arc;

/// One device of one backend.
#[pyclass(module = "xthunk", frozen)]
pub struct Device {
    pub(crate) device: Arc<dyn xthunk::Device>,
}

#[pymethods]
impl Device {
    #[getter]
    fn backend(&self) -> &'static str {
        self.device.backend_name()
    }
    #[getter]
    fn ordinal(&self) -> usize {
        self.device.info().ordinal
    }
    #[getter]
    fn name(&self) -> String {
        self.device.info().name.clone()
    }
    #[getter]
    fn arch(&self) -> String {
        self.device.info().arch.clone()
    }
    #[getter]
    fn total_memory(&self) -> u64 {
        self.device.info().total_memory
    }
    /// True for a device of the driver emulator (a test instrument: never a GPU result).
    #[getter]
    fn emulated(&self) -> bool {
        self.device.info().emulated
    }
    /// Memory statistics: `live_bytes`, `live_allocations`, `peak_bytes` and
    /// `allocations_made` (every allocation since the device was opened).
    fn memory_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let s = self.device.memory_stats();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("live_bytes", s.live_bytes)?;
        d.set_item("live_allocations", s.live_allocations)?;
        d.set_item("peak_bytes", s.peak_bytes)?;
        d.set_item("allocations_made", s.allocations_made)?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        let i = self.device.info();
        format!(
            "xthunk.Device({} {}: {}{})",
            self.device.backend_name(),
            i.ordinal,
            i.name,
            if i.emulated { " [EMULATED]" } else { "" }
        )
    }
}
