//! xthunk's collectives: the clique provider and communicator traits every collective library
//! implements (the host's, NCCL/RCCL's), the rendezvous, the clique cache and the watchdog.

// The crates below, under the names the moved files use (`crate::backend::…`).
pub(crate) use xthunk_backend::{backend, error};
pub(crate) use xthunk_ir as ir;
pub(crate) use xthunk_support::hash;

// One module keeps the moved files' `crate::collectives::…` paths valid; it is public for its
// documentation, and its items are re-exported here.
pub mod collectives;
pub use collectives::*;
