//! The standard kernel library: signatures, and host implementations (the reference every GPU
//! result is compared with). The portable (CUDA-C subset) source of each kernel arrives with the
//! GPU backends, with exactly these names, parameter lists and semantics.
//!
//! # Conventions
//!
//! - Names are `<op>_<dtype>` (e.g. `add_f32`, `gelu_bf16`, `softmax_f16`); row-broadcast
//!   variants are `<op>_row_<dtype>`; conversions are `convert_<from>_<to>`.
//! - Parameters: buffers first (in the order listed), then immediates. Element counts are `i64`
//!   immediates named `n`; row kernels take `rows` and `cols` (`i64`), row-major. Every buffer
//!   has exactly the element count given below (`Extent::Product` of those immediates);
//!   [`KernelSignature::check_args`] enforces dtypes, access and byte sizes. Immediates of the
//!   element type have that dtype (`f16`/`bf16` as raw bits: `Scalar::F16`/`Scalar::BF16`);
//!   `eps` of layer norm is always `f32`.
//! - Compute type: f16, bf16 and f32 elements are loaded, computed in **f32**, and rounded to
//!   nearest even when stored; f64 in f64; integers natively with **wrapping** add, sub, mul,
//!   neg and abs; integer division by zero gives 0, and `MIN / -1` wraps to `MIN`.
//! - Float `max`/`min` (also in `reduce_max`) follow C `fmax`/`fmin`: when one operand is NaN
//!   the other is returned.
//! - Host implementations compute in the order `a op b` with no fused multiply-add; GPU
//!   versions may contract and differ by an ulp or so.
//! - Row reductions and normalisations on the host (`reduce_sum`/`reduce_mean` of floats,
//!   softmax, layer norm) accumulate in f64 (compensated sums) and round once: GPU versions
//!   accumulate in the compute type in another order, and are compared with a tolerance.
//! - Buffers of one launch may alias: an output that starts at the same address as an input
//!   of the same element size (in place, e.g. `add_f32(a, b, a)`, `softmax(x, x)`) gives the
//!   same result as separate buffers; any other overlap reads the inputs' original values on the
//!   host (GPU results are undefined then). Buffers need no alignment on the host (GPU kernels
//!   need natural alignment of the element type).
//!
//! # Kernels
//!
//! `F` = {f16, bf16, f32, f64}; `I` = {i8, u8, i32, i64}; `S` = {i8, i32, i64};
//! `C` = {f16, bf16, f32, f64, i32}. R/W/RW is the access of each buffer.
//!
//! | kernel | dtypes | parameters | semantics |
//! |---|---|---|---|
//! | `fill_<t>` | F, I | `out: W [n], value: t, n` | `out[i] = value` |
//! | `iota_<t>` | F, I | `out: W [n], start: t, step: t, n` | `out[i] = start + i * step` in the compute type (`(float)i` for floats, wrapping for integers) |
//! | `convert_<a>_<b>` | a != b in C | `in: R [n] a, out: W [n] b, n` | float -> float and i32 -> float: round to nearest even (one rounding); float -> i32: toward zero, saturating, NaN -> 0 |
//! | `neg_<t>`, `abs_<t>` | F, S | `in: R [n], out: W [n], n` | `-x`, `\|x\|` (wrapping for integers) |
//! | `relu_<t>` | F, S | `in: R [n], out: W [n], n` | `x > 0 ? x : 0` (NaN -> 0) |
//! | `exp_<t>`, `log_<t>`, `sqrt_<t>`, `tanh_<t>` | F | `in: R [n], out: W [n], n` | natural exp / log, square root, tanh |
//! | `rsqrt_<t>` | F | `in: R [n], out: W [n], n` | `1 / sqrt(x)` |
//! | `sigmoid_<t>` | F | `in: R [n], out: W [n], n` | `1 / (1 + exp(-x))` |
//! | `gelu_<t>` | F | `in: R [n], out: W [n], n` | tanh approximation: `0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))` |
//! | `add_<t>`, `sub_<t>`, `mul_<t>`, `div_<t>`, `max_<t>`, `min_<t>` | F, I | `a: R [n], b: R [n], out: W [n], n` | `out[i] = a[i] op b[i]` |
//! | `<op>_row_<t>` (same ops) | F, I | `a: R [rows*cols], b: R [cols], out: W [rows*cols], rows, cols` | `out[r,c] = a[r,c] op b[c]` (e.g. bias add) |
//! | `axpy_<t>` | F | `x: R [n], y: RW [n], alpha: t, n` | `y[i] = alpha * x[i] + y[i]` |
//! | `scale_<t>` | F | `x: RW [n], alpha: t, n` | `x[i] = alpha * x[i]` |
//! | `reduce_sum_<t>` | F, i32, i64 | `in: R [rows*cols], out: W [rows], rows, cols` | row sums (integers wrap; empty rows give 0) |
//! | `reduce_max_<t>` | F, I | `in: R [rows*cols], out: W [rows], rows, cols` | row maxima (empty rows give -inf or the type's `MIN`) |
//! | `reduce_mean_<t>` | F | `in: R [rows*cols], out: W [rows], rows, cols` | row sum / cols (empty rows give NaN) |
//! | `softmax_<t>` | F | `in: R [rows*cols], out: W [rows*cols], rows, cols` | `exp(x - max) / sum(exp(x - max))` per row (a row holding NaN or +inf gives NaN) |
//! | `layer_norm_<t>` | F | `in: R [rows*cols], gamma: R [cols], beta: R [cols], out: W [rows*cols], eps: f32, rows, cols` | per row: `(x - mean) / sqrt(var + eps) * gamma[c] + beta[c]`, biased variance (as PyTorch) |
//! | `transpose_<t>` | F, I | `in: R [rows*cols], out: W [cols*rows], rows, cols` | `out[c,r] = in[r,c]` |
//! | `gelu_erf_<t>` | F | `in: R [n], out: W [n], n` | exact GELU: `0.5 * x * (1 + erf(x * 0.7071067811865476))` |
//! | `bias_gelu_<t>`, `bias_gelu_erf_<t>` | F | `a: R [rows*cols], b: R [cols], out: W [rows*cols], rows, cols` | `out[r,c] = gelu(a[r,c] + b[c])` (tanh form / exact form) |
//! | `cross_entropy_<t>` | F | `logits: R [rows*cols], labels: R i32 [rows], loss: W [rows], rows, cols` | `log(sum exp(x[r,:])) - x[r, label]`; a negative label gives 0 (ignored), a label `>= cols` NaN |
//! | `adamw_<t>` | F | `param: RW [n], grad: R [n], m: RW [n] s, v: RW [n] s, lr, beta1, beta2, eps, weight_decay: f32, step: i64, n` | one AdamW step (PyTorch's), moments `s` = f32 (f64 for f64); `step` from 1 |
//! | `embedding_<t>` | F | `table: R [vocab*dim], ids: R i32 [n], out: W [n*dim], n, vocab, dim` | `out[i,:] = table[ids[i],:]`; an id outside `[0, vocab)` gives NaN |
//!
//! 247 kernels in all. Grid and block only matter on GPUs (every portable kernel uses
//! grid-stride loops, so any launch shape is correct); the host implementations ignore them.

