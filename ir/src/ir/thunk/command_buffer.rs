//! `command_buffer`: a body recorded once into a replayable graph and replayed.

use super::kind::{Checker, Nested, ThunkKind};
use crate::ir::error::ValidationError;
use crate::ir::{ListName, ThunkPath};

/// Records `body` once per execution state into a replayable graph (CUDA/HIP graph, a
/// pre-resolved operation list on the host), replays it, and re-records only when an
/// address it uses changed. The body may hold copies, memsets, kernels, gemms, custom
/// calls, `While` and `Conditional` (recorded as conditional graph nodes where the backend
/// has them, else run with host-driven control flow) and sequences of them.
///
/// `T` is the element of its thunk lists: a program's is [`super::CommandBufferThunk`], with
/// [`super::Thunk`]s.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandBuffer<T> {
    pub body: Vec<T>,
}

impl<T> ThunkKind for CommandBuffer<T> {
    fn name(&self) -> &'static str {
        "command_buffer"
    }

    fn records(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "command_buffer")
    }

    fn describe(&self) -> String {
        format!("command_buffer ({} thunks)", self.body.len())
    }
}

impl<T> Nested<T> for CommandBuffer<T> {
    fn nested(&self) -> Vec<(ListName, &[T])> {
        vec![(ListName::field("body"), self.body.as_slice())]
    }
}
