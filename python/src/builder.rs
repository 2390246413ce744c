//! `xthunk.ProgramBuilder`, mirroring the Rust `ExecutableBuilder`: parameters, outputs, temps
//! and constants as `Tensor`s; copies, memsets and fills, kernels, matmuls and gemms with
//! transposes, collectives with replica groups, `while` loops, conditionals, command buffers,
//! async scopes, custom calls and nested sequences, each checked at the call with an error
//! naming the argument; `build()` validates and gives a `Program` that saves as `.txtpb` /
//! `.pb`. The nesting calls take Python callables that add the nested thunks: the builder is
//! not borrowed while they run.

use crate::arrays;
use crate::errors::{XResult, invalid};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt};
use pyo3::types::{PyDict, PyList, PyString};
use xthunk::builder::{BuildError, CustomCallOptions, ExecutableBuilder, Tensor as RsTensor};
use xthunk::ir::{
    AsyncKind, AttrArray, AttrValue, Attributes, CollectiveOp, DType, Executable, KernelArg,
    MemsetPattern, ReduceOp, Scalar, Thunk,
};

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
    Ok(Arg {
        arg: KernelArg::Scalar(typed_scalar(value, d)?),
    })
}

/// `value` as a scalar of type `d`.
fn typed_scalar(value: &Bound<'_, PyAny>, d: DType) -> XResult<Scalar> {
    Ok(match d {
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
        DType::C64 | DType::C128 | DType::F8E4M3FN | DType::F8E5M2 => {
            return Err(crate::errors::unsupported(format!(
                "{d} scalar kernel arguments (the IR has no {d} immediates yet)"
            ))
            .into());
        }
    })
}

/// A builder error as Python's `InvalidArgumentError` (it names the call and the argument).
fn build_error(e: BuildError) -> crate::errors::XErr {
    invalid(e.to_string()).into()
}

fn reduce_op(op: &str) -> XResult<ReduceOp> {
    ReduceOp::ALL
        .into_iter()
        .find(|r| r.name() == op)
        .ok_or_else(|| invalid(format!("op: {op:?} is not one of sum, prod, min, max")).into())
}

/// Replica groups from Python: `None` (every rank) or a list of lists of ranks.
fn groups(groups: Option<Vec<Vec<u32>>>) -> Vec<Vec<u32>> {
    groups.unwrap_or_default()
}

