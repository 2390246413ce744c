//! The executor: loads a validated executable onto a device (modules, kernels, constants, a
//! static schedule) and runs it.
//!
//! At load, the entry sequence is flattened (nested sequences and async bodies become nodes;
//! `While`, `Conditional` and `CommandBuffer` stay single composite nodes) and its
//! [dependency graph](graph::DependencyGraph) is built. Nodes are then assigned to streams
//! (continuing a chain on its stream when possible, otherwise the least loaded stream; async
//! communication bodies on a dedicated stream), and each cross-stream edge becomes an event
//! record/wait, minus the waits already implied by earlier ones (per-stream vector clocks).
//! Linear or tiny graphs, and `streams = 1`, take the sequential path: one stream, program
//! order.
//!
//! Per-execution state (streams, events, temporaries, command-buffer recordings) is drawn
//! from a pool, so one [`LoadedExecutable`] can be executed from many threads at once.

pub mod graph;
pub mod spmd;

use crate::backend::{
    Buffer, Device, DeviceMemory, DevicePtr, Event, GemmLaunch, Graph, KernelHandle, LaunchArg,
    LaunchDims, LoadedModule, Stream,
};
use crate::collectives::{CliqueKey, CliqueProvider, Communicator, StreamKind};
use crate::error::{Error, Result};
use crate::ir::{
    AllocationKind, AsyncKind, CollectiveOp, CollectiveThunk, DType, Executable, GemmThunk,
    KernelArg, MemorySpace, MemsetPattern, Slice, Thunk, ThunkPath, check_collective_sizes,
};
use crate::verify;
use graph::{DependencyGraph, NodeUses};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a program is scheduled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Compute streams to spread independent work over (at least 1). Async communication
    /// bodies get one more stream of their own.
    pub streams: usize,
    /// Graphs with fewer nodes than this run sequentially on one stream.
    pub sequential_below: usize,
    /// Always run in program order on one stream (the in-order executor).
    pub force_sequential: bool,
    /// Run a sequential program of at least [`AUTO_COMMAND_BUFFER_MIN`] plain operations
    /// (copies, memsets, kernels, gemms) as one implicit command buffer: recorded on the first
    /// execution of a pooled state, replayed after, re-recorded when an address changes (as
    /// XLA converts thunk sequences to command buffers). Executions with a deadline run the
    /// thunks one by one, so that the progress tracker can name the pending one.
    pub auto_command_buffer: bool,
}

/// The smallest sequential program that [`ExecutorConfig::auto_command_buffer`] records.
pub const AUTO_COMMAND_BUFFER_MIN: usize = 64;

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            streams: 2,
            sequential_below: 4,
            force_sequential: false,
            auto_command_buffer: true,
        }
    }
}

impl ExecutorConfig {
    /// The in-order executor: one stream, program order.
    pub fn in_order() -> Self {
        ExecutorConfig {
            streams: 1,
            sequential_below: 0,
            force_sequential: true,
            auto_command_buffer: false,
        }
    }

    /// Spread over `n` compute streams.
    pub fn with_streams(n: usize) -> Self {
        ExecutorConfig {
            streams: n.max(1),
            ..Default::default()
        }
    }
}

/// Options of one execution.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// Fail with `DeadlineExceeded` (naming the first pending thunk of every stream) if the
    /// execution has not finished after this long.
    pub deadline: Option<Duration>,
    /// This device's place in an SPMD run, for collective thunks. Without it the program
    /// runs as rank 0 of a world of 1.
    pub collectives: Option<CollectiveContext>,
}

/// One device's place in an SPMD run: its global rank, the number of ranks, and where its
/// communicators come from. Every rank acquires cliques in program order of the collective
/// thunks, the same on every rank.
#[derive(Clone)]
pub struct CollectiveContext {
    pub rank: u32,
    pub world: u32,
    pub cliques: Arc<dyn CliqueProvider>,
}

impl std::fmt::Debug for CollectiveContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollectiveContext")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish_non_exhaustive()
    }
}

/// Resource id shared by every collective: they keep program order among themselves, which is
/// the order every rank issues them in.
const COLLECTIVE_RESOURCE: u64 = 0xC011_EC71;

/// One operation, resolved at load.
#[derive(Clone)]
enum Op {
    Copy {
        src: Slice,
        dst: Slice,
    },
    Memset {
        dst: Slice,
        pattern: MemsetPattern,
    },
    Kernel {
        handle: Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: Vec<KernelArg>,
    },
    Gemm(Box<GemmThunk>),
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
    Collective(CollectiveThunk),
    Permute {
        src: Slice,
        dst: Slice,
        dtype: DType,
        pairs: Vec<(u32, u32)>,
    },
    Send {
        src: Slice,
        dtype: DType,
        peer: u32,
    },
    Recv {
        dst: Slice,
        dtype: DType,
        peer: u32,
    },
    RankId {
        dst: Slice,
    },
}

#[derive(Clone)]
struct Step {
    path: ThunkPath,
    kind: &'static str,
    label: String,
    op: Op,
    /// The stream class (from an enclosing async scope): collectives key their cliques by it.
    stream_kind: StreamKind,
}

