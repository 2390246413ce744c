//! The thunk IR.

mod builder;
mod dtype;
mod gemm;
mod path;
mod types;
mod verify;

pub use builder::{DEFAULT_BLOCK, ExecutableBuilder, Tensor};
pub use dtype::DType;
pub use gemm::{ColumnMajorGemm, GEMM_DTYPES, Gemm, GemmError, GemmMatrix, GemmOperand, GemmThunk};
pub use path::{PathSegment, ThunkPath};
pub use types::*;
pub use verify::{ValidationError, check_collective_sizes, verify};
