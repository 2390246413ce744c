//! Custom calls in the executor: resolved through the one registry at load (a missing handler
//! or a call its handler does not take fails the load, before anything runs), side effects
//! kept in program order, and the call itself at issue. (Command buffers are split around
//! handlers that cannot be captured by the planner, `plan.rs`.) A leaf below the planner and
//! the run: the issue takes the addresses and the device, not the run.

use crate::backend::{Device, DevicePtr, Stream};
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

/// The call's view of `list`, at the addresses `ptr` gives.
fn view<'a>(
    list: &'a [crate::ir::CustomCallBuffer],
    ptr: &dyn Fn(&crate::ir::Slice) -> DevicePtr,
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

/// Issues the custom call `r` on `stream`, its buffers at the addresses `ptr` gives: its
/// handler's error is the execution's error, naming the thunk and the target.
pub(super) fn issue(
    r: &Resolved,
    ptr: &dyn Fn(&crate::ir::Slice) -> DevicePtr,
    device: &dyn Device,
    stream: &dyn Stream,
    path: &ThunkPath,
) -> Result<()> {
    let call = Call {
        target: &r.call.target,
        path,
        operands: view(&r.call.operands, ptr),
        results: view(&r.call.results, ptr),
        attributes: &r.call.attributes,
        stream,
        device,
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
