//! One rank of a multi-process job: `xthunk run PROGRAM` in a process whose environment names
//! a job of more than one rank (`xthunk launch`, Slurm, Open MPI, a Kubernetes indexed job; see
//! `xthunk_core::distributed::env`).
//!
//! The rank joins the job through its coordinator, meets the others at the start barrier
//! (warning every few seconds about the ranks still missing), runs the program on its host
//! device with the collectives going through shared memory segments
//! ([`ShmCliqueProvider`]), prints its outputs behind
//! `rank R`, writes them under `DIR/rank<R>/` with `--output-dir` (the layout of
//! `run --devices N`, so that the two can be compared file by file), and leaves with the
//! coordinator's shutdown barrier.
//!
//! # Failing loudly
//!
//! - When the coordinator reports a dead rank (its lease expired: killed, hung, cut off), a
//!   failure handler aborts this rank's cliques (peers waiting in them fail at once), removes
//!   the job's shared memory segments, prints `error: rank R failed: ... (job J)`, leaves the
//!   coordinator (revoking its lease) and exits with status 1, whatever the main thread is
//!   doing — as XLA terminates on a missed heartbeat.
//! - When this rank fails by itself (a collective timed out naming the ranks that did not
//!   arrive, a mismatch, a deadline), it aborts its cliques, removes the segments, drops its
//!   coordinator without shutdown (its lease is revoked: the other ranks learn at once that it
//!   failed) and returns the error, which `main` prints.
//!
//! Exactly one of the two ends the process: whichever starts first.
//!
//! `XTHUNK_LEASE_TTL` (seconds, default 5) is the lease TTL: a dead rank is noticed within
//! about that long. `XTHUNK_START_TIMEOUT` (seconds, default 60) bounds the start barrier
//! (`xthunk launch --lease-ttl`, `--start-timeout` set both). The coordinator is the embedded
//! one of `xthunk launch` (`unix://…`, always built) or etcd (the `etcd` feature).
//!
//! # Where every rank is
//!
//! The rank's executions number their communication steps in a [`Progress`] record; a thread
//! publishes this rank's position under `xthunk.progress/R` while the program runs (never on
//! a collective's path), and an execution's failure (a collective timeout) says where every
//! rank was: this rank at its failure, the others as last published, so that a rank that is
//! stuck but alive is named as stuck, with its position.
//!
//! # The root cause
//!
//! The first rank that learns why the job fails publishes that cause
//! ([`Coordinator::publish_cause`], key [`CAUSE_KEY`](xthunk::core::distributed::CAUSE_KEY);
//! the first cause holds, and it outlives its publisher with every coordinator): a rank that
//! fails by itself publishes its error, a rank told of another's failure publishes that
//! failure. A rank that fails because another
//! left reports the published cause rather than the departure (`…; this rank aborts because
//! of it (…)`), and a rank waiting at the start barrier fails as soon as a cause is published
//! (the launcher publishes one when a rank's process ends before it joined). A rank that lost
//! its coordinator names the coordinator (`lost the coordinator etcd://…: …`) and asks it
//! nothing more.

use super::error::{CliError, CliResult};
use super::outfiles;
use super::run::{RunArgs, backend_choice};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use xthunk::core::collectives::{CliqueProvider, Timeouts};
use xthunk::core::distributed::{
    Coordinator, CoordinatorSpec, DEFAULT_LEASE_TTL, DistributedConfig, DistributedError,
    EmbeddedCoordinator, Overrides, RankFailure, list_ranks, spawn_failure_handler,
};
use xthunk::core::executor::{CollectiveContext, Progress, RankPosition, describe_positions};
use xthunk::core::host::{ShmCliqueProvider, ShmOptions, remove_job_segments};
use xthunk::{DeviceMemory, ExecuteOptions, LoadedExecutable, Runtime};

/// The lease TTL variable (seconds).
pub const XTHUNK_LEASE_TTL: &str = "XTHUNK_LEASE_TTL";

/// The start barrier's timeout variable (seconds).
pub const XTHUNK_START_TIMEOUT: &str = "XTHUNK_START_TIMEOUT";

/// The collective timeout variable (seconds): the default of `run --collective-timeout`
/// (`xthunk launch --collective-timeout` sets it for every rank).
pub const XTHUNK_COLLECTIVE_TIMEOUT: &str = "XTHUNK_COLLECTIVE_TIMEOUT";

