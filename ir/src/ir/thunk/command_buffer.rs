//! `command_buffer`: a body recorded once into a replayable graph and replayed.

use super::{ListName, Thunk, ThunkKind};
use crate::ir::ThunkPath;
use crate::ir::verify::{ThunkChecker, ValidationError};

/// Records `body` once per execution state into a replayable graph (CUDA/HIP graph, a
/// pre-resolved operation list on the host), replays it, and re-records only when an
/// address it uses changed. The body may hold copies, memsets, kernels, gemms, custom
/// calls, `While` and `Conditional` (recorded as conditional graph nodes where the backend
/// has them, else run with host-driven control flow) and sequences of them.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandBufferThunk {
    pub body: Vec<Thunk>,
}

impl ThunkKind for CommandBufferThunk {
    fn name(&self) -> &'static str {
        "command_buffer"
    }

    fn nested(&self) -> Vec<(ListName, &[Thunk])> {
        vec![(ListName::field("body"), self.body.as_slice())]
    }

    fn records(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut ThunkChecker<'_>, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "command_buffer")
    }

    fn describe(&self) -> String {
        format!("command_buffer ({} thunks)", self.body.len())
    }
}
