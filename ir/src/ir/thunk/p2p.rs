//! `send` / `recv`: point-to-point transfers between two global ranks.

use super::kind::{Checker, Nested, ThunkKind, TraceCost, read, uses_line, write};
use crate::ir::error::ValidationError;
use crate::ir::{BufferUse, DType, Slice, ThunkPath};
use serde_json::{Map, Value, json};

/// Sends `src` to global rank `peer` (matched by a `Recv` there, in order). A cycle of
/// sends and receives can deadlock, as with NCCL outside a group: use `CollectivePermute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendThunk {
    pub src: Slice,
    pub dtype: DType,
    pub peer: u32,
}

/// Receives `dst` from global rank `peer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvThunk {
    pub dst: Slice,
    pub dtype: DType,
    pub peer: u32,
}

/// The trace arguments both directions share.
fn trace_p2p(dtype: DType, peer: u32, bytes: u64, args: &mut Map<String, Value>) -> TraceCost {
    args.insert("dtype".into(), json!(dtype.to_string()));
    args.insert("peers".into(), json!([peer]));
    TraceCost {
        bytes,
        flops: 0,
        communicates: true,
    }
}

impl ThunkKind for SendThunk {
    fn name(&self) -> &'static str {
        "send"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![read(self.src)]
    }

    fn communicates(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "send")?;
        cx.typed_slice(&self.src, self.dtype, path, "src", false)
    }

    fn label(&self) -> String {
        format!("send to rank {}", self.peer)
    }

    fn describe(&self) -> String {
        uses_line(self)
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        trace_p2p(self.dtype, self.peer, self.src.size, args)
    }
}

impl<T> Nested<T> for SendThunk {}

impl ThunkKind for RecvThunk {
    fn name(&self) -> &'static str {
        "recv"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![write(self.dst)]
    }

    fn communicates(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "recv")?;
        cx.typed_slice(&self.dst, self.dtype, path, "dst", true)
    }

    fn label(&self) -> String {
        format!("recv from rank {}", self.peer)
    }

    fn describe(&self) -> String {
        uses_line(self)
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        trace_p2p(self.dtype, self.peer, self.dst.size, args)
    }
}

impl<T> Nested<T> for RecvThunk {}
