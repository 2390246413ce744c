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
//! is also killed by the kernel when the launcher dies (`PR_SET_PDEATHSIG`: Ctrl-C, SIGTERM,
//! SIGKILL, a crash). Ctrl-C at a terminal reaches the ranks directly too (same process
//! group).
//!
//! When the ranks have ended, the launcher removes whatever `/dev/shm` segment of the job is
//! still there (a rank killed while setting a clique up can leave one).

use super::error::{CliError, CliResult};
use super::job::{XTHUNK_INCARNATION, XTHUNK_LEASE_TTL, XTHUNK_START_TIMEOUT};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use xthunk_core::distributed::env::{
    XTHUNK_COORDINATOR, XTHUNK_JOB_ID, XTHUNK_LOCAL_RANK, XTHUNK_RANK, XTHUNK_WORLD_SIZE,
};
use xthunk_core::distributed::{
    CAUSE_KEY, CoordinatorSpec, EmbeddedServer, MachineJobClaim, validate_job_id,
};
use xthunk_core::host::remove_job_segments;

pub const AFTER_HELP: &str = "\
Each rank runs this same xthunk binary with COMMAND (e.g. `-- run program.txtpb`) and with
XTHUNK_RANK, XTHUNK_WORLD_SIZE, XTHUNK_LOCAL_RANK, XTHUNK_COORDINATOR, XTHUNK_JOB_ID,
XTHUNK_LEASE_TTL, XTHUNK_START_TIMEOUT and XTHUNK_INCARNATION (the launch's token, with etcd)
set. Every output line is prefixed with `[rank R]`.

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
  --grace          after the first rank fails, how long the others get to notice, report and
                   clean up before the launcher kills them (default: the lease TTL + 5 s; at
                   least the lease TTL + 1 s)
  `run --collective-timeout` (default 60 s) bounds each collective, and the shutdown barrier
  (with at least 60 s).

Exit status:
  0  every rank exited 0
  1  a rank failed: the cause the coordinator recorded first is named (else the first rank to
     exit non-zero), the others get --grace to exit on their own and are then killed; or the
     ranks could not be started
  2  a usage error (an unknown coordinator, `local` for several processes, --grace shorter
     than the lease TTL), caught before any rank starts";

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

/// clap value parser of `--lease-ttl` and `--start-timeout`: positive seconds.
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
    let (ttl, start) = (
        args.lease_ttl.as_secs_f64().to_string(),
        args.start_timeout.as_secs_f64().to_string(),
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
            (XTHUNK_INCARNATION, incarnation.clone()),
        ]
    };
    tracing::info!(
        nprocs = world, coordinator = %coordinator, job = %job_id, grace = ?grace,
        lease_ttl = ?args.lease_ttl, start_timeout = ?args.start_timeout, "launching ranks"
    );
    let mut stderr = std::io::stderr();
    // The launcher knows how each process ended: a rank that dies before it joined (or
    // whose end its coordinator has not seen yet) is a failure of the job with that cause.
    let mut on_exit = |rank: usize, status: ExitStatus| {
        if let Some(server) = &server
            && !status.success()
        {
            server.rank_exited(&job_id, world, rank, &status.to_string());
        }
    };
    let outcome = run_ranks(
        &exe,
        &args.command,
        world,
        &env,
        grace,
        &mut on_exit,
        out,
        &mut stderr,
    )
    .map_err(|e| CliError::io(&exe, e))?;
    // The root cause: what a rank published as the cause of the job's failure, else the
    // first failure the coordinator saw.
    let cause = server.as_ref().and_then(|s| {
        let published = s
            .value(&job_id, CAUSE_KEY)
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        published.or_else(|| s.failures(&job_id).first().map(ToString::to_string))
    });
    for line in outcome.failure_report(&job_id, cause.as_deref()) {
        let _ = writeln!(stderr, "{line}");
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

/// How the ranks ended.
#[derive(Debug)]
pub struct Outcome {
    /// Each rank's exit status, and whether the launcher killed it.
    pub ranks: Vec<(ExitStatus, bool)>,
    /// The first rank seen failing, with its status.
    pub first_failure: Option<(usize, ExitStatus)>,
    /// Writing the ranks' stdout failed (e.g. a closed pipe); later lines were dropped.
    pub stdout_error: Option<std::io::Error>,
}

impl Outcome {
    pub fn exit_code(&self) -> u8 {
        if self.first_failure.is_some() { 1 } else { 0 }
    }

    /// After a failure: one line per rank that did not exit 0, then the `error:` line that
    /// names the root cause: the first failure the job's coordinator recorded (`cause`,
    /// when the launcher serves it), else the first rank that exited non-zero. Nothing when
    /// every rank succeeded.
    pub fn failure_report(&self, job: &str, cause: Option<&str>) -> Vec<String> {
        let Some((first, status)) = &self.first_failure else {
            return Vec::new();
        };
        let mut lines: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| !s.success())
            .map(|(r, (s, killed))| {
                let how = if *killed {
                    ", killed by the launcher"
                } else {
                    ""
                };
                format!("xthunk launch: rank {r}: {s}{how}")
            })
            .collect();
        match cause {
            Some(cause) => lines.push(format!(
                "error: job {job}: {cause} (the root cause its coordinator recorded; rank {first} \
                 exited first: {status})"
            )),
            None => lines.push(format!("error: rank {first} failed first: {status}")),
        }
        lines
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Out,
    Err,
}

enum Msg {
    Line(usize, Pipe, Vec<u8>),
    Eof,
}

/// One running rank.
struct Rank {
    child: Child,
    status: Option<ExitStatus>,
    killed: bool,
}

/// Every spawned rank: those still running are killed and reaped on drop, whatever the
/// launcher's exit path (an error, a panic).
struct Ranks(Vec<Rank>);

impl Ranks {
    fn kill_running(&mut self) -> Vec<usize> {
        let mut killed = Vec::new();
        for (r, rank) in self.0.iter_mut().enumerate() {
            if rank.status.is_none() {
                let _ = rank.child.kill();
                if let Ok(s) = rank.child.wait() {
                    rank.status = Some(s);
                }
                rank.killed = true;
                killed.push(r);
            }
        }
        killed
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        self.kill_running();
    }
}

/// Where the ranks' lines go: `out` (their stdout) and `err` (their stderr, and the
/// launcher's own notes).
struct Sink<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    /// The first failed write to `out`; later stdout lines are dropped.
    stdout_error: Option<std::io::Error>,
}

