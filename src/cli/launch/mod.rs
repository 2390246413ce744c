//! `xthunk launch -n N [--coordinator SPEC] [--job-id ID] -- COMMAND...`: N local processes
//! of one job.
//!
//! Each rank is this same binary (`std::env::current_exe`) running `COMMAND` with
//! `XTHUNK_RANK`, `XTHUNK_WORLD_SIZE`, `XTHUNK_LOCAL_RANK`, `XTHUNK_COORDINATOR` and
//! `XTHUNK_JOB_ID` set (see `xthunk_core::distributed::env`), stdin closed. Every line a rank
//! writes to stdout or stderr is copied to the launcher's stdout or stderr behind
//! `[rank R] `, whole lines only (one writer, the launcher's main thread, so lines never mix).
//!
//! When a rank fails (non-zero exit or a signal) the launcher names it as the first failure,
//! gives the others `--grace` to exit on their own (a coordinator tells them their peer is
//! gone), then kills those still running, and exits 1. No rank outlives the launcher: every
//! exit path of the launcher kills and reaps the ranks still running, and on Linux each rank
//! is also killed by the kernel when the launcher dies (`PR_SET_PDEATHSIG`: SIGKILL, a
//! crash). Ctrl-C at a terminal reaches the ranks directly too (same process group).
//!
//! When the ranks have ended, the launcher removes whatever `/dev/shm` segment of the job is
//! still there (a rank killed while setting a clique up can leave one).
//!
//! # Stop signals
//!
//! SIGTERM, SIGINT and SIGHUP (a scheduler's cancel, Ctrl-C, a closed terminal) do not end
//! the launcher at once ([`signals`]): it forwards the signal to every rank still running
//! (SIGINT as SIGINT, SIGTERM and SIGHUP as SIGTERM; a rank then aborts its communicators and
//! exits 128 + the signal, see `cli::job`), gives them `--grace`, kills those still running
//! (at once on a second stop signal), reaps them, removes its socket folder, the job's keys
//! and its claims (the job id can be launched again at once, with etcd too), prints one line
//! (`xthunk launch: job J ended by SIGTERM: …`) and exits 128 + the signal.

mod ranks;
mod signals;

use super::error::{CliError, CliResult};
use super::job::{
    XTHUNK_COLLECTIVE_TIMEOUT, XTHUNK_INCARNATION, XTHUNK_LEASE_TTL, XTHUNK_START_TIMEOUT,
    cause_text,
};
use super::job_cause::{failure_words, process_key, process_words};
use ranks::{RootCause, run_ranks};
use signals::StopSignals;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitStatus;
use std::time::Duration;
use xthunk_core::distributed::env::{
    XTHUNK_COORDINATOR, XTHUNK_JOB_ID, XTHUNK_LOCAL_RANK, XTHUNK_RANK, XTHUNK_WORLD_SIZE,
};
use xthunk_core::distributed::{
    CAUSE_KEY, CoordinatorSpec, DistributedError, EmbeddedServer, MachineJobClaim, validate_job_id,
};
use xthunk_core::host::remove_job_segments;

