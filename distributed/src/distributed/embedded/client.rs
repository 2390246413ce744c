//! [`EmbeddedCoordinator`]: one rank's [`Coordinator`] on an [`EmbeddedServer`]'s socket:
//! a session with heartbeats and pushed failures, and one connection per call.
//!
//! [`EmbeddedServer`]: super::EmbeddedServer

use super::super::{
    CAUSE_KEY, Coordinator, DistributedError, DistributedResult, FailureBoard, RankFailure,
    SHUTDOWN_BARRIER, validate_job_id, validate_name, validate_rank,
};
use super::BACKEND;
use super::protocol::{MAX_VALUE, Request, Response, WireError, millis, read_line, write_line};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long connecting and a call's answer may take beyond the call's own wait.
const REQUEST_SLACK: Duration = Duration::from_secs(10);

/// What [`EmbeddedCoordinator::connect`] says when nothing serves the socket.
pub fn unreachable_help(socket: &Path) -> String {
    format!(
        "nothing serves {}: the embedded coordinator lives in the `xthunk launch` that started \
         this job, which has exited (or this rank was started by hand). Start the ranks with \
         `xthunk launch -n N -- COMMAND`, or start an etcd (e.g. `etcd --listen-client-urls \
         http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379`) and give every \
         rank XTHUNK_COORDINATOR=etcd://127.0.0.1:2379",
        socket.display()
    )
}

/// One rank of a job coordinated by an [`EmbeddedServer`](super::EmbeddedServer).
pub struct EmbeddedCoordinator {
    socket: PathBuf,
    job: String,
    rank: usize,
    world: usize,
    ttl: Duration,
    board: Arc<FailureBoard>,
    /// The session (heartbeats and `Leave` are written on it).
    session: Arc<Mutex<UnixStream>>,
    /// Set once this rank leaves: the end of the session is then expected.
    leaving: Arc<AtomicBool>,
    /// Dropped to stop the heartbeats.
    stop: Mutex<Option<Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    rounds: Mutex<HashMap<(bool, String), u64>>,
    open: Mutex<bool>,
}

impl fmt::Debug for EmbeddedCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedCoordinator")
            .field("socket", &self.socket)
            .field("job", &self.job)
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("ttl", &self.ttl)
            .finish()
    }
}

fn store_error(job: &str, op: impl Into<String>, message: impl fmt::Display) -> DistributedError {
    DistributedError::Store {
        job: job.to_string(),
        backend: BACKEND,
        op: op.into(),
        message: message.to_string(),
    }
}

fn dial(socket: &Path, job: &str) -> DistributedResult<UnixStream> {
    UnixStream::connect(socket).map_err(|e| {
        store_error(
            job,
            format!("connect to unix://{}", socket.display()),
            format!("{e}; {}", unreachable_help(socket)),
        )
    })
}

