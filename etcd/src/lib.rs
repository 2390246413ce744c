//! xthunk coordination over etcd v3: the [`Coordinator`] of a job whose ranks are processes,
//! on one host or many.
//!
//! etcd is the store and the consensus; this crate only lays out keys and watches them:
//!
//! ```text
//! /xthunk/<job>/meta/world                  the world size (checked by every rank that joins)
//! /xthunk/<job>/live/alive/<rank>           liveness: exists while the rank's lease lives
//! /xthunk/<job>/live/left/<rank>            written just before a clean exit
//! /xthunk/<job>/kv/<key>                    Coordinator::set / get
//! /xthunk/<job>/barrier/<name>/<round>/<rank>   user barriers (name with `/` and `%` escaped)
//! /xthunk/<job>/sys/<name>/<round>/<rank>       internal barriers (shutdown)
//! ```
//!
//! Every key a rank writes is attached to its **lease**, kept alive every TTL/3: the lease is
//! the heartbeat. When a process dies, hangs or loses etcd for longer than the TTL, etcd
//! deletes its keys, and every other rank's **watch** on `live/` sees its `alive` key go
//! without a `left` key before it: that rank is reported failed ([`Coordinator::failures`],
//! [`Coordinator::subscribe_failures`]) and every blocking call fails at once. A rank that
//! loses its own lease reports a failure of itself. A clean [`Coordinator::shutdown`] is a
//! barrier, a `left` key, and the revocation of the lease: nothing of the rank is left, and the
//! last rank out deletes the job's prefix. Dropping a coordinator without shutdown revokes its
//! lease (the others see the rank fail at once); [`EtcdCoordinator::abandon`] stops the
//! heartbeats without revoking anything, as a killed process would.
//!
//! Values are meant to be small (ids, addresses, configuration): etcd refuses requests over
//! 1.5 MiB by default (`--max-request-bytes`).
//!
//! The coordinator is blocking: it drives etcd-client on a private tokio runtime, and must not
//! be called from inside another async runtime (that is reported as an error). [`server`]
//! starts a throwaway etcd for tests.

pub mod server;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, PutOptions,
    Txn, TxnOp, WatchOptions,
};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use xthunk_core::distributed::{
    Coordinator, CoordinatorSpec, DistributedConfig, DistributedError, DistributedResult,
    FailureBoard, LocalCoordinator, RankFailure, SHUTDOWN_BARRIER, escape_segment, validate_job_id,
    validate_name, validate_rank,
};

pub use crossbeam_channel::Receiver;

const BACKEND: &str = "etcd";

/// The default lease TTL: a dead rank is noticed within about this long.
pub const DEFAULT_TTL: Duration = Duration::from_secs(5);

/// How to reach etcd and who this rank is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// `HOST:PORT` of one or more etcd members (`http://` is added when no scheme is given).
    pub endpoints: Vec<String>,
    pub job_id: String,
    pub rank: usize,
    pub world_size: usize,
    /// The lease TTL (whole seconds, at least 1; etcd may grant more): a rank whose heartbeats
    /// stop is reported dead within about this long. Keep-alives go every TTL/3.
    pub ttl: Duration,
    /// How long connecting, and each single request, may take.
    pub request_timeout: Duration,
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>, job_id: &str, rank: usize, world_size: usize) -> Self {
        EtcdConfig {
            endpoints,
            job_id: job_id.to_string(),
            rank,
            world_size,
            ttl: DEFAULT_TTL,
            request_timeout: Duration::from_secs(10),
        }
    }

    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn with_request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }
}

/// The key prefix of every key of `job_id`: `/xthunk/<job>/`.
pub fn job_prefix(job_id: &str) -> String {
    format!("/xthunk/{job_id}/")
}

