//! `xthunk.ProgramBuilder`, mirroring the Rust `ExecutableBuilder`: parameters, outputs, temps
//! and constants as `Tensor`s; copies, kernels of the standard library, matmuls, nested
//! sequences; `build()` validates and gives a `Program` that saves as `.txtpb` / `.pb`.

use crate::arrays;
use crate::errors::{XResult, invalid};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt};
use xthunk::builder::{ExecutableBuilder, Tensor as RsTensor};
use xthunk::ir::{DType, Executable, KernelArg, Scalar};

/// The largest byte size of one tensor the builder declares (1 TiB).
const MAX_TENSOR_BYTES: u64 = 1 << 40;

/// A tensor of the program being built (a whole allocation, or elements of one).
#[pyclass(module = "xthunk", frozen)]
#[derive(Clone)]
pub struct Tensor {
    t: RsTensor,
}

/// A kernel argument: a tensor with its access (`t.r()`, `t.w()`, `t.rw()`) or a typed
/// scalar (`xthunk.scalar(2.0, "f32")`).
#[pyclass(module = "xthunk", frozen)]
#[derive(Clone)]
pub struct Arg {
    arg: KernelArg,
}

#[pymethods]
impl Tensor {
    /// As a read-only kernel argument.
    fn r(&self) -> Arg {
        Arg { arg: self.t.r() }
    }
    /// As a write-only kernel argument.
    fn w(&self) -> Arg {
        Arg { arg: self.t.w() }
    }
    /// As a read-write kernel argument.
    fn rw(&self) -> Arg {
        Arg { arg: self.t.rw() }
    }
    /// Elements `[start, start + count)` as a 1-D tensor.
    fn elems(&self, start: u64, count: u64) -> XResult<Tensor> {
        let end = start.checked_add(count);
        if end.is_none_or(|e| e > self.t.elements()) {
            return Err(invalid(format!(
                "elements {start}..{start}+{count} of a tensor of {}",
                self.t.elements()
            ))
            .into());
        }
        Ok(Tensor {
            t: self.t.elems(start, count),
        })
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        arrays::numpy_name(self.t.dtype)
    }
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.t.dims.clone()
    }
    fn __repr__(&self) -> String {
        format!(
            "xthunk.Tensor({}{:?}, allocation {})",
            self.t.dtype, self.t.dims, self.t.slice.allocation
        )
    }
}