impl EmbeddedCoordinator {
    /// Opens this rank's session on the server at `socket` (failing if the job exists with
    /// another world size or the rank is already in session), then starts the heartbeats
    /// (every `ttl / 3`) and the reader of pushed failures.
    pub fn connect(
        socket: &Path,
        job_id: &str,
        rank: usize,
        world_size: usize,
        ttl: Duration,
    ) -> DistributedResult<Self> {
        validate_job_id(job_id)?;
        validate_rank(rank, world_size)?;
        let ttl = ttl.max(Duration::from_millis(300));
        let job = job_id.to_string();
        let io = |op: &str, e: std::io::Error| store_error(&job, op, e);
        let mut conn = dial(socket, &job)?;
        conn.set_read_timeout(Some(REQUEST_SLACK))
            .map_err(|e| io("join", e))?;
        write_line(
            &mut conn,
            &Request::Join {
                job: job.clone(),
                rank,
                world: world_size,
                ttl_ms: millis(ttl),
            },
        )
        .map_err(|e| io("join", e))?;
        let mut reader = BufReader::new(conn.try_clone().map_err(|e| io("join", e))?);
        let board = Arc::new(FailureBoard::new());
        match read_line::<Response>(&mut reader).map_err(|e| io("join", e))? {
            Some(Response::Joined { failures }) => {
                for f in failures {
                    board.record(f.into());
                }
            }
            Some(Response::Error(e)) => return Err(e.into_error(&job)),
            other => {
                return Err(store_error(
                    &job,
                    "join",
                    format!("unexpected answer {other:?}"),
                ));
            }
        }
        conn.set_read_timeout(None).map_err(|e| io("join", e))?;
        let session = Arc::new(Mutex::new(conn));
        let leaving = Arc::new(AtomicBool::new(false));
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let mut threads = Vec::new();
        {
            let (board, leaving, socket) = (board.clone(), leaving.clone(), socket.to_path_buf());
            threads.push(
                std::thread::Builder::new()
                    .name("xthunk-coord-reader".into())
                    .spawn(move || read_pushes(reader, rank, &socket, &board, &leaving))
                    .map_err(|e| io("start the session reader", e))?,
            );
        }
        {
            let session = session.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("xthunk-coord-heartbeat".into())
                    .spawn(move || heartbeats(&session, ttl / 3, &stop_rx))
                    .map_err(|e| io("start the heartbeats", e))?,
            );
        }
        tracing::info!(job = %job, rank, world = world_size, ttl = ?ttl,
            socket = %socket.display(), "joined the job through the embedded coordinator");
        Ok(EmbeddedCoordinator {
            socket: socket.to_path_buf(),
            job,
            rank,
            world: world_size,
            ttl,
            board,
            session,
            leaving,
            stop: Mutex::new(Some(stop_tx)),
            threads: Mutex::new(threads),
            rounds: Mutex::new(HashMap::new()),
            open: Mutex::new(true),
        })
    }

    /// The heartbeat TTL: the server reports this rank failed after that long without one.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn ensure_open(&self) -> DistributedResult<()> {
        if *self.open.lock() {
            Ok(())
        } else {
            Err(DistributedError::ShutDown {
                job: self.job.clone(),
                rank: self.rank,
            })
        }
    }

    /// One call: a connection, a request, its answer (within `wait` plus some slack).
    fn call(&self, op: &str, request: &Request, wait: Duration) -> DistributedResult<Response> {
        let mut conn = dial(&self.socket, &self.job)?;
        let err = |e: std::io::Error| store_error(&self.job, op, e);
        conn.set_read_timeout(Some(wait.saturating_add(REQUEST_SLACK)))
            .map_err(err)?;
        if let Err(e) = write_line(&mut conn, request) {
            // The server may have answered (and closed) before taking the whole request:
            // its answer says more than the broken pipe.
            let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
            return match read_line::<Response>(&mut BufReader::new(conn)) {
                Ok(Some(Response::Error(answer))) => Err(answer.into_error(&self.job)),
                _ => Err(err(e)),
            };
        }
        match read_line::<Response>(&mut BufReader::new(conn)).map_err(err)? {
            Some(Response::Error(e)) => Err(e.into_error(&self.job)),
            Some(r) => Ok(r),
            None => Err(store_error(
                &self.job,
                op,
                format!(
                    "the coordinator closed the connection without an answer ({})",
                    unreachable_help(&self.socket)
                ),
            )),
        }
    }

    fn barrier_in(&self, internal: bool, name: &str, timeout: Duration) -> DistributedResult<()> {
        validate_name("barrier name", name)?;
        self.check()?;
        let round = {
            let mut rounds = self.rounds.lock();
            let next = rounds.entry((internal, name.to_string())).or_insert(0);
            let round = *next;
            *next += 1;
            round
        };
        let request = Request::Barrier {
            job: self.job.clone(),
            rank: self.rank,
            internal,
            name: name.to_string(),
            round,
            wait_ms: millis(timeout),
        };
        self.call("barrier", &request, timeout).map(drop)
    }

    /// Sets `key` (with `if_absent`, only if it has no value: then the value that holds is
    /// returned when there was one). A value over [`MAX_VALUE`] is refused before sending.
    fn set_value(
        &self,
        key: &str,
        value: &[u8],
        if_absent: bool,
    ) -> DistributedResult<Option<Vec<u8>>> {
        self.ensure_open()?;
        validate_name("key", key)?;
        if value.len() > MAX_VALUE {
            return Err(DistributedError::ValueTooLarge {
                job: self.job.clone(),
                backend: BACKEND,
                key: key.to_string(),
                size: value.len(),
                limit: MAX_VALUE,
            });
        }
        let request = Request::Set {
            job: self.job.clone(),
            rank: self.rank,
            key: key.to_string(),
            value: value.to_vec(),
            if_absent,
        };
        match self.call("set", &request, Duration::ZERO)? {
            Response::Ok => Ok(None),
            Response::Value { value } => Ok(value),
            other => Err(store_error(&self.job, "set", format!("answer {other:?}"))),
        }
    }

    /// Ends the session: `Leave`, then the socket is closed and the threads end.
    fn leave(&self, clean: bool, reason: Option<String>) {
        self.leaving.store(true, Ordering::SeqCst);
        *self.open.lock() = false;
        self.stop.lock().take();
        {
            let mut s = self.session.lock();
            let _ = write_line(&mut *s, &Request::Leave { clean, reason });
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

/// Reads the failures the server pushes; the end of the session, unless this rank is
/// leaving, is a failure of this rank (it can no longer tell whether the others live).
fn read_pushes(
    mut reader: BufReader<UnixStream>,
    rank: usize,
    socket: &Path,
    board: &FailureBoard,
    leaving: &AtomicBool,
) {
    let why = loop {
        match read_line::<Response>(&mut reader) {
            Ok(Some(Response::Failure(f))) => {
                board.record(f.into());
            }
            Ok(Some(_)) => {}
            Ok(None) => break "the coordinator closed it".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    if !leaving.load(Ordering::SeqCst) {
        board.record(RankFailure::lost(
            rank,
            format!("unix://{}", socket.display()),
            format!(
                "rank {rank} lost its session ({why}): the `xthunk launch` serving it exited, \
                 or considers this rank dead"
            ),
        ));
    }
}

fn heartbeats(session: &Mutex<UnixStream>, every: Duration, stop: &Receiver<()>) {
    loop {
        match stop.recv_timeout(every) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let mut s = session.lock();
        if write_line(&mut *s, &Request::Heartbeat).is_err() {
            // The reader sees the session end and says so.
            return;
        }
    }
}

impl Coordinator for EmbeddedCoordinator {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn job_id(&self) -> &str {
        &self.job
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn set(&self, key: &str, value: &[u8]) -> DistributedResult<()> {
        self.set_value(key, value, false).map(drop)
    }

    fn publish_cause(&self, cause: &str) -> DistributedResult<String> {
        match self.set_value(CAUSE_KEY, cause.as_bytes(), true)? {
            Some(earlier) => Ok(String::from_utf8_lossy(&earlier).into_owned()),
            None => Ok(cause.to_string()),
        }
    }

    fn try_get(&self, key: &str) -> DistributedResult<Option<Vec<u8>>> {
        self.ensure_open()?;
        validate_name("key", key)?;
        let request = Request::Get {
            job: self.job.clone(),
            rank: self.rank,
            key: key.to_string(),
            wait_ms: None,
        };
        match self.call("get", &request, Duration::ZERO)? {
            Response::Value { value } => Ok(value),
            other => Err(store_error(&self.job, "get", format!("answer {other:?}"))),
        }
    }

    fn get(&self, key: &str, timeout: Duration) -> DistributedResult<Vec<u8>> {
        self.ensure_open()?;
        validate_name("key", key)?;
        self.check()?;
        let request = Request::Get {
            job: self.job.clone(),
            rank: self.rank,
            key: key.to_string(),
            wait_ms: Some(millis(timeout)),
        };
        match self.call("get", &request, timeout)? {
            Response::Value { value: Some(v) } => Ok(v),
            Response::Value { value: None } => Err(WireError::GetTimeout {
                key: key.to_string(),
                wait_ms: millis(timeout),
            }
            .into_error(&self.job)),
            other => Err(store_error(&self.job, "get", format!("answer {other:?}"))),
        }
    }

    fn barrier(&self, name: &str, timeout: Duration) -> DistributedResult<()> {
        self.ensure_open()?;
        self.barrier_in(false, name, timeout)
    }

    fn failures(&self) -> Vec<RankFailure> {
        self.board.all()
    }

    fn subscribe_failures(&self) -> Receiver<RankFailure> {
        self.board.subscribe()
    }

    fn abandon(&self, cause: &str) {
        if *self.open.lock() {
            self.leave(
                false,
                Some(format!("it aborted because of the job's failure: {cause}")),
            );
        }
    }

    fn shutdown(&self, timeout: Duration) -> DistributedResult<()> {
        if !*self.open.lock() {
            return Ok(());
        }
        let result = self.barrier_in(true, SHUTDOWN_BARRIER, timeout);
        let reason = result.as_ref().err().map(|e| match e {
            DistributedError::RankFailed { .. } => {
                format!("it aborted because of another rank's failure: {e}")
            }
            e => format!("its shutdown barrier failed: {e}"),
        });
        self.leave(result.is_ok(), reason);
        result
    }
}

impl Drop for EmbeddedCoordinator {
    fn drop(&mut self) {
        if *self.open.get_mut() {
            let reason = if std::thread::panicking() {
                "its thread panicked (the coordinator was dropped without shutdown)"
            } else {
                "its coordinator was dropped without shutdown (the rank failed or returned early)"
            };
            self.leave(false, Some(reason.to_string()));
        }
    }
}