/// A top-level node of the schedule.
struct Node {
    step: Step,
    stream: usize,
    /// Nodes (on other streams) whose events this node waits for.
    waits: Vec<usize>,
    /// Record this node's event after it (someone on another stream waits for it).
    record: bool,
}

/// The static schedule.
struct Schedule {
    nodes: Vec<Node>,
    /// The whole program as one implicit command buffer (see
    /// [`ExecutorConfig::auto_command_buffer`]), used by executions without a deadline.
    fused: Option<Node>,
    streams: usize,
    sequential: bool,
    graph_edges: usize,
}

/// Per-execution resources, pooled.
struct ExecState {
    streams: Vec<Arc<dyn Stream>>,
    events: HashMap<usize, Arc<dyn Event>>,
    temps: Vec<(u32, Buffer)>,
    scratch: Buffer,
    recordings: HashMap<usize, Recording>,
    tracking: Vec<Arc<dyn Event>>,
}

struct Recording {
    addresses: Vec<DevicePtr>,
    graph: Option<Arc<dyn Graph>>,
}

/// What an execution did, for tests and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleInfo {
    pub nodes: usize,
    pub edges: usize,
    pub streams: usize,
    pub sequential: bool,
    pub cross_stream_waits: usize,
    /// The program runs as one implicit command buffer (executions without a deadline).
    pub implicit_command_buffer: bool,
}

/// An executable loaded onto one device.
pub struct LoadedExecutable {
    exe: Arc<Executable>,
    device: Arc<dyn Device>,
    modules: BTreeMap<String, Arc<dyn LoadedModule>>,
    schedule: Schedule,
    constants: BTreeMap<u32, Buffer>,
    pool: Mutex<Vec<ExecState>>,
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field("name", &self.exe.name)
            .field("device", &self.device.info().name)
            .finish_non_exhaustive()
    }
}

struct Planner<'a> {
    modules: &'a BTreeMap<String, Arc<dyn LoadedModule>>,
    device: &'a dyn Device,
    next_cmd: usize,
}

impl Planner<'_> {
    fn step(&mut self, t: &Thunk, path: &ThunkPath) -> Result<Step> {
        let mut label = t.kind().to_string();
        let op = match t {
            Thunk::Copy { src, dst } => Op::Copy {
                src: *src,
                dst: *dst,
            },
            Thunk::Memset { dst, pattern } => Op::Memset {
                dst: *dst,
                pattern: *pattern,
            },
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
                Op::Gemm(Box::new(g.clone()))
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
                let id = self.next_cmd;
                self.next_cmd += 1;
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
                Op::Collective(c.clone())
            }
            Thunk::CollectivePermute {
                src,
                dst,
                dtype,
                pairs,
            } => Op::Permute {
                src: *src,
                dst: *dst,
                dtype: *dtype,
                pairs: pairs.clone(),
            },
            Thunk::Send { src, dtype, peer } => {
                label = format!("send to rank {peer}");
                Op::Send {
                    src: *src,
                    dtype: *dtype,
                    peer: *peer,
                }
            }
            Thunk::Recv { dst, dtype, peer } => {
                label = format!("recv from rank {peer}");
                Op::Recv {
                    dst: *dst,
                    dtype: *dtype,
                    peer: *peer,
                }
            }
            Thunk::RankId { dst } => Op::RankId { dst: *dst },
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
    fn flatten(
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
        match t {
            Thunk::Sequence(_) => {
                for (name, list) in t.nested() {
                    for (i, c) in list.iter().enumerate() {
                        self.flatten_in(c, &path.in_list(&name, i), out, on_step, class)?;
                    }
                }
            }
            Thunk::AsyncStart { kind, .. } => {
                for (name, list) in t.nested() {
                    for (i, c) in list.iter().enumerate() {
                        self.flatten_in(c, &path.in_list(&name, i), out, on_step, Some(*kind))?;
                    }
                }
            }
            // Ordering after an async scope comes from the buffer uses of its body.
            Thunk::AsyncDone { .. } => {}
            _ => {
                on_step(t, class);
                let mut step = self.step(t, path)?;
                if let Some(c) = class {
                    step.stream_kind = StreamKind::from(c);
                }
                out.push(step);
            }
        }
        Ok(())
    }
}

