//! [`EmbeddedServer`]: the coordinator `xthunk launch` serves to its ranks on a Unix socket in
//! a private (0700) folder: sessions with heartbeats, key-value, barriers, per job.

use super::super::{RankFailure, validate_job_id, validate_name, validate_rank};
use super::protocol::{
    MAX_VALUE, Request, Response, WireError, WireFailure, millis, read_line, write_line,
};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufReader, ErrorKind};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The socket's name in the server's folder.
pub const SOCKET_NAME: &str = "coordinator.sock";

/// How long a push of a failure to a session may block (a stopped rank's full socket).
const PUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// A barrier is identified by its namespace (internal or user), its name and its round.
type BarrierId = (bool, String, u64);

#[derive(Default)]
struct Shared {
    jobs: Mutex<HashMap<String, Job>>,
    /// Signalled on every change of any job.
    changed: Condvar,
    stopping: AtomicBool,
    next_session: AtomicU64,
    /// Jobs whose state went with their last clean member.
    completed: Mutex<std::collections::HashSet<String>>,
}

struct Job {
    world: usize,
    kv: HashMap<String, Vec<u8>>,
    /// Arrived ranks per round, and how many have seen the round complete.
    barriers: HashMap<BarrierId, (BTreeSet<usize>, usize)>,
    /// Ranks with an open session, and where their failures are pushed.
    members: BTreeMap<usize, Member>,
    /// Ranks that left cleanly.
    left: BTreeSet<usize>,
    failures: Vec<RankFailure>,
}

struct Member {
    session: u64,
    push: UnixStream,
}

impl Job {
    fn new(world: usize) -> Self {
        Job {
            world,
            kv: HashMap::new(),
            barriers: HashMap::new(),
            members: BTreeMap::new(),
            left: BTreeSet::new(),
            failures: Vec::new(),
        }
    }

    /// Records the failure of `rank` (its first), pushes it to every session and ends the
    /// rank's membership.
    /// The failed rank is told too (when it can still hear: e.g. a stopped process that is
    /// continued learns that the others consider it dead).
    fn fail(&mut self, rank: usize, reason: String) {
        if !self.failures.iter().any(|f| f.rank == rank) {
            let failure = RankFailure::new(rank, reason);
            tracing::debug!(rank, reason = %failure.reason, "embedded coordinator: rank failure");
            let msg = Response::Failure(WireFailure::from(&failure));
            for m in self.members.values_mut() {
                // A session that cannot take it is failing anyway (its reader will say why).
                let _ = write_line(&mut m.push, &msg);
            }
            self.failures.push(failure);
        }
        if let Some(m) = self.members.remove(&rank) {
            let _ = m.push.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Nothing is left once every rank left cleanly; a failed job keeps its failures (for a
    /// rank that joins late and for the launcher's report).
    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.failures.is_empty()
    }
}

/// The embedded coordinator: serves any number of jobs on a Unix socket until dropped (see
/// the [module documentation](super)). The folder and the socket go with it.
///
/// The folder is `xthunk-job-<launcher pid>-XXXXXX`: a launcher that was killed leaves its
/// folder behind (nothing runs to remove it), and the next server started by this user sweeps
/// the folders of launchers that are gone ([`sweep_dead_folders`]).
pub struct EmbeddedServer {
    dir: Option<tempfile::TempDir>,
    socket: PathBuf,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EmbeddedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedServer")
            .field("socket", &self.socket)
            .finish()
    }
}

impl EmbeddedServer {
    /// Serves on a socket in a new folder of the temporary directory that only this user can
    /// enter (mode 0700).
    pub fn start() -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let swept = sweep_dead_folders(&std::env::temp_dir());
        if swept > 0 {
            tracing::info!(swept, "removed the socket folders of launchers that died");
        }
        let prefix = format!("{FOLDER_PREFIX}{}-", std::process::id());
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let socket = dir.path().join(SOCKET_NAME);
        let listener = UnixListener::bind(&socket)?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("xthunk-coordinator".into())
            .spawn(move || accept_loop(&listener, &s))?;
        tracing::debug!(socket = %socket.display(), "embedded coordinator serving");
        Ok(EmbeddedServer {
            dir: Some(dir),
            socket,
            shared,
            accept: Some(accept),
        })
    }