/// The coordinator `config` asks for: [`EtcdCoordinator`] for `etcd://`, or, for `local`, a
/// [`LocalCoordinator`] when the job is this process alone (the local coordinator cannot span
/// processes: a `local` job of more ranks is an error here).
pub fn connect(
    config: &DistributedConfig,
    ttl: Duration,
) -> DistributedResult<Box<dyn Coordinator>> {
    match &config.coordinator {
        CoordinatorSpec::Local if config.world_size == 1 => {
            Ok(Box::new(LocalCoordinator::single()))
        }
        CoordinatorSpec::Local => Err(DistributedError::Config(format!(
            "job `{}` has {} processes, but the local coordinator serves the threads of one \
             process: use --coordinator etcd://HOST:PORT",
            config.job_id, config.world_size
        ))),
        CoordinatorSpec::Etcd { endpoints } => {
            let c = EtcdConfig::new(
                endpoints.clone(),
                &config.job_id,
                config.rank,
                config.world_size,
            )
            .with_ttl(ttl);
            Ok(Box::new(EtcdCoordinator::connect(c)?))
        }
    }
}

/// Which rank-numbered key of `live/` an event is about.
enum LiveKey {
    Alive(usize),
    Left(usize),
}

/// Key layout of one job.
#[derive(Debug, Clone)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn kv(&self, key: &str) -> String {
        format!("{}kv/{key}", self.prefix)
    }
    fn live(&self) -> String {
        format!("{}live/", self.prefix)
    }
    fn alive_prefix(&self) -> String {
        format!("{}live/alive/", self.prefix)
    }
    fn alive(&self, rank: usize) -> String {
        format!("{}live/alive/{rank}", self.prefix)
    }
    fn left(&self, rank: usize) -> String {
        format!("{}live/left/{rank}", self.prefix)
    }
    fn world(&self) -> String {
        format!("{}meta/world", self.prefix)
    }
    fn barrier(&self, internal: bool, name: &str, round: u64) -> String {
        let ns = if internal { "sys" } else { "barrier" };
        format!("{}{ns}/{}/{round}/", self.prefix, escape_segment(name))
    }
    fn parse_live(&self, key: &[u8]) -> Option<LiveKey> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.live())?;
        if let Some(r) = rest.strip_prefix("alive/") {
            return r.parse().ok().map(LiveKey::Alive);
        }
        rest.strip_prefix("left/")?.parse().ok().map(LiveKey::Left)
    }
}

/// What the calling thread and the background tasks share.
struct Ctx {
    client: Client,
    keys: Keys,
    job: String,
    rank: usize,
    world: usize,
    lease: i64,
    ttl: Duration,
    request_timeout: Duration,
    board: FailureBoard,
    /// Bumped on every new failure: wakes async waiters.
    failure_tick: tokio::sync::watch::Sender<u64>,
    /// Set when this rank starts leaving: the deletion of its own keys is then expected.
    leaving: AtomicBool,
}

impl Ctx {
    fn store_err(&self, op: impl Into<String>, message: impl fmt::Display) -> DistributedError {
        DistributedError::Store {
            job: self.job.clone(),
            backend: BACKEND,
            op: op.into(),
            message: message.to_string(),
        }
    }

    fn fail(&self, rank: usize, reason: String) {
        if self.board.record(RankFailure { rank, reason }) {
            self.failure_tick.send_modify(|n| *n += 1);
        }
    }

    fn check(&self) -> DistributedResult<()> {
        match self.board.first() {
            Some(failure) => Err(DistributedError::RankFailed {
                job: self.job.clone(),
                failure,
            }),
            None => Ok(()),
        }
    }

    /// One request, bounded by the request timeout.
    async fn req<T>(
        &self,
        op: &str,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> DistributedResult<T> {
        match timeout(self.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.store_err(op, e)),
            Err(_) => {
                Err(self.store_err(op, format!("no answer within {:?}", self.request_timeout)))
            }
        }
    }

    /// Ranks that have an `alive` key now.
    async fn alive_ranks(&self) -> DistributedResult<BTreeSet<usize>> {
        let mut client = self.client.clone();
        let prefix = self.keys.alive_prefix();
        let resp = self
            .req(
                "list live ranks",
                client.get(
                    prefix.clone(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            )
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| match self.keys.parse_live(kv.key()) {
                Some(LiveKey::Alive(r)) => Some(r),
                _ => None,
            })
            .collect())
    }