fn schedule(
    exe: &Executable,
    planner: &mut Planner<'_>,
    config: &ExecutorConfig,
) -> Result<Schedule> {
    let mut steps = vec![];
    let mut uses = vec![];
    let mut classes = vec![];
    for (i, t) in exe.entry.iter().enumerate() {
        let mut seen = vec![];
        planner.flatten(t, &ThunkPath::entry(i), &mut steps, &mut |t, c| {
            seen.push((
                NodeUses {
                    buffers: t.all_buffer_uses(),
                    resources: if t.is_collective() {
                        vec![COLLECTIVE_RESOURCE]
                    } else {
                        vec![]
                    },
                },
                c,
            ));
        })?;
        for (u, c) in seen {
            uses.push(u);
            classes.push(c);
        }
    }
    let graph = DependencyGraph::build(&uses);
    let n = steps.len();
    let has_comm = classes.contains(&Some(AsyncKind::Communication));
    let sequential = config.force_sequential
        || config.streams <= 1 && !has_comm
        || n < config.sequential_below
        || graph.is_chain();
    if sequential {
        let plain = steps.iter().all(|s| {
            matches!(
                s.op,
                Op::Copy { .. } | Op::Memset { .. } | Op::Kernel { .. } | Op::Gemm(_)
            )
        });
        let fused =
            (config.auto_command_buffer && plain && n >= AUTO_COMMAND_BUFFER_MIN).then(|| {
                let bindings: BTreeSet<u32> = uses
                    .iter()
                    .flat_map(|u| u.buffers.iter().map(|b| b.slice.allocation))
                    .collect();
                let id = planner.next_cmd;
                planner.next_cmd += 1;
                Node {
                    step: Step {
                        path: ThunkPath::default(),
                        kind: "command_buffer",
                        label: format!("implicit command buffer of {n} thunks"),
                        op: Op::CommandBuffer {
                            id,
                            body: steps.clone(),
                            bindings: bindings.into_iter().collect(),
                        },
                        stream_kind: StreamKind::Compute,
                    },
                    stream: 0,
                    waits: vec![],
                    record: false,
                }
            });
        return Ok(Schedule {
            nodes: steps
                .into_iter()
                .map(|step| Node {
                    step,
                    stream: 0,
                    waits: vec![],
                    record: false,
                })
                .collect(),
            fused,
            streams: 1,
            sequential: true,
            graph_edges: graph.edge_count(),
        });
    }
    let compute = config.streams.max(1);
    let total = compute + usize::from(has_comm);
    let comm = compute; // index of the communication stream when present
    let mut stream_of = vec![0usize; n];
    let mut last_on: Vec<Option<usize>> = vec![None; total];
    let mut load = vec![0usize; total];
    let mut clock: Vec<Vec<i64>> = vec![vec![-1; total]; total];
    let mut snapshot: Vec<Vec<i64>> = Vec::with_capacity(n);
    let mut waits: Vec<Vec<usize>> = vec![vec![]; n];
    let mut record = vec![false; n];
    for v in 0..n {
        let s = if classes[v] == Some(AsyncKind::Communication) {
            comm
        } else {
            // Continue a chain: a predecessor that is the last node of its stream.
            let chain = graph.preds[v]
                .iter()
                .copied()
                .filter(|&u| stream_of[u] < compute && last_on[stream_of[u]] == Some(u))
                .max_by_key(|&u| graph.priority[u]);
            match chain {
                Some(u) => stream_of[u],
                None => (0..compute).min_by_key(|&s| (load[s], s)).unwrap_or(0),
            }
        };
        stream_of[v] = s;
        for &u in &graph.preds[v] {
            let t = stream_of[u];
            if t == s || clock[s][t] >= u as i64 {
                continue;
            }
            waits[v].push(u);
            record[u] = true;
            let snap = &snapshot[u];
            for (x, &y) in clock[s].iter_mut().zip(snap.iter()) {
                *x = (*x).max(y);
            }
        }
        clock[s][s] = v as i64;
        snapshot.push(clock[s].clone());
        last_on[s] = Some(v);
        load[s] += 1;
    }
    let nodes = steps
        .into_iter()
        .enumerate()
        .map(|(i, step)| Node {
            step,
            stream: stream_of[i],
            waits: std::mem::take(&mut waits[i]),
            record: record[i],
        })
        .collect();
    Ok(Schedule {
        nodes,
        fused: None,
        streams: total,
        sequential: false,
        graph_edges: graph.edge_count(),
    })
}

impl LoadedExecutable {
    /// Loads with the default [`ExecutorConfig`].
    pub fn load(device: Arc<dyn Device>, exe: Executable) -> Result<Self> {
        Self::load_with(device, exe, &ExecutorConfig::default())
    }

    /// Validates `exe`, checks the device supports what it needs, loads its modules, resolves
    /// every kernel, uploads constants and builds the schedule.
    pub fn load_with(
        device: Arc<dyn Device>,
        exe: Executable,
        config: &ExecutorConfig,
    ) -> Result<Self> {
        verify(&exe)?;
        let caps = device.capabilities();
        for a in &exe.allocations {
            if !caps.memory_spaces.contains(&a.memory_space) {
                return Err(Error::Unsupported {
                    backend: device.backend_name().into(),
                    feature: format!("{} memory (allocation {})", a.memory_space, a.index),
                });
            }
        }
        let mut modules = BTreeMap::new();
        for m in &exe.modules {
            let lm = device.load_module(m)?;
            tracing::debug!(module = %m.name, image = %lm.image(), "loaded module");
            modules.insert(m.name.clone(), lm);
        }
        let mut planner = Planner {
            modules: &modules,
            device: device.as_ref(),
            next_cmd: 0,
        };
        let schedule = schedule(&exe, &mut planner, config)?;
        tracing::debug!(
            nodes = schedule.nodes.len(),
            edges = schedule.graph_edges,
            streams = schedule.streams,
            sequential = schedule.sequential,
            "scheduled"
        );
        let mut constants = BTreeMap::new();
        for a in &exe.allocations {
            if let AllocationKind::Constant(bytes) = &a.kind {
                let buf = device.allocate(a.size, a.alignment, a.memory_space)?;
                device.copy_from_host(bytes, buf.ptr())?;
                constants.insert(a.index, buf);
            }
        }
        Ok(LoadedExecutable {
            exe: Arc::new(exe),
            device,
            modules,
            schedule,
            constants,
            pool: Mutex::new(vec![]),
        })
    }

    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The image each module was loaded from, e.g. `("std", "standard")`.
    pub fn module_images(&self) -> Vec<(String, String)> {
        self.modules
            .iter()
            .map(|(n, m)| (n.clone(), m.image()))
            .collect()
    }

