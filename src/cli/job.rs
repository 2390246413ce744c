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
pub use super::job_cause::cause_text;
use super::job_cause::{
    Failing, Naming, PEER_CAUSE_WAIT, fail, is_consequence, process_key, wait_for_cause,
};
use super::logging::note;
use super::outfiles;
use super::rank_stop::{ExitClaim, StopHandler, StopTargets};
use super::run_args::RunArgs;
use super::summary::{print_outputs, print_temp_memory, print_times};
use std::io::Write;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use xthunk::core::collectives::{CliqueProvider, JobPlacement, Timeouts, UnavailableCliques};
use xthunk::core::distributed::{
    Coordinator, CoordinatorSpec, DEFAULT_LEASE_TTL, DistributedConfig, DistributedError,
    EmbeddedCoordinator, Overrides, RankFailure, list_ranks, spawn_failure_handler,
};
use xthunk::core::executor::spmd::Ranks;
use xthunk::core::executor::{Program, Progress, RankPosition, describe_positions_gone};
use xthunk::core::host::remove_job_segments;
use xthunk::{ExecuteOptions, JobCliques, Runtime};

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

/// How long the failure handler waits for the main thread to free the job's device
/// resources before it exits anyway (exiting with them live leaks nothing on a real driver,
/// which frees a process's memory when it ends, but skips the driver's orderly teardown).
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// The global ranks of this process in the job `config` when it drives `devices` devices:
/// process `p` holds `p·devices .. p·devices + devices`.
pub fn global_ranks(
    config: &DistributedConfig,
    devices: usize,
) -> CliResult<std::ops::Range<usize>> {
    let span = |n: usize| n.checked_mul(devices);
    match (span(config.rank), span(config.world_size)) {
        (Some(first), Some(_)) => Ok(first..first + devices),
        _ => Err(CliError::Usage(format!(
            "--devices {devices} in a job of {} processes: too many ranks",
            config.world_size
        ))),
    }
}

/// The variables that restrict which GPUs a process sees (the driver applies them: device
/// ordinals count only the visible devices).
const VISIBLE_DEVICES: [&str; 3] = [
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
];

/// This process's devices: `count` consecutive ordinals from `--device`, else from its local
/// rank (`XTHUNK_LOCAL_RANK`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`; 0 when unknown)
/// times `count`, so that the processes of one host take disjoint devices — unless the
/// devices are `shared` (the host backend's: from 0). The choice is
/// logged, with the visible-devices variables that are set.
fn place(
    backend: &dyn xthunk::Backend,
    config: &DistributedConfig,
    args: &RunArgs,
    (count, shared): (usize, bool),
) -> CliResult<(Vec<Arc<dyn xthunk::Device>>, String)> {
    let (first, why) = match (args.device, config.local_rank) {
        (Some(d), _) => (d, "--device".to_string()),
        (None, _) if shared => (0, "every process has its own".to_string()),
        (None, Some(l)) => (
            l.checked_mul(count)
                .ok_or_else(|| CliError::Usage(format!("local rank {l}: too large")))?,
            format!("local rank {l} × {count} device(s) per process"),
        ),
        (None, None) => (0, "no local rank known: device 0".to_string()),
    };
    let visible: Vec<String> = VISIBLE_DEVICES
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| format!("{v}={x}")))
        .collect();
    let visible = if visible.is_empty() {
        String::new()
    } else {
        format!(", {}", visible.join(" "))
    };
    let end = first
        .checked_add(count)
        .ok_or_else(|| CliError::Usage(format!("device {first} and {count} more: too large")))?;
    let mut devices = Vec::with_capacity(count);
    for ordinal in first..end {
        let d = backend.device(ordinal).map_err(|e| {
            CliError::Usage(format!(
                "rank {} of job `{}` takes {} device {ordinal} ({why}{visible}), which it \
                 cannot open: {e}",
                config.rank,
                config.job_id,
                backend.name()
            ))
        })?;
        devices.push(d);
    }
    let what = if count == 1 {
        format!("device {first} ({why}{visible})")
    } else {
        format!("devices {first}..{end} ({why}{visible})")
    };
    let what = if devices.iter().any(|d| d.info().emulated) {
        format!("{what} [EMULATED, not a GPU]")
    } else {
        what
    };
    tracing::info!(rank = config.rank, "placement: {what}");
    Ok((devices, what))
}

