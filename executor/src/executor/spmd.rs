//! SPMD execution: one program on the devices of one process, one [`Session`] and one thread
//! per rank, with collectives among them ([`Ranks`]); the ranks may be all of the run
//! ([`run_spmd`]) or this process's share of a job of several processes (the CLI's launched
//! ranks).

use super::config::{CollectiveContext, ExecuteOptions, ExecutorConfig};
use super::progress::Progress;
use super::session::{HostAlloc, Session, zeroed};
use crate::backend::{Buffer, Device};
use crate::collectives::CliqueProvider;
use crate::error::{Error, Result};
use crate::ir::Executable;
use crate::program::Program;
use crate::trace::Tracer;
use std::sync::Arc;
use std::time::Duration;

/// What one rank produced.
#[derive(Clone, Debug, Default)]
pub struct RankOutput {
    /// Output bytes, in signature order.
    pub outputs: Vec<Vec<u8>>,
    /// Wall time of each iteration.
    pub times: Vec<Duration>,
}

/// The ranks of an SPMD run that this process drives: rank `first + i` runs on
/// `sessions[i]`, of `world` ranks in all.
#[derive(Debug)]
pub struct Ranks {
    first: usize,
    world: usize,
    sessions: Vec<Session>,
}

/// Runs `f(i)` for `i` in `0..n`, each on its own scoped thread named after rank
/// `first + i` (inside a `rank` tracing span); returns the results by rank, a panicked or
/// unspawnable thread as an error naming its rank.
fn on_rank_threads<T: Send>(
    n: usize,
    first: usize,
    f: &(dyn Fn(usize) -> Result<T> + Sync),
) -> Vec<Result<T>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let rank = first + i;
                std::thread::Builder::new()
                    .name(format!("xthunk-rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        let span = tracing::info_span!("rank", rank);
                        let _g = span.enter();
                        f(i)
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument(format!(
                        "rank {}: its thread panicked",
                        first + i
                    )))
                }),
                Err(e) => Err(Error::backend(
                    "executor",
                    "spawn rank thread",
                    format!("rank {}: {e}", first + i),
                )),
            })
            .collect()
    })
}

impl Ranks {
    /// Loads `program` on every device (rank `first + i` on `devices[i]`, each on its own
    /// thread, traced on its rank's track) with `config`, and binds `inputs[i]` (host bytes
    /// in signature order) to it. Returns each rank's session or failure, by rank.
    pub fn load(
        program: &Program,
        devices: &[Arc<dyn Device>],
        inputs: &[Vec<Vec<u8>>],
        first: usize,
        config: &ExecutorConfig,
        tracer: Option<&Tracer>,
    ) -> Vec<Result<Session>> {
        if inputs.len() != devices.len() {
            let e = Error::InvalidArgument(format!(
                "{} devices but inputs for {} ranks",
                devices.len(),
                inputs.len()
            ));
            return vec![Err(e)];
        }
        on_rank_threads(devices.len(), first, &|i| {
            let (rank, device) = (first + i, &devices[i]);
            let t = std::time::Instant::now();
            let trace = tracer.map(|t| {
                t.name_rank(rank as u32, device.info().name.clone());
                (t, rank as u32)
            });
            let session = Session::load(device.clone(), program, config, trace)?;
            tracing::info!(
                rank,
                elapsed_ms = t.elapsed().as_secs_f64() * 1e3,
                "loaded `{}`",
                program.name
            );
            session.bind(&inputs[i])?;
            Ok(session)
        })
    }

    /// This process's ranks `first..first + sessions.len()` of `world`.
    pub fn new(first: usize, world: usize, sessions: Vec<Session>) -> Ranks {
        Ranks {
            first,
            world,
            sessions,
        }
    }

    /// Each rank's session (rank `first + i` at `i`).
    pub fn sessions(&self) -> &[Session] {
        &self.sessions
    }

    /// Executes every rank on its own thread, `iterations` times, with `opts` and its place in
    /// the run (its [`CollectiveContext`], communicators from `cliques`), then reads its
    /// outputs (into vectors from `alloc`). An execution's failure goes through
    /// `on_error(rank, error)` (which may say more, e.g. where the other ranks were). All
    /// threads are joined before this returns; the results are by rank.
    pub fn execute(
        &self,
        cliques: &Arc<dyn CliqueProvider>,
        iterations: u32,
        opts: &ExecuteOptions,
        on_error: &(dyn Fn(usize, Error) -> Error + Sync),
        alloc: HostAlloc<'_>,
    ) -> Vec<Result<RankOutput>> {
        let read = |s: &Session| s.read_outputs_with(alloc);
        self.execute_then(cliques, iterations, opts, on_error, &read)
            .into_iter()
            .map(|r| r.map(|(times, outputs)| RankOutput { outputs, times }))
            .collect()
    }