pub const AFTER_HELP: &str = "\
Each rank runs this same xthunk binary with COMMAND (e.g. `-- run program.txtpb`) and with
XTHUNK_RANK, XTHUNK_WORLD_SIZE, XTHUNK_LOCAL_RANK, XTHUNK_COORDINATOR, XTHUNK_JOB_ID,
XTHUNK_LEASE_TTL, XTHUNK_START_TIMEOUT, XTHUNK_COLLECTIVE_TIMEOUT and XTHUNK_INCARNATION (the
launch's token, with etcd) set. Every output line is prefixed with `[rank R]`.

Coordinators:
  embedded   (default) this launcher serves the job's coordinator on a Unix socket in a
             private folder: nothing to install or start
  etcd://HOST:PORT[,HOST:PORT...]
             an etcd v3 cluster (needed for jobs across hosts; this xthunk needs the `etcd`
             feature)
  local      only for -n 1 (the in-process coordinator cannot span processes)

Timeouts (all of a job's timers):
  --lease-ttl      a rank that hangs or stops is reported failed after this long without a
                   heartbeat, a dead one too with etcd (the embedded coordinator sees a death
                   at once) (default 5 s)
  --start-timeout  how long the ranks wait for each other at the start; every 5 s the lowest
                   rank present names the ranks still missing (default 60 s)
  --collective-timeout
                   a collective whose peers do not all arrive within this long fails, naming
                   them and where every rank is; also bounds the shutdown barrier (with at
                   least 60 s) (default 60 s; every rank's `run --collective-timeout`, which
                   COMMAND may still give itself)
  --grace          after the first rank fails, how long the others get to notice, report and
                   clean up before the launcher kills them (default: the lease TTL + 5 s; at
                   least the lease TTL + 1 s)

Signals:
  SIGTERM, SIGINT (Ctrl-C) and SIGHUP stop the job: the launcher sends every rank SIGTERM
  (SIGINT for SIGINT), each rank aborts its collectives and exits (128 + the signal), those
  still running after --grace are killed (at once on a second SIGTERM or Ctrl-C); then the
  launcher removes its socket folder, the job's etcd keys and its claim of the job id (the
  id can be launched again at once), prints one line
  `xthunk launch: job J ended by SIGTERM: ...` and exits 128 + the signal.

Exit status:
  0  every rank exited 0
  1  a rank failed: the root cause the coordinator recorded first is named (the cause a rank
     published, else the first failure; with etcd, a rank's process that ended is published by
     this launcher; else the first rank to exit non-zero), the others get --grace to exit on
     their own and are then killed; or the ranks could not be started
  2  a usage error (an unknown coordinator, `local` for several processes, --grace shorter
     than the lease TTL), caught before any rank starts
  129, 130, 143
     the launcher got SIGHUP, SIGINT or SIGTERM (see Signals)";

/// The default of `--grace`: the lease TTL plus this.
pub const GRACE_AFTER_TTL: Duration = Duration::from_secs(5);

/// The shortest `--grace`: the lease TTL plus this.
pub const MIN_GRACE_AFTER_TTL: Duration = Duration::from_secs(1);

/// Where the ranks of a launch meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchCoordinator {
    /// This launcher serves it ([`EmbeddedServer`]).
    Embedded,
    /// An existing coordinator.
    Given(CoordinatorSpec),
}

impl std::fmt::Display for LaunchCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchCoordinator::Embedded => f.write_str("embedded"),
            LaunchCoordinator::Given(spec) => spec.fmt(f),
        }
    }
}

/// `xthunk launch` as parsed (its command-line arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct LaunchArgs {
    /// How many processes (ranks).
    #[arg(short = 'n', long = "nprocs", value_name = "N")]
    #[arg(value_parser = parse_nprocs)]
    pub nprocs: usize,
    /// Where the ranks meet: `embedded` (served by this launcher), `etcd://HOST:PORT[,...]`,
    /// or `local` (-n 1 only).
    #[arg(long, default_value = "embedded", value_parser = parse_coordinator)]
    pub coordinator: LaunchCoordinator,
    /// The job id, the same for every rank and unique among the jobs sharing the
    /// coordinator (default: a new one).
    #[arg(long)]
    pub job_id: Option<String>,
    /// Seconds without a heartbeat after which a rank is reported failed (the etcd lease
    /// TTL).
    #[arg(
        long,
        value_name = "SECS",
        env = "XTHUNK_LEASE_TTL",
        default_value = "5"
    )]
    #[arg(value_parser = parse_positive_secs)]
    pub lease_ttl: Duration,
    /// Seconds the ranks wait for each other at the start before the job fails, naming the
    /// ranks that never started.
    #[arg(
        long,
        value_name = "SECS",
        env = "XTHUNK_START_TIMEOUT",
        default_value = "60"
    )]
    #[arg(value_parser = parse_positive_secs)]
    pub start_timeout: Duration,
    /// Seconds a collective waits for all its peers before it fails naming them: every
    /// rank's `run --collective-timeout` (unless COMMAND gives one).
    #[arg(
        long,
        value_name = "SECS",
        env = "XTHUNK_COLLECTIVE_TIMEOUT",
        default_value = "60"
    )]
    #[arg(value_parser = parse_positive_secs)]
    pub collective_timeout: Duration,
    /// Seconds the other ranks get to exit on their own after one failed, before they are
    /// killed (default: the lease TTL + 5; at least the lease TTL + 1).
    #[arg(long, value_name = "SECS")]
    #[arg(value_parser = parse_grace)]
    pub grace: Option<Duration>,
    /// The xthunk command every rank runs, after `--` (e.g. `-- run program.txtpb`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// clap value parser of `--coordinator`.