    /// The static schedule's shape.
    pub fn schedule_info(&self) -> ScheduleInfo {
        ScheduleInfo {
            nodes: self.schedule.nodes.len(),
            edges: self.schedule.graph_edges,
            streams: self.schedule.streams,
            sequential: self.schedule.sequential,
            cross_stream_waits: self.schedule.nodes.iter().map(|n| n.waits.len()).sum(),
            implicit_command_buffer: self.schedule.fused.is_some(),
        }
    }

    /// Frees pooled per-execution state (temporaries, streams, recordings).
    pub fn release_cached_state(&self) {
        self.pool.lock().clear();
    }

    fn alloc_specs(&self, outputs: bool) -> Result<Vec<Buffer>> {
        let specs = if outputs {
            &self.exe.signature.outputs
        } else {
            &self.exe.signature.parameters
        };
        specs
            .iter()
            .map(|o| {
                let a = &self.exe.allocations[o.allocation as usize];
                self.device.allocate(a.size, a.alignment, a.memory_space)
            })
            .collect()
    }

    /// Allocates a buffer for every output (to pass to [`Self::execute`]).
    pub fn allocate_outputs(&self) -> Result<Vec<Buffer>> {
        self.alloc_specs(true)
    }

    /// Allocates a buffer for every parameter.
    pub fn allocate_parameters(&self) -> Result<Vec<Buffer>> {
        self.alloc_specs(false)
    }

    fn new_state(&self) -> Result<ExecState> {
        let streams = (0..self.schedule.streams)
            .map(|_| self.device.create_stream())
            .collect::<Result<Vec<_>>>()?;
        let mut events = HashMap::new();
        for (i, n) in self.schedule.nodes.iter().enumerate() {
            if n.record {
                events.insert(i, self.device.create_event()?);
            }
        }
        let mut temps = vec![];
        for a in &self.exe.allocations {
            if a.kind == AllocationKind::Temp {
                temps.push((
                    a.index,
                    self.device.allocate(a.size, a.alignment, a.memory_space)?,
                ));
            }
        }
        let space = if self
            .device
            .capabilities()
            .memory_spaces
            .contains(&MemorySpace::HostPinned)
        {
            MemorySpace::HostPinned
        } else {
            MemorySpace::Device
        };
        let scratch = self.device.allocate(8, 8, space)?;
        Ok(ExecState {
            streams,
            events,
            temps,
            scratch,
            recordings: HashMap::new(),
            tracking: vec![],
        })
    }

