//! xthunk's distributed coordination: the `Coordinator` trait, the in-process and embedded
//! coordinators and the job environment. A leaf: it depends on no other xthunk crate.

// One module keeps the moved files' `crate::distributed::…` paths valid; it is public for its
// documentation, and its items are re-exported here.
pub mod distributed;
pub use distributed::*;
