//! xthunk's standard kernel library (the catalog of signatures, the host implementations,
//! the portable source), [`verify`], a program's validation against it, and [`Program`], a
//! program that passed it.

// The crates below, under the names the moved files use (`crate::ir::…`).
pub(crate) use xthunk_ir as ir;

// One module keeps the moved files' `crate::kernels::…` paths valid; it is public for its
// documentation, and its items are re-exported here.
pub mod kernels;
pub use kernels::*;

pub mod program;
pub use program::Program;

/// Validates an executable against the standard kernel library (see [`ir::verify_with`]).
pub fn verify(exe: &ir::Executable) -> std::result::Result<(), ir::ValidationError> {
    ir::verify_with(exe, kernels::standard_library())
}