    /// Runs the program with device buffers for the parameters and outputs (in signature
    /// order). Returns when all work finished. On error, issuing stops, queued work is
    /// drained, and the error (naming the thunk where known) is returned.
    pub fn execute(
        &self,
        params: &[&dyn DeviceMemory],
        outputs: &[&dyn DeviceMemory],
        opts: &ExecuteOptions,
    ) -> Result<()> {
        let sig = &self.exe.signature;
        if params.len() != sig.parameters.len() || outputs.len() != sig.outputs.len() {
            return Err(Error::InvalidArgument(format!(
                "`{}` takes {} parameters and {} outputs, got {} and {}",
                self.exe.name,
                sig.parameters.len(),
                sig.outputs.len(),
                params.len(),
                outputs.len()
            )));
        }
        let span = tracing::debug_span!("execute", program = %self.exe.name);
        let _g = span.enter();
        let start = Instant::now();
        let mut table = vec![DevicePtr(0); self.exe.allocations.len()];
        for a in &self.exe.allocations {
            let (buf, what): (Option<&dyn DeviceMemory>, String) = match &a.kind {
                AllocationKind::Parameter(n) => {
                    (params.get(*n as usize).copied(), format!("parameter {n}"))
                }
                AllocationKind::Output(n) => {
                    (outputs.get(*n as usize).copied(), format!("output {n}"))
                }
                AllocationKind::Constant(_) => (
                    self.constants
                        .get(&a.index)
                        .map(|b| b.as_ref() as &dyn DeviceMemory),
                    "constant".into(),
                ),
                AllocationKind::Temp => continue,
            };
            let Some(buf) = buf else {
                return Err(Error::InvalidArgument(format!("missing buffer for {what}")));
            };
            if buf.size() < a.size {
                return Err(Error::InvalidArgument(format!(
                    "{what} of `{}` needs {} bytes, the buffer has {}",
                    self.exe.name,
                    a.size,
                    buf.size()
                )));
            }
            if buf.ptr().0 % a.alignment != 0 {
                return Err(Error::InvalidArgument(format!(
                    "{what} buffer at {} is not aligned to {}",
                    buf.ptr(),
                    a.alignment
                )));
            }
            table[a.index as usize] = buf.ptr();
        }
        let pooled = self.pool.lock().pop();
        let mut state = match pooled {
            Some(s) => s,
            None => self.new_state()?,
        };
        for (i, b) in &state.temps {
            table[*i as usize] = b.ptr();
        }
        let deadline = opts.deadline.map(|d| (d, start + d));
        let mut run = Run {
            exe: self,
            table: &table,
            deadline,
            collectives: opts.collectives.as_ref(),
            used: std::cell::RefCell::new(vec![]),
        };
        let issued = run.issue_all(&mut state);
        if let Err(e) = &issued {
            // Peers waiting for this rank in a collective must not wait for the timeout.
            run.abort_communicators(&format!("rank {} failed: {e}", run.rank_world().0));
        }
        let waited = match &issued {
            Ok(()) => run.wait_all(&state),
            Err(_) => Ok(()),
        };
        if let Err(e) = &waited {
            run.abort_communicators(&format!("rank {} failed: {e}", run.rank_world().0));
        }
        if let Err(Error::DeadlineExceeded { .. }) = &issued.as_ref().and(waited.as_ref()) {
            // The work may never finish (a hung kernel): do not block the caller. A reaper
            // thread waits for the streams and only then frees the state.
            let reaper = std::thread::Builder::new()
                .name("xthunk-reaper".into())
                .spawn(move || {
                    for s in &state.streams {
                        let _ = s.synchronize();
                    }
                    drop(state);
                });
            if let Err(spawn) = reaper {
                tracing::error!("could not spawn a reaper thread: {spawn}");
            }
            return issued.and(waited);
        }
        let result = issued.and(waited);
        // Drain before anything is freed or reused, whatever happened.
        let mut drained = Ok(());
        for s in &state.streams {
            let r = s.synchronize();
            if drained.is_ok() {
                drained = r;
            }
        }
        let result = result.and(drained);
        if result.is_ok() {
            state.tracking.clear();
            self.pool.lock().push(state);
        }
        tracing::debug!(elapsed_us = start.elapsed().as_micros() as u64, "executed");
        result
    }

    /// Convenience: uploads host bytes for every parameter, runs, and downloads every output.
    pub fn run_with_host_data(
        &self,
        inputs: &[&[u8]],
        opts: &ExecuteOptions,
    ) -> Result<Vec<Vec<u8>>> {
        let sig = &self.exe.signature;
        if inputs.len() != sig.parameters.len() {
            return Err(Error::InvalidArgument(format!(
                "`{}` takes {} parameters, got {}",
                self.exe.name,
                sig.parameters.len(),
                inputs.len()
            )));
        }
        let params = self.allocate_parameters()?;
        for ((p, data), spec) in params.iter().zip(inputs).zip(&sig.parameters) {
            if data.len() as u64 != p.size() {
                return Err(Error::InvalidArgument(format!(
                    "parameter `{}` needs {} bytes, got {}",
                    spec.name,
                    p.size(),
                    data.len()
                )));
            }
            self.device.copy_from_host(data, p.ptr())?;
        }
        let outputs = self.allocate_outputs()?;
        let pr: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
        let or: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
        self.execute(&pr, &or, opts)?;
        outputs
            .iter()
            .map(|o| {
                let mut v = vec![0u8; o.size() as usize];
                self.device.copy_to_host(o.ptr(), &mut v)?;
                Ok(v)
            })
            .collect()
    }
}

/// One execution in progress.
struct Run<'a> {
    exe: &'a LoadedExecutable,
    table: &'a [DevicePtr],
    deadline: Option<(Duration, Instant)>,
    collectives: Option<&'a CollectiveContext>,
    /// Communicators this execution used: aborted if it fails, so peers fail fast instead of
    /// waiting for this rank until their terminate timeout.
    used: std::cell::RefCell<Vec<Arc<dyn Communicator>>>,
}

