//! xthunk core, the facade over core's crates: the thunk IR and its validation, the backend
//! traits, the host (CPU) reference backend with the standard kernel library, the collectives,
//! distributed coordination and the executor, each re-exported under its module name
//! (`xthunk_core::ir` is `xthunk_ir`, …), plus the program builder and the shared bench
//! workloads. Crates that only need a lower layer may depend on its crate directly.

pub mod bench;
pub mod builder;
#[cfg(test)]
mod executor_tests;

pub use xthunk_backend::{backend, error};
pub use xthunk_collectives as collectives;
pub use xthunk_distributed as distributed;
pub use xthunk_executor::{custom_call, executor, trace};
pub use xthunk_host as host;
pub use xthunk_ir as ir;
pub use xthunk_kernels as kernels;
pub use xthunk_support::{files, hash};

pub use error::{Error, Result};
pub use xthunk_kernels::{Program, program, verify};