/// Runs this process's ranks of the job `config` (see the [module documentation](self)):
/// `inputs[i]` are the parameters of its `i`-th rank (host bytes in signature order; `run`
/// makes the random ones with the streams `run --devices N` gives that rank, so the two
/// compute the same).
pub fn run_job(
    args: &RunArgs,
    rt: &Runtime,
    config: &DistributedConfig,
    program: Program,
    inputs: Vec<Vec<Vec<u8>>>,
    out: &mut dyn Write,
) -> CliResult<()> {
    check_coordinator(config)?;
    let per_process = args.devices.max(1) as usize;
    let ranks = global_ranks(config, per_process)?;
    let world = config.world_size * per_process;
    if u32::try_from(world).is_err() {
        return Err(CliError::Usage(format!(
            "{world} ranks in all: more than an SPMD run can number"
        )));
    }
    let job = config.job_id.clone();
    let which = if per_process == 1 {
        format!("rank {}", ranks.start)
    } else {
        format!("ranks {}..={}", ranks.start, ranks.end - 1)
    };
    // SIGTERM, SIGINT and SIGHUP stop this rank cleanly from now on (`rank_stop`).
    let exit = Arc::new(ExitClaim::default());
    let stop = StopHandler::install(which.clone(), job.clone(), exit.clone())
        .map_err(|e| CliError::Usage(format!("cannot watch for stop signals: {e}")))?;
    let (backend, skipped) = rt.select(&xthunk::embed::backend_choice(&args.backend))?;
    for s in skipped {
        tracing::info!("skipped {s}");
    }
    let Some(factory) = rt.collectives(backend.name()).jobs else {
        return Err(xthunk::Error::Unsupported {
            backend: backend.name().into(),
            feature: "collectives among the processes of a job".into(),
        }
        .into());
    };
    if let Some(most) = factory
        .devices_per_process()
        .filter(|most| per_process > *most)
    {
        return Err(CliError::Usage(format!(
            "--devices {per_process} in a job of the {} backend, whose jobs take at most {most} \
             device(s) per process: drop --devices, or run more processes",
            backend.name()
        )));
    }
    let mut plans = Vec::with_capacity(per_process);
    for g in ranks.clone() {
        plans.push(match &args.output_dir {
            Some(dir) => Some(outfiles::Plan::new(
                &dir.join(format!("rank{g}")),
                &program.signature.outputs,
            )?),
            None => None,
        });
    }
    let (devices, placed) = place(
        backend.as_ref(),
        config,
        args,
        (per_process, factory.shares_devices()),
    )?;

    let coordinator: Arc<dyn Coordinator> = Arc::from(connect(config)?);
    let timeouts = Timeouts::new(args.collective_timeout / 6, args.collective_timeout);
    let made = factory.create(JobCliques {
        coordinator: coordinator.clone(),
        placement: JobPlacement {
            devices: devices.clone(),
            first_rank: ranks.start,
            world,
        },
        timeouts,
    });
    let provider: Arc<dyn CliqueProvider> = match made {
        Ok(p) => p,
        // No collective library (e.g. no libnccl): the backend still runs programs without
        // collectives; a collective fails with the reason.
        Err(xthunk::Error::Unavailable { backend: b, reason }) => {
            note(format_args!(
                "xthunk: job {job}: collectives are off on backend {}: {b}: {reason}",
                backend.name()
            ));
            Arc::new(UnavailableCliques::new(b, reason, world))
        }
        Err(e) => return Err(e.into()),
    };
    stop.arm(StopTargets {
        provider: Arc::downgrade(&provider),
        coordinator: Arc::downgrade(&coordinator),
    });
    let naming = Naming { per_process };
    // Which ranks this process holds, its pid and host: how the others and the launcher name
    // it when it fails.
    if let Err(e) = coordinator.set(
        &process_key(config.rank),
        naming.describe_self(config.rank).as_bytes(),
    ) {
        tracing::warn!(error = %e, "could not publish this process's ranks");
    }
    {
        let weak_provider = Arc::downgrade(&provider);
        let weak_coordinator = Arc::downgrade(&coordinator);
        let (exit, job) = (exit.clone(), job.clone());
        spawn_failure_handler(coordinator.as_ref(), move |f| {
            on_rank_failure(&f, (&job, naming), &exit, &weak_provider, &weak_coordinator);
        })
        .map_err(|e| CliError::Usage(format!("cannot start the failure handler thread: {e}")))?;
    }
    note(format_args!(
        "xthunk: job {job}: process {} of {} (pid {}), {which} of {world}, {} coordinator {}, \
         backend {} on {placed}, collectives through {}",
        config.rank,
        config.world_size,
        std::process::id(),
        coordinator.backend(),
        config.coordinator,
        backend.name(),
        factory.transport()
    ));
    // Leaving may take longer than a collective (processes finish writing and exit).
    let barrier_timeout = args.collective_timeout.max(Duration::from_secs(60));
    let result = run_ranks(
        args,
        &coordinator,
        &provider,
        Placed {
            first: ranks.start,
            world,
            devices,
            inputs,
            plans,
        },
        program,
        out,
    )
    .and_then(|()| coordinator.shutdown(barrier_timeout).map_err(distributed))
    // Every process has written its trace before the shutdown barrier: the first merges them.
    .and_then(|()| match config.rank {
        0 => args
            .trace
            .merge_job((0..config.world_size).map(|p| p * per_process)),
        _ => Ok(()),
    });
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(fail(
            e,
            Failing {
                job: &job,
                spec: &config.coordinator,
                naming,
                exit: &exit,
            },
            provider,
            coordinator,
        )),
    }
}

