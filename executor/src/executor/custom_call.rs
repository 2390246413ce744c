//! Custom calls in the executor: resolved through the one registry at load (a missing handler
//! or a call its handler does not take fails the load, before anything runs), command buffers
//! split around handlers that cannot be captured, side effects kept in program order, and the
//! call itself at issue.

use super::plan::{Op, Planner, Step};
use super::run::Run;
use crate::backend::{Device, Stream};
use crate::custom_call::{Call, CallBuffer, CustomCallError, Handler, registry};
use crate::error::{Error, Result};
use crate::ir::{CustomCallThunk, Thunk, ThunkPath};
use std::sync::Arc;

/// Resource id shared by side-effecting custom calls: they keep program order among
/// themselves.
const SIDE_EFFECT_RESOURCE: u64 = 0x51DE_EFFC;

/// A custom call and its handler.
pub(super) struct Resolved {
    pub(super) call: CustomCallThunk,
    pub(super) handler: Arc<dyn Handler>,
    pub(super) capturable: bool,
}

/// Resolves `c` for `device`'s backend in the process's registry.
pub(super) fn resolve(
    device: &dyn Device,
    c: &CustomCallThunk,
    path: &ThunkPath,
) -> Result<Arc<Resolved>> {
    let handler = registry().resolve(device.backend_name(), c, path)?;
    handler.prepare(device, c, path).map_err(|source| {
        let e: Error = CustomCallError::Failed {
            target: c.target.clone(),
            source: Box::new(source),
        }
        .into();
        e.at_thunk(path, "custom_call")
    })?;
    let capturable = handler.traits().command_buffer_compatible;
    Ok(Arc::new(Resolved {
        call: c.clone(),
        handler,
        capturable,
    }))
}

/// The scheduler's resource uses of `t` (and of what it nests): the side-effect resource when
/// a side-effecting custom call is in it.
pub(super) fn resources(t: &Thunk) -> Vec<u64> {
    fn has(t: &Thunk) -> bool {
        t.as_custom_call().is_some_and(|c| c.side_effect)
            || t.nested().iter().any(|(_, l)| l.iter().any(has))
    }
    if has(t) {
        vec![SIDE_EFFECT_RESOURCE]
    } else {
        vec![]
    }
}

/// A command buffer whose body holds a custom call that cannot be captured, as parts: the
/// runs of capturable steps each a command buffer of their own, the custom calls between them
/// direct steps. Any other step is returned as it is.
pub(super) fn split_command_buffer(step: Step, planner: &mut Planner<'_>) -> Vec<Step> {
    let Op::CommandBuffer { body, bindings, .. } = &step.op else {
        return vec![step];
    };
    let splits = |s: &Step| matches!(&s.op, Op::CustomCall(r) if !r.capturable);
    if !body.iter().any(splits) {
        return vec![step];
    }
    let mut parts: Vec<Step> = vec![];
    let mut run: Vec<Step> = vec![];
    let flush = |run: &mut Vec<Step>, parts: &mut Vec<Step>, planner: &mut Planner<'_>| {
        if run.is_empty() {
            return;
        }
        let n = run.len();
        parts.push(Step {
            path: step.path.clone(),
            kind: "command_buffer",
            label: format!("command_buffer part of {n} thunks (split at a custom call)"),
            op: Op::CommandBuffer {
                id: planner.command_buffer_id(),
                body: std::mem::take(run),
                bindings: bindings.clone(),
            },
            stream_kind: step.stream_kind,
        });
    };
    for s in body {
        if splits(s) {
            flush(&mut run, &mut parts, planner);
            tracing::debug!(
                command_buffer = %step.path,
                custom_call = %s.path,
                "custom call is not command-buffer compatible: the command buffer is split"
            );
            parts.push(s.clone());
        } else {
            run.push(s.clone());
        }
    }
    flush(&mut run, &mut parts, planner);
    parts
}

/// The call's view of `list`, at the addresses `ptr` gives.
fn view<'a>(
    list: &'a [crate::ir::CustomCallBuffer],
    ptr: &dyn Fn(&crate::ir::Slice) -> crate::backend::DevicePtr,
) -> Vec<CallBuffer<'a>> {
    list.iter()
        .map(|b| CallBuffer {
            ptr: ptr(&b.slice),
            dtype: b.dtype,
            dims: &b.dims,
            size: b.slice.size,
        })
        .collect()
}

impl Run<'_> {
    /// Issues a custom call on `stream`: its handler's error is the execution's error, naming
    /// the thunk and the target.
    pub(super) fn custom_call(
        &self,
        r: &Resolved,
        stream: &dyn Stream,
        path: &ThunkPath,
    ) -> Result<()> {
        let ptr = |s: &crate::ir::Slice| self.ptr(s);
        let call = Call {
            target: &r.call.target,
            path,
            operands: view(&r.call.operands, &ptr),
            results: view(&r.call.results, &ptr),
            attributes: &r.call.attributes,
            stream,
            device: self.exe.device.as_ref(),
        };
        r.handler.call(&call).map_err(|source| {
            let e: Error = CustomCallError::Failed {
                target: r.call.target.clone(),
                source: Box::new(source),
            }
            .into();
            e.at_thunk(path, "custom_call")
        })
    }
}