/// The incarnation token of the launch that started this rank (`xthunk launch` with etcd
/// claims the job id with it): an etcd rank joins only that incarnation of the job.
pub const XTHUNK_INCARNATION: &str = "XTHUNK_INCARNATION";

/// The start barrier's timeout when [`XTHUNK_START_TIMEOUT`] is not set.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a rank waiting at the start barrier names the ranks still missing.
pub const START_WARN_EVERY: Duration = Duration::from_secs(5);

/// This process's job, when its environment names one of more than one rank. An environment
/// that names a job badly is an error when it holds `XTHUNK_*` variables (someone meant to
/// start a job); a cluster's own variables that do not add up (e.g. a Kubernetes index without
/// a world size) only warn, and `run` runs alone.
pub fn detect() -> CliResult<Option<DistributedConfig>> {
    match DistributedConfig::from_process_env(&Overrides::default()) {
        Ok(config) => Ok((config.world_size > 1).then_some(config)),
        Err(e) => {
            use xthunk::core::distributed::env::{
                XTHUNK_COORDINATOR, XTHUNK_JOB_ID, XTHUNK_RANK, XTHUNK_WORLD_SIZE,
            };
            let explicit = [
                XTHUNK_RANK,
                XTHUNK_WORLD_SIZE,
                XTHUNK_COORDINATOR,
                XTHUNK_JOB_ID,
            ]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
            if explicit {
                return Err(CliError::Usage(e.to_string()));
            }
            tracing::warn!("not joining a job: {e}");
            Ok(None)
        }
    }
}

/// Positive seconds from the variable `name`, if set.
fn seconds_var(name: &str) -> CliResult<Option<Duration>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(Some)
        .ok_or_else(|| {
            CliError::Usage(format!(
                "{name}={v:?}: expected a positive number of seconds"
            ))
        })
}

/// The lease TTL from [`XTHUNK_LEASE_TTL`], if set.
fn lease_ttl() -> CliResult<Option<Duration>> {
    seconds_var(XTHUNK_LEASE_TTL)
}

/// The start barrier's timeout from [`XTHUNK_START_TIMEOUT`], else the default.
fn start_timeout() -> CliResult<Duration> {
    Ok(seconds_var(XTHUNK_START_TIMEOUT)?.unwrap_or(DEFAULT_START_TIMEOUT))
}

fn distributed(e: DistributedError) -> CliError {
    CliError::Core(xthunk::Error::Distributed(e))
}

/// Whether this build can reach the job's coordinator at all (before anything else is done).
fn check_coordinator(config: &DistributedConfig) -> CliResult<()> {
    lease_ttl()?;
    start_timeout()?;
    match &config.coordinator {
        CoordinatorSpec::Local => Err(CliError::Usage(local_coordinator_error(config))),
        CoordinatorSpec::Unix { .. } => Ok(()),
        CoordinatorSpec::Etcd { .. } if cfg!(feature = "etcd") => Ok(()),
        spec => Err(CliError::Usage(format!(
            "job `{}` meets through {spec}, but this xthunk was built without the `etcd` \
             feature: rebuild it with `cargo build --features etcd` (etcd-client needs protoc), \
             or run the job on one machine with `xthunk launch -n N` (its embedded coordinator \
             needs no etcd)",
            config.job_id
        ))),
    }
}

fn connect(config: &DistributedConfig) -> CliResult<Box<dyn Coordinator>> {
    check_coordinator(config)?;
    let ttl = lease_ttl()?.unwrap_or(DEFAULT_LEASE_TTL);
    match &config.coordinator {
        CoordinatorSpec::Unix { path } => Ok(Box::new(
            EmbeddedCoordinator::connect(path, &config.job_id, config.rank, config.world_size, ttl)
                .map_err(distributed)?,
        )),
        #[cfg(feature = "etcd")]
        _ => {
            let incarnation = std::env::var(XTHUNK_INCARNATION)
                .ok()
                .filter(|t| !t.is_empty());
            xthunk_etcd::connect_incarnation(config, ttl, incarnation).map_err(distributed)
        }
        #[cfg(not(feature = "etcd"))]
        _ => Err(CliError::Usage(local_coordinator_error(config))),
    }
}

fn local_coordinator_error(config: &DistributedConfig) -> String {
    format!(
        "job `{}` has {} processes, but the local coordinator serves the threads of one \
         process: start the job with `xthunk launch -n N` (it serves a coordinator to its \
         ranks), or with --coordinator etcd://HOST:PORT",
        config.job_id, config.world_size
    )
}