    async fn get_wait(
        &self,
        key: &str,
        user_key: &str,
        wait: Duration,
    ) -> DistributedResult<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut tick = self.failure_tick.subscribe();
        loop {
            self.check()?;
            let mut client = self.client.clone();
            let resp = self.req("get", client.get(key, None)).await?;
            if let Some(kv) = resp.kvs().first() {
                return Ok(kv.value().to_vec());
            }
            let rev = resp.header().map_or(0, |h| h.revision());
            let opts = WatchOptions::new().with_start_revision(rev + 1);
            let mut stream = self.req("watch", client.watch(key, Some(opts))).await?;
            let err = loop {
                tokio::select! {
                    msg = stream.message() => match msg {
                        Ok(Some(resp)) => {
                            if resp.canceled() {
                                break format!("watch canceled: {}", resp.cancel_reason());
                            }
                            for ev in resp.events() {
                                if let (EventType::Put, Some(kv)) = (ev.event_type(), ev.kv()) {
                                    return Ok(kv.value().to_vec());
                                }
                            }
                        }
                        Ok(None) => break "watch stream ended".to_string(),
                        Err(e) => break e.to_string(),
                    },
                    () = sleep_until(deadline) => {
                        return Err(DistributedError::GetTimeout {
                            job: self.job.clone(),
                            key: user_key.to_string(),
                            timeout: wait,
                        });
                    }
                    () = changed(&mut tick) => self.check()?,
                }
            };
            tracing::debug!(key, error = %err, "etcd watch failed; retrying");
            if Instant::now() >= deadline {
                return Err(self.store_err("watch", err));
            }
            sleep(Duration::from_millis(100)).await;
        }
    }

    async fn barrier(
        &self,
        internal: bool,
        name: &str,
        round: u64,
        wait: Duration,
    ) -> DistributedResult<()> {
        let deadline = Instant::now() + wait;
        let mut tick = self.failure_tick.subscribe();
        self.check()?;
        let prefix = self.keys.barrier(internal, name, round);
        let parse = |key: &[u8]| -> Option<usize> {
            let r: usize = std::str::from_utf8(key)
                .ok()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            (r < self.world).then_some(r)
        };
        let mut client = self.client.clone();
        let put = self
            .req(
                "barrier arrive",
                client.put(
                    format!("{prefix}{}", self.rank),
                    "",
                    Some(PutOptions::new().with_lease(self.lease)),
                ),
            )
            .await?;
        // Read at the revision of our own arrival: a rank that saw the barrier complete and
        // left since (its keys revoked) still counts.
        let mut rev = put.header().map_or(0, |h| h.revision());
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let resp = match client
            .get(prefix.clone(), Some(opts.clone().with_revision(rev)))
            .await
        {
            Ok(r) => r,
            // Compacted meanwhile: the current state is the next best thing.
            Err(_) => {
                let r = self
                    .req("barrier read", client.get(prefix.clone(), Some(opts)))
                    .await?;
                rev = r.header().map_or(rev, |h| h.revision());
                r
            }
        };
        let mut present: BTreeSet<usize> =
            resp.kvs().iter().filter_map(|kv| parse(kv.key())).collect();
        loop {
            if present.len() >= self.world {
                return Ok(());
            }
            let opts = WatchOptions::new()
                .with_prefix()
                .with_start_revision(rev + 1);
            let mut stream = self
                .req("barrier watch", client.watch(prefix.clone(), Some(opts)))
                .await?;
            let err = loop {
                tokio::select! {
                    msg = stream.message() => match msg {
                        Ok(Some(resp)) => {
                            if resp.canceled() {
                                break format!("watch canceled: {}", resp.cancel_reason());
                            }
                            for ev in resp.events() {
                                let Some(kv) = ev.kv() else { continue };
                                rev = rev.max(kv.mod_revision());
                                let Some(r) = parse(kv.key()) else { continue };
                                match ev.event_type() {
                                    EventType::Put => present.insert(r),
                                    EventType::Delete => present.remove(&r),
                                };
                                if present.len() >= self.world {
                                    return Ok(());
                                }
                            }
                        }
                        Ok(None) => break "watch stream ended".to_string(),
                        Err(e) => break e.to_string(),
                    },
                    () = sleep_until(deadline) => {
                        let missing: Vec<usize> =
                            (0..self.world).filter(|r| !present.contains(r)).collect();
                        let alive = self.alive_ranks().await.unwrap_or_default();
                        let dead = missing.iter().copied().filter(|r| !alive.contains(r)).collect();
                        return Err(DistributedError::BarrierTimeout {
                            job: self.job.clone(),
                            name: name.to_string(),
                            timeout: wait,
                            missing,
                            dead,
                        });
                    }
                    () = changed(&mut tick) => self.check()?,
                }
            };
            tracing::debug!(barrier = name, error = %err, "etcd watch failed; retrying");
            if Instant::now() >= deadline {
                return Err(self.store_err("barrier watch", err));
            }
            sleep(Duration::from_millis(100)).await;
        }
    }

    /// Renews the lease every TTL/3; reports a failure of this rank when it cannot for a TTL.
    async fn keep_alive(self: Arc<Self>) {
        let interval = (self.ttl / 3).max(Duration::from_millis(100));
        let mut last_ok = Instant::now();
        let mut last_err = String::from("no answer");
        loop {
            if last_ok.elapsed() > self.ttl {
                self.fail(
                    self.rank,
                    format!(
                        "its heartbeats stopped: its lease could not be renewed for {:?} ({last_err}); \
                         the other ranks consider it dead",
                        self.ttl
                    ),
                );
                return;
            }
            let mut client = self.client.clone();
            match timeout(interval, client.lease_keep_alive(self.lease)).await {
                Ok(Ok((mut keeper, mut stream))) => loop {
                    let round = async {
                        keeper.keep_alive().await?;
                        stream.message().await
                    };
                    match timeout(interval, round).await {
                        Ok(Ok(Some(resp))) if resp.ttl() <= 0 => {
                            self.fail(
                                self.rank,
                                "its lease expired before it could be renewed (heartbeats \
                                 did not reach etcd in time); the other ranks consider it dead"
                                    .into(),
                            );
                            return;
                        }
                        Ok(Ok(Some(_))) => last_ok = Instant::now(),
                        Ok(Ok(None)) => {
                            last_err = "the keep-alive stream ended".into();
                            break;
                        }
                        Ok(Err(e)) => {
                            last_err = e.to_string();
                            break;
                        }
                        Err(_) => {
                            last_err = format!("no keep-alive answer within {interval:?}");
                            break;
                        }
                    }
                    sleep(interval).await;
                },
                Ok(Err(e)) => last_err = e.to_string(),
                Err(_) => last_err = format!("no keep-alive stream within {interval:?}"),
            }
            tracing::warn!(rank = self.rank, error = %last_err, "etcd lease keep-alive failed; retrying");
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// Watches `live/` from `start` (the revision after this rank registered), knowing the
    /// ranks in `alive` were alive then; reports every rank whose `alive` key goes without a
    /// `left` key before it.
    async fn watch_liveness(self: Arc<Self>, mut start: i64, mut alive: HashSet<usize>) {
        let mut left: HashSet<usize> = HashSet::new();
        let mut trouble_since: Option<Instant> = None;
        let mut resync = false;
        loop {
            let mut client = self.client.clone();
            let err = 'stream: {
                if resync {
                    // Events were lost (compaction): compare the known live ranks with now.
                    match client
                        .get(
                            self.keys.live(),
                            Some(GetOptions::new().with_prefix().with_keys_only()),
                        )
                        .await
                    {
                        Ok(resp) => {
                            let mut now_alive = HashSet::new();
                            for kv in resp.kvs() {
                                match self.keys.parse_live(kv.key()) {
                                    Some(LiveKey::Alive(r)) => {
                                        now_alive.insert(r);
                                    }
                                    Some(LiveKey::Left(r)) => {
                                        left.insert(r);
                                    }
                                    None => {}
                                }
                            }
                            for r in alive.difference(&now_alive) {
                                self.on_alive_deleted(*r, &left);
                            }
                            alive = now_alive;
                            start = resp.header().map_or(start, |h| h.revision() + 1);
                            resync = false;
                        }
                        Err(e) => break 'stream e.to_string(),
                    }
                }
                let opts = WatchOptions::new().with_prefix().with_start_revision(start);
                let mut stream = match client.watch(self.keys.live(), Some(opts)).await {
                    Ok(s) => s,
                    Err(e) => break 'stream e.to_string(),
                };
                loop {
                    match stream.message().await {
                        Ok(Some(resp)) => {
                            trouble_since = None;
                            if resp.canceled() {
                                resync = resp.compact_revision() > 0;
                                break 'stream format!("watch canceled: {}", resp.cancel_reason());
                            }
                            for ev in resp.events() {
                                let Some(kv) = ev.kv() else { continue };
                                start = start.max(kv.mod_revision() + 1);
                                match (ev.event_type(), self.keys.parse_live(kv.key())) {
                                    (EventType::Put, Some(LiveKey::Alive(r))) => {
                                        alive.insert(r);
                                    }
                                    (EventType::Put, Some(LiveKey::Left(r))) => {
                                        left.insert(r);
                                    }
                                    (EventType::Delete, Some(LiveKey::Alive(r))) => {
                                        alive.remove(&r);
                                        self.on_alive_deleted(r, &left);
                                    }
                                    _ => {}
                                }
                            }
                        }
                        Ok(None) => break 'stream "the watch stream ended".to_string(),
                        Err(e) => break 'stream e.to_string(),
                    }
                }
            };
            let since = *trouble_since.get_or_insert_with(Instant::now);
            if since.elapsed() > self.ttl {
                self.fail(
                    self.rank,
                    format!(
                        "it lost its liveness watch on etcd for {:?} ({err}): it cannot tell \
                         whether the other ranks are alive",
                        self.ttl
                    ),
                );
                return;
            }
            tracing::warn!(rank = self.rank, error = %err, "etcd liveness watch failed; retrying");
            sleep(Duration::from_millis(200)).await;
        }
    }

    fn on_alive_deleted(&self, r: usize, left: &HashSet<usize>) {
        if r == self.rank {
            if !self.leaving.load(Ordering::SeqCst) {
                self.fail(
                    r,
                    format!(
                        "its own liveness key was deleted: its lease (TTL {:?}) expired or was \
                         revoked; the other ranks consider it dead",
                        self.ttl
                    ),
                );
            }
        } else if !left.contains(&r) && r < self.world {
            self.fail(
                r,
                format!(
                    "its liveness lease expired or was revoked without a clean shutdown (the \
                     process died, hung, or lost etcd for longer than the TTL of {:?})",
                    self.ttl
                ),
            );
        }
    }

    /// Leaves the job: marks a clean exit if `clean`, revokes the lease (every key of this
    /// rank goes), and deletes the job's prefix if no rank is alive any more.
    async fn leave(&self, clean: bool) -> DistributedResult<()> {
        self.leaving.store(true, Ordering::SeqCst);
        let mut client = self.client.clone();
        if clean {
            let put = client.put(
                self.keys.left(self.rank),
                "",
                Some(PutOptions::new().with_lease(self.lease)),
            );
            self.req("mark clean exit", put).await?;
        }
        self.req("revoke lease", client.lease_revoke(self.lease))
            .await?;
        if self.alive_ranks().await?.is_empty() {
            let del = client.delete(
                self.keys.prefix.clone(),
                Some(DeleteOptions::new().with_prefix()),
            );
            self.req("delete job keys", del).await?;
        }
        Ok(())
    }
}