pub fn parse_coordinator(s: &str) -> Result<LaunchCoordinator, String> {
    if s.trim() == "embedded" {
        return Ok(LaunchCoordinator::Embedded);
    }
    s.parse()
        .map(LaunchCoordinator::Given)
        .map_err(|e: xthunk_core::distributed::DistributedError| format!("{e}, or `embedded`"))
}

/// clap value parser of `--lease-ttl`, `--start-timeout` and `--collective-timeout`:
/// positive seconds.
pub fn parse_positive_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of seconds, got `{s}`"))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("expected a positive number of seconds, got {s}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s} seconds: {e}"))
}

/// clap value parser of `-n`: 1 to 4096.
pub fn parse_nprocs(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=4096) => Ok(n),
        _ => Err(format!(
            "expected a number of processes from 1 to 4096, got `{s}`"
        )),
    }
}

/// clap value parser of `--grace` (seconds, 0 allowed).
pub fn parse_grace(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, got `{s}`"))?;
    if secs < 0.0 {
        return Err(format!("the grace period cannot be negative, got {s}"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("grace {s}: {e}"))
}

/// A fresh job id: `launch-<pid>-<unix seconds>-<random>`.
pub fn new_job_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "launch-{}-{secs}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// The grace the survivors get: `--grace`, else the lease TTL + [`GRACE_AFTER_TTL`]; a
/// `--grace` under the lease TTL + [`MIN_GRACE_AFTER_TTL`] is a usage error (the survivors
/// would be killed before they could notice the failure).
pub fn grace(args: &LaunchArgs) -> Result<Duration, String> {
    let min = args.lease_ttl + MIN_GRACE_AFTER_TTL;
    match args.grace {
        None => Ok(args.lease_ttl + GRACE_AFTER_TTL),
        Some(g) if g >= min => Ok(g),
        Some(g) => Err(format!(
            "--grace {g:?} is shorter than the lease TTL ({:?}) + {MIN_GRACE_AFTER_TTL:?}: the \
             other ranks would be killed before they can notice a failure and clean up; give \
             at least --grace {}",
            args.lease_ttl,
            min.as_secs_f64()
        )),
    }
}

/// The coordinator the ranks are given, checked before any rank starts.
fn check_coordinator(args: &LaunchArgs) -> Result<(), String> {
    match &args.coordinator {
        LaunchCoordinator::Given(CoordinatorSpec::Local) if args.nprocs > 1 => Err(format!(
            "--coordinator local serves the threads of one process, but this job has {} \
             processes: drop --coordinator (this launcher then serves an embedded coordinator), \
             or give --coordinator etcd://HOST:PORT",
            args.nprocs
        )),
        LaunchCoordinator::Given(spec @ CoordinatorSpec::Etcd { .. })
            if !cfg!(feature = "etcd") =>
        {
            Err(format!(
                "--coordinator {spec}: this xthunk was built without the `etcd` feature (rebuild \
                 it with `cargo build --features etcd`), or drop --coordinator to use the \
                 embedded one"
            ))
        }
        _ => Ok(()),
    }
}

/// The launch's claim of its job id in etcd (`None` for the other coordinators: each
/// embedded coordinator is the launch's own server, so two launches can never merge; the
/// machine's claim keeps them apart in /dev/shm).
#[cfg(feature = "etcd")]
type Claim = Option<xthunk_etcd::JobClaim>;
#[cfg(not(feature = "etcd"))]
type Claim = Option<NoClaim>;

/// Without the `etcd` feature there is nothing to claim.
#[cfg(not(feature = "etcd"))]
struct NoClaim;

#[cfg(not(feature = "etcd"))]
impl NoClaim {
    fn token(&self) -> &str {
        ""
    }

    fn publish_cause(&self, cause: &str) -> xthunk_core::distributed::DistributedResult<String> {
        Ok(cause.to_string())
    }

    fn value(&self, _key: &str) -> xthunk_core::distributed::DistributedResult<Option<Vec<u8>>> {
        Ok(None)
    }

    fn finish(&self) -> xthunk_core::distributed::DistributedResult<bool> {
        Ok(true)
    }
}

#[cfg(feature = "etcd")]
fn claim_job(args: &LaunchArgs, job_id: &str) -> Result<Claim, String> {
    match &args.coordinator {
        LaunchCoordinator::Given(CoordinatorSpec::Etcd { endpoints }) => {
            xthunk_etcd::JobClaim::acquire(endpoints, job_id, args.lease_ttl)
                .map(Some)
                .map_err(|e| e.to_string())
        }
        _ => Ok(None),
    }
}

#[cfg(not(feature = "etcd"))]
fn claim_job(_args: &LaunchArgs, _job_id: &str) -> Result<Claim, String> {
    Ok(None)
}

/// The incarnation token the ranks carry (empty without a claim).
fn claim_token(claim: &Claim) -> String {
    claim
        .as_ref()
        .map_or_else(String::new, |c| c.token().to_string())
}

pub fn launch(args: &LaunchArgs, out: &mut dyn Write) -> CliResult<u8> {
    let job_id = args.job_id.clone().unwrap_or_else(new_job_id);
    let checked = validate_job_id(&job_id)
        .map_err(|e| e.to_string())
        .and_then(|()| check_coordinator(args))
        .and_then(|()| grace(args));
    let grace = match checked {
        Ok(g) => g,
        Err(e) => {
            // A usage error: exit 2, as clap's own, before any rank starts.
            eprintln!("error: {e}");
            return Ok(2);
        }
    };
    let exe = std::env::current_exe().map_err(|e| {
        CliError::Usage(format!("cannot find the xthunk executable to launch: {e}"))
    })?;
    // From here a stop signal waits for the ranks' loop (which forwards it), so that every
    // exit path cleans up: the socket folder, the claims, the job's keys.
    let mut stop_signals = StopSignals::install().map_err(|e| {
        CliError::Usage(format!(
            "cannot watch for stop signals (SIGTERM, SIGINT): {e}"
        ))
    })?;
    let server =
        match &args.coordinator {
            LaunchCoordinator::Embedded => Some(EmbeddedServer::start().map_err(|e| {
                CliError::Usage(format!("cannot start the embedded coordinator: {e}"))
            })?),
            LaunchCoordinator::Given(_) => None,
        };
    // With etcd the job id is claimed first, atomically: a second launch of the same id is
    // refused here, whole, before any rank starts.
    let claim = match claim_job(args, &job_id) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };
    let incarnation = claim_token(&claim);
    // Then on this machine, whatever the coordinator: ranks of two launches of one id would
    // meet in /dev/shm (with the embedded coordinator this is the only claim).
    let machine_claim = match MachineJobClaim::acquire(&job_id) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };
    // From here this launch owns the id on this machine, so the job's segments are its own:
    // they are swept when the launcher returns, whatever happened to the ranks.
    let sweep = SweepSegments(&job_id);
    let coordinator = match (&server, &args.coordinator) {
        (Some(server), _) => server.spec().to_string(),
        (None, c) => c.to_string(),
    };
    let world = args.nprocs;
    let (ttl, start, collective) = (
        args.lease_ttl.as_secs_f64().to_string(),
        args.start_timeout.as_secs_f64().to_string(),
        args.collective_timeout.as_secs_f64().to_string(),
    );
    let env = |rank: usize| {
        vec![
            (XTHUNK_RANK, rank.to_string()),
            (XTHUNK_WORLD_SIZE, world.to_string()),
            (XTHUNK_LOCAL_RANK, rank.to_string()),
            (XTHUNK_COORDINATOR, coordinator.clone()),
            (XTHUNK_JOB_ID, job_id.clone()),
            (XTHUNK_LEASE_TTL, ttl.clone()),
            (XTHUNK_START_TIMEOUT, start.clone()),
            (XTHUNK_COLLECTIVE_TIMEOUT, collective.clone()),
            (XTHUNK_INCARNATION, incarnation.clone()),
        ]
    };
    tracing::info!(
        nprocs = world, coordinator = %coordinator, job = %job_id, grace = ?grace,
        lease_ttl = ?args.lease_ttl, start_timeout = ?args.start_timeout,
        collective_timeout = ?args.collective_timeout, "launching ranks"
    );
    let mut stderr = std::io::stderr();
    // The launcher knows how each process ended: a rank that dies before it joined (or
    // whose end its coordinator has not seen yet) is a failure of the job with that cause.
    // The embedded coordinator records it; with etcd the launcher publishes it as the cause
    // (unless a rank published one first: then that one is the root cause), which the ranks
    // at the start barrier see at once, the others with the failure they are told of.
    let mut etcd_cause: Option<RootCause> = None;
    // A process in words: `rank P`, or `process P (ranks A–B, pid N, host H)` when it holds
    // several ranks (as it published when it joined).
    // Read once and kept: a process's key goes with it (etcd: with its lease).
    let published: std::cell::RefCell<Vec<Option<String>>> =
        std::cell::RefCell::new(vec![None; world]);
    let name = |p: usize| {
        let known = published.borrow().get(p).cloned().flatten();
        let text = known.or_else(|| {
            let read = match (&server, &claim) {
                (Some(s), _) => s.value(&job_id, &process_key(p)),
                (None, Some(c)) => c.value(&process_key(p)).ok().flatten(),
                (None, None) => None,
            };
            let read = read.map(|v| String::from_utf8_lossy(&v).into_owned());
            if let Some(slot) = published.borrow_mut().get_mut(p) {
                slot.clone_from(&read);
            }
            read
        });
        process_words(p, text.as_deref(), &(0..0))
    };
    // A process's failure in words (`rank 1 failed: …`, or `process 1 (ranks 2–3, …) was
    // killed by SIGKILL …`).
    let failure = |p: usize, reason: &str| {
        let who = name(p);
        if who.starts_with("process ") {
            format!("{who} {}", failure_words(reason))
        } else {
            format!("{who} failed: {reason}")
        }
    };
    let mut named = false;
    let mut on_exit = |rank: usize, status: ExitStatus| {
        if status.success() {
            return None;
        }
        // The first failure: every process is named now, while the others still run.
        if !named {
            named = true;
            for p in 0..world {
                let _ = name(p);
            }
        }
        if let Some(server) = &server {
            server.rank_exited(&job_id, world, rank, &status.to_string());
        }
        if let Some(claim) = &claim
            && etcd_cause.is_none()
        {
            let cause = failure(rank, &format!("its process ended ({status})"));
            match claim.publish_cause(&cause) {
                Ok(root) => etcd_cause = Some(RootCause::Recorded(root)),
                Err(e @ DistributedError::CoordinatorLost { .. }) => {
                    etcd_cause = Some(RootCause::CoordinatorLost(cause_text(
                        &e.to_string(),
                        &job_id,
                    )));
                }
                Err(e) => tracing::warn!(error = %e, "could not publish the cause of the failure"),
            }
        }
        Some(name(rank))
    };
    let outcome = run_ranks(
        &exe,
        &args.command,
        world,
        &env,
        grace,
        &mut || stop_signals.pending(),
        &mut on_exit,
        out,
        &mut stderr,
    )
    .map_err(|e| CliError::io(&exe, e))?;
    // The root cause: what a rank published as the cause of the job's failure, else the
    // first failure the coordinator saw.
    let cause = match &server {
        Some(s) => {
            let published = s
                .value(&job_id, CAUSE_KEY)
                .map(|v| String::from_utf8_lossy(&v).into_owned());
            published
                .or_else(|| {
                    s.failures(&job_id)
                        .first()
                        .map(|f| failure(f.rank, &f.reason))
                })
                .map(RootCause::Recorded)
        }
        None => etcd_cause,
    };
    // Stopped by a signal: one line says so (what the ranks said when they stopped is no
    // failure to report).
    let report = match outcome.stop_line(&job_id, grace) {
        Some(line) => vec![line],
        None => outcome.failure_report(&job_id, cause.as_ref(), &name),
    };
    for line in report {
        let _ = writeln!(stderr, "{line}");
    }
    // With etcd, nothing of the job is left: its keys go now (rather than when their leases
    // expire), unless etcd is gone.
    if let Some(claim) = &claim
        && !matches!(cause, Some(RootCause::CoordinatorLost(_)))
    {
        match claim.finish() {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                job = %job_id,
                "the job's claim is not this launch's any more: its keys are left to expire"
            ),
            Err(e) => tracing::warn!(error = %e, "could not delete the job's keys"),
        }
    }
    drop(server);
    drop(sweep);
    // The claims (`claim`, the etcd one, goes at the end of this function) free the id.
    drop(machine_claim);
    if let Some(e) = outcome.stdout_error {
        return Err(CliError::Stdout(e));
    }
    Ok(outcome.exit_code())
}