/// Who ends the process after a failure: the failure handler or the main thread, whichever
/// claims it first.
#[derive(Default)]
struct ExitClaim(AtomicBool);

impl ExitClaim {
    fn claim(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }
}

/// Runs this process's rank of the job `config` (see the [module documentation](self)):
/// `inputs` are this rank's parameters (host bytes in signature order; `run` makes the random
/// ones with the streams `run --devices N` gives this rank, so the two compute the same).
pub fn run_job(
    args: &RunArgs,
    config: &DistributedConfig,
    program: xthunk::ir::Executable,
    inputs: Vec<Vec<u8>>,
    out: &mut dyn Write,
) -> CliResult<()> {
    check_coordinator(config)?;
    if args.devices > 1 {
        return Err(CliError::Usage(format!(
            "--devices {} runs that many ranks in one process, but this process is rank {} of \
             job `{}` ({} processes, one rank each): drop --devices",
            args.devices, config.rank, config.job_id, config.world_size
        )));
    }
    let (rank, world, job) = (config.rank, config.world_size, config.job_id.clone());
    let plan = match &args.output_dir {
        Some(dir) => Some(outfiles::Plan::new(
            &dir.join(format!("rank{rank}")),
            &program.signature.outputs,
        )?),
        None => None,
    };
    let rt = Runtime::new();
    let (backend, skipped) = rt.select(&backend_choice(&args.backend))?;
    // Ranks in separate processes meet through shared memory segments of host memory.
    if !rt.collectives(backend.name()).across_processes {
        return Err(xthunk::Error::Unsupported {
            backend: backend.name().into(),
            feature: "jobs of several processes (their collectives run on the host backend, \
                      through shared memory; NCCL/RCCL cliques across processes are not wired \
                      into `run` yet): use --backend host"
                .into(),
        }
        .into());
    }
    for s in skipped {
        tracing::info!("skipped {s}");
    }
    let device = backend.device(args.device)?;

    let coordinator: Arc<dyn Coordinator> = Arc::from(connect(config)?);
    let timeouts = Timeouts::new(args.collective_timeout / 6, args.collective_timeout);
    let provider = Arc::new(ShmCliqueProvider::new(
        coordinator.clone(),
        ShmOptions::default().with_timeouts(timeouts),
    ));
    let exit = Arc::new(ExitClaim::default());
    {
        let weak_provider = Arc::downgrade(&provider);
        let weak_coordinator = Arc::downgrade(&coordinator);
        let (exit, job) = (exit.clone(), job.clone());
        spawn_failure_handler(coordinator.as_ref(), move |f| {
            on_rank_failure(&f, &job, &exit, &weak_provider, &weak_coordinator);
        })
        .map_err(|e| CliError::Usage(format!("cannot start the failure handler thread: {e}")))?;
    }
    eprintln!(
        "xthunk: job {job}: rank {rank} of {world} (pid {}), {} coordinator {}, backend {}, \
         collectives through shared memory",
        std::process::id(),
        coordinator.backend(),
        config.coordinator,
        backend.name()
    );
    // Leaving may take longer than a collective (processes finish writing and exit).
    let barrier_timeout = args.collective_timeout.max(Duration::from_secs(60));
    let result = run_rank(
        args,
        &coordinator,
        &provider,
        device,
        program,
        inputs,
        plan,
        out,
    )
    .and_then(|()| coordinator.shutdown(barrier_timeout).map_err(distributed));
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(fail(
            e,
            &job,
            &config.coordinator,
            &exit,
            provider,
            coordinator,
        )),
    }
}

