//! The planner: resolves each thunk of a validated executable into a [`Step`] at load
//! (kernels looked up in their loaded modules, device support checked), flattening
//! sequences and async scopes into program order and splitting command buffers around
//! custom calls that cannot be captured. What each kind becomes is the dispatch table's
//! ([`PlanOp`], handed in by the loader); the planner names no thunk kind.

use crate::backend::{Device, KernelHandle, LaunchDims, LoadedModule};
use crate::collectives::StreamKind;
use crate::error::{Error, Result};
use crate::ir::{AsyncKind, DType, KernelThunk, Scope, Slice, Thunk, ThunkPath};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One operation, as the executor runs it.
#[derive(Clone)]
pub(super) enum Op {
    /// A thunk that runs as written: a copy, memset, gemm, collective, collective permute,
    /// send, receive or rank id.
    Direct {
        thunk: Thunk,
        /// Whether a command buffer may record it (decided by the dispatch table).
        recordable: bool,
    },
    /// A kernel, resolved in its loaded module.
    Kernel {
        handle: Arc<dyn KernelHandle>,
        dims: LaunchDims,
        kernel: KernelThunk,
    },
    While {
        cond: Vec<Step>,
        pred: Slice,
        body: Vec<Step>,
        trip_count: Option<u64>,
    },
    Conditional {
        index: Slice,
        index_type: DType,
        branches: Vec<Vec<Step>>,
    },
    CommandBuffer {
        id: usize,
        body: Vec<Step>,
        /// Allocations whose addresses the recording depends on.
        bindings: Vec<u32>,
    },
    /// A custom call with its handler, resolved (and checked against it) at load.
    CustomCall(Arc<super::custom_call::Resolved>),
}

/// One operation with its place in the program.
#[derive(Clone)]
pub(super) struct Step {
    pub(super) path: ThunkPath,
    pub(super) kind: &'static str,
    /// What the progress tracker and the logs call it, e.g. `gemm f32 64x64x64`.
    pub(super) label: String,
    pub(super) op: Op,
    /// The stream class (from an enclosing async scope): collectives key their cliques by it.
    pub(super) stream_kind: StreamKind,
}

/// What a schedulable thunk becomes at load: the executor's dispatch table
/// (`dispatch::op`), handed to the [`Planner`] by whoever makes one, so that planning names
/// no thunk kind.
pub(super) type PlanOp = fn(&mut Planner<'_>, &Thunk, &ThunkPath) -> Result<Op>;

/// Plans the thunks of one executable for one device.
pub(super) struct Planner<'a> {
    modules: &'a BTreeMap<String, Arc<dyn LoadedModule>>,
    device: &'a dyn Device,
    /// The id of the next command buffer (explicit or implicit): its recordings are keyed by it.
    next_cmd: usize,
    /// Each thunk's op.
    op: PlanOp,
}

impl<'a> Planner<'a> {
    pub(super) fn new(
        modules: &'a BTreeMap<String, Arc<dyn LoadedModule>>,
        device: &'a dyn Device,
        op: PlanOp,
    ) -> Self {
        Planner {
            modules,
            device,
            next_cmd: 0,
            op,
        }
    }

    /// The device the program is planned for.
    pub(super) fn device(&self) -> &'a dyn Device {
        self.device
    }

    /// Kernel `name` of the loaded module `module`.
    pub(super) fn kernel(
        &self,
        module: &str,
        name: &str,
        path: &ThunkPath,
    ) -> Result<Arc<dyn KernelHandle>> {
        let Some(m) = self.modules.get(module) else {
            return Err(Error::Module {
                module: module.to_string(),
                message: "not loaded".into(),
            }
            .at_thunk(path, "kernel"));
        };
        m.kernel(name).map_err(|e| e.at_thunk(path, "kernel"))
    }

    /// A new command-buffer id.
    pub(super) fn command_buffer_id(&mut self) -> usize {
        let id = self.next_cmd;
        self.next_cmd += 1;
        id
    }

    fn step(&mut self, t: &Thunk, path: &ThunkPath) -> Result<Step> {
        let kind = t.as_kind();
        Ok(Step {
            path: path.clone(),
            kind: kind.name(),
            label: kind.label(),
            op: (self.op)(self, t, path)?,
            stream_kind: StreamKind::Compute,
        })
    }

    /// Plans the `which`-th nested list of `parent`, flattening sequences and async scopes
    /// into program order (inside composite thunks everything runs in order on one stream).
    pub(super) fn list(
        &mut self,
        list: &[Thunk],
        path: &ThunkPath,
        parent: &Thunk,
        which: usize,
    ) -> Result<Vec<Step>> {
        let names = parent.nested();
        let Some((name, _)) = names.get(which) else {
            return Ok(vec![]);
        };
        let mut out = vec![];
        for (i, t) in list.iter().enumerate() {
            self.flatten(t, &path.in_list(name, i), &mut out, &mut |_, _| {})?;
        }
        Ok(out)
    }

    /// Appends the steps of `t` to `out`; `on_step` sees each with its async class.
    pub(super) fn flatten(
        &mut self,
        t: &Thunk,
        path: &ThunkPath,
        out: &mut Vec<Step>,
        on_step: &mut dyn FnMut(&Thunk, Option<AsyncKind>),
    ) -> Result<()> {
        self.flatten_in(t, path, out, on_step, None)
    }

    fn flatten_in(
        &mut self,
        t: &Thunk,
        path: &ThunkPath,
        out: &mut Vec<Step>,
        on_step: &mut dyn FnMut(&Thunk, Option<AsyncKind>),
        class: Option<AsyncKind>,
    ) -> Result<()> {
        for_each_step(t, path, class, &mut |t, path, class| {
            let step = self.step(t, path)?;
            // A command buffer with a custom call that cannot be captured runs as parts: each
            // part has the whole buffer's uses (more ordering, never less).
            for mut step in split_command_buffer(step, self) {
                on_step(t, class);
                if let Some(c) = class {
                    step.stream_kind = StreamKind::from(c);
                }
                out.push(step);
            }
            Ok(())
        })
    }
}

/// A command buffer whose body holds a custom call that cannot be captured, as parts: the
/// runs of capturable steps each a command buffer of their own, the custom calls between them
/// direct steps. Any other step is returned as it is.
fn split_command_buffer(step: Step, planner: &mut Planner<'_>) -> Vec<Step> {
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

/// What [`for_each_step`] calls with each schedulable thunk, its path and its async class.
pub(super) type StepVisitor<'a> =
    dyn FnMut(&Thunk, &ThunkPath, Option<AsyncKind>) -> Result<()> + 'a;

/// Calls `f` with every schedulable thunk of `t` in program order (sequences and async
/// scopes flattened), its path and its async class.
pub(super) fn for_each_step(
    t: &Thunk,
    path: &ThunkPath,
    class: Option<AsyncKind>,
    f: &mut StepVisitor<'_>,
) -> Result<()> {
    let inner = match t.scope() {
        Scope::Sequence => class,
        Scope::AsyncStart { kind, .. } => Some(kind),
        // Ordering after an async scope comes from the buffer uses of its body.
        Scope::AsyncDone { .. } => return Ok(()),
        Scope::Step => return f(t, path, class),
    };
    for (name, list) in t.nested() {
        for (i, c) in list.iter().enumerate() {
            for_each_step(c, &path.in_list(&name, i), inner, f)?;
        }
    }
    Ok(())
}
