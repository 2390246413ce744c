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

pub mod error;
pub mod graph;
pub mod lower;

pub use error::{GraphError, LowerError};