    /// The socket the ranks connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The coordinator the ranks are given (`unix://…`).
    pub fn spec(&self) -> super::super::CoordinatorSpec {
        super::super::CoordinatorSpec::Unix {
            path: self.socket.clone(),
        }
    }

    /// The failures of `job`, in the order they were seen.
    pub fn failures(&self, job: &str) -> Vec<RankFailure> {
        let jobs = self.shared.jobs.lock();
        jobs.get(job)
            .map(|j| j.failures.clone())
            .unwrap_or_default()
    }

    /// The value of `key` of `job`, while the job has state here.
    pub fn value(&self, job: &str, key: &str) -> Option<Vec<u8>> {
        let jobs = self.shared.jobs.lock();
        jobs.get(job).and_then(|j| j.kv.get(key).cloned())
    }

    /// The jobs with state on this server (a rank in session, or failures recorded).
    pub fn job_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.shared.jobs.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The launcher saw the process of `rank` of `job` (of `world` ranks) end with `status`
    /// (not a success): unless the rank left the job cleanly, that is a failure of the job,
    /// with this cause (a rank that died before it joined is otherwise never heard of).
    pub fn rank_exited(&self, job_id: &str, world: usize, rank: usize, status: &str) {
        if self.shared.completed.lock().contains(job_id) {
            return;
        }
        let mut jobs = self.shared.jobs.lock();
        let job = jobs
            .entry(job_id.to_string())
            .or_insert_with(|| Job::new(world));
        if job.left.contains(&rank) {
            return;
        }
        let reason = if job.members.contains_key(&rank) {
            format!("its process ended ({status})")
        } else {
            format!("its process ended ({status}) before it joined the job")
        };
        job.fail(rank, reason);
        drop(jobs);
        self.shared.changed.notify_all();
    }

    /// The ranks of `job` in session now.
    pub fn members(&self, job: &str) -> Vec<usize> {
        let jobs = self.shared.jobs.lock();
        jobs.get(job)
            .map(|j| j.members.keys().copied().collect())
            .unwrap_or_default()
    }
}

impl Drop for EmbeddedServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        // Wake the accept loop; join it only if the wake-up got through (otherwise it may
        // never return from accept, and it is left to end with the process).
        let woke = UnixStream::connect(&self.socket).is_ok();
        if let Some(h) = self.accept.take()
            && woke
        {
            let _ = h.join();
        }
        {
            let mut jobs = self.shared.jobs.lock();
            for job in jobs.values_mut() {
                for m in job.members.values() {
                    let _ = m.push.shutdown(std::net::Shutdown::Both);
                }
            }
            jobs.clear();
        }
        self.shared.changed.notify_all();
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("xthunk-coordinator-conn".into())
            .spawn(move || serve(conn, &s));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "embedded coordinator: cannot start a connection thread");
        }
    }
}

fn protocol_error(message: impl Into<String>) -> Response {
    Response::Error(WireError::Protocol {
        message: message.into(),
    })
}

/// How long a new connection may take to send its first line.
const FIRST_LINE_TIMEOUT: Duration = Duration::from_secs(10);

fn serve(conn: UnixStream, shared: &Shared) {
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    // A client that connects and sends nothing must not hold this thread forever; a session
    // sets its own (TTL) timeout after its join.
    let _ = conn.set_read_timeout(Some(FIRST_LINE_TIMEOUT));
    let mut reader = BufReader::new(read_half);
    let mut conn = conn;
    let request = match read_line::<Request>(&mut reader) {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            // A malformed or over-long line (read to its end) is answered, not dropped.
            let _ = write_line(&mut conn, &protocol_error(e.to_string()));
            return;
        }
    };
    match request {
        Request::Join {
            job,
            rank,
            world,
            ttl_ms,
        } => session(shared, conn, reader, &job, rank, world, ttl_ms),
        Request::Heartbeat | Request::Leave { .. } => {
            let _ = write_line(&mut conn, &protocol_error("no session: join first"));
        }
        call => {
            let response = answer(shared, call);
            let _ = write_line(&mut conn, &response);
        }
    }
}

