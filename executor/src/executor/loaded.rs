//! [`LoadedExecutable`]: an executable loaded onto one device (modules, constants, the static
//! schedule, a pool of per-execution state), and its entry points: load, allocate, execute.

use super::collective_memory::{CollectiveMemory, CollectiveMemoryReport, has_collective};
use super::config::{ExecuteOptions, ExecutorConfig};
use super::plan::Planner;
use super::progress::Progress;
use super::run::Run;
use super::schedule::{Schedule, ScheduleInfo, schedule};
use super::scratch::ScratchPath;
use super::state::{ExecState, OrderedScratch};
use super::temps::TempPlan;
use crate::backend::{Buffer, Device, DeviceMemory, DevicePtr, LoadedModule};
use crate::error::{Error, Result};
use crate::ir::{AllocationKind, Executable};
use crate::program::Program;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// An executable loaded onto one device.
pub struct LoadedExecutable {
    pub(super) exe: Program,
    pub(super) device: Arc<dyn Device>,
    modules: BTreeMap<String, Arc<dyn LoadedModule>>,
    pub(super) schedule: Schedule,
    /// Where each execution's temp arenas come from.
    pub(super) scratch_path: ScratchPath,
    constants: BTreeMap<u32, Buffer>,
    pool: Mutex<Vec<ExecState>>,
    /// The progress record of executions given none, when their clique provider needs one
    /// for its [completion timeout](crate::collectives::CliqueProvider::completion_timeout).
    own_progress: std::sync::OnceLock<Arc<Progress>>,
    /// What traces call the schedule's nodes (made by the first traced execution).
    trace_nodes: std::sync::OnceLock<Arc<[crate::trace::NodeInfo]>>,
    /// The collective-space arenas (made by the first execution, kept until unload; see
    /// `collective_memory`); held locked by each execution of a program that has them.
    collective: Option<Mutex<Option<CollectiveMemory>>>,
    /// Executions started so far (their `execution_seed`s are its successive values).
    executions: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field("name", &self.exe.name)
            .field("device", &self.device.info().name)
            .finish_non_exhaustive()
    }
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
        Self::load_traced(device, exe, config, None)
    }

    /// [`Self::load_with`], with each module's compile-and-load and the whole load as spans
    /// of `trace` (a tracer and the rank whose host track they go on).
    pub fn load_traced(
        device: Arc<dyn Device>,
        exe: Executable,
        config: &ExecutorConfig,
        trace: Option<(&crate::trace::Tracer, u32)>,
    ) -> Result<Self> {
        let started = Instant::now();
        let program = Program::new(exe)?;
        Self::load_verified(device, &program, config, trace, started)
    }

    /// Loads a verified `program` (not verified again): checks the device supports what it
    /// needs, loads its modules, resolves every kernel, uploads constants and builds the
    /// schedule; the module loads and the whole load are spans of `trace`, as in
    /// [`Self::load_traced`].
    pub fn load_program(
        device: Arc<dyn Device>,
        program: &Program,
        config: &ExecutorConfig,
        trace: Option<(&crate::trace::Tracer, u32)>,
    ) -> Result<Self> {
        Self::load_verified(device, program, config, trace, Instant::now())
    }

    fn load_verified(
        device: Arc<dyn Device>,
        program: &Program,
        config: &ExecutorConfig,
        trace: Option<(&crate::trace::Tracer, u32)>,
        started: Instant,
    ) -> Result<Self> {
        let exe = program.executable();
        let info = device.info();
        let name = format!("{}:{} ({})", device.backend_name(), info.ordinal, info.name);
        crate::backend::check_launch_limits(exe, &device.capabilities().launch_limits, &name)?;
        check_memory(device.as_ref(), exe, None)?;
        let caps = device.capabilities();
        for a in &exe.allocations {
            // Collective temps are the executor's (`collective_memory`): the library's memory
            // or the device's own.
            let executor_owned = a.memory_space == crate::ir::MemorySpace::Collective
                && matches!(a.kind, AllocationKind::Temp);
            if !executor_owned && !caps.memory_spaces.contains(&a.memory_space) {
                return Err(Error::Unsupported {
                    backend: device.backend_name().into(),
                    feature: format!("{} memory (allocation {})", a.memory_space, a.index),
                });
            }
        }
        let mut modules = BTreeMap::new();
        for m in &exe.modules {
            let t = Instant::now();
            let _compile = tracing::debug_span!("compile", module = %m.name).entered();
            let lm = device.load_module(m)?;
            tracing::debug!(module = %m.name, image = %lm.image(), "loaded module");
            if let Some((tracer, rank)) = trace {
                let mut args = serde_json::Map::new();
                args.insert("image".into(), lm.image().into());
                args.insert("images".into(), m.images.len().into());
                let name = format!("compile+load module {}", m.name);
                tracer.span(rank, "compile", name, t, Instant::now(), args);
            }
            modules.insert(m.name.clone(), lm);
        }
        let mut planner = Planner::new(&modules, device.as_ref(), super::dispatch::op);
        let schedule = schedule(exe, &mut planner, config)?;
        tracing::debug!(
            nodes = schedule.nodes.len(),
            edges = schedule.graph_edges,
            coarse_allocations = schedule.coarse_allocations,
            unreduced_nodes = schedule.unreduced_nodes,
            streams = schedule.streams,
            sequential = schedule.sequential,
            "scheduled"
        );
        tracing::debug!(plan = %schedule.temps.summary(), "planned temps");
        check_memory(device.as_ref(), exe, Some(schedule.temps.planned_bytes))?;
        let scratch_path = super::scratch::choose(device.as_ref(), config);
        let mut constants = BTreeMap::new();
        for a in &exe.allocations {
            if let AllocationKind::Constant(bytes) = &a.kind {
                let buf = device.allocate(a.size, a.alignment, a.memory_space)?;
                device.copy_from_host(bytes, buf.ptr())?;
                constants.insert(a.index, buf);
            }
        }
        if let Some((tracer, rank)) = trace {
            let mut args = serde_json::Map::new();
            args.insert("nodes".into(), schedule.nodes.len().into());
            args.insert("streams".into(), schedule.streams.into());
            let name = format!("load {}", exe.name);
            tracer.span(rank, "load", name, started, Instant::now(), args);
        }
        let collective = has_collective(&schedule.temps).then(|| Mutex::new(None));
        Ok(LoadedExecutable {
            exe: program.clone(),
            device,
            modules,
            schedule,
            scratch_path,
            constants,
            pool: Mutex::new(vec![]),
            own_progress: std::sync::OnceLock::new(),
            trace_nodes: std::sync::OnceLock::new(),
            collective,
            executions: Default::default(),
        })
    }

    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// The verified program (to load again elsewhere without verifying it again).
    pub fn program(&self) -> &Program {
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
        self.schedule.info()
    }

    /// Where the temps live: the arenas, each temp's offset, peak bytes against the sum.
    pub fn temp_plan(&self) -> &TempPlan {
        &self.schedule.temps
    }

    /// The program's input–output aliases as `(output, parameter, in place)`: in place, a
    /// donated parameter's buffer is written with no copy; otherwise each donated execution
    /// first copies the parameter into memory of its pooled state.
    pub fn aliases_in_place(&self) -> Vec<(u32, u32, bool)> {
        self.schedule
            .aliases
            .iter()
            .map(|a| (a.output, a.parameter, a.in_place))
            .collect()
    }

    /// Where each execution's temp arenas come from: the device's memory pool in stream
    /// order, or the pooled execution state.
    pub fn scratch_path(&self) -> ScratchPath {
        self.scratch_path
    }

    /// The program's collective memory (see `collective_memory`): `None` when it has none;
    /// all zero before its first execution.
    pub fn collective_memory(&self) -> Option<CollectiveMemoryReport> {
        let c = self.collective.as_ref()?;
        Some(c.lock().as_ref().map(|m| m.report()).unwrap_or_default())
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

    /// Runs the program with device buffers for the parameters and outputs (in signature
    /// order). An output's bytes may not overlap another output's or a parameter's (an
    /// `InvalidArgument` naming both; parameters may share), except that one buffer may be
    /// passed as both a parameter and the output the program aliases it to (donation: the
    /// output is written there; see `alias.rs` for the rule, and for an alias not donated). Returns when all work finished. On error, issuing stops, queued work is
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
        // The caller's buffers as (address, bytes used, is an output, index).
        let mut callers: Vec<(u64, u64, bool, u32)> =
            Vec::with_capacity(params.len() + outputs.len());
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
            if let AllocationKind::Parameter(n) | AllocationKind::Output(n) = a.kind {
                let output = matches!(a.kind, AllocationKind::Output(_));
                callers.push((buf.ptr().0, a.size, output, n));
            }
        }
        // A donated parameter (one buffer for it and its aliased output) is checked as the
        // output: against every other buffer.
        callers.retain(|&(_, _, output, n)| {
            output
                || !self
                    .schedule
                    .aliases
                    .iter()
                    .any(|a| a.parameter == n && super::alias::donated(a, &table))
        });
        refuse_overlaps(&self.exe.name, &mut callers)?;
        // A program with collective memory runs one execution at a time (they share it).
        let mut collective = self.collective.as_ref().map(|c| c.lock());
        if let Some(c) = collective.as_deref_mut() {
            if c.is_none() {
                *c = Some(CollectiveMemory::allocate(
                    self.device.as_ref(),
                    &self.schedule.temps,
                    self.exe.allocations.len(),
                    opts.collectives.as_ref(),
                )?);
            }
            if let Some(m) = c.as_ref() {
                m.place(&self.schedule.temps, &mut table);
            }
        }
        let pooled = self.pool.lock().pop();
        let mut state = match pooled {
            Some(s) => s,
            None => ExecState::new(self.device.as_ref(), &self.schedule, self.scratch_path)?,
        };
        if let (false, Some(stream)) = (
            self.schedule.aliases.is_empty(),
            state.streams.first().cloned(),
        ) {
            // Copies may be in flight on a failure: the state is not pooled again.
            super::alias::bind(
                self.device.as_ref(),
                &self.schedule.aliases,
                stream.as_ref(),
                &mut state.shadows,
                &mut table,
            )?;
        }
        for (i, p) in &state.temps {
            table[*i as usize] = *p;
        }
        let scratch = match super::state::allocate_scratch(
            &self.schedule.temps,
            self.scratch_path,
            &state,
            &mut table,
        ) {
            Ok(s) => s,
            Err(e) => {
                // Nothing was issued with the state: it stays reusable.
                self.pool.lock().push(state);
                return Err(e);
            }
        };
        let deadline = opts.deadline.map(|d| (d, start + d));
        let own;
        let progress = match (opts.progress.as_deref(), &opts.collectives) {
            (Some(p), _) => Some(p),
            (None, Some(c)) if c.cliques.completion_timeout().is_some() => {
                own = self
                    .own_progress
                    .get_or_init(|| Arc::new(Progress::new(c.world as usize)))
                    .clone();
                Some(own.as_ref())
            }
            (None, _) => None,
        };
        let mut run = Run::new(
            self.device.as_ref(),
            &self.schedule,
            super::dispatch::step,
            &table,
            deadline,
            opts.collectives.as_ref(),
            progress,
        );
        run.collective_memory = collective.as_deref().and_then(Option::as_ref);
        run.seed = crate::ir::execution_seed(
            self.executions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        if let Some(token) = &opts.cancel {
            run.set_cancel(token);
        }
        if let Some(tracer) = opts.trace.as_deref() {
            let nodes = self
                .trace_nodes
                .get_or_init(|| super::trace::node_infos(&self.schedule))
                .clone();
            let rank = run.rank_world().0;
            // One record for an implicit command buffer, else one per node.
            let fused = self.schedule.fused.is_some()
                && opts.deadline.is_none()
                && !tracer.config().device_times;
            let capacity = if fused { 1 } else { self.schedule.nodes.len() };
            run.trace = Some(super::trace::Recorder::new(
                tracer,
                nodes,
                rank,
                &self.exe.name,
                start,
                capacity,
            ));
        }
        if let Some((p, rank)) = run.progress {
            p.start(rank);
        }
        let result = self.run(&mut run, state, scratch, opts.keep_alive.clone());
        if let Some((p, rank)) = run.progress {
            p.end(rank, result.is_ok());
        }
        tracing::debug!(elapsed_us = start.elapsed().as_micros() as u64, "executed");
        result
    }

    /// Issues and waits for one execution with `state` and its stream-ordered `scratch`;
    /// returns the state to the pool after a success. The scratch is freed in its stream's
    /// order once everything is issued, or after the streams are drained when issuing failed.
    fn run(
        &self,
        run: &mut Run<'_>,
        mut state: ExecState,
        mut scratch: OrderedScratch,
        keep_alive: Option<super::config::KeepAlive>,
    ) -> Result<()> {
        // Everything issued: the scratch goes back to the pool in stream order, so that the
        // pool has it again once the execution completes.
        let issued = run
            .issue_all(&mut state)
            .and_then(|()| scratch.free(&state));
        if let Err(e) = &issued {
            run.freeze_progress();
            // Peers waiting for this rank in a collective must not wait for the timeout.
            run.abort_communicators(&format!("rank {} failed: {e}", run.rank_world().0));
        }
        let waited = match &issued {
            Ok(()) => run.wait_all(&state),
            Err(_) => Ok(()),
        };
        if let Err(e) = &waited {
            run.freeze_progress();
            run.abort_communicators(&format!("rank {} failed: {e}", run.rank_world().0));
        }
        if let Err(Error::DeadlineExceeded { .. }) = &issued.as_ref().and(waited.as_ref()) {
            if let Some(t) = run.trace.take() {
                t.finish(&state, false);
            }
            // The work may never finish (a hung kernel): do not block the caller. A reaper
            // thread waits for the streams and only then frees the state.
            let reaper = std::thread::Builder::new()
                .name("xthunk-reaper".into())
                .spawn(move || {
                    for s in &state.streams {
                        let _ = s.synchronize();
                    }
                    drop(scratch);
                    drop(state);
                    drop(keep_alive);
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
        drop(scratch);
        if let Some(t) = run.trace.take() {
            t.finish(&state, result.is_ok());
        }
        if result.is_ok() {
            state.tracking.clear();
            self.pool.lock().push(state);
        }
        result
    }
}

/// Fails with [`Error::ProgramMemory`] when the program's allocations (temps, parameters,
/// outputs and constants together) exceed what the device says it has available, instead
/// of failing later in the middle of allocating (or, for lazily backed memory, at first
/// touch). `planned_temps` is the temps' bytes under the temp plan, once known (before it,
/// the smallest they can take, the largest temp, is checked).
fn check_memory(device: &dyn Device, exe: &Executable, planned_temps: Option<u64>) -> Result<()> {
    let Some(available) = device.available_memory() else {
        return Ok(());
    };
    let (mut temps, mut io, mut constants) = (0u64, 0u64, 0u64);
    let mut largest_temp = 0u64;
    for a in &exe.allocations {
        let sum = match a.kind {
            AllocationKind::Temp => {
                largest_temp = largest_temp.max(a.size);
                &mut temps
            }
            AllocationKind::Parameter(_) | AllocationKind::Output(_) => &mut io,
            AllocationKind::Constant(_) => &mut constants,
        };
        *sum = sum.saturating_add(a.size);
    }
    let temps = planned_temps.unwrap_or(largest_temp).min(temps);
    let needed = temps.saturating_add(io).saturating_add(constants);
    if needed <= available {
        return Ok(());
    }
    Err(Error::ProgramMemory {
        device: device.info().name.clone(),
        needed,
        parts: format!(
            "{temps} of temps, {io} of parameters and outputs, {constants} of constants"
        ),
        available,
    })
}

/// Refuses caller buffers where an output's bytes overlap another output's or a parameter's:
/// the program does not declare such aliasing, so the result would silently be wrong
/// (parameters may share bytes with each other: they are only read).
fn refuse_overlaps(program: &str, callers: &mut [(u64, u64, bool, u32)]) -> Result<()> {
    callers.sort_unstable();
    let name = |output: bool, n: u32| {
        if output {
            format!("output {n}")
        } else {
            format!("parameter {n}")
        }
    };
    // The furthest end so far of a parameter and of an output, with who reaches it.
    let mut reach: [Option<(u64, u32)>; 2] = [None, None];
    for &(start, size, output, n) in callers.iter() {
        if size == 0 {
            continue;
        }
        // An output is checked against outputs and parameters, a parameter against outputs.
        let against = [(true, reach[1]), (false, reach[0].filter(|_| output))];
        for (other_output, r) in against {
            if let Some((end, m)) = r
                && end > start
            {
                return Err(Error::InvalidArgument(format!(
                    "{} and {} of `{program}` overlap in memory: the program does not alias \
                     them, so pass distinct buffers",
                    name(other_output, m),
                    name(output, n)
                )));
            }
        }
        let end = start.saturating_add(size);
        let slot = &mut reach[usize::from(output)];
        if slot.is_none_or(|(e, _)| end > e) {
            *slot = Some((end, n));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod overlap_tests {
    use super::refuse_overlaps;

    fn check(v: &[(u64, u64, bool, u32)]) -> Result<(), String> {
        refuse_overlaps("p", &mut v.to_vec()).map_err(|e| e.to_string())
    }

    #[test]
    fn outputs_may_not_share_bytes_with_anything_parameters_may_with_each_other() {
        // Two parameters on one buffer, outputs apart: fine.
        assert!(check(&[(0, 64, false, 0), (0, 64, false, 1), (64, 16, true, 0)]).is_ok());
        // An output that is a parameter's buffer (the issue's C case).
        let e = check(&[(0, 16, false, 1), (0, 16, true, 0)]).unwrap_err();
        assert!(e.contains("parameter 1 and output 0 of `p` overlap"), "{e}");
        // Inside a longer parameter, either order of addresses.
        assert!(check(&[(0, 100, false, 0), (50, 4, true, 0)]).is_err());
        assert!(check(&[(0, 10, true, 0), (5, 20, false, 0)]).is_err());
        // Two outputs overlapping by one byte; touching ones are fine; empty ones never clash.
        assert!(check(&[(0, 9, true, 0), (8, 8, true, 1)]).is_err());
        assert!(check(&[(0, 8, true, 0), (8, 8, true, 1), (8, 0, false, 0)]).is_ok());
    }
}
