//! A typed builder for executables.
//!
//! ```
//! use xthunk_core::builder::ExecutableBuilder;
//! use xthunk_core::ir::DType;
//! let mut b = ExecutableBuilder::new("axpy");
//! let x = b.parameter("x", DType::F32, &[1024]);
//! let y = b.output("y", DType::F32, &[1024]);
//! let m = b.standard_module();
//! b.copy(x.slice(), y.slice());
//! b.kernel(&m, "scale_f32", 1024, vec![y.rw(), 2.0f32.into(), (1024i64).into()]);
//! let exe = b.build().unwrap();
//! assert_eq!(exe.thunk_count(), 2);
//! ```
//!
//! The `try_*` calls cover every thunk kind (memset and fill, gemm with transposes,
//! collectives with replica groups, ragged all-to-all, collective permute, send and receive,
//! rank id, while, conditional, command buffers, async scopes, custom calls, source modules)
//! and check their arguments at the call: a [`BuildError`] names the call and the argument.
//! Nested bodies are blocks ([`ExecutableBuilder::block`], or `begin_block` / `end_block`).

use crate::ir::*;
use crate::verify;

/// A builder call whose arguments do not fit together; it names the call and the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: `{arg}` {message}")]
pub struct BuildError {
    pub call: &'static str,
    pub arg: &'static str,
    pub message: String,
}

/// `f32, f64, …`: element types' names, for messages.
fn dtype_names(d: &[DType]) -> String {
    let v: Vec<String> = d.iter().map(ToString::to_string).collect();
    v.join(", ")
}

/// `t`'s element type must be one the collectives take.
fn collective_dtype(call: &'static str, arg: &'static str, t: &Tensor) -> Result<(), BuildError> {
    if COLLECTIVE_DTYPES.contains(&t.dtype) {
        return Ok(());
    }
    Err(build_err(
        call,
        arg,
        format!("is {}, not a collective type", t.dtype),
    ))
}

fn build_err(call: &'static str, arg: &'static str, message: impl Into<String>) -> BuildError {
    BuildError {
        call,
        arg,
        message: message.into(),
    }
}

/// `[batch, m, n, k]` of `c = a @ b`, or what does not fit.
fn matmul_dims(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<[u64; 4], BuildError> {
    gemm_dims("matmul", a, b, c, false, false)
}

/// `[batch, m, n, k]` of `c = op(a) @ op(b)` (`op` transposes the last two axes of an operand
/// whose flag is set), or what does not fit, for call `call`.
fn gemm_dims(
    call: &'static str,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<[u64; 4], BuildError> {
    let err = |arg, message: String| BuildError { call, arg, message };
    if !crate::ir::GEMM_DTYPES.contains(&a.dtype) {
        return Err(err(
            "a",
            format!(
                "is {}; a gemm takes {}",
                a.dtype,
                dtype_names(&crate::ir::GEMM_DTYPES)
            ),
        ));
    }
    let (batch, m, k) = match (a.dims.as_slice(), trans_a) {
        ([m, k], false) | ([k, m], true) => (None, *m, *k),
        ([bt, m, k], false) | ([bt, k, m], true) => (Some(*bt), *m, *k),
        d => {
            return Err(err(
                "a",
                format!(
                    "must be a matrix [m, k] or a batch of them [batch, m, k], got shape {d:?}"
                ),
            ));
        }
    };
    let want_rank = a.dims.len();
    for (name, t) in [("b", b), ("c", c)] {
        if t.dims.len() != want_rank {
            return Err(err(
                name,
                format!(
                    "has shape {:?}; with `a` of shape {:?} it needs rank {want_rank}",
                    t.dims, a.dims
                ),
            ));
        }
        if t.dtype != a.dtype {
            return Err(err(
                name,
                format!(
                    "is {}, `a` is {}: a matmul takes one element type",
                    t.dtype, a.dtype
                ),
            ));
        }
        if let Some(bt) = batch
            && t.dims[0] != bt
        {
            return Err(err(
                name,
                format!("has batch size {}, `a` has {bt}", t.dims[0]),
            ));
        }
    }
    let (b0, b1) = (b.dims[want_rank - 2], b.dims[want_rank - 1]);
    let (bk, n) = if trans_b { (b1, b0) } else { (b0, b1) };
    if bk != k {
        let (rows, cols) = (
            if trans_b {
                "columns (transposed)"
            } else {
                "rows"
            },
            if trans_a {
                "rows (transposed)"
            } else {
                "columns"
            },
        );
        return Err(err(
            "b",
            format!(
                "has {bk} {rows} (shape {:?}), `a` has {k} {cols} (shape {:?})",
                b.dims, a.dims
            ),
        ));
    }
    let (cm, cn) = (c.dims[want_rank - 2], c.dims[want_rank - 1]);
    if (cm, cn) != (m, n) {
        return Err(err(
            "c",
            format!("has shape {:?}; `a` @ `b` is {m} x {n}", c.dims),
        ));
    }
    Ok([batch.unwrap_or(1), m, n, k])
}

/// Checks replica groups (none empty, disjoint, equal sizes) for `call`; their common size.
fn group_size(call: &'static str, groups: &[Vec<u32>]) -> Result<Option<u64>, BuildError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut size = None;
    for (i, g) in groups.iter().enumerate() {
        if g.is_empty() {
            return Err(build_err(call, "groups", format!("groups[{i}] is empty")));
        }
        if let Some(r) = g.iter().find(|r| !seen.insert(**r)) {
            return Err(build_err(
                call,
                "groups",
                format!("rank {r} is in two groups or twice in one (groups[{i}])"),
            ));
        }
        if *size.get_or_insert(g.len()) != g.len() {
            return Err(build_err(
                call,
                "groups",
                format!(
                    "groups[{i}] has {} ranks, groups[0] {}: replica groups have one size",
                    g.len(),
                    groups[0].len()
                ),
            ));
        }
    }
    Ok(size.map(|n| n as u64))
}

/// The arguments of [`ExecutableBuilder::try_custom_call`] besides the target and buffers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CustomCallOptions {
    pub attributes: Attributes,
    /// Kept in program order with the other side-effecting calls, never removed.
    pub side_effect: bool,
}