/// The failure handler: a rank of the job died (or this rank lost its coordinator).
fn on_rank_failure(
    failure: &RankFailure,
    (job, naming): (&str, Naming),
    exit: &ExitClaim,
    provider: &Weak<dyn CliqueProvider>,
    coordinator: &Weak<dyn Coordinator>,
) {
    if !exit.claim() {
        // The main thread is already failing (and will say why).
        return;
    }
    let text = naming.failure(coordinator.upgrade().as_deref(), failure);
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
            super::logging::print_error_line(&format!(
                "{root}; this rank aborts because of it ({text})"
            ));
        }
        _ => super::logging::print_error_line(&format!("{text} (job {job})")),
    }
    if let Some(cause) = cause {
        note(format_args!(
            "xthunk: the collectives of this rank had already failed: {cause}"
        ));
    }
    exit.wait_released(RELEASE_WAIT);
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
    // Ranks arrived / expected, drawn by rank 0 where stderr is a terminal (a launched job's
    // output goes through the launcher: no bar).
    let bar = if rank == 0 {
        super::progress::bar(world as u64, "ranks started")
    } else {
        indicatif::ProgressBar::hidden()
    };
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
        bar.set_position((world - missing.len()) as u64);
        if missing.is_empty() {
            bar.finish_and_clear();
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
                note(format_args!(
                    "xthunk: job {}: waiting for {} to start ({:.0?} so far; the job fails after \
                     the start timeout of {timeout:?})",
                    c.job_id(),
                    list_ranks(&missing),
                    now - begun
                ));
            }
            warn_at += START_WARN_EVERY;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    c.barrier("start", timeout.max(Duration::from_secs(10)))
        .map_err(distributed)
}

/// This process's ranks: the global rank of the first, the job's number of ranks, and per
/// rank its device, inputs and output files.
struct Placed {
    first: usize,
    world: usize,
    devices: Vec<Arc<dyn xthunk::Device>>,
    inputs: Vec<Vec<Vec<u8>>>,
    plans: Vec<Option<outfiles::Plan>>,
}

