//! xthunk's executor: loading a validated program onto a device of any backend, scheduling it
//! on streams and running it (`executor`), custom calls (`custom_call`) and execution traces
//! (`trace`). It knows backends only through `xthunk_backend`'s traits: no backend crate,
//! the host's included, is a dependency.

pub mod custom_call;
pub mod executor;
pub mod trace;

// The crates below, under the names the moved files use (`crate::backend::…`).
pub(crate) use xthunk_backend::{Error, backend, error};
pub(crate) use xthunk_collectives as collectives;
pub(crate) use xthunk_ir as ir;
pub(crate) use xthunk_kernels::{program, verify};
pub(crate) use xthunk_support::files;
