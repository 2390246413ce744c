//! The thunk IR: the bottom layer of core. It imports nothing else from the crate: validation
//! is handed the kernel catalog (the standard library) by its caller ([`crate::verify`]).

mod dtype;
mod gemm;
mod path;
mod signature;
mod types;
mod verify;

pub use dtype::DType;
pub use gemm::{ColumnMajorGemm, GEMM_DTYPES, Gemm, GemmError, GemmMatrix, GemmOperand, GemmThunk};
pub use path::{PathSegment, ThunkPath};
pub use signature::{Extent, KernelCatalog, KernelSignature, Param, ParamKind};
pub use types::*;
pub use verify::{MAX_ALLOCATION_SIZE, ValidationError, check_collective_sizes, verify_with};