/// A custom call's attribute value: bool, int (i64), float (f64), str, `xthunk.scalar(x,
/// dtype)` for another width, a list of one of those kinds, or a dict of them.
fn attr_value(name: &str, v: &Bound<'_, PyAny>, depth: usize) -> XResult<AttrValue> {
    let bad = || {
        invalid(format!(
            "attributes[{name:?}]: a {} is not an attribute value (bool, int, float, str, \
             xthunk.scalar(x, dtype), a list of one of those, or a dict)",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    };
    if let Ok(a) = v.cast::<Arg>() {
        return match a.get().arg {
            KernelArg::Scalar(Scalar::I32(x)) => Ok(AttrValue::I32(x)),
            KernelArg::Scalar(Scalar::I64(x)) => Ok(AttrValue::I64(x)),
            KernelArg::Scalar(Scalar::F32(x)) => Ok(AttrValue::F32(x)),
            KernelArg::Scalar(Scalar::F64(x)) => Ok(AttrValue::F64(x)),
            KernelArg::Scalar(Scalar::Pred(x)) => Ok(AttrValue::Bool(x)),
            _ => Err(invalid(format!(
                "attributes[{name:?}]: attributes are bool, i32, i64, f32, f64 or str"
            ))
            .into()),
        };
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(AttrValue::Bool(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(AttrValue::I64(v.extract().map_err(|_| bad())?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(AttrValue::F64(v.extract()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(AttrValue::Str(v.extract()?));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        if depth >= 8 {
            return Err(invalid(format!("attributes[{name:?}]: dicts nested too deep")).into());
        }
        return Ok(AttrValue::Dict(attributes(d, depth + 1)?));
    }
    if let Ok(l) = v.cast::<PyList>() {
        let items: Vec<Bound<'_, PyAny>> = l.iter().collect();
        let all = |f: &dyn Fn(&Bound<'_, PyAny>) -> bool| items.iter().all(f);
        return Ok(AttrValue::Array(
            if all(&|x| x.is_instance_of::<PyBool>()) {
                AttrArray::Bool(l.extract()?)
            } else if all(&|x| x.is_instance_of::<PyInt>() && !x.is_instance_of::<PyBool>()) {
                AttrArray::I64(l.extract().map_err(|_| bad())?)
            } else if all(&|x| x.is_instance_of::<PyFloat>() || x.is_instance_of::<PyInt>()) {
                AttrArray::F64(l.extract()?)
            } else if all(&|x| x.is_instance_of::<PyString>()) {
                AttrArray::Str(l.extract()?)
            } else {
                return Err(bad().into());
            },
        ));
    }
    Err(bad().into())
}

fn attributes(d: &Bound<'_, PyDict>, depth: usize) -> XResult<Attributes> {
    let mut out = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let k: String = k
            .extract()
            .map_err(|_| invalid("attributes: names are strings"))?;
        let v = attr_value(&k, &v, depth)?;
        out.push((k, v));
    }
    Ok(Attributes(out))
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

/// The thunks that `f(builder)` adds, as a block (for argument `what` of a nesting call).
/// The builder is not borrowed while `f` runs; an exception in `f` closes the block and is
/// raised.
fn block(slf: &Bound<'_, ProgramBuilder>, what: &str, f: &Bound<'_, PyAny>) -> XResult<Vec<Thunk>> {
    if !f.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "`{what}` must be a callable taking the builder, got a {}",
            f.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
        .into());
    }
    let token = slf.borrow_mut().b()?.begin_block();
    let r = f.call1((slf,));
    let body = slf
        .borrow_mut()
        .b()?
        .end_block(token)
        .map_err(build_error)?;
    r?;
    Ok(body)
}

impl ProgramBuilder {
    fn collective(
        &mut self,
        op: CollectiveOp,
        src: &Tensor,
        dst: &Tensor,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        self.b()?
            .try_collective(op, &src.t, &dst.t, &self::groups(groups))
            .map_err(build_error)
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
    /// Adds module `name` of portable kernel source (the xthunk CUDA-C subset,
    /// docs/kernels.md: NVRTC / hipRTC on GPUs, a C++ compiler on the host) and returns its
    /// name for `kernel`; `defines`: `NAME` or `NAME=VALUE`; `headers`: `{name: code}` the
    /// source includes.
    #[pyo3(signature = (name, code, defines = vec![], fast_math = false, headers = None))]
    fn source_module(
        &mut self,
        name: &str,
        code: &str,
        defines: Vec<String>,
        fast_math: bool,
        headers: Option<std::collections::BTreeMap<String, String>>,
    ) -> XResult<String> {
        let options = xthunk::ir::ModuleOptions {
            defines,
            fast_math,
            headers: headers
                .unwrap_or_default()
                .into_iter()
                .map(|(name, code)| xthunk::ir::HeaderSource { name, code })
                .collect(),
        };
        self.b()?
            .try_source_module(name, code, options)
            .map_err(build_error)
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
    /// Fills `dst` with a repeated `width`-byte (1, 2 or 4) `pattern` (a memset).
    #[pyo3(signature = (dst, pattern, width = 1))]
    fn memset(&mut self, dst: &Tensor, pattern: u64, width: u32) -> XResult<()> {
        let too_big = || {
            invalid(format!(
                "memset: `pattern` {pattern:#x} does not fit {width} bytes"
            ))
        };
        let p = match width {
            1 => MemsetPattern::U8(u8::try_from(pattern).map_err(|_| too_big())?),
            2 => MemsetPattern::U16(u16::try_from(pattern).map_err(|_| too_big())?),
            4 => MemsetPattern::U32(u32::try_from(pattern).map_err(|_| too_big())?),
            w => {
                return Err(
                    invalid(format!("memset: `width` is {w}; it must be 1, 2 or 4")).into(),
                );
            }
        };
        self.b()?.try_memset(&dst.t, p).map_err(build_error)
    }
    /// Sets every element of `dst` to `value` (converted to `dst`'s dtype) with a memset.
    fn fill(&mut self, dst: &Tensor, value: &Bound<'_, PyAny>) -> XResult<()> {
        let v = typed_scalar(value, dst.t.dtype).map_err(|_| {
            invalid(format!(
                "fill: `value` {value} is not a {} value",
                arrays::numpy_name(dst.t.dtype)
            ))
        })?;
        self.b()?.try_fill(&dst.t, v).map_err(build_error)
    }
    /// Row-major `c = alpha * op(a) @ op(b) + beta * c`, `op` transposing (the last two axes
    /// of) an operand whose flag is set; shapes and dtypes checked.
    #[pyo3(signature = (a, b, c, trans_a = false, trans_b = false, alpha = 1.0, beta = 0.0))]
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        trans_a: bool,
        trans_b: bool,
        alpha: f64,
        beta: f64,
    ) -> XResult<()> {
        self.b()?
            .try_gemm(&a.t, &b.t, &c.t, trans_a, trans_b, alpha, beta)
            .map_err(build_error)
    }
    /// `dst = op over the group of src` (`op`: sum, prod, min, max); `groups`: replica groups
    /// (lists of ranks), `None` for one group of every rank. In place when `dst` is `src`.
    #[pyo3(signature = (src, dst, op = "sum", groups = None))]
    fn all_reduce(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        op: &str,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        let op = CollectiveOp::AllReduce { op: reduce_op(op)? };
        self.collective(op, src, dst, groups)
    }
    /// `dst` = the group's `src`s concatenated in group order.
    #[pyo3(signature = (src, dst, groups = None))]
    fn all_gather(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        self.collective(CollectiveOp::AllGather, src, dst, groups)
    }
    /// `dst` = `op` over the group of this rank's block of `src`.
    #[pyo3(signature = (src, dst, op = "sum", groups = None))]
    fn reduce_scatter(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        op: &str,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        let op = CollectiveOp::ReduceScatter { op: reduce_op(op)? };
        self.collective(op, src, dst, groups)
    }
    /// Block `j` of `dst` = block (this rank's position) of member `j`'s `src`.
    #[pyo3(signature = (src, dst, groups = None))]
    fn all_to_all(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        self.collective(CollectiveOp::AllToAll, src, dst, groups)
    }
    /// `dst` = `src` of the member at position `root` of the group.
    #[pyo3(signature = (src, dst, root = 0, groups = None))]
    fn broadcast(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        root: u32,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        self.collective(CollectiveOp::Broadcast { root }, src, dst, groups)
    }
    /// `dst` on rank `b` = `src` on rank `a` for each `(a, b)` in `pairs`; zeros elsewhere.
    fn collective_permute(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        pairs: Vec<(u32, u32)>,
    ) -> XResult<()> {
        self.b()?
            .try_collective_permute(&src.t, &dst.t, &pairs)
            .map_err(build_error)
    }
    /// Rows (the leading axis) of `operand` to each member of the group, at the offsets and
    /// sizes (in rows, one i32 or i64 entry per member) of `input_offsets`, `send_sizes`
    /// (what this rank sends to member `j`), `output_offsets` (where those rows land in
    /// member `j`'s `output`) and `recv_sizes` (what it receives from member `j`).
    #[pyo3(signature = (operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, groups = None))]
    #[allow(clippy::too_many_arguments)]
    fn ragged_all_to_all(
        &mut self,
        operand: &Tensor,
        output: &Tensor,
        input_offsets: &Tensor,
        send_sizes: &Tensor,
        output_offsets: &Tensor,
        recv_sizes: &Tensor,
        groups: Option<Vec<Vec<u32>>>,
    ) -> XResult<()> {
        let index = [
            &input_offsets.t,
            &send_sizes.t,
            &output_offsets.t,
            &recv_sizes.t,
        ];
        self.b()?
            .try_ragged_all_to_all(&operand.t, &output.t, index, &self::groups(groups))
            .map_err(build_error)
    }
    /// Sends `src` to global rank `peer` (matched by a `recv` there, in order); usually in a
    /// branch of a `conditional` on `rank_id`.
    fn send(&mut self, src: &Tensor, peer: u32) -> XResult<()> {
        self.b()?.try_send(&src.t, peer).map_err(build_error)
    }
    /// Receives `dst` from global rank `peer`.
    fn recv(&mut self, dst: &Tensor, peer: u32) -> XResult<()> {
        self.b()?.try_recv(&dst.t, peer).map_err(build_error)
    }
    /// Writes this rank's number into `dst` (one i32).
    fn rank_id(&mut self, dst: &Tensor) -> XResult<()> {
        self.b()?.try_rank_id(&dst.t).map_err(build_error)
    }
    /// Writes the execution's seed into `dst` (one u64): a value that differs from one run of
    /// the loaded program to the next (run n of a load gets the same value every time).
    fn execution_seed(&mut self, dst: &Tensor) -> XResult<()> {
        self.b()?.try_execution_seed(&dst.t).map_err(build_error)
    }
    /// `loop { cond(b); if not pred: break; body(b) }`, or `body(b)` `trip_count` times.
    /// `pred` is one bool; `cond` and `body` are callables taking this builder, adding the
    /// thunks of the loop's condition and body.
    #[pyo3(signature = (pred, body, cond = None, trip_count = None))]
    fn while_loop(
        slf: &Bound<'_, Self>,
        pred: &Tensor,
        body: &Bound<'_, PyAny>,
        cond: Option<&Bound<'_, PyAny>>,
        trip_count: Option<u64>,
    ) -> XResult<()> {
        let cond = match cond {
            Some(c) => block(slf, "cond", c)?,
            None => vec![],
        };
        let body = block(slf, "body", body)?;
        slf.borrow_mut()
            .b()?
            .try_while_blocks(&pred.t, trip_count, cond, body)
            .map_err(build_error)
    }
    /// Runs `branches[index]` (an i32 tensor of one element; out of range: the last branch)
    /// or, with a bool `index`, `branches[0]` if true else `branches[1]` (XLA's order). Each
    /// branch is a callable taking this builder.
    fn conditional(
        slf: &Bound<'_, Self>,
        index: &Tensor,
        branches: Vec<Bound<'_, PyAny>>,
    ) -> XResult<()> {
        let bodies = branches
            .iter()
            .map(|f| block(slf, "branches", f))
            .collect::<XResult<Vec<_>>>()?;
        slf.borrow_mut()
            .b()?
            .try_conditional(&index.t, bodies)
            .map_err(build_error)
    }
    /// The thunks `body(b)` adds, captured once and replayed as one command buffer (a graph
    /// where the backend has them). No collectives inside.
    fn command_buffer(slf: &Bound<'_, Self>, body: &Bound<'_, PyAny>) -> XResult<()> {
        let body = block(slf, "body", body)?;
        slf.borrow_mut().b()?.command_buffer(body);
        Ok(())
    }
    /// Starts the thunks `body(b)` adds on another stream (`kind`: "compute" or
    /// "communication"); returns the scope's id for `async_done`.
    #[pyo3(signature = (body, kind = "compute"))]
    fn async_start(slf: &Bound<'_, Self>, body: &Bound<'_, PyAny>, kind: &str) -> XResult<u32> {
        let kind = match kind {
            "compute" => AsyncKind::Compute,
            "communication" => AsyncKind::Communication,
            k => {
                return Err(invalid(format!(
                    "async_start: `kind` {k:?} is not \"compute\" or \"communication\""
                ))
                .into());
            }
        };
        let body = block(slf, "body", body)?;
        Ok(slf.borrow_mut().b()?.async_start(kind, body))
    }
    /// Waits for the async scope `id` that `async_start` returned.
    fn async_done(&mut self, id: u32) -> XResult<()> {
        self.b()?.try_async_done(id).map_err(build_error)
    }
    /// Calls the custom-call handler registered for `target` (a plugin's, `load_plugin`)
    /// with `operands` (read) and `results` (written), each with its dtype and shape;
    /// `attributes`: `{name: value}` (see docs/python.md for the value types).
    #[pyo3(signature = (target, operands, results, attributes = None, side_effect = false))]
    fn custom_call(
        &mut self,
        target: &str,
        operands: Vec<PyRef<'_, Tensor>>,
        results: Vec<PyRef<'_, Tensor>>,
        attributes: Option<&Bound<'_, PyDict>>,
        side_effect: bool,
    ) -> XResult<()> {
        let attributes = match attributes {
            Some(d) => self::attributes(d, 0)?,
            None => Attributes::default(),
        };
        let ops: Vec<&RsTensor> = operands.iter().map(|t| &t.t).collect();
        let res: Vec<&RsTensor> = results.iter().map(|t| &t.t).collect();
        let options = CustomCallOptions {
            attributes,
            side_effect,
        };
        self.b()?
            .try_custom_call(target, &ops, &res, options)
            .map_err(build_error)
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