/// The failure handler: a rank of the job died (or this rank lost its coordinator).
fn on_rank_failure(
    failure: &RankFailure,
    job: &str,
    exit: &ExitClaim,
    provider: &Weak<ShmCliqueProvider>,
    coordinator: &Weak<dyn Coordinator>,
) {
    if !exit.claim() {
        // The main thread is already failing (and will say why).
        return;
    }
    let text = failure.to_string();
    let mut cause = None;
    if let Some(p) = provider.upgrade() {
        cause = p.failure();
        p.abort_all(&text);
    }
    remove_job_segments(job);
    // The root cause: the one published first, else this failure (published now for the
    // others and the launcher). A lost coordinator is asked nothing.
    let lost = failure.coordinator_lost.is_some();
    let root = match coordinator.upgrade() {
        Some(c) if !lost => c.publish_cause(&text).ok(),
        _ => None,
    };
    match root {
        Some(root) if root != text => {
            eprintln!("error: {root}; this rank aborts because of it ({text})");
        }
        _ => eprintln!("error: {text} (job {job})"),
    }
    if let Some(cause) = cause {
        eprintln!("xthunk: the collectives of this rank had already failed: {cause}");
    }
    // Leave the coordinator (its shutdown fails fast once a rank is known dead, then revokes
    // this rank's lease), but never wait long for it: exiting promptly matters more. A lost
    // coordinator cannot be left.
    if let Some(c) = coordinator.upgrade().filter(|_| !lost) {
        let (tx, rx) = std::sync::mpsc::channel();
        let leave = std::thread::Builder::new().spawn(move || {
            let _ = c.shutdown(Duration::from_secs(1));
            let _ = tx.send(());
        });
        if leave.is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(2));
        }
    }
    std::process::exit(1);
}

/// What a failure of the main thread (`e`) says about the job's coordinator and the other
/// ranks.
enum Blame {
    /// The coordinator is lost: nothing can be published or read.
    CoordinatorLost,
    /// Another rank failed (as the coordinator reports it).
    Another(String),
    /// This rank failed by itself.
    Own,
}

fn blame(e: &CliError, rank: usize) -> Blame {
    let CliError::Core(xthunk::Error::Distributed(d)) = e else {
        return Blame::Own;
    };
    match d {
        DistributedError::CoordinatorLost { .. } => Blame::CoordinatorLost,
        DistributedError::RankFailed { failure, .. } if failure.coordinator_lost.is_some() => {
            Blame::CoordinatorLost
        }
        DistributedError::RankFailed { failure, .. } if failure.rank != rank => {
            Blame::Another(failure.to_string())
        }
        _ => Blame::Own,
    }
}

/// When the main thread's failure `e` (`message`, one line) comes from the loss of the
/// coordinator `spec` (this rank's error, a failure its coordinator reported, or another
/// rank's that its collectives carried here): `lost the coordinator SPEC: WHY`.
fn lost_coordinator(
    e: &CliError,
    message: &str,
    job: &str,
    c: &dyn Coordinator,
    spec: &CoordinatorSpec,
) -> Option<String> {
    if matches!(blame(e, c.rank()), Blame::CoordinatorLost) {
        return Some(cause_text(message, job));
    }
    if let Some(f) = c
        .failures()
        .into_iter()
        .find(|f| f.coordinator_lost.is_some())
    {
        return Some(f.to_string());
    }
    // Carried as text (a collective aborted by a rank that lost it): up to the next clause.
    let needle = format!("lost the coordinator {spec}: ");
    let at = message.find(&needle)?;
    let rest = message.get(at..)?;
    Some(rest.split("; ").next().unwrap_or(rest).to_string())
}

/// `message` as a cause of job `job`'s failure: without a leading "job `J`: " (the launcher
/// names the job).
pub fn cause_text(message: &str, job: &str) -> String {
    let prefix = format!("job `{job}`: ");
    message.strip_prefix(&prefix).unwrap_or(message).to_string()
}

/// The main thread failed with `e`: clean up and return it, unless the failure handler is
/// already ending the process.
fn fail(
    e: CliError,
    job: &str,
    spec: &CoordinatorSpec,
    exit: &ExitClaim,
    provider: Arc<ShmCliqueProvider>,
    coordinator: Arc<dyn Coordinator>,
) -> CliError {
    if !exit.claim() {
        // The failure handler exits the process (it names the dead rank); let it.
        let since = Instant::now();
        while since.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        return e;
    }
    let message = super::error::one_line(&e);
    provider.abort_all(&message);
    remove_job_segments(job);
    // The cause of the job's failure: the one published first, else this rank's own or the
    // failure of another it was told of (then published for the others and the launcher).
    let lost = lost_coordinator(&e, &message, job, coordinator.as_ref(), spec);
    let own_text = cause_text(&message, job);
    let e = match (lost, blame(&e, coordinator.rank())) {
        // The coordinator is gone: it is the cause, named first (and asked nothing more).
        (Some(lost), _) if lost == own_text => CliError::Usage(format!("{lost} (job {job})")),
        (Some(lost), _) => CliError::Usage(format!(
            "{lost}; this rank aborts because of it ({message})"
        )),
        (None, Blame::CoordinatorLost) => e,
        (None, Blame::Another(failure)) => match coordinator.publish_cause(&failure) {
            Ok(root) if root != failure => CliError::Usage(format!(
                "{root}; this rank aborts because of it ({message})"
            )),
            _ => e,
        },
        (None, Blame::Own) => {
            let cause = format!("{own_text} (found by rank {})", coordinator.rank());
            if let Err(err) = coordinator.publish_cause(&cause) {
                tracing::warn!(error = %err, "could not publish the cause of the failure");
            }
            e
        }
    };
    drop(provider);
    // Dropped without shutdown, the coordinator revokes this rank's lease: the other ranks
    // learn at once that it failed, instead of after the TTL.
    if Arc::strong_count(&coordinator) > 1 {
        tracing::warn!("the coordinator is still in use; its lease expires with its TTL");
    }
    drop(coordinator);
    e
}

