//! The `xthunk` Python package's extension module (`xthunk._xthunk`, built by maturin, abi3 for
//! CPython 3.9+): runtimes, devices, executables run with numpy arrays, device arrays with
//! DLPack, and the program builder. `xthunk/__init__.py` is the package's face.

mod arrays;
mod builder;
mod device;
mod device_array;
mod dlpack;
mod errors;
mod executable;
mod execution;
mod runtime;
mod views;

use pyo3::prelude::*;

/// The version of the xthunk library inside this package.
const VERSION: &str = env!("CARGO_PKG_VERSION");

#[pymodule]
fn _xthunk(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", VERSION)?;
    m.add("PROGRAM_ABI_VERSION", xthunk::ir::ABI_VERSION)?;
    m.add_class::<runtime::Runtime>()?;
    m.add_class::<device::Device>()?;
    m.add_class::<executable::Executable>()?;
    m.add_class::<executable::PyTensorSpec>()?;
    m.add_class::<execution::PyExecution>()?;
    m.add_class::<device_array::DeviceArray>()?;
    m.add_class::<builder::ProgramBuilder>()?;
    m.add_class::<builder::Tensor>()?;
    m.add_class::<builder::Arg>()?;
    m.add_class::<builder::Program>()?;
    m.add_function(wrap_pyfunction!(runtime::devices, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::load_plugin, m)?)?;
    m.add_function(wrap_pyfunction!(builder::scalar, m)?)?;
    Ok(())
}
