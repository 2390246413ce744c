//! xthunk's host (CPU) reference backend: memory, streams and events, the standard kernel
//! library's host implementations and compiled CPU kernels (`cpu`, with the CPU runtime),
//! and the host's collectives (in-process and shared memory).

// The crates below, under the names the moved files use (`crate::backend::…`).
pub(crate) use xthunk_backend::{backend, error};
pub(crate) use xthunk_collectives as collectives;
pub(crate) use xthunk_distributed as distributed;
pub(crate) use xthunk_ir as ir;
pub(crate) use xthunk_kernels as kernels;
pub(crate) use xthunk_support::files;

// One module keeps the moved files' `crate::host::…` paths valid; it is public for its
// documentation, and its items are re-exported here.
pub mod host;
pub use host::*;
