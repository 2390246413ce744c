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

/// `[batch, m, n, k]` of `c = a @ b`, or what does not fit.
fn matmul_dims(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<[u64; 4], BuildError> {
    let err = |arg, message: String| BuildError {
        call: "matmul",
        arg,
        message,
    };
    let (batch, m, k) = match a.dims.as_slice() {
        [m, k] => (None, *m, *k),
        [bt, m, k] => (Some(*bt), *m, *k),
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
        if let Some(bt) = batch {
            if t.dims[0] != bt {
                return Err(err(
                    name,
                    format!("has batch size {}, `a` has {bt}", t.dims[0]),
                ));
            }
        }
    }
    let (bk, n) = (b.dims[want_rank - 2], b.dims[want_rank - 1]);
    if bk != k {
        return Err(err(
            "b",
            format!(
                "has {bk} rows (shape {:?}), `a` has {k} columns (shape {:?})",
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

    /// Opens a nested sequence; thunks pushed until [`Self::end_sequence`] go into it.
    pub fn begin_sequence(&mut self) {
        self.stack.push(vec![]);
    }

    /// Closes the innermost nested sequence.
    pub fn end_sequence(&mut self) {
        if self.stack.len() > 1 {
            if let Some(body) = self.stack.pop() {
                self.push(Thunk::from(body));
            }
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
