//! The thunk IR: the bottom layer of core. It imports nothing else from the crate: validation
//! is handed the kernel catalog (the standard library) by its caller (`xthunk_core::verify`).

mod alias;
mod dtype;
mod error;
mod executable;
pub mod f8;
mod gemm;
mod path;
mod signature;
mod thunk;
mod types;
mod verify;

pub use dtype::DType;
pub use error::ValidationError;
pub use executable::Executable;
pub use gemm::{ColumnMajorGemm, GEMM_DTYPES, Gemm, GemmError, GemmMatrix, GemmOperand, GemmThunk};
pub use path::{ListName, PathSegment, ThunkPath};
pub use signature::{Extent, KernelCatalog, KernelSignature, Param, ParamKind};
pub use thunk::custom_call::{
    AttrArray, AttrValue, Attributes, CUSTOM_CALL_API_VERSION, CustomCallBuffer, CustomCallThunk,
    MAX_ATTRIBUTE_DEPTH, MAX_CUSTOM_CALL_RANK,
};
pub use thunk::{
    AsyncDoneThunk, AsyncKind, AsyncStart, AsyncStartThunk, COLLECTIVE_DTYPES, Checker,
    CollectiveOp, CollectivePermuteThunk, CollectiveThunk, CommandBuffer, CommandBufferThunk,
    Conditional, ConditionalThunk, CopyThunk, ExecutionSeedThunk, KernelThunk, MemsetPattern,
    MemsetThunk, Nested, RaggedAllToAllThunk, RaggedIndices, RaggedPart, RaggedParts, RankIdThunk,
    RecvThunk, ReduceOp, Scope, SendThunk, Thunk, ThunkKind, TraceCost, While, WhileThunk,
    check_collective_sizes, execution_seed, select_branch,
};
pub use types::*;
pub use verify::{MAX_ALLOCATION_SIZE, ThunkChecker, verify_with};