/// The start of the job: every rank announces itself, then waits for the others up to
/// `timeout` ([`DistributedError::NeverStarted`] names the missing), the lowest rank present
/// naming those still missing every [`START_WARN_EVERY`]; then a barrier.
fn start_barrier(c: &dyn Coordinator, timeout: Duration) -> CliResult<()> {
    let key = |r: usize| format!("xthunk.started/{r}");
    let (rank, world) = (c.rank(), c.world_size());
    c.set(&key(rank), b"").map_err(distributed)?;
    let begun = Instant::now();
    let mut warn_at = begun + START_WARN_EVERY;
    let mut present = vec![false; world];
    present[rank] = true;
    loop {
        c.check().map_err(distributed)?;
        // A cause published meanwhile (e.g. by the launcher: a rank's process ended before it
        // joined) ends the wait at once.
        if let Some(cause) = c.published_cause().map_err(distributed)? {
            return Err(CliError::Usage(format!(
                "{cause}; this rank aborts because of it (it was waiting at the start barrier, \
                 job {})",
                c.job_id()
            )));
        }
        for (r, seen) in present.iter_mut().enumerate() {
            if !*seen && c.try_get(&key(r)).map_err(distributed)?.is_some() {
                *seen = true;
            }
        }
        let missing: Vec<usize> = (0..world).filter(|r| !present[*r]).collect();
        if missing.is_empty() {
            break;
        }
        let now = Instant::now();
        if now - begun >= timeout {
            return Err(distributed(DistributedError::NeverStarted {
                job: c.job_id().to_string(),
                missing,
                timeout,
            }));
        }
        if now >= warn_at {
            if present.iter().position(|p| *p) == Some(rank) {
                eprintln!(
                    "xthunk: job {}: waiting for {} to start ({:.0?} so far; the job fails after \
                     the start timeout of {timeout:?})",
                    c.job_id(),
                    list_ranks(&missing),
                    now - begun
                );
            }
            warn_at += START_WARN_EVERY;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    c.barrier("start", timeout.max(Duration::from_secs(10)))
        .map_err(distributed)
}

/// The rank's work between the coordinator's start and shutdown.
#[allow(clippy::too_many_arguments)]
fn run_rank(
    args: &RunArgs,
    coordinator: &Arc<dyn Coordinator>,
    provider: &Arc<ShmCliqueProvider>,
    device: Arc<dyn xthunk::Device>,
    program: xthunk::ir::Executable,
    inputs: Vec<Vec<u8>>,
    plan: Option<outfiles::Plan>,
    out: &mut dyn Write,
) -> CliResult<()> {
    let rank = coordinator.rank();
    let world = coordinator.world_size();
    let sig = program.signature.clone();
    let t = Instant::now();
    let exe = LoadedExecutable::load(device.clone(), program)?;
    tracing::info!(
        elapsed_ms = t.elapsed().as_secs_f64() * 1e3,
        "loaded `{}`",
        exe.executable().name
    );
    let params = exe.allocate_parameters()?;
    if params.len() != inputs.len() {
        return Err(CliError::Usage(format!(
            "rank {rank}: {} parameters but {} inputs",
            params.len(),
            inputs.len()
        )));
    }
    for (buf, bytes) in params.iter().zip(&inputs) {
        device.copy_from_host(bytes, buf.ptr())?;
    }
    let outputs = exe.allocate_outputs()?;
    start_barrier(coordinator.as_ref(), start_timeout()?)?;
    eprintln!(
        "xthunk: job {}: rank {rank} of {world} started",
        coordinator.job_id()
    );
    let cliques: Arc<dyn CliqueProvider> = provider.clone();
    let progress = Arc::new(Progress::new(world));
    let opts = ExecuteOptions {
        deadline: args.deadline,
        collectives: Some(CollectiveContext {
            rank: rank as u32,
            world: world as u32,
            cliques,
        }),
        progress: Some(progress.clone()),
    };
    let pr: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let or: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    let mut times = Vec::with_capacity(args.iterations as usize);
    let every =
        (args.collective_timeout / 6).clamp(Duration::from_millis(50), Duration::from_secs(2));
    publishing_progress(coordinator.as_ref(), &progress, every, || {
        for i in 0..args.iterations {
            let t = Instant::now();
            exe.execute(&pr, &or, &opts)
                .map_err(|e| with_positions(e, coordinator.as_ref(), &progress))?;
            let dt = t.elapsed();
            tracing::debug!(
                iteration = i,
                elapsed_us = dt.as_micros() as u64,
                "executed"
            );
            times.push(dt);
        }
        Ok::<(), xthunk::Error>(())
    })?;
    let mut results = Vec::with_capacity(outputs.len());
    for o in &outputs {
        let mut v = vec![0u8; o.size() as usize];
        device.copy_to_host(o.ptr(), &mut v)?;
        results.push(v);
    }
    let e = exe.executable();
    writeln!(
        out,
        "program {} ({} thunks) as rank {rank} of {world} on {}:{} {} (job {})",
        e.name,
        e.thunk_count(),
        device.backend_name(),
        device.info().ordinal,
        device.info().name,
        coordinator.job_id()
    )?;
    super::run::print_outputs(out, &format!("rank {rank} "), &sig.outputs, &results)?;
    super::run::print_times(out, &format!("time per iteration (rank {rank})"), &times)?;
    if let Some(plan) = plan {
        for p in plan.write(&results)? {
            writeln!(out, "wrote {}", p.display())?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The coordinator key under which rank `r` publishes its position in its communication
/// steps ([`RankPosition::encode`]).
fn progress_key(r: usize) -> String {
    format!("xthunk.progress/{r}")
}

/// Runs `work` while a thread publishes this rank's position in `progress` under its
/// [`progress_key`] every `every` (when it changed): what a rank whose collective times out
/// reads to say where every rank is, a stuck-but-alive one included (its thread keeps
/// publishing). A set costs a round trip to the coordinator, so it is never on the path of a
/// collective.
fn publishing_progress<T>(
    c: &dyn Coordinator,
    progress: &Progress,
    every: Duration,
    work: impl FnOnce() -> T,
) -> T {
    let rank = c.rank();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let publisher = std::thread::Builder::new()
            .name("xthunk-progress".into())
            .spawn_scoped(s, move || {
                let mut last = String::new();
                loop {
                    if let Some(p) = progress.position(rank) {
                        let text = p.encode();
                        if text != last && c.set(&progress_key(rank), text.as_bytes()).is_ok() {
                            last = text;
                        }
                    }
                    if stopped.recv_timeout(every)
                        != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    {
                        return;
                    }
                }
            });
        if let Err(e) = publisher {
            tracing::warn!("cannot start the progress publisher thread: {e}");
        }
        let r = work();
        drop(stop);
        r
    })
}

/// `e`, an execution's failure, with where every rank was: this rank's position when it
/// failed (also published for the others) and the others' last published ones. A failure
/// that comes from the coordinator (a rank died) is returned as it is.
fn with_positions(e: xthunk::Error, c: &dyn Coordinator, progress: &Progress) -> xthunk::Error {
    let rank = c.rank();
    let own = match (&e, progress.frozen_position(rank)) {
        (xthunk::Error::Distributed(_), _) | (_, None) => return e,
        (_, Some(own)) => own,
    };
    if let Err(err) = c.set(&progress_key(rank), own.encode().as_bytes()) {
        tracing::warn!(error = %err, "could not publish this rank's position");
    }
    let positions: Vec<Option<RankPosition>> = (0..c.world_size())
        .map(|r| {
            if r == rank {
                return Some(own.clone());
            }
            let v = c.try_get(&progress_key(r)).ok()??;
            RankPosition::decode(&String::from_utf8_lossy(&v))
        })
        .collect();
    xthunk::Error::backend(
        "job",
        &format!("rank {rank} of {}", c.world_size()),
        format!(
            "{}; where each rank was: {}",
            super::error::one_line(&e),
            describe_positions(&positions)
        ),
    )
}
