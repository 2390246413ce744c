//! xthunk's backend traits (devices, memory, streams, events, modules), vendor library
//! loading (`backend::dylib`, the one symbol-table mechanism), the kernel disk cache, and the
//! runtime [`Error`] every layer above returns.

pub mod backend;
pub mod error;

pub use error::{Error, Result};

// The crates below, under the names the moved files use (`crate::ir::…`).
pub(crate) use xthunk_distributed as distributed;
pub(crate) use xthunk_ir as ir;
pub(crate) use xthunk_support::files;