/// A typed view of a whole allocation (or part of one) created by the builder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub slice: Slice,
    pub dtype: DType,
    pub dims: Vec<u64>,
}

impl Tensor {
    pub fn slice(&self) -> Slice {
        self.slice
    }
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
    /// As a read-only kernel argument.
    pub fn r(&self) -> KernelArg {
        KernelArg::Buffer {
            slice: self.slice,
            access: Access::Read,
        }
    }
    /// As a write-only kernel argument.
    pub fn w(&self) -> KernelArg {
        KernelArg::Buffer {
            slice: self.slice,
            access: Access::Write,
        }
    }
    /// As a read-write kernel argument.
    pub fn rw(&self) -> KernelArg {
        KernelArg::Buffer {
            slice: self.slice,
            access: Access::ReadWrite,
        }
    }
    /// As a custom-call operand or result.
    pub fn buffer(&self) -> CustomCallBuffer {
        CustomCallBuffer::new(self.slice, self.dtype, &self.dims)
    }
    /// A sub-range of elements `[start, start+count)` viewed as a 1-D tensor.
    pub fn elems(&self, start: u64, count: u64) -> Tensor {
        let es = self.dtype.size() as u64;
        Tensor {
            slice: Slice::new(
                self.slice.allocation,
                self.slice.offset + start * es,
                count * es,
            ),
            dtype: self.dtype,
            dims: vec![count],
        }
    }
}

/// Default block size used by [`ExecutableBuilder::kernel`].
pub const DEFAULT_BLOCK: u32 = 256;

/// Builds an [`Executable`] step by step; [`ExecutableBuilder::build`] validates it.
#[derive(Debug)]
pub struct ExecutableBuilder {
    exe: Executable,
    stack: Vec<Vec<Thunk>>,
    /// The next async scope id, and the scopes started and not yet done.
    next_async: u32,
    open_async: Vec<u32>,
}