/// The process's work between the coordinator's start and shutdown: loads the program on
/// every device of this process, meets the other processes at the start barrier, runs each
/// rank on its own thread (the first error, by rank, is returned) and prints (and writes)
/// every rank's outputs.
fn run_ranks(
    args: &RunArgs,
    coordinator: &Arc<dyn Coordinator>,
    provider: &Arc<dyn CliqueProvider>,
    placed: Placed,
    program: Program,
    out: &mut dyn Write,
) -> CliResult<()> {
    let Placed {
        first,
        world,
        devices,
        inputs,
        plans,
    } = placed;
    let sig = program.signature.clone();
    let tracer = args.trace.tracer();
    // Every option of `run` reaches the ranks: the executor's configuration included.
    let sessions = Ranks::load(
        &program,
        &devices,
        &inputs,
        first,
        &args.config(),
        tracer.as_deref(),
    );
    let ranks = Ranks::new(
        first,
        world,
        sessions.into_iter().collect::<xthunk::Result<Vec<_>>>()?,
    );
    start_barrier(coordinator.as_ref(), start_timeout()?)?;
    let names = if devices.len() == 1 {
        format!("rank {first}")
    } else {
        format!("ranks {first}..={}", first + devices.len() - 1)
    };
    note(format_args!(
        "xthunk: job {}: {names} of {world} started",
        coordinator.job_id()
    ));
    let progress = Arc::new(Progress::new(world));
    let local_ranks = &(first..first + devices.len());
    let every =
        (args.collective_timeout / 6).clamp(Duration::from_millis(50), Duration::from_secs(2));
    let opts = ExecuteOptions {
        deadline: args.deadline,
        progress: Some(progress.clone()),
        trace: tracer.clone(),
        ..Default::default()
    };
    let naming = Naming {
        per_process: devices.len(),
    };
    // Whether a rank of this process failed by itself (not as a consequence): the others of
    // this process then wait for no other cause.
    let found_here = std::sync::atomic::AtomicBool::new(false);
    let with_positions = |rank: usize, e: xthunk::Error| {
        with_positions(
            e,
            rank,
            (coordinator.as_ref(), &found_here),
            &progress,
            (world, local_ranks, naming),
        )
    };
    let results = publishing_progress(coordinator.as_ref(), &progress, local_ranks, every, || {
        ranks.execute(
            provider,
            args.iterations,
            &opts,
            &with_positions,
            &super::tensor::host_output,
        )
    });
    // A failed run's trace is written too: it shows how far each rank got.
    args.trace.save(tracer.as_deref(), first)?;
    let mut done = Vec::with_capacity(results.len());
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(r) => done.push(r),
            Err(e) => errors.push(e),
        }
    }
    // The error of this process: the first (by rank) that is a cause (a collective timeout),
    // rather than a consequence of it (a driver error after the abort it triggered).
    if !errors.is_empty() {
        let primary = errors
            .iter()
            .position(|e| !is_consequence(&super::error::one_line(e)))
            .unwrap_or(0);
        return Err(errors.swap_remove(primary).into());
    }
    for (i, (r, plan)) in done.iter().zip(plans).enumerate() {
        let rank = first + i;
        let device = &devices[i];
        let exe = ranks.sessions()[i].loaded();
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
        print_temp_memory(out, exe)?;
        print_outputs(out, &format!("rank {rank} "), &sig.outputs, &r.outputs)?;
        print_times(out, &format!("time per iteration (rank {rank})"), &r.times)?;
        if let Some(plan) = plan {
            for p in plan.write(&r.outputs)? {
                writeln!(out, "wrote {}", p.display())?;
            }
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

/// Runs `work` while a thread publishes the positions of this process's ranks (`ranks`) in
/// `progress` under their [`progress_key`]s every `every` (when they changed): what a rank
/// whose collective times out reads to say where every rank is, a stuck-but-alive one
/// included (its thread keeps publishing). A set costs a round trip to the coordinator, so it
/// is never on the path of a collective.
fn publishing_progress<T>(
    c: &dyn Coordinator,
    progress: &Progress,
    ranks: &std::ops::Range<usize>,
    every: Duration,
    work: impl FnOnce() -> T,
) -> T {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let publisher = std::thread::Builder::new()
            .name("xthunk-progress".into())
            .spawn_scoped(s, move || {
                let mut last = vec![String::new(); ranks.len()];
                loop {
                    for (rank, last) in ranks.clone().zip(last.iter_mut()) {
                        if let Some(p) = progress.position(rank) {
                            let text = p.encode();
                            if text != *last && c.set(&progress_key(rank), text.as_bytes()).is_ok()
                            {
                                *last = text;
                            }
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
fn with_positions(
    e: xthunk::Error,
    rank: usize,
    (c, found_here): (&dyn Coordinator, &std::sync::atomic::AtomicBool),
    progress: &Progress,
    (world, local, naming): (usize, &std::ops::Range<usize>, Naming),
) -> xthunk::Error {
    let own = match (&e, progress.frozen_position(rank)) {
        (xthunk::Error::Distributed(_), _) | (_, None) => return e,
        (_, Some(own)) => own,
    };
    if let Err(err) = c.set(&progress_key(rank), own.encode().as_bytes()) {
        tracing::warn!(error = %err, "could not publish this rank's position");
    }
    // A failure that follows another's (a peer gone, an abort): wait a moment for that one,
    // so that the ranks of a process that is gone are called dead, not stuck or idle.
    use std::sync::atomic::Ordering;
    if is_consequence(&super::error::one_line(&e)) {
        let _ = wait_for_cause(c, naming, PEER_CAUSE_WAIT, &|| {
            found_here.load(Ordering::SeqCst)
        });
    } else {
        found_here.store(true, Ordering::SeqCst);
    }
    let positions: Vec<Option<RankPosition>> = (0..world)
        .map(|r| {
            if r == rank {
                return Some(own.clone());
            }
            if local.contains(&r) {
                // A rank of this process: its own record, as frozen at the first failure.
                return progress.frozen_position(r).or_else(|| progress.position(r));
            }
            let v = c.try_get(&progress_key(r)).ok()??;
            RankPosition::decode(&String::from_utf8_lossy(&v))
        })
        .collect();
    xthunk::Error::backend(
        "job",
        &format!("rank {rank} of {world}"),
        format!(
            "{}; where each rank was: {}",
            super::error::one_line(&e),
            describe_positions_gone(&positions, &naming.gone(c, world))
        ),
    )
}
