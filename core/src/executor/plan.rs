//! The planner: resolves each thunk of a validated executable into a [`Step`] at load
//! (kernels looked up in their loaded modules, device support checked), flattening
//! sequences and async scopes into program order.

use crate::backend::{Device, KernelHandle, LaunchDims, LoadedModule};
use crate::collectives::StreamKind;
use crate::error::{Error, Result};
use crate::ir::{AsyncKind, DType, KernelArg, Slice, Thunk, ThunkPath};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One operation, as the executor runs it.
#[derive(Clone)]
pub(super) enum Op {
    /// A thunk that runs as written: a copy, memset, gemm, collective, collective permute,
    /// send, receive or rank id.
    Direct(Thunk),
    /// A kernel, resolved in its loaded module.
    Kernel {
        handle: Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: Vec<KernelArg>,
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

/// Plans the thunks of one executable for one device.
pub(super) struct Planner<'a> {
    modules: &'a BTreeMap<String, Arc<dyn LoadedModule>>,
    device: &'a dyn Device,
    /// The id of the next command buffer (explicit or implicit): its recordings are keyed by it.
    next_cmd: usize,
}

impl<'a> Planner<'a> {
    pub(super) fn new(
        modules: &'a BTreeMap<String, Arc<dyn LoadedModule>>,
        device: &'a dyn Device,
    ) -> Self {
        Planner {
            modules,
            device,
            next_cmd: 0,
        }
    }

    /// A new command-buffer id.
    pub(super) fn command_buffer_id(&mut self) -> usize {
        let id = self.next_cmd;
        self.next_cmd += 1;
        id
    }

    fn step(&mut self, t: &Thunk, path: &ThunkPath) -> Result<Step> {
        let mut label = t.kind().to_string();
        let op = match t {
            Thunk::Copy { .. }
            | Thunk::Memset { .. }
            | Thunk::CollectivePermute { .. }
            | Thunk::RankId { .. } => Op::Direct(t.clone()),
            Thunk::Kernel(k) => {
                label = format!("kernel {}.{}", k.module, k.name);
                let Some(m) = self.modules.get(&k.module) else {
                    return Err(Error::Module {
                        module: k.module.clone(),
                        message: "not loaded".into(),
                    }
                    .at_thunk(path, "kernel"));
                };
                let handle = m.kernel(&k.name).map_err(|e| e.at_thunk(path, "kernel"))?;
                Op::Kernel {
                    handle,
                    dims: LaunchDims {
                        grid: k.grid,
                        block: k.block,
                        shared_mem: k.shared_mem,
                    },
                    args: k.args.clone(),
                }
            }
            Thunk::Gemm(g) => {
                label = format!("gemm {} {}x{}x{}", g.dtype, g.m, g.n, g.k);
                if !self.device.capabilities().gemm_dtypes.contains(&g.dtype) {
                    return Err(Error::Unsupported {
                        backend: self.device.backend_name().into(),
                        feature: format!("{} gemm", g.dtype),
                    }
                    .at_thunk(path, "gemm"));
                }
                Op::Direct(t.clone())
            }
            Thunk::While {
                cond,
                pred,
                body,
                trip_count,
            } => Op::While {
                cond: self.list(cond, path, t, 0)?,
                pred: *pred,
                body: self.list(body, path, t, 1)?,
                trip_count: *trip_count,
            },
            Thunk::Conditional {
                index,
                index_type,
                branches,
            } => Op::Conditional {
                index: *index,
                index_type: *index_type,
                branches: (0..branches.len())
                    .map(|b| self.list(&branches[b], path, t, b))
                    .collect::<Result<_>>()?,
            },
            Thunk::CommandBuffer { body } => {
                let id = self.command_buffer_id();
                let bindings: BTreeSet<u32> = t
                    .all_buffer_uses()
                    .iter()
                    .map(|u| u.slice.allocation)
                    .collect();
                Op::CommandBuffer {
                    id,
                    body: self.list(body, path, t, 0)?,
                    bindings: bindings.into_iter().collect(),
                }
            }
            Thunk::Collective(c) => {
                label = format!("{} {} {}", c.op.name(), c.dtype, c.src);
                Op::Direct(t.clone())
            }
            Thunk::Send { peer, .. } => {
                label = format!("send to rank {peer}");
                Op::Direct(t.clone())
            }
            Thunk::Recv { peer, .. } => {
                label = format!("recv from rank {peer}");
                Op::Direct(t.clone())
            }
            Thunk::CustomCall(c) => {
                label = format!("custom_call {}", c.target);
                Op::CustomCall(super::custom_call::resolve(self.device, c, path)?)
            }
            Thunk::Sequence(_) | Thunk::AsyncStart { .. } | Thunk::AsyncDone { .. } => {
                return Err(Error::InvalidArgument(format!(
                    "internal: {} at {path} is not a schedulable step",
                    t.kind()
                )));
            }
        };
        Ok(Step {
            path: path.clone(),
            kind: t.kind(),
            label,
            op,
            stream_kind: StreamKind::Compute,
        })
    }

    /// Plans the `which`-th nested list of `parent`, flattening sequences and async scopes
    /// into program order (inside composite thunks everything runs in order on one stream).
    fn list(
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
            for mut step in super::custom_call::split_command_buffer(step, self) {
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
    let inner = match t {
        Thunk::Sequence(_) => class,
        Thunk::AsyncStart { kind, .. } => Some(*kind),
        // Ordering after an async scope comes from the buffer uses of its body.
        Thunk::AsyncDone { .. } => return Ok(()),
        _ => return f(t, path, class),
    };
    for (name, list) in t.nested() {
        for (i, c) in list.iter().enumerate() {
            for_each_step(c, &path.in_list(&name, i), inner, f)?;
        }
    }
    Ok(())
}
