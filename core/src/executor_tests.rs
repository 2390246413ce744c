//! The executor's unit tests that run on the host backend. They live in the facade, the one
//! crate with both the executor and the host (`xthunk-executor` has no backend, not even for
//! its tests); `super::…` in them names the executor's public items, as it did there.

use crate::executor::*;

mod scratch_tests;
mod temps_tests;
mod tests;
mod trace_tests;