impl Sink<'_> {
    fn line(&mut self, rank: usize, pipe: Pipe, mut line: Vec<u8>) {
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        let prefix = format!("[rank {rank}] ");
        let w: &mut dyn Write = match pipe {
            Pipe::Out if self.stdout_error.is_some() => return,
            Pipe::Out => &mut *self.out,
            Pipe::Err => &mut *self.err,
        };
        let result = w
            .write_all(prefix.as_bytes())
            .and_then(|()| w.write_all(&line))
            .and_then(|()| w.flush());
        if let (Err(e), Pipe::Out) = (result, pipe) {
            self.stdout_error = Some(e);
        }
    }

    fn note(&mut self, msg: &str) {
        let _ = writeln!(self.err, "{msg}").and_then(|()| self.err.flush());
    }
}

fn forward(rank: usize, pipe: Pipe, stream: impl Read, tx: mpsc::Sender<Msg>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if tx.send(Msg::Line(rank, pipe, line)).is_err() {
                    break;
                }
            }
        }
    }
    let _ = tx.send(Msg::Eof);
}

/// Starts `world` processes `program args...` (rank `r` with the variables `env(r)`), copies
/// their output lines to `out`/`err` behind `[rank R] `, and waits for them all (`on_exit`
/// is told of each exit as it is seen); after the first failure the others get `grace`, then
/// are killed. Call it from the thread that lives
/// as long as the ranks should: on Linux a rank is killed when that thread ends.
#[allow(clippy::too_many_arguments)]
pub fn run_ranks(
    program: &Path,
    args: &[OsString],
    world: usize,
    env: &dyn Fn(usize) -> Vec<(&'static str, String)>,
    grace: Duration,
    on_exit: &mut dyn FnMut(usize, ExitStatus),
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<Outcome> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut ranks = Ranks(Vec::with_capacity(world));
    let mut readers = Vec::new();
    for r in 0..world {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env(r))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        // On error `ranks` drops here: the ranks already started are killed.
        let mut child = cmd.spawn()?;
        if let Some(s) = child.stdout.take() {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || forward(r, Pipe::Out, s, tx)));
        }
        if let Some(s) = child.stderr.take() {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || forward(r, Pipe::Err, s, tx)));
        }
        ranks.0.push(Rank {
            child,
            status: None,
            killed: false,
        });
    }
    drop(tx);

    let mut sink = Sink {
        out,
        err,
        stdout_error: None,
    };
    let mut open_pipes = readers.len();
    let mut first_failure: Option<(usize, ExitStatus)> = None;
    let mut kill_at: Option<Instant> = None;
    let mut all_exited_at: Option<Instant> = None;
    loop {
        // Output first: at most one poll interval of waiting.
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Msg::Line(r, pipe, line)) => {
                sink.line(r, pipe, line);
                while let Ok(msg) = rx.try_recv() {
                    match msg {
                        Msg::Line(r, pipe, line) => sink.line(r, pipe, line),
                        Msg::Eof => open_pipes -= 1,
                    }
                }
            }
            Ok(Msg::Eof) => open_pipes -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open_pipes = 0,
        }
        for (r, rank) in ranks.0.iter_mut().enumerate() {
            if rank.status.is_some() {
                continue;
            }
            if let Some(status) = rank.child.try_wait()? {
                rank.status = Some(status);
                on_exit(r, status);
                if !status.success() && first_failure.is_none() {
                    first_failure = Some((r, status));
                    sink.note(&format!(
                        "xthunk launch: rank {r} failed first ({status}); the other ranks get \
                         {grace:?} to exit, then are killed"
                    ));
                    kill_at = Some(Instant::now() + grace);
                }
            }
        }
        let running = ranks.0.iter().filter(|r| r.status.is_none()).count();
        if running > 0
            && let Some(at) = kill_at
            && Instant::now() >= at
        {
            for r in ranks.kill_running() {
                sink.note(&format!(
                    "xthunk launch: killed rank {r} (still running {grace:?} after the first \
                     failure)"
                ));
            }
        }
        if running == 0 {
            // The pipes close when the ranks exit, unless a process they started holds them:
            // wait a moment for the last lines, not forever.
            let since = *all_exited_at.get_or_insert_with(Instant::now);
            if open_pipes == 0 || since.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
    }
    // Lines already read but not written.
    while let Ok(Msg::Line(r, pipe, line)) = rx.try_recv() {
        sink.line(r, pipe, line);
    }
    if open_pipes == 0 {
        for h in readers {
            let _ = h.join();
        }
    }
    let statuses: Vec<(ExitStatus, bool)> = ranks
        .0
        .iter()
        .filter_map(|r| r.status.map(|s| (s, r.killed)))
        .collect();
    let stdout_error = sink.stdout_error;
    Ok(Outcome {
        ranks: statuses,
        first_failure,
        stdout_error,
    })
}