impl ExecutableBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        ExecutableBuilder {
            exe: Executable {
                abi_version: ABI_VERSION,
                name: name.into(),
                allocations: vec![],
                modules: vec![],
                entry: vec![],
                signature: Signature::default(),
                aliases: vec![],
            },
            stack: vec![vec![]],
            next_async: 0,
            open_async: vec![],
        }
    }

    fn alloc(&mut self, size: u64, kind: AllocationKind, space: MemorySpace) -> u32 {
        let index = self.exe.allocations.len() as u32;
        self.exe.allocations.push(BufferAllocation {
            index,
            size,
            alignment: 64,
            kind,
            memory_space: space,
        });
        index
    }

    fn tensor(index: u32, dtype: DType, dims: &[u64]) -> Tensor {
        let size = dims.iter().product::<u64>() * dtype.size() as u64;
        Tensor {
            slice: Slice::new(index, 0, size),
            dtype,
            dims: dims.to_vec(),
        }
    }

    /// Declares the next parameter.
    pub fn parameter(&mut self, name: &str, dtype: DType, dims: &[u64]) -> Tensor {
        let n = self.exe.signature.parameters.len() as u32;
        let size = dims.iter().product::<u64>() * dtype.size() as u64;
        let index = self.alloc(size, AllocationKind::Parameter(n), MemorySpace::Device);
        self.exe.signature.parameters.push(TensorSpec {
            name: name.into(),
            dtype,
            dims: dims.to_vec(),
            allocation: index,
        });
        Self::tensor(index, dtype, dims)
    }

    /// Declares the next output.
    pub fn output(&mut self, name: &str, dtype: DType, dims: &[u64]) -> Tensor {
        let n = self.exe.signature.outputs.len() as u32;
        let size = dims.iter().product::<u64>() * dtype.size() as u64;
        let index = self.alloc(size, AllocationKind::Output(n), MemorySpace::Device);
        self.exe.signature.outputs.push(TensorSpec {
            name: name.into(),
            dtype,
            dims: dims.to_vec(),
            allocation: index,
        });
        Self::tensor(index, dtype, dims)
    }

    /// Declares that output `output` may reuse parameter `parameter`'s buffer (checked by
    /// [`Self::build`]: same dtype and shape, each at most once).
    pub fn alias(&mut self, output: u32, parameter: u32) {
        self.exe
            .aliases
            .push(crate::ir::IoAlias { output, parameter });
    }

    /// [`Self::alias`] by tensors: `output` (an output's tensor) may reuse `parameter`'s
    /// buffer. An error says which of the two is not what it should be.
    pub fn alias_tensors(&mut self, output: &Tensor, parameter: &Tensor) -> Result<(), String> {
        let kind = |t: &Tensor| {
            self.exe
                .allocations
                .get(t.slice.allocation as usize)
                .map(|a| a.kind.clone())
        };
        let o = match kind(output) {
            Some(AllocationKind::Output(n)) => n,
            _ => return Err("the output tensor is not an output of this builder".into()),
        };
        let p = match kind(parameter) {
            Some(AllocationKind::Parameter(n)) => n,
            _ => return Err("the parameter tensor is not a parameter of this builder".into()),
        };
        self.alias(o, p);
        Ok(())
    }

    /// Declares a scratch buffer.
    pub fn temp(&mut self, dtype: DType, dims: &[u64]) -> Tensor {
        let size = dims.iter().product::<u64>() * dtype.size() as u64;
        let index = self.alloc(size, AllocationKind::Temp, MemorySpace::Device);
        Self::tensor(index, dtype, dims)
    }

    /// Declares a scratch buffer in a given memory space.
    pub fn temp_in(&mut self, dtype: DType, dims: &[u64], space: MemorySpace) -> Tensor {
        let size = dims.iter().product::<u64>() * dtype.size() as u64;
        let index = self.alloc(size, AllocationKind::Temp, space);
        Self::tensor(index, dtype, dims)
    }

    /// Declares a constant from raw little-endian bytes.
    pub fn constant(&mut self, dtype: DType, dims: &[u64], bytes: Vec<u8>) -> Tensor {
        let index = self.alloc(
            bytes.len() as u64,
            AllocationKind::Constant(bytes),
            MemorySpace::Device,
        );
        Self::tensor(index, dtype, dims)
    }

    /// Adds the standard kernel library as module `std` (once) and returns its name.
    pub fn standard_module(&mut self) -> String {
        if self.exe.module("std").is_none() {
            self.exe.modules.push(Module {
                name: "std".into(),
                images: vec![ModuleImage::Standard],
                options: Default::default(),
            });
        }
        "std".into()
    }

    /// Adds module `name` of portable kernel source (the xthunk CUDA-C subset, compiled by
    /// NVRTC / hipRTC on GPUs and by a C++ compiler on the host; `docs/kernels.md`) with
    /// `options` (defines, fast math, headers); returns its name for [`Self::kernel`]. The
    /// name must be new and not `std`, the code not empty, the headers' names unique.
    pub fn try_source_module(
        &mut self,
        name: &str,
        code: &str,
        options: ModuleOptions,
    ) -> Result<String, BuildError> {
        let call = "source_module";
        if name.is_empty() || name == "std" || self.exe.module(name).is_some() {
            return Err(build_err(
                call,
                "name",
                format!("{name:?} is empty, `std` or a module this builder already has"),
            ));
        }
        if code.trim().is_empty() {
            return Err(build_err(call, "code", "is empty"));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(h) = options
            .headers
            .iter()
            .find(|h| !seen.insert(h.name.as_str()))
        {
            return Err(build_err(
                call,
                "headers",
                format!("`{}` is given twice", h.name),
            ));
        }
        Ok(self.module(Module {
            name: name.into(),
            images: vec![ModuleImage::Source { code: code.into() }],
            options,
        }))
    }

    /// Adds a module.
    pub fn module(&mut self, module: Module) -> String {
        let name = module.name.clone();
        self.exe.modules.push(module);
        name
    }

    /// Appends a thunk to the innermost open sequence.
    pub fn push(&mut self, t: Thunk) {
        if let Some(top) = self.stack.last_mut() {
            top.push(t);
        }
    }

    pub fn copy(&mut self, src: Slice, dst: Slice) {
        self.push(CopyThunk { src, dst }.into());
    }

    pub fn memset(&mut self, dst: Slice, pattern: MemsetPattern) {
        self.push(MemsetThunk { dst, pattern }.into());
    }

    /// Launches `name` from `module` over `threads` work items with the default block size
    /// (the grid is capped at 65535 blocks; portable kernels use grid-stride loops).
    pub fn kernel(&mut self, module: &str, name: &str, threads: u64, args: Vec<KernelArg>) {
        let blocks = threads.div_ceil(DEFAULT_BLOCK as u64).clamp(1, 65535) as u32;
        self.push(
            KernelThunk {
                module: module.into(),
                name: name.into(),
                grid: Dim3::x(blocks),
                block: Dim3::x(DEFAULT_BLOCK),
                shared_mem: 0,
                args,
            }
            .into(),
        );
    }

    /// Row-major `c = alpha * a @ b + beta * c` on whole tensors of shapes `[m,k]`, `[k,n]`,
    /// `[m,n]` (or with a leading batch dimension on all three). Shapes are not checked here
    /// (`build` checks the sizes only); [`Self::try_matmul`] checks them and the dtypes.
    pub fn matmul(&mut self, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f64, beta: f64) {
        let (batch, m, k) = match a.dims.as_slice() {
            [m, k] => (1, *m, *k),
            [bt, m, k] => (*bt, *m, *k),
            _ => (1, 0, 0),
        };
        let n = *b.dims.last().unwrap_or(&0);
        self.push_gemm(a, b, c, [batch, m, n, k], alpha, beta);
    }

    /// [`Self::matmul`] after checking that the three tensors fit together: ranks 2 (or 3, with
    /// one batch size), one element type, `a`'s columns equal to `b`'s rows and `c` of shape
    /// `[m, n]`. The error names the argument to fix; nothing is added on error.
    pub fn try_matmul(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        alpha: f64,
        beta: f64,
    ) -> Result<(), BuildError> {
        let dims = matmul_dims(a, b, c)?;
        self.push_gemm(a, b, c, dims, alpha, beta);
        Ok(())
    }

    fn push_gemm(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        dims: [u64; 4],
        alpha: f64,
        beta: f64,
    ) {
        let [batch, m, n, k] = dims;
        self.push(
            GemmThunk {
                a: a.slice,
                b: b.slice,
                c: c.slice,
                m,
                n,
                k,
                lda: k,
                ldb: n,
                ldc: n,
                trans_a: false,
                trans_b: false,
                alpha,
                beta,
                dtype: a.dtype,
                batch,
                stride_a: m * k,
                stride_b: k * n,
                stride_c: m * n,
            }
            .into(),
        );
    }

    /// Fills `dst` with a repeated 1-, 2- or 4-byte `pattern` (a memset); `dst`'s byte size
    /// must be a multiple of the pattern's width.
    pub fn try_memset(&mut self, dst: &Tensor, pattern: MemsetPattern) -> Result<(), BuildError> {
        let w = pattern.width();
        if !dst.slice.size.is_multiple_of(w) {
            return Err(build_err(
                "memset",
                "dst",
                format!(
                    "has {} bytes, not a multiple of the {w}-byte pattern",
                    dst.slice.size
                ),
            ));
        }
        self.memset(dst.slice, pattern);
        Ok(())
    }

    /// Sets every element of `dst` to `value` (of `dst`'s element type) with a memset: the
    /// value's bytes are the pattern (an 8-byte value only when its two halves are equal, such
    /// as 0; the IR's patterns are at most 4 bytes).
    pub fn try_fill(&mut self, dst: &Tensor, value: Scalar) -> Result<(), BuildError> {
        if value.dtype() != dst.dtype {
            return Err(build_err(
                "fill",
                "value",
                format!("is {}, `dst` is {}", value.dtype(), dst.dtype),
            ));
        }
        let b = value.to_le_bytes();
        let pattern = match b.as_slice() {
            [x] => MemsetPattern::U8(*x),
            [x, y] => MemsetPattern::U16(u16::from_le_bytes([*x, *y])),
            [x, y, z, w] => MemsetPattern::U32(u32::from_le_bytes([*x, *y, *z, *w])),
            _ if b.len() == 8 && b[..4] == b[4..] => {
                MemsetPattern::U32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            _ => {
                return Err(build_err(
                    "fill",
                    "value",
                    format!(
                        "{value:?} is 8 bytes whose halves differ; a memset repeats at most 4 \
                         bytes (write it with a kernel or a constant)"
                    ),
                ));
            }
        };
        self.try_memset(dst, pattern)
            .map_err(|e| BuildError { call: "fill", ..e })
    }

    /// Row-major `c = alpha * op(a) @ op(b) + beta * c`, `op` transposing the last two axes
    /// of an operand whose flag is set (`a` is `[k, m]` with `trans_a`, `b` `[n, k]` with
    /// `trans_b`; or with one leading batch axis on all three). Checked like
    /// [`Self::try_matmul`], errors naming the argument.
    #[allow(clippy::too_many_arguments)]
    pub fn try_gemm(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        trans_a: bool,
        trans_b: bool,
        alpha: f64,
        beta: f64,
    ) -> Result<(), BuildError> {
        let [batch, m, n, k] = gemm_dims("gemm", a, b, c, trans_a, trans_b)?;
        self.push(
            GemmThunk {
                a: a.slice,
                b: b.slice,
                c: c.slice,
                m,
                n,
                k,
                lda: if trans_a { m } else { k },
                ldb: if trans_b { k } else { n },
                ldc: n,
                trans_a,
                trans_b,
                alpha,
                beta,
                dtype: a.dtype,
                batch,
                stride_a: m * k,
                stride_b: k * n,
                stride_c: m * n,
            }
            .into(),
        );
        Ok(())
    }

    /// A collective `op` from `src` to `dst` among replica `groups` (empty: one group of every
    /// rank). Checked here: one collective element type, the groups (none empty, disjoint, one
    /// size), a broadcast's root inside a group, `src` and `dst` not overlapping (except an
    /// all_reduce in place) and their sizes for the group size (when `groups` gives it; with
    /// every rank, what can be checked without the number of ranks).
    pub fn try_collective(
        &mut self,
        op: CollectiveOp,
        src: &Tensor,
        dst: &Tensor,
        groups: &[Vec<u32>],
    ) -> Result<(), BuildError> {
        let call = op.name();
        let e = |arg, m: String| build_err(call, arg, m);
        if !COLLECTIVE_DTYPES.contains(&src.dtype) {
            return Err(e(
                "src",
                format!(
                    "is {}; collectives take {}",
                    src.dtype,
                    dtype_names(&COLLECTIVE_DTYPES)
                ),
            ));
        }
        if dst.dtype != src.dtype {
            return Err(e(
                "dst",
                format!("is {}, `src` is {}: one element type", dst.dtype, src.dtype),
            ));
        }
        let n = group_size(call, groups)?;
        if let (CollectiveOp::Broadcast { root }, Some(n)) = (&op, n)
            && u64::from(*root) >= n
        {
            return Err(e(
                "root",
                format!("is {root}, a position in groups of {n} ranks"),
            ));
        }
        let in_place = src.slice == dst.slice;
        if src.slice.overlaps(&dst.slice)
            && !(in_place && matches!(op, CollectiveOp::AllReduce { .. }))
        {
            return Err(e(
                "dst",
                "overlaps `src` (only an all_reduce may work in place, on the same tensor)".into(),
            ));
        }
        let (s, d) = (src.slice.size, dst.slice.size);
        let thunk = CollectiveThunk {
            op,
            src: src.slice,
            dst: dst.slice,
            dtype: src.dtype,
            groups: groups.to_vec(),
        };
        match n {
            Some(n) => check_collective_sizes(&thunk, n)
                .map_err(|(field, m)| e(if field == "src" { "src" } else { "dst" }, m))?,
            None => {
                let bad = match thunk.op {
                    CollectiveOp::AllReduce { .. }
                    | CollectiveOp::Broadcast { .. }
                    | CollectiveOp::AllToAll => (s != d).then_some("dst"),
                    CollectiveOp::AllGather => (s == 0 || d % s != 0).then_some("dst"),
                    CollectiveOp::ReduceScatter { .. } => (d == 0 || s % d != 0).then_some("src"),
                };
                if let Some(arg) = bad {
                    return Err(e(
                        arg,
                        format!(
                            "`src` has {s} bytes, `dst` {d}: sizes that fit no number of ranks \
                             for {call}"
                        ),
                    ));
                }
            }
        }
        self.push(thunk.into());
        Ok(())
    }

    /// `dst` on rank `b` = `src` on rank `a` for each `(a, b)` of `pairs` (a rank sends and
    /// receives at most once); a rank that receives nothing gets zeros.
    pub fn try_collective_permute(
        &mut self,
        src: &Tensor,
        dst: &Tensor,
        pairs: &[(u32, u32)],
    ) -> Result<(), BuildError> {
        let call = "collective_permute";
        collective_dtype(call, "src", src)?;
        if dst.dtype != src.dtype || dst.slice.size != src.slice.size {
            return Err(build_err(
                call,
                "dst",
                format!(
                    "is {}{:?}, `src` {}{:?}: the same type and size",
                    dst.dtype, dst.dims, src.dtype, src.dims
                ),
            ));
        }
        if src.slice.overlaps(&dst.slice) {
            return Err(build_err(call, "dst", "overlaps `src`"));
        }
        let (mut from, mut to) = (
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
        );
        for (i, (a, b)) in pairs.iter().enumerate() {
            if !from.insert(*a) || !to.insert(*b) {
                return Err(build_err(
                    call,
                    "pairs",
                    format!("pairs[{i}] = ({a}, {b}): a rank sends or receives twice"),
                ));
            }
        }
        self.push(
            CollectivePermuteThunk {
                src: src.slice,
                dst: dst.slice,
                dtype: src.dtype,
                pairs: pairs.to_vec(),
            }
            .into(),
        );
        Ok(())
    }

    /// Sends `src` to global rank `peer` (matched by a receive there, in order); typically in
    /// a branch of a [`Self::try_conditional`] on the rank ([`Self::try_rank_id`]).
    pub fn try_send(&mut self, src: &Tensor, peer: u32) -> Result<(), BuildError> {
        collective_dtype("send", "src", src)?;
        self.push(
            SendThunk {
                src: src.slice,
                dtype: src.dtype,
                peer,
            }
            .into(),
        );
        Ok(())
    }

    /// Receives `dst` from global rank `peer` (its matching send).
    pub fn try_recv(&mut self, dst: &Tensor, peer: u32) -> Result<(), BuildError> {
        collective_dtype("recv", "dst", dst)?;
        self.push(
            RecvThunk {
                dst: dst.slice,
                dtype: dst.dtype,
                peer,
            }
            .into(),
        );
        Ok(())
    }

    /// A ragged all-to-all among replica `groups` (empty: every rank): rows of `operand`
    /// (its leading axis; a row is the rest of its shape) go to each member at the offsets and
    /// sizes (in rows) of the four index tensors, one i32 or i64 entry per member each
    /// (`input_offsets`, `send_sizes`: what this rank sends to member `j`; `output_offsets`:
    /// where they land in member `j`'s `output`; `recv_sizes`: what it receives from member
    /// `j`). Rows of `output` nothing is written to keep their contents.
    pub fn try_ragged_all_to_all(
        &mut self,
        operand: &Tensor,
        output: &Tensor,
        index: [&Tensor; 4],
        groups: &[Vec<u32>],
    ) -> Result<(), BuildError> {
        let call = "ragged_all_to_all";
        collective_dtype(call, "operand", operand)?;
        let row = |t: &Tensor| t.dims.get(1..).map(<[u64]>::to_vec);
        if operand.dims.is_empty()
            || output.dtype != operand.dtype
            || output.dims.is_empty()
            || row(output) != row(operand)
        {
            return Err(build_err(
                call,
                "output",
                format!(
                    "is {}{:?}, `operand` {}{:?}: the same element type and rows (all axes after the first)",
                    output.dtype, output.dims, operand.dtype, operand.dims
                ),
            ));
        }
        if operand.slice.overlaps(&output.slice) {
            return Err(build_err(call, "output", "overlaps `operand`"));
        }
        let names = [
            "input_offsets",
            "send_sizes",
            "output_offsets",
            "recv_sizes",
        ];
        let index_dtype = index[0].dtype;
        let entries = index[0].elements();
        for (name, t) in names.into_iter().zip(index) {
            if !matches!(t.dtype, DType::I32 | DType::I64)
                || t.dtype != index_dtype
                || t.dims.len() != 1
                || t.elements() != entries
                || entries == 0
            {
                return Err(build_err(
                    call,
                    name,
                    format!(
                        "is {}{:?}; the four index tensors are 1-D, i32 or i64, one type and one \
                         length (≥ 1): input_offsets is {}{:?}",
                        t.dtype, t.dims, index_dtype, index[0].dims
                    ),
                ));
            }
            if t.slice.overlaps(&output.slice) {
                return Err(build_err(call, name, "overlaps `output`"));
            }
        }
        if let Some(n) = group_size(call, groups)?
            && entries != n
        {
            return Err(build_err(
                call,
                "input_offsets",
                format!("has {entries} entries for groups of {n} ranks"),
            ));
        }
        let row_elements = operand.dims[1..].iter().product::<u64>().max(1);
        self.push(
            RaggedAllToAllThunk {
                operand: operand.slice,
                output: output.slice,
                input_offsets: index[0].slice,
                send_sizes: index[1].slice,
                output_offsets: index[2].slice,
                recv_sizes: index[3].slice,
                dtype: operand.dtype,
                index_dtype,
                row_elements,
                groups: groups.to_vec(),
            }
            .into(),
        );
        Ok(())
    }

    /// Writes this rank's number (an i32) into `dst`, which must be an i32 or u32 scalar or
    /// one-element tensor.
    pub fn try_rank_id(&mut self, dst: &Tensor) -> Result<(), BuildError> {
        if !matches!(dst.dtype, DType::I32 | DType::U32) || dst.slice.size != 4 {
            return Err(build_err(
                "rank_id",
                "dst",
                format!("is {}{:?}; it needs one i32", dst.dtype, dst.dims),
            ));
        }
        self.push(RankIdThunk { dst: dst.slice }.into());
        Ok(())
    }

    /// Writes the execution's seed (a u64 that differs from one execution of the loaded
    /// program to the next; see [`ExecutionSeedThunk`]) into `dst`, which must be a u64 or
    /// i64 scalar or one-element tensor.
    pub fn try_execution_seed(&mut self, dst: &Tensor) -> Result<(), BuildError> {
        if !matches!(dst.dtype, DType::U64 | DType::I64) || dst.slice.size != 8 {
            return Err(build_err(
                "execution_seed",
                "dst",
                format!("is {}{:?}; it needs one u64", dst.dtype, dst.dims),
            ));
        }
        self.push(ExecutionSeedThunk { dst: dst.slice }.into());
        Ok(())
    }

    /// Opens a block: thunks pushed until [`Self::end_block`] (given the token returned
    /// here) are collected for a thunk that nests them (a loop's body, a branch, a command
    /// buffer, an async scope).
    pub fn begin_block(&mut self) -> usize {
        self.stack.push(vec![]);
        self.stack.len()
    }

    /// Closes the block that [`Self::begin_block`] opened (and the sequences left open in
    /// it) and returns its thunks; an error when that block is no longer open.
    pub fn end_block(&mut self, token: usize) -> Result<Vec<Thunk>, BuildError> {
        if token < 2 || self.stack.len() < token {
            return Err(build_err("end_block", "token", "that block is not open"));
        }
        while self.stack.len() > token {
            self.end_sequence();
        }
        Ok(self.stack.pop().unwrap_or_default())
    }

    /// The thunks `f` pushes, as a block.
    pub fn block(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<(), BuildError>,
    ) -> Result<Vec<Thunk>, BuildError> {
        let token = self.begin_block();
        let r = f(self);
        let body = self.end_block(token)?;
        r.map(|()| body)
    }

    fn check_pred(call: &'static str, arg: &'static str, t: &Tensor) -> Result<(), BuildError> {
        if t.dtype != DType::Pred || t.slice.size != 1 {
            return Err(build_err(
                call,
                arg,
                format!("is {}{:?}; it must be one pred (a bool)", t.dtype, t.dims),
            ));
        }
        Ok(())
    }

    /// A loop of blocks: `loop { cond; if !pred { break }; body }`, or with `trip_count` the
    /// body `trip_count` times (`cond` not run; give an empty one). `pred` is one pred,
    /// written by `cond`.
    pub fn try_while_blocks(
        &mut self,
        pred: &Tensor,
        trip_count: Option<u64>,
        cond: Vec<Thunk>,
        body: Vec<Thunk>,
    ) -> Result<(), BuildError> {
        Self::check_pred("while", "pred", pred)?;
        if trip_count.is_some_and(|n| n > i64::MAX as u64) {
            return Err(build_err("while", "trip_count", "is larger than i64::MAX"));
        }
        if trip_count.is_none() && cond.is_empty() {
            return Err(build_err(
                "while",
                "cond",
                "is empty: without a trip_count, cond must write `pred`",
            ));
        }
        self.push(
            WhileThunk {
                cond,
                pred: pred.slice,
                body,
                trip_count,
            }
            .into(),
        );
        Ok(())
    }

    /// [`Self::try_while_blocks`] with the blocks that `cond` and `body` push.
    pub fn try_while_loop(
        &mut self,
        pred: &Tensor,
        trip_count: Option<u64>,
        cond: impl FnOnce(&mut Self) -> Result<(), BuildError>,
        body: impl FnOnce(&mut Self) -> Result<(), BuildError>,
    ) -> Result<(), BuildError> {
        let cond = self.block(cond)?;
        let body = self.block(body)?;
        self.try_while_blocks(pred, trip_count, cond, body)
    }

    /// Runs branch `index` (an i32 scalar; out of range runs the last branch) or, with a pred
    /// `index`, `branches[0]` when true and `branches[1]` when false (XLA's order).
    pub fn try_conditional(
        &mut self,
        index: &Tensor,
        branches: Vec<Vec<Thunk>>,
    ) -> Result<(), BuildError> {
        let index_type = match (index.dtype, index.slice.size) {
            (DType::I32, 4) => DType::I32,
            (DType::Pred, 1) => DType::Pred,
            _ => {
                return Err(build_err(
                    "conditional",
                    "index",
                    format!(
                        "is {}{:?}; it must be one i32 or one pred",
                        index.dtype, index.dims
                    ),
                ));
            }
        };
        if branches.is_empty() || (index_type == DType::Pred && branches.len() != 2) {
            return Err(build_err(
                "conditional",
                "branches",
                format!(
                    "has {} branches; a {index_type} index needs {}",
                    branches.len(),
                    if index_type == DType::Pred {
                        "2"
                    } else {
                        "at least 1"
                    }
                ),
            ));
        }
        self.push(
            ConditionalThunk {
                index: index.slice,
                index_type,
                branches,
            }
            .into(),
        );
        Ok(())
    }

    /// Its body captured once and replayed as a whole (a CUDA / HIP graph where the backend
    /// has them; in order otherwise). Collectives cannot be in it.
    pub fn command_buffer(&mut self, body: Vec<Thunk>) {
        self.push(CommandBufferThunk { body }.into());
    }

    /// Starts `body` on another stream (`kind`) as async scope `id`, which
    /// [`Self::try_async_done`] waits for; the id is returned (a new one for each scope).
    pub fn async_start(&mut self, kind: AsyncKind, body: Vec<Thunk>) -> u32 {
        let id = self.next_async;
        self.next_async += 1;
        self.open_async.push(id);
        self.push(AsyncStartThunk { id, kind, body }.into());
        id
    }

    /// Waits for async scope `id` (started by [`Self::async_start`], not yet waited for).
    pub fn try_async_done(&mut self, id: u32) -> Result<(), BuildError> {
        let Some(i) = self.open_async.iter().position(|&o| o == id) else {
            return Err(build_err(
                "async_done",
                "id",
                format!(
                    "{id} is no async scope started and not yet done (open: {:?})",
                    self.open_async
                ),
            ));
        };
        self.open_async.remove(i);
        self.push(AsyncDoneThunk { id }.into());
        Ok(())
    }

    /// Calls the handler registered for `target` with `operands` (read) and `results`
    /// (written, not overlapping one another), each passed with its tensor's dtype and shape.
    pub fn try_custom_call(
        &mut self,
        target: &str,
        operands: &[&Tensor],
        results: &[&Tensor],
        options: CustomCallOptions,
    ) -> Result<(), BuildError> {
        let call = "custom_call";
        if target.is_empty() || target.len() > 256 || target.chars().any(char::is_control) {
            return Err(build_err(
                call,
                "target",
                format!("{target:?}: a name of 1 to 256 bytes without control characters"),
            ));
        }
        for (i, r) in results.iter().enumerate() {
            if let Some(j) = results[..i].iter().position(|o| o.slice.overlaps(&r.slice)) {
                return Err(build_err(
                    call,
                    "results",
                    format!("results[{i}] overlaps results[{j}]"),
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        if let Some((n, _)) = options
            .attributes
            .0
            .iter()
            .find(|(n, _)| !names.insert(n.as_str()))
        {
            return Err(build_err(
                call,
                "attributes",
                format!("`{n}` is given twice"),
            ));
        }
        let mut c = CustomCallThunk::new(target);
        c.operands = operands.iter().map(|t| t.buffer()).collect();
        c.results = results.iter().map(|t| t.buffer()).collect();
        c.attributes = options.attributes;
        c.side_effect = options.side_effect;
        self.push(c.into());
        Ok(())
    }

    /// Opens a nested sequence; thunks pushed until [`Self::end_sequence`] go into it.
    pub fn begin_sequence(&mut self) {
        self.stack.push(vec![]);
    }

    /// Closes the innermost nested sequence.
    pub fn end_sequence(&mut self) {
        if self.stack.len() > 1
            && let Some(body) = self.stack.pop()
        {
            self.push(Thunk::from(body));
        }
    }

    /// Finishes (closing open sequences) and validates.
    pub fn build(mut self) -> Result<Executable, ValidationError> {
        while self.stack.len() > 1 {
            self.end_sequence();
        }
        self.exe.entry = self.stack.pop().unwrap_or_default();
        verify(&self.exe)?;
        Ok(self.exe)
    }

    /// Finishes without validating (for tests of the validator).
    pub fn build_unchecked(mut self) -> Executable {
        while self.stack.len() > 1 {
            self.end_sequence();
        }
        self.exe.entry = self.stack.pop().unwrap_or_default();
        self.exe
    }
}