/// Resolves when the failure tick changes; never, once its sender is gone.
async fn changed(tick: &mut tokio::sync::watch::Receiver<u64>) {
    if tick.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    ShutDown,
    Abandoned,
}

/// One rank of a job coordinated through etcd. See the [crate documentation](crate).
pub struct EtcdCoordinator {
    rt: Option<Runtime>,
    ctx: Arc<Ctx>,
    tasks: Vec<JoinHandle<()>>,
    rounds: Mutex<HashMap<(bool, String), u64>>,
    state: Mutex<State>,
}

impl fmt::Debug for EtcdCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCoordinator")
            .field("job", &self.ctx.job)
            .field("rank", &self.ctx.rank)
            .field("world", &self.ctx.world)
            .field("lease", &self.ctx.lease)
            .field("ttl", &self.ctx.ttl)
            .finish()
    }
}

fn not_in_async(job: &str) -> DistributedResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(DistributedError::Store {
            job: job.to_string(),
            backend: BACKEND,
            op: "blocking call".into(),
            message: "the etcd coordinator blocks: call it from a plain thread (e.g. \
                      tokio::task::spawn_blocking), not from inside an async runtime"
                .into(),
        });
    }
    Ok(())
}

fn runtime(job: &str) -> DistributedResult<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("xthunk-etcd")
        .enable_all()
        .build()
        .map_err(|e| DistributedError::Store {
            job: job.to_string(),
            backend: BACKEND,
            op: "start the etcd client runtime".into(),
            message: e.to_string(),
        })
}

