//! xthunk's thunk IR: executables, allocations, modules, the thunk kinds and their validation.
//! The bottom crate: it depends on no other xthunk crate (the kernel catalog that validation
//! checks launches against is handed in by the caller, e.g. `xthunk_kernels::verify`).

// One module keeps the moved files' `crate::ir::…` paths valid; it is public for its
// documentation, and its items are re-exported here.
pub mod ir;
pub use ir::*;
