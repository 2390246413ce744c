//! The thunk IR: the bottom layer of core. It imports nothing else from the crate: validation
//! is handed the kernel catalog (the standard library) by its caller ([`crate::verify`]).

mod custom_call;
mod dtype;
mod gemm;
mod path;
mod signature;
mod types;
mod verify;

pub use custom_call::{
    AttrArray, AttrValue, Attributes, CUSTOM_CALL_API_VERSION, CustomCallBuffer, CustomCallThunk,
    MAX_ATTRIBUTE_DEPTH, MAX_CUSTOM_CALL_RANK,
};
pub use dtype::DType;
pub use gemm::{ColumnMajorGemm, GEMM_DTYPES, Gemm, GemmError, GemmMatrix, GemmOperand, GemmThunk};
pub use path::{PathSegment, ThunkPath};
pub use signature::{Extent, KernelCatalog, KernelSignature, Param, ParamKind};
pub use types::*;
pub use verify::{MAX_ALLOCATION_SIZE, ValidationError, check_collective_sizes, verify_with};