/// Removes the job's shared memory segments from `/dev/shm` when dropped. A segment's name
/// goes as soon as every rank of its clique mapped it, and a rank that fails removes the
/// job's names; what is left after the ranks ended (every rank of a clique killed during its
/// setup, a rank killed by the launcher) goes here, whatever the launcher's exit path. Made
/// once the launch holds the machine's claim of the job id: no other launch on this machine
/// has segments of that id.
struct SweepSegments<'a>(&'a str);

impl Drop for SweepSegments<'_> {
    fn drop(&mut self) {
        let gone = remove_job_segments(self.0);
        if gone > 0 {
            tracing::info!(
                job = self.0,
                segments = gone,
                "removed the shared memory segments the ranks left"
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_and_parsers() {
        let a = new_job_id();
        assert!(validate_job_id(&a).is_ok(), "{a}");
        assert_ne!(a, new_job_id());
        assert_eq!(parse_grace("0"), Ok(Duration::ZERO));
        assert!(parse_grace("-1").is_err());
        assert_eq!(parse_nprocs("4"), Ok(4));
        assert!(parse_nprocs("0").is_err());
        assert_eq!(
            parse_coordinator("local"),
            Ok(LaunchCoordinator::Given(CoordinatorSpec::Local))
        );
        assert_eq!(
            parse_coordinator("embedded"),
            Ok(LaunchCoordinator::Embedded)
        );
        assert!(parse_coordinator("etcd://").is_err());
        assert!(parse_coordinator("zookeeper://a:1").is_err());
        assert!(parse_positive_secs("0").is_err());
        assert_eq!(parse_positive_secs("2.5"), Ok(Duration::from_millis(2500)));
    }
}
