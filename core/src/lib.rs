//! xthunk core: the thunk IR and its validation, the backend traits, the host (CPU) reference
//! backend with the standard kernel library, and the executor.

pub mod backend;
pub mod collectives;
pub mod distributed;
pub mod error;
pub mod executor;
pub mod host;
pub mod ir;
pub mod kernels;

pub use error::{Error, Result};