use crate::ir::Scalar;
pub use crate::ir::{Extent, KernelCatalog, KernelSignature, Param, ParamKind};
use std::fmt;

/// A buffer or immediate handed to a host kernel implementation.
#[derive(Clone, Copy, Debug)]
pub enum HostArg {
    /// `len` bytes at `ptr`. Buffers of one launch may alias (in-place kernels); an
    /// implementation reads all its inputs before writing, or works element by element.
    Buffer {
        ptr: *mut u8,
        len: usize,
    },
    Scalar(Scalar),
}

/// Errors of a host kernel implementation.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("argument {index}: expected {expected}, got {got}")]
    BadArgument {
        index: usize,
        expected: String,
        got: String,
    },
    #[error("{0}")]
    Failed(String),
}

/// A host kernel implementation.
///
/// # Safety
/// Every `HostArg::Buffer` must point to `len` valid, writable bytes for the whole call, and no
/// other thread may access those bytes during the call.
pub type HostKernelFn = unsafe fn(&[HostArg]) -> Result<(), KernelError>;

/// A kernel of a library: signature and host implementation.
#[derive(Clone)]
pub struct HostKernel {
    pub signature: KernelSignature,
    pub func: HostKernelFn,
}

impl fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKernel")
            .field("signature", &self.signature)
            .finish_non_exhaustive()
    }
}

/// A named set of host kernels, looked up by kernel name.
#[derive(Debug, Default)]
pub struct KernelLibrary {
    pub name: String,
    kernels: std::collections::BTreeMap<String, HostKernel>,
}

impl KernelLibrary {
    pub fn new(name: impl Into<String>) -> Self {
        KernelLibrary {
            name: name.into(),
            kernels: Default::default(),
        }
    }

    /// Adds (or replaces) a kernel.
    pub fn register(&mut self, kernel: HostKernel) {
        self.kernels.insert(kernel.signature.name.clone(), kernel);
    }

    pub fn get(&self, name: &str) -> Option<&HostKernel> {
        self.kernels.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    pub fn kernels(&self) -> impl Iterator<Item = &HostKernel> {
        self.kernels.values()
    }

    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

mod args;
mod elem;
mod elementwise;
pub mod portable;
pub mod reference;
mod rows;
mod sigs;
mod standard;
mod training;
pub use standard::standard_library;

impl KernelCatalog for KernelLibrary {
    fn signature(&self, name: &str) -> Option<&KernelSignature> {
        self.get(name).map(|k| &k.signature)
    }
}
