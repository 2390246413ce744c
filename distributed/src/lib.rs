//! xthunk's distributed coordination: the `Coordinator` trait, the in-process and embedded
//! coordinators and the job environment. A leaf: it depends on no other xthunk crate.

// One module keeps the moved files' `crate::distributed::…` paths valid.
mod distributed;
pub use distributed::*;