fn urls(endpoints: &[String]) -> Vec<String> {
    endpoints
        .iter()
        .map(|e| {
            if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            }
        })
        .collect()
}

async fn connect_client(endpoints: &[String], request_timeout: Duration) -> Result<Client, String> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(request_timeout)
        .with_require_leader(true);
    let urls = urls(endpoints);
    let mut client = match timeout(request_timeout, Client::connect(&urls, Some(opts))).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no connection within {request_timeout:?}")),
    };
    // The connection is lazy: make sure somebody answers.
    match timeout(request_timeout, client.status()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {request_timeout:?}")),
    }
}

impl EtcdCoordinator {
    /// Connects, checks the job's world size, takes a lease and registers this rank as alive
    /// (failing if the rank is already alive in this job: another process with the same job
    /// id and rank, or a previous run whose lease has not expired yet), then starts the
    /// heartbeats and the liveness watch.
    pub fn connect(config: EtcdConfig) -> DistributedResult<Self> {
        validate_job_id(&config.job_id)?;
        validate_rank(config.rank, config.world_size)?;
        let job = config.job_id.clone();
        if config.endpoints.is_empty() {
            return Err(DistributedError::Config("no etcd endpoint given".into()));
        }
        not_in_async(&job)?;
        let rt = runtime(&job)?;
        let store_err = |op: &str, message: String| DistributedError::Store {
            job: job.clone(),
            backend: BACKEND,
            op: op.to_string(),
            message,
        };
        let ttl_secs = config.ttl.as_secs_f64().ceil().max(1.0) as i64;
        let ctx = rt.block_on(async {
            let mut client = connect_client(&config.endpoints, config.request_timeout)
                .await
                .map_err(|e| store_err(&format!("connect to {}", config.endpoints.join(",")), e))?;
            let grant = timeout(config.request_timeout, client.lease_grant(ttl_secs, None))
                .await
                .map_err(|_| store_err("grant lease", "no answer".into()))?
                .map_err(|e| store_err("grant lease", e.to_string()))?;
            let (tick, _) = tokio::sync::watch::channel(0);
            let ctx = Ctx {
                client,
                keys: Keys {
                    prefix: job_prefix(&job),
                },
                job: job.clone(),
                rank: config.rank,
                world: config.world_size,
                lease: grant.id(),
                ttl: Duration::from_secs(grant.ttl().max(1).unsigned_abs()),
                request_timeout: config.request_timeout,
                board: FailureBoard::new(),
                failure_tick: tick,
                leaving: AtomicBool::new(false),
            };
            match register(&ctx).await {
                Ok(r) => Ok((ctx, r)),
                Err(e) => {
                    let mut c = ctx.client.clone();
                    let _ = timeout(ctx.request_timeout, c.lease_revoke(ctx.lease)).await;
                    Err(e)
                }
            }
        });
        let (ctx, (rev, alive)) = match ctx {
            Ok(v) => v,
            Err(e) => {
                rt.shutdown_background();
                return Err(e);
            }
        };
        let ctx = Arc::new(ctx);
        let tasks = vec![
            rt.spawn(ctx.clone().keep_alive()),
            rt.spawn(ctx.clone().watch_liveness(rev + 1, alive)),
        ];
        tracing::info!(
            job = %ctx.job, rank = ctx.rank, world = ctx.world, lease = ctx.lease,
            ttl = ?ctx.ttl, "joined the job through etcd"
        );
        Ok(EtcdCoordinator {
            rt: Some(rt),
            ctx,
            tasks,
            rounds: Mutex::new(HashMap::new()),
            state: Mutex::new(State::Open),
        })
    }