/// A rank's session: joins, then reads heartbeats until `Leave`, silence or the end.
fn session(
    shared: &Shared,
    mut conn: UnixStream,
    mut reader: BufReader<UnixStream>,
    job_id: &str,
    rank: usize,
    world: usize,
    ttl_ms: u64,
) {
    let ttl = Duration::from_millis(ttl_ms.max(100));
    let id = shared.next_session.fetch_add(1, Ordering::Relaxed);
    let joined = (|| {
        validate_job_id(job_id).map_err(|e| e.to_string())?;
        validate_rank(rank, world).map_err(|e| e.to_string())?;
        let push = conn.try_clone().map_err(|e| e.to_string())?;
        push.set_write_timeout(Some(PUSH_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let mut jobs = shared.jobs.lock();
        let job = jobs
            .entry(job_id.to_string())
            .or_insert_with(|| Job::new(world));
        if job.world != world {
            return Err(format!(
                "job `{job_id}` has {} ranks, but rank {rank} joins it with a world of {world}",
                job.world
            ));
        }
        if job.members.contains_key(&rank) {
            return Err(format!(
                "rank {rank} of job `{job_id}` is already registered: another process uses \
                 this job id and rank"
            ));
        }
        let failures = job.failures.iter().map(WireFailure::from).collect();
        // Under the lock: no failure can be pushed before this answer.
        write_line(&mut conn, &Response::Joined { failures }).map_err(|e| e.to_string())?;
        job.members.insert(rank, Member { session: id, push });
        Ok(())
    })();
    if let Err(message) = joined {
        let _ = write_line(&mut conn, &Response::Error(WireError::Config { message }));
        return;
    }
    shared.changed.notify_all();
    if conn.set_read_timeout(Some(ttl)).is_err() {
        end_session(
            shared,
            job_id,
            rank,
            id,
            Some("its session could not be set up".into()),
        );
        return;
    }
    let failure = loop {
        match read_line::<Request>(&mut reader) {
            Ok(Some(Request::Heartbeat)) => {}
            Ok(Some(Request::Leave { clean: true, .. })) => break None,
            Ok(Some(Request::Leave {
                clean: false,
                reason,
            })) => {
                break Some(
                    reason
                        .unwrap_or_else(|| "it left the job without a clean shutdown".to_string()),
                );
            }
            Ok(Some(_)) => break Some("it sent a call on its session (a client bug)".into()),
            Ok(None) => {
                break Some(
                    "its connection to the coordinator closed without a clean shutdown (the \
                     process exited or was killed)"
                        .into(),
                );
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break Some(format!(
                    "it sent no heartbeat for {ttl:?}, its lease TTL (the process hung, was \
                     stopped, or is starved of CPU)"
                ));
            }
            Err(e) => break Some(format!("its session failed: {e}")),
        }
    };
    end_session(shared, job_id, rank, id, failure);
}

/// Ends session `id` of `rank`: a failure when `failure` is given; the job's state goes with
/// its last clean member.
fn end_session(shared: &Shared, job_id: &str, rank: usize, id: u64, failure: Option<String>) {
    if shared.stopping.load(Ordering::SeqCst) {
        return;
    }
    let mut jobs = shared.jobs.lock();
    if let Some(job) = jobs.get_mut(job_id)
        && job.members.get(&rank).is_some_and(|m| m.session == id)
    {
        match failure {
            Some(reason) => job.fail(rank, reason),
            None => {
                job.members.remove(&rank);
                job.left.insert(rank);
            }
        }
        if job.is_empty() {
            jobs.remove(job_id);
            self_completed(shared, job_id);
        } else if job.members.is_empty() {
            job.barriers.clear();
        }
    }
    drop(jobs);
    shared.changed.notify_all();
}

fn self_completed(shared: &Shared, job_id: &str) {
    shared.completed.lock().insert(job_id.to_string());
}

fn answer(shared: &Shared, call: Request) -> Response {
    let (job_id, rank) = match &call {
        Request::Set { job, rank, .. }
        | Request::Get { job, rank, .. }
        | Request::Barrier { job, rank, .. } => (job.clone(), *rank),
        _ => return protocol_error("not a call"),
    };
    let mut jobs = shared.jobs.lock();
    let not_member = || {
        Response::Error(WireError::Config {
            message: format!("rank {rank} of job `{job_id}` has no session on this coordinator"),
        })
    };
    match jobs.get(&job_id) {
        Some(job) if job.members.contains_key(&rank) => {}
        Some(job) => {
            return match job.failures.first() {
                Some(f) => Response::Error(WireError::RankFailed(f.into())),
                None => not_member(),
            };
        }
        None => return not_member(),
    }
    match call {
        Request::Set {
            key,
            value,
            if_absent,
            ..
        } => {
            if let Err(e) = validate_name("key", &key) {
                return Response::Error(WireError::Config {
                    message: e.to_string(),
                });
            }
            if value.len() > MAX_VALUE {
                return Response::Error(WireError::ValueTooLarge {
                    key,
                    size: value.len(),
                    limit: MAX_VALUE,
                });
            }
            if let Some(job) = jobs.get_mut(&job_id) {
                if if_absent && let Some(v) = job.kv.get(&key) {
                    return Response::Value {
                        value: Some(v.clone()),
                    };
                }
                job.kv.insert(key, value);
            }
            drop(jobs);
            shared.changed.notify_all();
            Response::Ok
        }
        Request::Get { key, wait_ms, .. } => {
            let deadline = wait_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
            loop {
                let Some(job) = jobs.get(&job_id) else {
                    return not_member();
                };
                if let Some(v) = job.kv.get(&key) {
                    return Response::Value {
                        value: Some(v.clone()),
                    };
                }
                let (Some(deadline), Some(wait_ms)) = (deadline, wait_ms) else {
                    return Response::Value { value: None };
                };
                if let Some(f) = job.failures.first() {
                    return Response::Error(WireError::RankFailed(f.into()));
                }
                if shared.changed.wait_until(&mut jobs, deadline).timed_out() {
                    if let Some(v) = jobs.get(&job_id).and_then(|j| j.kv.get(&key)) {
                        return Response::Value {
                            value: Some(v.clone()),
                        };
                    }
                    return Response::Error(WireError::GetTimeout { key, wait_ms });
                }
            }
        }
        Request::Barrier {
            internal,
            name,
            round,
            wait_ms,
            ..
        } => {
            let deadline = Instant::now() + Duration::from_millis(wait_ms);
            let id: BarrierId = (internal, name.clone(), round);
            if let Some(job) = jobs.get_mut(&job_id) {
                job.barriers.entry(id.clone()).or_default().0.insert(rank);
            }
            shared.changed.notify_all();
            loop {
                let Some(job) = jobs.get_mut(&job_id) else {
                    return not_member();
                };
                let world = job.world;
                if let Some((arrived, seen)) = job.barriers.get_mut(&id)
                    && arrived.len() == world
                {
                    *seen += 1;
                    if *seen == world {
                        job.barriers.remove(&id);
                    }
                    return Response::Ok;
                }
                if let Some(f) = job.failures.first() {
                    return Response::Error(WireError::RankFailed(f.into()));
                }
                if shared.changed.wait_until(&mut jobs, deadline).timed_out() {
                    let Some(job) = jobs.get(&job_id) else {
                        return not_member();
                    };
                    let arrived = job.barriers.get(&id).map(|b| &b.0);
                    let missing: Vec<usize> = (0..world)
                        .filter(|r| !arrived.is_some_and(|a| a.contains(r)))
                        .collect();
                    if missing.is_empty() {
                        continue;
                    }
                    let dead = missing
                        .iter()
                        .copied()
                        .filter(|r| !job.members.contains_key(r))
                        .collect();
                    return Response::Error(WireError::BarrierTimeout {
                        name,
                        wait_ms: millis(Duration::from_millis(wait_ms)),
                        missing,
                        dead,
                    });
                }
            }
        }
        _ => protocol_error("not a call"),
    }
}

/// Whether process `pid` exists and is not a zombie (a killed launcher not yet reaped).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The name of every socket folder starts with this, then the launcher's pid and `-`.
pub const FOLDER_PREFIX: &str = "xthunk-job-";

/// Removes the socket folders in `tmp` of launchers that are gone: named
/// `xthunk-job-<pid>-…`, owned by this user, with no process `<pid>` (a pid in use, even by
/// another program, keeps its folder). Returns how many went.
pub fn sweep_dead_folders(tmp: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let mut swept = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FOLDER_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || running(pid) {
            continue;
        }
        match std::fs::remove_dir_all(e.path()) {
            Ok(()) => swept += 1,
            Err(err) => tracing::debug!(folder = %e.path().display(), "not swept: {err}"),
        }
    }
    swept
}
