//! The gemm, `C = alpha·op(A)·op(B) + beta·C` over row-major matrices, and its one shape type
//! [`Gemm`]: the IR's [`GemmThunk`] names its operands by slices, a backend's launch by device
//! ranges.

use super::{DType, Slice};

/// Element types a `Gemm` supports. f16/bf16 accumulate in f32.
pub const GEMM_DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// A gemm, row-major: `C = alpha * op(A) * op(B) + beta * C` for each batch entry, with
/// `op(A)` of shape m×k and `op(B)` k×n. `lda`/`ldb`/`ldc` are row strides (in elements) of the
/// matrices as stored (A is stored k×m when `trans_a`). Batch strides are in elements.
///
/// `T` names the operands: a [`Slice`] in the IR ([`GemmThunk`]), a device range in a
/// backend's launch (`backend::GemmLaunch`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm<T> {
    pub a: T,
    pub b: T,
    pub c: T,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f64,
    pub beta: f64,
    pub dtype: DType,
    pub batch: u64,
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
}

/// The `Gemm` thunk: operands are slices of the program's allocations.
pub type GemmThunk = Gemm<Slice>;

impl<T> Gemm<T> {
    /// Rows and columns of A as stored.
    pub fn stored_a(&self) -> (u64, u64) {
        if self.trans_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// Rows and columns of B as stored.
    pub fn stored_b(&self) -> (u64, u64) {
        if self.trans_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }

    /// The same gemm with other names for its operands.
    pub fn with_operands<U>(&self, a: U, b: U, c: U) -> Gemm<U> {
        Gemm {
            a,
            b,
            c,
            m: self.m,
            n: self.n,
            k: self.k,
            lda: self.lda,
            ldb: self.ldb,
            ldc: self.ldc,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            alpha: self.alpha,
            beta: self.beta,
            dtype: self.dtype,
            batch: self.batch,
            stride_a: self.stride_a,
            stride_b: self.stride_b,
            stride_c: self.stride_c,
        }
    }
}