impl Run<'_> {
    fn ptr(&self, s: &Slice) -> DevicePtr {
        self.table[s.allocation as usize].offset(s.offset)
    }

    fn rank_world(&self) -> (u32, u32) {
        self.collectives
            .map(|c| (c.rank, c.world))
            .unwrap_or((0, 1))
    }

    fn communicator(&self, ranks: &[u32], kind: StreamKind) -> Result<Arc<dyn Communicator>> {
        let (rank, world) = self.rank_world();
        let Some(ctx) = self.collectives else {
            return Err(Error::InvalidArgument(format!(
                "a collective among ranks {ranks:?} needs an SPMD run (this execution is rank 0 of a world of 1)"
            )));
        };
        if let Some(bad) = ranks.iter().find(|r| **r >= world) {
            return Err(Error::InvalidArgument(format!(
                "rank {bad} does not exist in a world of {world}"
            )));
        }
        let key = CliqueKey::new(ranks.iter().map(|r| *r as usize), kind)?;
        let comm = ctx.cliques.acquire(&key, rank as usize)?;
        let mut used = self.used.borrow_mut();
        if !used.iter().any(|c| Arc::ptr_eq(c, &comm)) {
            used.push(comm.clone());
        }
        Ok(comm)
    }

    /// Aborts every communicator this execution used (after a failure).
    fn abort_communicators(&self, reason: &str) {
        for c in self.used.borrow().iter() {
            c.abort(reason);
        }
    }

    /// The clique of this rank and `peer`, and the peer's position in it.
    fn pair(&self, peer: u32, kind: StreamKind) -> Result<(u32, Arc<dyn Communicator>, usize)> {
        let (rank, _) = self.rank_world();
        if peer == rank {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} cannot send to or receive from itself"
            )));
        }
        let mut ranks = vec![rank, peer];
        ranks.sort_unstable();
        let comm = self.communicator(&ranks, kind)?;
        let pos = usize::from(ranks[0] != peer);
        Ok((rank, comm, pos))
    }

    fn collective(&self, c: &CollectiveThunk, kind: StreamKind, stream: &dyn Stream) -> Result<()> {
        let (rank, world) = self.rank_world();
        let group: Vec<u32> = if c.groups.is_empty() {
            (0..world).collect()
        } else {
            match c.groups.iter().find(|g| g.contains(&rank)) {
                Some(g) => g.clone(),
                // Not in any group: this rank skips the collective.
                None => return Ok(()),
            }
        };
        let n = group.len() as u64;
        check_collective_sizes(c, n).map_err(|(field, m)| {
            Error::InvalidArgument(format!("{field}: {m} (group of {n} ranks)"))
        })?;
        let es = c.dtype.size() as u64;
        let (src, dst) = (self.ptr(&c.src), self.ptr(&c.dst));
        if n == 1 {
            // A group of one: every collective is a copy (or nothing, in place).
            if src != dst {
                stream.copy(src, dst, c.dst.size.min(c.src.size))?;
            }
            return Ok(());
        }
        let mut sorted = group.clone();
        sorted.sort_unstable();
        if sorted != group {
            return Err(Error::Unsupported {
                backend: "executor".into(),
                feature: format!("replica group {group:?} not in ascending rank order"),
            });
        }
        let comm = self.communicator(&sorted, kind)?;
        match c.op {
            CollectiveOp::AllReduce { op } => {
                comm.all_reduce(stream, src, dst, c.src.size / es, c.dtype, op)
            }
            CollectiveOp::AllGather => comm.all_gather(stream, src, dst, c.src.size / es, c.dtype),
            CollectiveOp::ReduceScatter { op } => {
                comm.reduce_scatter(stream, src, dst, c.dst.size / es, c.dtype, op)
            }
            CollectiveOp::AllToAll => {
                comm.all_to_all(stream, src, dst, c.src.size / es / n, c.dtype)
            }
            CollectiveOp::Broadcast { root } => {
                comm.broadcast(stream, src, dst, c.src.size / es, c.dtype, root as usize)
            }
        }
    }

    fn permute(
        &self,
        src: Slice,
        dst: Slice,
        dtype: DType,
        pairs: &[(u32, u32)],
        kind: StreamKind,
        stream: &dyn Stream,
    ) -> Result<()> {
        let (rank, world) = self.rank_world();
        let to = pairs.iter().find(|p| p.0 == rank).map(|p| p.1);
        let from = pairs.iter().find(|p| p.1 == rank).map(|p| p.0);
        if from.is_none() {
            stream.memset(self.ptr(&dst), dst.size, MemsetPattern::U8(0))?;
        }
        let count = src.size / dtype.size() as u64;
        if world == 1 {
            return match (to, from) {
                (Some(0), Some(0)) => stream.copy(self.ptr(&src), self.ptr(&dst), src.size),
                (None, None) => Ok(()),
                _ => Err(Error::InvalidArgument(format!(
                    "collective_permute pairs {pairs:?} name ranks outside a world of 1"
                ))),
            };
        }
        // Every rank joins the world clique (its creation is collective), then sends and
        // receives as one group.
        let all: Vec<u32> = (0..world).collect();
        let comm = self.communicator(&all, kind)?;
        comm.group_start()?;
        let mut r = Ok(());
        if let Some(t) = to {
            r = r.and(comm.send(stream, self.ptr(&src), count, dtype, t as usize));
        }
        if let Some(f) = from {
            r = r.and(comm.recv(stream, self.ptr(&dst), count, dtype, f as usize));
        }
        comm.group_end_on(stream).and(r)
    }

    fn issue_all(&mut self, state: &mut ExecState) -> Result<()> {
        let nodes = &self.exe.schedule.nodes;
        let tracking = self.deadline.is_some();
        if tracking {
            while state.tracking.len() < nodes.len() {
                state.tracking.push(self.exe.device.create_event()?);
            }
        }
        // A sequential schedule without a deadline may run in the issuing thread (a hint the
        // host backend uses; with a deadline the caller must stay free to give up).
        let immediate = self.exe.schedule.sequential && self.deadline.is_none();
        for s in &state.streams {
            s.set_immediate(immediate);
        }
        if let (Some(fused), None) = (&self.exe.schedule.fused, self.deadline) {
            let stream = state.streams[0].clone();
            return self
                .step(&fused.step, stream.as_ref(), state)
                .map_err(|e| e.at_thunk(&fused.step.path, fused.step.kind));
        }
        for (i, node) in nodes.iter().enumerate() {
            let stream = state.streams[node.stream].clone();
            for w in &node.waits {
                if let Some(e) = state.events.get(w) {
                    stream.wait(e.as_ref())?;
                }
            }
            self.step(&node.step, stream.as_ref(), state)
                .map_err(|e| e.at_thunk(&node.step.path, node.step.kind))?;
            if node.record {
                if let Some(e) = state.events.get(&i) {
                    stream.record(e.as_ref())?;
                }
            }
            if tracking {
                stream.record(state.tracking[i].as_ref())?;
            }
        }
        Ok(())
    }

    fn check_deadline(&self, state: &ExecState) -> Result<()> {
        if let Some((d, at)) = self.deadline {
            if Instant::now() >= at {
                return Err(Error::DeadlineExceeded {
                    deadline: d,
                    pending: self.pending(state),
                });
            }
        }
        Ok(())
    }

    /// The first unfinished node of every stream (needs tracking events).
    fn pending(&self, state: &ExecState) -> String {
        let nodes = &self.exe.schedule.nodes;
        let mut out = vec![];
        for s in 0..state.streams.len() {
            let first = nodes.iter().enumerate().find(|(i, n)| {
                n.stream == s
                    && state
                        .tracking
                        .get(*i)
                        .is_none_or(|e| !e.query().unwrap_or(false))
            });
            if let Some((_, n)) = first {
                out.push(format!("stream {s}: {} ({})", n.step.path, n.step.label));
            }
        }
        if out.is_empty() {
            "none (finishing)".into()
        } else {
            out.join("; ")
        }
    }

    fn wait_all(&self, state: &ExecState) -> Result<()> {
        // With communicators in use, poll: a communicator's asynchronous error (a peer died, a
        // timeout in the library) aborts every communicator of this execution instead of
        // leaving the streams blocked forever (the hang watchdog).
        let watch = !self.used.borrow().is_empty();
        if self.deadline.is_none() && !watch {
            let mut first = Ok(());
            for s in &state.streams {
                let r = s.synchronize();
                if first.is_ok() {
                    first = r;
                }
            }
            return first;
        }
        let mut sleep = Duration::from_micros(20);
        loop {
            let mut done = true;
            for s in &state.streams {
                if !s.query()? {
                    done = false;
                }
            }
            if done {
                return Ok(());
            }
            self.check_deadline(state)?;
            if watch {
                let failed = self
                    .used
                    .borrow()
                    .iter()
                    .find_map(|c| c.async_error().err());
                if let Some(e) = failed {
                    let (rank, _) = self.rank_world();
                    self.abort_communicators(&format!("rank {rank}: {e}"));
                    return Err(Error::backend(
                        "executor",
                        "collective watchdog",
                        format!(
                            "rank {rank}: a communicator failed asynchronously ({e}); first pending thunks: {}",
                            self.pending(state)
                        ),
                    ));
                }
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_millis(2));
        }
    }

    /// Reads `size` bytes at `slice` on the host after the stream's work so far.
    fn read_back(&self, slice: &Slice, stream: &dyn Stream, state: &ExecState) -> Result<[u8; 8]> {
        stream.copy(self.ptr(slice), state.scratch.ptr(), slice.size)?;
        if self.deadline.is_some() {
            let mut sleep = Duration::from_micros(10);
            while !stream.query()? {
                self.check_deadline(state)?;
                std::thread::sleep(sleep);
                sleep = (sleep * 2).min(Duration::from_millis(2));
            }
        } else {
            stream.synchronize()?;
        }
        let mut buf = [0u8; 8];
        let n = slice.size.min(8) as usize;
        self.exe
            .device
            .copy_to_host(state.scratch.ptr(), &mut buf[..n])?;
        Ok(buf)
    }

    fn steps(&self, steps: &[Step], stream: &dyn Stream, state: &mut ExecState) -> Result<()> {
        for s in steps {
            self.step(s, stream, state)
                .map_err(|e| e.at_thunk(&s.path, s.kind))?;
        }
        Ok(())
    }

    fn step(&self, step: &Step, stream: &dyn Stream, state: &mut ExecState) -> Result<()> {
        match &step.op {
            Op::Copy { src, dst } => stream.copy(self.ptr(src), self.ptr(dst), src.size),
            Op::Memset { dst, pattern } => stream.memset(self.ptr(dst), dst.size, *pattern),
            Op::Kernel { handle, dims, args } => {
                let la: smallvec::SmallVec<[LaunchArg; 8]> = args
                    .iter()
                    .map(|a| match a {
                        KernelArg::Buffer { slice, .. } => LaunchArg::Buffer {
                            ptr: self.ptr(slice),
                            len: slice.size,
                        },
                        KernelArg::Scalar(s) => LaunchArg::Scalar(*s),
                    })
                    .collect();
                stream.launch(handle, *dims, &la)
            }
            Op::Gemm(g) => stream.gemm(&GemmLaunch {
                a: self.ptr(&g.a),
                b: self.ptr(&g.b),
                c: self.ptr(&g.c),
                a_len: g.a.size,
                b_len: g.b.size,
                c_len: g.c.size,
                m: g.m,
                n: g.n,
                k: g.k,
                lda: g.lda,
                ldb: g.ldb,
                ldc: g.ldc,
                trans_a: g.trans_a,
                trans_b: g.trans_b,
                alpha: g.alpha,
                beta: g.beta,
                dtype: g.dtype,
                batch: g.batch,
                stride_a: g.stride_a,
                stride_b: g.stride_b,
                stride_c: g.stride_c,
            }),
            Op::While {
                cond,
                pred,
                body,
                trip_count,
            } => {
                if let Some(n) = trip_count {
                    for _ in 0..*n {
                        self.steps(body, stream, state)?;
                    }
                    return Ok(());
                }
                loop {
                    self.steps(cond, stream, state)?;
                    let b = self.read_back(pred, stream, state)?;
                    if b[0] == 0 {
                        return Ok(());
                    }
                    self.steps(body, stream, state)?;
                    self.check_deadline(state)?;
                }
            }
            Op::Conditional {
                index,
                index_type,
                branches,
            } => {
                let b = self.read_back(index, stream, state)?;
                let last = branches.len().saturating_sub(1);
                let which = if *index_type == DType::Pred {
                    if b[0] != 0 { 0 } else { 1 }
                } else {
                    let i = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    if i < 0 || i as usize > last {
                        last
                    } else {
                        i as usize
                    }
                };
                match branches.get(which) {
                    Some(br) => self.steps(br, stream, state),
                    None => Ok(()),
                }
            }
            Op::Collective(c) => self.collective(c, step.stream_kind, stream),
            Op::Permute {
                src,
                dst,
                dtype,
                pairs,
            } => self.permute(*src, *dst, *dtype, pairs, step.stream_kind, stream),
            Op::Send { src, dtype, peer } => {
                let (rank, comm, pos) = self.pair(*peer, step.stream_kind)?;
                let _ = rank;
                comm.send(
                    stream,
                    self.ptr(src),
                    src.size / dtype.size() as u64,
                    *dtype,
                    pos,
                )
            }
            Op::Recv { dst, dtype, peer } => {
                let (_, comm, pos) = self.pair(*peer, step.stream_kind)?;
                comm.recv(
                    stream,
                    self.ptr(dst),
                    dst.size / dtype.size() as u64,
                    *dtype,
                    pos,
                )
            }
            Op::RankId { dst } => {
                stream.memset(self.ptr(dst), 4, MemsetPattern::U32(self.rank_world().0))
            }
            Op::CommandBuffer { id, body, bindings } => {
                let addresses: Vec<DevicePtr> =
                    bindings.iter().map(|a| self.table[*a as usize]).collect();
                let reuse = state
                    .recordings
                    .get(id)
                    .is_some_and(|r| r.addresses == addresses);
                if !reuse {
                    // The graph recorded for earlier addresses, if any: the backend may update
                    // it in place instead of building a new one.
                    let previous = state.recordings.get(id).and_then(|r| r.graph.clone());
                    let graph = match stream.begin_capture() {
                        Ok(()) => {
                            let issued = self.steps(body, stream, state);
                            // Only a complete recording may update the previous graph.
                            let captured = match &issued {
                                Ok(_) => stream.end_capture_reusing(previous.as_ref()),
                                Err(_) => stream.end_capture(),
                            };
                            match issued.and(captured) {
                                Ok(g) => Some(g),
                                // Captured work never ran: fall back to running the body
                                // directly (now and on later executions of this state); a
                                // real error shows up again there, with its thunk.
                                Err(e) => {
                                    tracing::warn!(
                                        command_buffer = id,
                                        "recording failed, running the body directly: {e}"
                                    );
                                    None
                                }
                            }
                        }
                        Err(Error::Unsupported { .. }) => None,
                        Err(e) => return Err(e),
                    };
                    tracing::debug!(
                        command_buffer = id,
                        nodes = graph.as_ref().map(|g| g.node_count()),
                        "recorded command buffer"
                    );
                    state.recordings.insert(*id, Recording { addresses, graph });
                }
                let graph = state.recordings.get(id).and_then(|r| r.graph.clone());
                match graph {
                    Some(g) => stream.launch_graph(&g),
                    // No graph support: run the body directly.
                    None => self.steps(body, stream, state),
                }
            }
        }
    }
}
