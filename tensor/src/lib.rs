//! xthunk tensor programs: a small graph of tensor operations with StableHLO's semantics that
//! an importer (StableHLO today, ONNX or PyTorch later) fills in ([`graph`]), and its lowering
//! to a thunk program ([`lower`]): fused generated kernels in one portable source module,
//! `Gemm` thunks for dots, `While` / `Conditional` thunks for control flow.
//!
//! ```
//! use xthunk_core::ir::DType;
//! use xthunk_tensor::graph::{BinaryOp, Graph, UnaryOp};
//! let mut g = Graph::new("f");
//! let x = g.parameter("x", DType::F32, &[4]).unwrap();
//! let y = g.unary(UnaryOp::Exponential, x).unwrap();
//! let z = g.binary(BinaryOp::Add, y, x).unwrap();
//! g.result("z", z).unwrap();
//! let lowered = xthunk_tensor::lower::lower(&g).unwrap();
//! assert_eq!(lowered.kernels, 1); // exp and add fused into one kernel
//! ```
//!
//! # Semantics of the generated code
//!
//! StableHLO's spec (openxla/stablehlo `docs/spec.md`) where it is exact, XLA's choices where
//! it leaves one open (helpers in `lower/prelude.rs`; the test's reference interpreter states
//! the same rules independently):
//! - integers wrap (two's complement; computed in the unsigned type); `divide` by 0 gives -1
//!   (all ones), `INT_MIN / -1` gives `INT_MIN`; `remainder` by 0 gives the dividend,
//!   `INT_MIN % -1` gives 0; `power` with a negative exponent gives 1 for base 1, ±1 for
//!   base -1 by parity, else 0 (XLA's rule); a non-negative exponent is used whole (XLA uses
//!   only its low 6 bits: `3^64` is 1 there, its wrapped value here);
//! - shifts by the bit width or more (the amount read as unsigned) give 0, or the sign for
//!   `shift_right_arithmetic`; `count_leading_zeros`/`popcnt` count in the type's width;
//! - `maximum`/`minimum` are IEEE 754-2019's: a NaN operand gives NaN, and -0 < +0; `clamp`
//!   is `minimum(maximum(x, min), max)`; `sign` keeps NaN and signed zeros;
//! - `compare` with `TOTALORDER` orders by IEEE totalOrder (-NaN < -inf < … < -0 < +0 < … <
//!   +inf < NaN); `FLOAT` comparisons are quiet (NaN compares unequal);
//! - `convert` float → integer truncates and saturates at the type's bounds, NaN gives 0 (as
//!   XLA:CPU does; the spec leaves it open); → pred is `!= 0` (NaN is true); to f16/bf16 goes
//!   through f32 as XLA's does (from f64 or a wide integer: rounded twice, as JAX gives);
//! - `round_nearest_afz` is `round`, `round_nearest_even` is `rint` (the default rounding mode);
//! - f16 and bf16 compute in f32 and round to the type after every op; for `+ - * /` and
//!   `sqrt` that equals one rounding in the type (f32 has more than twice their precision, so
//!   rounding twice is innocuous); transcendental functions are the platform's `expf`,
//!   `sinf`, … (within an ulp or so, not bit-exact across vendors);
//! - `reduce` folds the reduced elements in row-major order from the init value (a float sum's
//!   rounding depends on that order: XLA's tree order can differ in the last bits);
//!   `dot_general` through `Gemm` accumulates as the vendor's BLAS does (f16/bf16 in f32);
//! - `dynamic_slice`, `dynamic_update_slice` and `gather` clamp their starts into range;
//!   `scatter` skips an update window not wholly inside its input (XLA's rule, and so JAX's;
//!   the spec skips only the window's elements outside) and applies colliding updates in
//!   row-major order; `case` runs the last branch for an index out of range.
//!
//! `tests/lowering/xla.rs` holds the values XLA:CPU gave for these choices.

pub mod error;
pub mod graph;
pub mod lower;

pub use error::{GraphError, LowerError};