    /// The lease TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ctx.ttl
    }

    /// This rank's lease id.
    pub fn lease_id(&self) -> i64 {
        self.ctx.lease
    }

    /// Stops the heartbeats and goes away without revoking or deleting anything, as a killed
    /// process would: the lease expires after its TTL and the other ranks report this rank
    /// failed. For fault-injection tests.
    pub fn abandon(self) {
        *self.state.lock() = State::Abandoned;
    }

    fn block<T>(&self, fut: impl Future<Output = DistributedResult<T>>) -> DistributedResult<T> {
        not_in_async(&self.ctx.job)?;
        if *self.state.lock() != State::Open {
            return Err(DistributedError::ShutDown {
                job: self.ctx.job.clone(),
                rank: self.ctx.rank,
            });
        }
        match &self.rt {
            Some(rt) => rt.block_on(fut),
            None => Err(DistributedError::ShutDown {
                job: self.ctx.job.clone(),
                rank: self.ctx.rank,
            }),
        }
    }

    fn next_round(&self, internal: bool, name: &str) -> u64 {
        let mut rounds = self.rounds.lock();
        let next = rounds.entry((internal, name.to_string())).or_insert(0);
        let round = *next;
        *next += 1;
        round
    }

    fn stop_tasks(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

/// Checks the world size and registers `ctx.rank` as alive; returns the revision of the
/// registration and the ranks alive at it.
async fn register(ctx: &Ctx) -> DistributedResult<(i64, HashSet<usize>)> {
    let mut client = ctx.client.clone();
    let lease = Some(PutOptions::new().with_lease(ctx.lease));
    let world_key = ctx.keys.world();
    let world = ctx.world.to_string();
    let txn = Txn::new()
        .when([Compare::create_revision(
            world_key.clone(),
            CompareOp::Equal,
            0,
        )])
        .and_then([TxnOp::put(world_key.clone(), world.clone(), lease.clone())])
        .or_else([TxnOp::get(world_key.clone(), None)]);
    let resp = ctx.req("check world size", client.txn(txn)).await?;
    if !resp.succeeded() {
        for op in resp.op_responses() {
            if let etcd_client::TxnOpResponse::Get(g) = op
                && let Some(kv) = g.kvs().first()
                && kv.value() != world.as_bytes()
            {
                return Err(DistributedError::Config(format!(
                    "job `{}` has {} ranks in etcd, but rank {} joins it with a world of {}",
                    ctx.job,
                    String::from_utf8_lossy(kv.value()),
                    ctx.rank,
                    ctx.world
                )));
            }
        }
    }
    let alive_key = ctx.keys.alive(ctx.rank);
    let txn = Txn::new()
        .when([Compare::create_revision(
            alive_key.clone(),
            CompareOp::Equal,
            0,
        )])
        .and_then([TxnOp::put(alive_key, "", lease)]);
    let resp = ctx.req("register as alive", client.txn(txn)).await?;
    if !resp.succeeded() {
        return Err(DistributedError::Config(format!(
            "rank {} of job `{}` is already alive in etcd: another process uses this job id and \
             rank, or a previous run's lease has not expired yet (wait for its TTL, or use \
             another job id)",
            ctx.rank, ctx.job
        )));
    }
    let rev = resp.header().map_or(0, |h| h.revision());
    let opts = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_revision(rev);
    let now = ctx
        .req(
            "list live ranks",
            client.get(ctx.keys.alive_prefix(), Some(opts)),
        )
        .await?;
    let alive = now
        .kvs()
        .iter()
        .filter_map(|kv| match ctx.keys.parse_live(kv.key()) {
            Some(LiveKey::Alive(r)) => Some(r),
            _ => None,
        })
        .collect();
    Ok((rev, alive))
}

impl Coordinator for EtcdCoordinator {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn job_id(&self) -> &str {
        &self.ctx.job
    }

    fn rank(&self) -> usize {
        self.ctx.rank
    }

    fn world_size(&self) -> usize {
        self.ctx.world
    }

    fn set(&self, key: &str, value: &[u8]) -> DistributedResult<()> {
        validate_name("key", key)?;
        let ctx = &self.ctx;
        self.block(async {
            let mut client = ctx.client.clone();
            let put = client.put(
                ctx.keys.kv(key),
                value,
                Some(PutOptions::new().with_lease(ctx.lease)),
            );
            ctx.req("set", put).await.map(drop)
        })
    }

    fn try_get(&self, key: &str) -> DistributedResult<Option<Vec<u8>>> {
        validate_name("key", key)?;
        let ctx = &self.ctx;
        self.block(async {
            let mut client = ctx.client.clone();
            let resp = ctx.req("get", client.get(ctx.keys.kv(key), None)).await?;
            Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    fn get(&self, key: &str, timeout: Duration) -> DistributedResult<Vec<u8>> {
        validate_name("key", key)?;
        let full = self.ctx.keys.kv(key);
        self.block(self.ctx.get_wait(&full, key, timeout))
    }

    fn barrier(&self, name: &str, timeout: Duration) -> DistributedResult<()> {
        validate_name("barrier name", name)?;
        let round = self.next_round(false, name);
        self.block(self.ctx.barrier(false, name, round, timeout))
    }

    fn failures(&self) -> Vec<RankFailure> {
        self.ctx.board.all()
    }

    fn subscribe_failures(&self) -> Receiver<RankFailure> {
        self.ctx.board.subscribe()
    }

    fn shutdown(&self, timeout: Duration) -> DistributedResult<()> {
        if *self.state.lock() != State::Open {
            return Ok(());
        }
        let round = self.next_round(true, SHUTDOWN_BARRIER);
        let result = self.block(self.ctx.barrier(true, SHUTDOWN_BARRIER, round, timeout));
        for t in &self.tasks {
            // The heartbeats stop first, so that nothing renews the lease being revoked.
            t.abort();
        }
        let left = self.block(self.ctx.leave(result.is_ok()));
        *self.state.lock() = State::ShutDown;
        if let Err(e) = &left {
            tracing::warn!(error = %e, "leaving the job cleanly failed; its keys expire with the lease");
        }
        result.and(left)
    }
}

impl Drop for EtcdCoordinator {
    fn drop(&mut self) {
        let state = *self.state.get_mut();
        self.stop_tasks();
        if state == State::Open && tokio::runtime::Handle::try_current().is_err() {
            // Not shut down: revoke the lease so that the other ranks learn at once that this
            // rank is gone (without a `left` key, they report it failed).
            if let Some(rt) = &self.rt {
                let ctx = &self.ctx;
                ctx.leaving.store(true, Ordering::SeqCst);
                let mut client = ctx.client.clone();
                let lease = ctx.lease;
                let _ = rt.block_on(async move {
                    timeout(Duration::from_secs(1), client.lease_revoke(lease)).await
                });
            }
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `f` on a throwaway runtime with a client of `endpoints` (the admin helpers below).
fn with_client<T>(
    endpoints: &[String],
    what: &str,
    job_id: &str,
    f: impl AsyncFnOnce(&mut Client) -> Result<T, etcd_client::Error>,
) -> DistributedResult<T> {
    not_in_async(job_id)?;
    let rt = runtime(job_id)?;
    let err = |message: String| DistributedError::Store {
        job: job_id.to_string(),
        backend: BACKEND,
        op: what.to_string(),
        message,
    };
    let timeout_ = Duration::from_secs(10);
    let r = rt.block_on(async {
        let mut client = connect_client(endpoints, timeout_).await.map_err(&err)?;
        match timeout(timeout_, f(&mut client)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(err(e.to_string())),
            Err(_) => Err(err(format!("no answer within {timeout_:?}"))),
        }
    });
    rt.shutdown_background();
    r
}

/// Every key of `job_id` in the etcd at `endpoints` (an empty list after a clean shutdown, or
/// once the leases of dead ranks expired).
pub fn job_keys(endpoints: &[String], job_id: &str) -> DistributedResult<Vec<String>> {
    validate_job_id(job_id)?;
    let prefix = job_prefix(job_id);
    with_client(endpoints, "list job keys", job_id, async |c| {
        let resp = c
            .get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect())
    })
}

/// Deletes every key of `job_id` (e.g. by a launcher after its ranks were killed, instead of
/// waiting for their leases to expire); returns how many went.
pub fn delete_job(endpoints: &[String], job_id: &str) -> DistributedResult<u64> {
    validate_job_id(job_id)?;
    let prefix = job_prefix(job_id);
    with_client(endpoints, "delete job keys", job_id, async |c| {
        let resp = c
            .delete(prefix.clone(), Some(DeleteOptions::new().with_prefix()))
            .await?;
        Ok(resp.deleted().unsigned_abs())
    })
}