/// A typed scalar kernel argument: `scalar(2.0, "f32")`.
#[pyfunction]
pub fn scalar(value: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> XResult<Arg> {
    let d = arrays::parse_dtype(dtype)?;
    let s = match d {
        DType::Pred => Scalar::Pred(value.extract()?),
        DType::I8 => Scalar::I8(value.extract()?),
        DType::U8 => Scalar::U8(value.extract()?),
        DType::I32 => Scalar::I32(value.extract()?),
        DType::I64 => Scalar::I64(value.extract()?),
        DType::F16 => Scalar::F16(half::f16::from_f64(value.extract()?).to_bits()),
        DType::BF16 => Scalar::BF16(half::bf16::from_f64(value.extract()?).to_bits()),
        DType::F32 => Scalar::F32(value.extract::<f64>()? as f32),
        DType::F64 => Scalar::F64(value.extract()?),
        DType::I16 => Scalar::I16(value.extract()?),
        DType::U16 => Scalar::U16(value.extract()?),
        DType::U32 => Scalar::U32(value.extract()?),
        DType::U64 => Scalar::U64(value.extract()?),
    };
    Ok(Arg {
        arg: KernelArg::Scalar(s),
    })
}

/// A kernel argument from Python: an `Arg`, a bool (pred), or an int (i64, the type of the
/// standard library's extents). Floats need a type: `scalar(x, "f32")`.
fn kernel_arg(obj: &Bound<'_, PyAny>) -> XResult<KernelArg> {
    if let Ok(a) = obj.cast::<Arg>() {
        return Ok(a.get().arg);
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(KernelArg::Scalar(Scalar::Pred(obj.extract()?)));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(KernelArg::Scalar(Scalar::I64(obj.extract()?)));
    }
    let hint = if obj.is_instance_of::<PyFloat>() {
        "a float needs its type: xthunk.scalar(x, \"f32\")"
    } else if obj.cast::<Tensor>().is_ok() {
        "a tensor needs its access: t.r(), t.w() or t.rw()"
    } else {
        "pass t.r() / t.w() / t.rw(), an int, a bool, or xthunk.scalar(x, dtype)"
    };
    Err(PyTypeError::new_err(format!("kernel argument {obj}: {hint}")).into())
}

/// Dimensions given from Python as tensor `what` (a parameter's or output's name, or "a
/// temp"): none negative.
fn unsigned_dims(what: &str, shape: &[i64]) -> XResult<Vec<u64>> {
    let mut dims = Vec::with_capacity(shape.len());
    for (i, d) in shape.iter().enumerate() {
        dims.push(u64::try_from(*d).map_err(|_| {
            invalid(format!(
                "{what}: shape[{i}] is {d}; dimensions are 0 or more (shape {shape:?})"
            ))
        })?);
    }
    Ok(dims)
}

/// `shape`, if tensor `what` of it is at most [`MAX_TENSOR_BYTES`].
fn checked_dims(what: &str, dtype: DType, shape: &[u64]) -> XResult<Vec<u64>> {
    let bytes = shape
        .iter()
        .try_fold(dtype.size() as u64, |a, d| a.checked_mul(*d));
    match bytes {
        Some(b) if b <= MAX_TENSOR_BYTES => Ok(shape.to_vec()),
        _ => Err(invalid(format!(
            "{what}: a tensor of {dtype}{shape:?} is larger than {MAX_TENSOR_BYTES} bytes"
        ))
        .into()),
    }
}

/// Builds a program step by step (see the Rust `ExecutableBuilder`).
#[pyclass(module = "xthunk")]
pub struct ProgramBuilder {
    b: Option<ExecutableBuilder>,
}

impl ProgramBuilder {
    fn b(&mut self) -> XResult<&mut ExecutableBuilder> {
        self.b
            .as_mut()
            .ok_or_else(|| invalid("this builder has already built its program").into())
    }
}

#[pymethods]
impl ProgramBuilder {
    #[new]
    fn new(name: &str) -> Self {
        ProgramBuilder {
            b: Some(ExecutableBuilder::new(name)),
        }
    }
    /// Declares the next parameter.
    fn parameter(
        &mut self,
        name: &str,
        dtype: &Bound<'_, PyAny>,
        shape: Vec<i64>,
    ) -> XResult<Tensor> {
        let d = arrays::parse_dtype(dtype)?;
        let what = &format!("parameter `{name}`");
        let dims = checked_dims(what, d, &unsigned_dims(what, &shape)?)?;
        Ok(Tensor {
            t: self.b()?.parameter(name, d, &dims),
        })
    }
    /// Declares the next output.
    fn output(&mut self, name: &str, dtype: &Bound<'_, PyAny>, shape: Vec<i64>) -> XResult<Tensor> {
        let d = arrays::parse_dtype(dtype)?;
        let what = &format!("output `{name}`");
        let dims = checked_dims(what, d, &unsigned_dims(what, &shape)?)?;
        Ok(Tensor {
            t: self.b()?.output(name, d, &dims),
        })
    }
    /// Declares a scratch buffer.
    fn temp(&mut self, dtype: &Bound<'_, PyAny>, shape: Vec<i64>) -> XResult<Tensor> {
        let d = arrays::parse_dtype(dtype)?;
        let what = "a temp";
        let dims = checked_dims(what, d, &unsigned_dims(what, &shape)?)?;
        Ok(Tensor {
            t: self.b()?.temp(d, &dims),
        })
    }
    /// Declares a constant holding a numpy array (its dtype and shape).
    fn constant(&mut self, array: &Bound<'_, PyAny>) -> XResult<Tensor> {
        let arr = arrays::contiguous(array)?;
        let (d, dims) = arrays::describe(&arr)?;
        let dims = checked_dims("a constant", d, &dims)?;
        let bytes = arrays::bytes(&arr, arrays::nbytes(&arr)?)?.to_vec();
        Ok(Tensor {
            t: self.b()?.constant(d, &dims, bytes),
        })
    }
    /// Adds the standard kernel library (module `std`) and returns its name.
    fn standard_module(&mut self) -> XResult<String> {
        Ok(self.b()?.standard_module())
    }
    /// Copies `src` into `dst` (same byte size).
    fn copy(&mut self, src: &Tensor, dst: &Tensor) -> XResult<()> {
        self.b()?.copy(src.t.slice(), dst.t.slice());
        Ok(())
    }
    /// Declares that `output` may reuse `parameter`'s memory (an input–output alias:
    /// `Executable.run(..., donate=[name])`); checked by `build()`.
    fn alias(&mut self, output: &Tensor, parameter: &Tensor) -> XResult<()> {
        self.b()?
            .alias_tensors(&output.t, &parameter.t)
            .map_err(|e| invalid(format!("alias: {e}")))?;
        Ok(())
    }
    /// Launches kernel `name` of `module` over `threads` work items with `args`.
    fn kernel(
        &mut self,
        module: &str,
        name: &str,
        threads: u64,
        args: Vec<Bound<'_, PyAny>>,
    ) -> XResult<()> {
        let args = args.iter().map(kernel_arg).collect::<XResult<Vec<_>>>()?;
        self.b()?.kernel(module, name, threads, args);
        Ok(())
    }
    /// Row-major `c = alpha * a @ b + beta * c`.
    #[pyo3(signature = (a, b, c, alpha = 1.0, beta = 0.0))]
    fn matmul(&mut self, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f64, beta: f64) -> XResult<()> {
        self.b()?
            .try_matmul(&a.t, &b.t, &c.t, alpha, beta)
            .map_err(|e| invalid(e.to_string()))?;
        Ok(())
    }
    /// Opens a nested sequence (closed by `end_sequence`).
    fn begin_sequence(&mut self) -> XResult<()> {
        self.b()?.begin_sequence();
        Ok(())
    }
    fn end_sequence(&mut self) -> XResult<()> {
        self.b()?.end_sequence();
        Ok(())
    }
    /// Validates and returns the `Program` (the builder is spent).
    fn build(&mut self) -> XResult<Program> {
        let b = self
            .b
            .take()
            .ok_or_else(|| invalid("this builder has already built its program"))?;
        Ok(Program { exe: b.build()? })
    }
}

/// A validated program: `save(path)` (`.txtpb` or `.pb` by extension), `to_text()`,
/// `to_bytes()`; `Runtime.load` takes it as it is.
#[pyclass(module = "xthunk", frozen)]
pub struct Program {
    pub(crate) exe: Executable,
}

#[pymethods]
impl Program {
    #[getter]
    fn name(&self) -> String {
        self.exe.name.clone()
    }
    #[getter]
    fn thunk_count(&self) -> usize {
        self.exe.thunk_count()
    }
    /// Writes the program (atomically); the format follows the extension.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> XResult<()> {
        let exe = &self.exe;
        py.detach(|| xthunk::proto::save_file(&path, exe))?;
        Ok(())
    }
    /// The text (`.txtpb`) encoding.
    fn to_text(&self) -> String {
        xthunk::proto::to_text(&self.exe)
    }
    /// The binary (`.pb`) encoding.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &xthunk::proto::encode(&self.exe))
    }
    fn __repr__(&self) -> String {
        format!(
            "xthunk.Program({:?}, {} thunks)",
            self.exe.name,
            self.exe.thunk_count()
        )
    }
}
