//! xthunk core: the thunk IR and its validation, the backend traits, the host (CPU) reference
//! backend with the standard kernel library, and the executor.

pub use xthunk_backend::{backend, error};
pub mod bench;
pub mod builder;
pub use xthunk_collectives as collectives;
pub mod custom_call;
pub use xthunk_distributed as distributed;
pub mod executor;
#[cfg(test)]
mod executor_tests;
pub use xthunk_host as host;
pub use xthunk_ir as ir;
pub use xthunk_kernels as kernels;
pub use xthunk_support::{files, hash};
pub mod trace;

pub use error::{Error, Result};
pub use xthunk_kernels::verify;