/// On Linux: the child gets SIGKILL when the thread that spawned it ends (the launcher's main
/// thread: when the launcher dies, however it dies).
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    const PR_SET_PDEATHSIG: std::ffi::c_int = 1;
    const SIGKILL: std::ffi::c_ulong = 9;
    unsafe extern "C" {
        fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
    }
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec; it makes two
    // async-signal-safe system calls (prctl with integer arguments, as its C prototype takes
    // them; getppid) and allocates nothing (an `io::Error` from an OS code or a kind does not
    // allocate).
    unsafe {
        cmd.pre_exec(move || {
            if prctl(
                PR_SET_PDEATHSIG,
                SIGKILL,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The launcher died before prctl took effect: nobody would stop this rank.
            if std::os::unix::process::parent_id() != parent {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sh() -> PathBuf {
        PathBuf::from("/bin/sh")
    }

    fn script(s: &str) -> Vec<OsString> {
        vec!["-c".into(), s.into()]
    }

    fn env(rank: usize) -> Vec<(&'static str, String)> {
        vec![
            (XTHUNK_RANK, rank.to_string()),
            (XTHUNK_WORLD_SIZE, "3".into()),
            (XTHUNK_JOB_ID, "test-job".into()),
            (XTHUNK_COORDINATOR, "local".into()),
        ]
    }

    fn run(s: &str, world: usize, grace: Duration) -> (Outcome, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let o = run_ranks(
            &sh(),
            &script(s),
            world,
            &env,
            grace,
            &mut |_, _| {},
            &mut out,
            &mut err,
        )
        .unwrap();
        (
            o,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    fn sorted_lines(s: &str) -> Vec<&str> {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn every_line_is_prefixed_with_its_rank() {
        let (o, out, err) = run(
            concat!(
                r#"echo "out $XTHUNK_RANK of $XTHUNK_WORLD_SIZE" "$XTHUNK_JOB_ID" "#,
                r#""$XTHUNK_COORDINATOR"; "#,
                r#"echo "err $XTHUNK_RANK" >&2; printf 'no newline'"#
            ),
            3,
            Duration::from_secs(1),
        );
        assert_eq!(o.exit_code(), 0);
        assert!(o.first_failure.is_none());
        assert_eq!(o.ranks.len(), 3);
        assert_eq!(
            sorted_lines(&out),
            vec![
                "[rank 0] no newline",
                "[rank 0] out 0 of 3 test-job local",
                "[rank 1] no newline",
                "[rank 1] out 1 of 3 test-job local",
                "[rank 2] no newline",
                "[rank 2] out 2 of 3 test-job local",
            ]
        );
        assert_eq!(
            sorted_lines(&err),
            vec!["[rank 0] err 0", "[rank 1] err 1", "[rank 2] err 2"]
        );
    }

    #[test]
    fn a_failed_rank_is_named_and_the_others_are_killed_after_the_grace() {
        let started = Instant::now();
        let (o, out, err) = run(
            r#"if [ "$XTHUNK_RANK" = 1 ]; then echo bye; exit 3; fi; echo $$; exec sleep 60"#,
            3,
            Duration::from_millis(300),
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(o.exit_code(), 1);
        let (first, status) = o.first_failure.unwrap();
        assert_eq!((first, status.code()), (1, Some(3)));
        assert!(o.ranks[0].1 && o.ranks[2].1, "ranks 0 and 2 were killed");
        assert!(!o.ranks[1].1);
        assert!(err.contains("rank 1 failed first"), "{err}");
        assert!(err.contains("killed rank 0"), "{err}");
        let report = o.failure_report("j", None);
        assert_eq!(
            report.last().map(String::as_str),
            Some("error: rank 1 failed first: exit status: 3")
        );
        assert!(
            report
                .iter()
                .any(|l| l.starts_with("xthunk launch: rank 0: signal: 9")
                    && l.ends_with("killed by the launcher")),
            "{report:?}"
        );
        assert!(out.contains("[rank 1] bye"), "{out}");
        // The killed ranks are gone (reaped: not even zombies).
        for line in out.lines().filter(|l| !l.contains("bye")) {
            let pid = line.rsplit(' ').next().unwrap();
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{line}");
        }
    }

    #[test]
    fn ranks_that_exit_within_the_grace_are_not_killed() {
        let (o, _, err) = run(
            r#"if [ "$XTHUNK_RANK" = 2 ]; then exit 5; fi; sleep 0.3; exit 1"#,
            3,
            Duration::from_secs(20),
        );
        assert_eq!(o.first_failure.map(|f| f.0), Some(2));
        assert!(o.ranks.iter().all(|r| !r.1), "nobody killed: {err}");
    }

    #[test]
    fn a_rank_that_cannot_start_is_an_error() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let e = run_ranks(
            Path::new("/nonexistent/xthunk"),
            &[],
            2,
            &env,
            Duration::ZERO,
            &mut |_, _| {},
            &mut out,
            &mut err,
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn ranks_die_with_the_thread_that_started_them() {
        // The launcher's main thread is what a rank's life is tied to; here a helper thread
        // plays it, and ends while its rank still sleeps.
        let child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("60");
            die_with_parent(&mut cmd);
            cmd.spawn().unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        let started = Instant::now();
        let status = child.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status}");
    }

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