    /// [`Self::execute`], with `then(session)` in place of reading the outputs: each rank's
    /// times and what `then` gave, by rank.
    pub fn execute_then<T: Send>(
        &self,
        cliques: &Arc<dyn CliqueProvider>,
        iterations: u32,
        opts: &ExecuteOptions,
        on_error: &(dyn Fn(usize, Error) -> Error + Sync),
        then: &(dyn Fn(&Session) -> Result<T> + Sync),
    ) -> Vec<Result<(Vec<Duration>, T)>> {
        on_rank_threads(self.sessions.len(), self.first, &|i| {
            let rank = self.first + i;
            let session = &self.sessions[i];
            let mut opts = opts.clone();
            opts.collectives = Some(CollectiveContext {
                rank: rank as u32,
                world: self.world as u32,
                cliques: cliques.clone(),
            });
            let times = session
                .execute_iterations(iterations, &opts, |_, _| {})
                .map_err(|e| on_error(rank, e))?;
            Ok((times, then(session)?))
        })
    }

    /// The sessions, by rank (their output buffers hold the last execution's results).
    pub fn into_sessions(self) -> Vec<Session> {
        self.sessions
    }
}

/// Runs `exe` on every device (rank = position in `devices`), `iterations` times, with
/// `inputs[rank]` as that rank's parameters (host bytes in signature order). The program is
/// verified once; every rank loads it, then runs it, on its own thread; all threads are
/// joined before this returns, also on error. On failure the first error (by rank) is
/// returned, naming the rank; the communicators of a failing rank are aborted so its peers
/// fail promptly rather than at their terminate timeout, and the error says where every rank
/// was at the first failure ([`Progress`]: which ranks wait in a collective, which is stuck
/// before it).
pub fn run_spmd(
    exe: &Executable,
    devices: &[Arc<dyn Device>],
    cliques: Arc<dyn CliqueProvider>,
    inputs: &[Vec<Vec<u8>>],
    iterations: u32,
    config: &ExecutorConfig,
    opts: &ExecuteOptions,
) -> Result<Vec<RankOutput>> {
    check_inputs(devices.len(), inputs)?;
    match Program::new(exe.clone()) {
        Ok(program) => run_program(&program, devices, cliques, inputs, iterations, config, opts),
        // Reported as the ranks' loads reported it before the program was verified once.
        Err(e) => first_failure(vec![Err(e.into())], devices.len(), &Progress::new(1)),
    }
}

/// One list of parameters per device.
fn check_inputs(world: usize, inputs: &[Vec<Vec<u8>>]) -> Result<()> {
    if inputs.len() != world {
        return Err(Error::InvalidArgument(format!(
            "{world} devices but inputs for {} ranks",
            inputs.len()
        )));
    }
    Ok(())
}

/// [`run_spmd`] of a verified program (not verified again).
pub fn run_program(
    program: &Program,
    devices: &[Arc<dyn Device>],
    cliques: Arc<dyn CliqueProvider>,
    inputs: &[Vec<Vec<u8>>],
    iterations: u32,
    config: &ExecutorConfig,
    opts: &ExecuteOptions,
) -> Result<Vec<RankOutput>> {
    let world = devices.len();
    check_inputs(world, inputs)?;
    // Every rank's progress in its communication steps, for the message of a hang (a given
    // record is kept, so the caller can read it too).
    let mut opts = opts.clone();
    let progress = opts
        .progress
        .get_or_insert_with(|| Arc::new(Progress::new(world)))
        .clone();
    let loaded = Ranks::load(program, devices, inputs, 0, config, opts.trace.as_deref());
    let ranks = Ranks::new(0, world, first_failure(loaded, world, &progress)?);
    let results = ranks.execute(&cliques, iterations.max(1), &opts, &|_, e| e, &zeroed);
    first_failure(results, world, &progress)
}

/// [`run_program`] once, with the outputs left on the devices: each rank's output buffers
/// (signature order), by rank.
pub fn run_program_on_devices(
    program: &Program,
    devices: &[Arc<dyn Device>],
    cliques: Arc<dyn CliqueProvider>,
    inputs: &[Vec<Vec<u8>>],
    config: &ExecutorConfig,
    opts: &ExecuteOptions,
) -> Result<Vec<Vec<Buffer>>> {
    let world = devices.len();
    check_inputs(world, inputs)?;
    let mut opts = opts.clone();
    let progress = opts
        .progress
        .get_or_insert_with(|| Arc::new(Progress::new(world)))
        .clone();
    let loaded = Ranks::load(program, devices, inputs, 0, config, opts.trace.as_deref());
    let ranks = Ranks::new(0, world, first_failure(loaded, world, &progress)?);
    let results = ranks.execute_then(&cliques, 1, &opts, &|_, e| e, &|_| Ok(()));
    first_failure(results, world, &progress)?;
    Ok(ranks
        .into_sessions()
        .into_iter()
        .map(Session::into_outputs)
        .collect())
}

/// The ranks' values, or the first failure (by rank) naming its rank and where every rank
/// was; every failure is logged.
fn first_failure<T>(results: Vec<Result<T>>, world: usize, progress: &Progress) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(results.len());
    let mut first: Option<Error> = None;
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => out.push(o),
            Err(e) => {
                tracing::error!(rank, "rank failed: {e}");
                if first.is_none() {
                    let mut message = e.to_string();
                    if let Some(at) = progress.frozen() {
                        message.push_str(&format!("; where each rank was: {at}"));
                    }
                    first = Some(Error::Backend {
                        backend: "spmd".into(),
                        call: format!("rank {rank} of {world}"),
                        message,
                    });
                }
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
