//! xthunk core: the thunk IR and its validation, the backend traits, the host (CPU) reference
//! backend with the standard kernel library, and the executor.

pub mod backend;
pub mod bench;
pub mod builder;
pub mod collectives;
pub mod custom_call;
pub use xthunk_distributed as distributed;
pub mod error;
pub mod executor;
#[cfg(test)]
mod executor_tests;
pub use xthunk_support::{files, hash};
pub mod host;
pub use xthunk_ir as ir;
pub mod kernels;
pub mod trace;

pub use error::{Error, Result};

/// Validates an executable against the standard kernel library (see [`ir::verify_with`]).
pub fn verify(exe: &ir::Executable) -> std::result::Result<(), ir::ValidationError> {
    ir::verify_with(exe, kernels::standard_library())
}
