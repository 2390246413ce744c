//! The part of a clique that spans processes: the rendezvous folder, one Unix socket per
//! process, the connections to the other processes of the clique, and what happens when one
//! of them goes away.
//!
//! - **Rendezvous.** The folder is `temp_dir()/xthunk-emu-nccl-<hash of the unique id>`
//!   (created `0700`; an existing one must be a folder of this user that nobody else can
//!   enter). Each process binds `<pid>.sock` there, connects to every other socket it finds
//!   (one outgoing connection per peer process: everything this process sends to that peer
//!   goes through it) and sends `Join` with the ranks it holds; each incoming connection has
//!   a reader thread. A process that receives a `Join` from a process it has not connected to
//!   connects back. An init thread per clique accepts, scans, connects and announces new
//!   local ranks until the clique is complete: every rank held by exactly one process and
//!   an outgoing connection to each of them. Once every peer has connected in, the process
//!   unlinks its socket and tries to remove the folder, so nothing is left on disk (a
//!   survivor also removes the socket of a peer that died before unlinking its own).
//! - **Failure.** A connection that ends without `Leave` (the peer was killed, crashed, or
//!   aborted: `Abort` says why) makes the peer *gone*: every waiting operation that needs one
//!   of its ranks fails at once with `ncclRemoteError`, and the clique's communicators report
//!   `ncclRemoteError` (a message naming the process and its ranks); a peer that dies before
//!   it connected in shows as the end of our connection to it. A failed initialization and
//!   `ncclCommAbort` send `Abort` to every peer and close the connections; destroying the
//!   last local communicator (or a normal exit) sends `Leave` and closes them.
//! - **Writing.** Stream workers write their messages themselves; reader threads only queue
//!   theirs (a receive's `Done`) for the link's writer thread, so two processes whose readers
//!   both wait for the other to read cannot deadlock. What is queued is written before the
//!   process leaves the clique or exits.

use super::link::{Link, MAX_SOCKET_PATH, alive, make_dir, rendezvous_dir, send_once};
use super::types::{Failure, Init, Meta, SlotKey};
use super::wire::{self, Msg};
use super::{INVALID_USAGE, REMOTE_ERROR, SYSTEM_ERROR, timeout};
use crate::diag::{self, Kind};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::ffi::c_int;
use std::io::{BufReader, ErrorKind};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Peer {
    out: Option<Arc<Link>>,
    /// How many of `local` it has been told about.
    announced: usize,
    /// Its incoming connections (to shut them down).
    inc: Vec<UnixStream>,
    joined_in: bool,
    ranks: Vec<usize>,
    left: bool,
    gone: Option<String>,
}

struct State {
    /// The process holding each rank, as known so far.
    owners: Vec<Option<u32>>,
    /// This process's ranks, in joining order.
    local: Vec<usize>,
    peers: BTreeMap<u32, Peer>,
    unlinked: bool,
}

/// What the net part needs of its clique: its state, settling its initialization, and what
/// the other processes' messages do to it. The clique (`comm::Clique`) owns its net part, so
/// the net part reaches it through this trait (implemented in `owner`) rather than by name.
pub(super) trait Owner: Send + Sync {
    fn nranks(&self) -> usize;
    /// Gives the clique its net part (`false`: it already has one).
    fn attach(&self, net: Arc<Net>) -> bool;
    fn init_state(&self) -> Init;
    fn is_forming(&self) -> bool;
    fn init_failed(&self) -> bool;
    /// The clique's name in messages.
    fn label(&self) -> String;
    /// The clique's initialization is over (`comm::settle`).
    fn settle(&self, r: Result<(), Failure>);
    /// Process `from` sent the part at `place` of `key` (`remote::on_data`).
    fn on_data(
        self: Arc<Self>,
        net: &Arc<Net>,
        from: u32,
        key: SlotKey,
        place: usize,
        meta: Meta,
        input: Result<Option<Vec<u8>>, String>,
    ) -> Result<(), String>;
    /// Process `from` performed (or failed) a message this process sent (`remote::on_done`).
    fn on_done(
        self: Arc<Self>,
        net: &Arc<Net>,
        from: u32,
        key: SlotKey,
        result: Result<(), (i32, String)>,
    ) -> Result<(), String>;
    /// A rank in process `from` entered split round `round` (`split::on_remote`).
    fn on_split(
        self: Arc<Self>,
        net: &Net,
        from: u32,
        round: u64,
        rank: usize,
        color: c_int,
        key: c_int,
    ) -> Result<(), String>;
    /// A peer process of the formed clique is gone: its communicators report `msg`.
    fn set_remote_error(&self, msg: String);
    /// A peer process is gone: what waits for it fails (`remote::fail_needing`,
    /// `split::wake`).
    fn peer_lost(&self, net: &Net);
}

/// The cross-process part of one clique.
pub(super) struct Net {
    pub(super) pid: u32,
    pub(super) uid: [u8; 128],
    dir: PathBuf,
    sock: PathBuf,
    nranks: usize,
    clique: Weak<dyn Owner>,
    st: Mutex<State>,
    tick: Condvar,
    /// Set once the clique is complete: the process of each rank.
    fixed: OnceLock<Vec<u32>>,
    /// Leaving or aborted: connections closing are expected.
    closed: AtomicBool,
}

/// Every net part of this process (to unlink sockets at exit).
static NETS: Mutex<Vec<Weak<Net>>> = Mutex::new(Vec::new());

unsafe extern "C" {
    fn atexit(cb: extern "C" fn()) -> std::ffi::c_int;
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let nets: Vec<Arc<Net>> = NETS.lock().iter().filter_map(Weak::upgrade).collect();
        for n in nets {
            // A process that exits normally leaves its cliques (what its reader threads
            // queued, a receive's answer, is written first); one that is killed dies.
            n.leave();
        }
    });
}

impl Net {
    /// Joins the processes of `cl` (made from `uid`) with the local ranks `local`: binds this
    /// process's socket and starts the init thread.
    pub(super) fn start<C: Owner + 'static>(
        cl: &Arc<C>,
        uid: [u8; 128],
        local: &[usize],
    ) -> Result<(), String> {
        let pid = std::process::id();
        let dir = rendezvous_dir(&uid);
        let sock = dir.join(format!("{pid}.sock"));
        if sock.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "the rendezvous socket path {} is longer than {MAX_SOCKET_PATH} bytes (set TMPDIR to a shorter folder)",
                sock.display()
            ));
        }
        make_dir(&dir)?;
        let _ = std::fs::remove_file(&sock);
        let listener = UnixListener::bind(&sock)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
        let mut owners = vec![None; cl.nranks()];
        for r in local {
            owners[*r] = Some(pid);
        }
        let net = Arc::new(Net {
            pid,
            uid,
            dir,
            sock,
            nranks: cl.nranks(),
            clique: Arc::downgrade(cl) as Weak<dyn Owner>,
            st: Mutex::new(State {
                owners,
                local: local.to_vec(),
                peers: BTreeMap::new(),
                unlinked: false,
            }),
            tick: Condvar::new(),
            fixed: OnceLock::new(),
            closed: AtomicBool::new(false),
        });
        {
            let mut all = NETS.lock();
            if all.is_empty() {
                // SAFETY: registers a plain function without state; it only unlinks files.
                let _ = unsafe { atexit(at_exit) };
            }
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&net));
        }
        if !cl.attach(net.clone()) {
            net.unlink();
            return Err("the clique already has a net part".into());
        }
        let n = net.clone();
        std::thread::Builder::new()
            .name("xthunk-emu-nccl-init".into())
            .spawn(move || n.init_loop(listener))
            .map_err(|e| {
                net.unlink();
                format!("cannot start the rendezvous thread: {e}")
            })?;
        Ok(())
    }

    /// A new local rank (`Err`: another process holds it).
    pub(super) fn add_local(&self, rank: usize) -> Result<(), String> {
        let mut st = self.st.lock();
        if let Some(p) = st.owners[rank] {
            return Err(format!("rank {rank} joined twice (process {p} holds it)"));
        }
        st.owners[rank] = Some(self.pid);
        st.local.push(rank);
        self.tick.notify_all();
        Ok(())
    }

    /// The process holding `rank`, if known.
    pub(super) fn owner(&self, rank: usize) -> Option<u32> {
        match self.fixed.get() {
            Some(f) => f.get(rank).copied(),
            None => self.st.lock().owners.get(rank).copied().flatten(),
        }
    }

    pub(super) fn is_local(&self, rank: usize) -> bool {
        self.owner(rank) == Some(self.pid)
    }

    /// The other processes of the clique (once it is complete).
    pub(super) fn remote_pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .fixed
            .get()
            .map(|f| f.iter().copied().filter(|p| *p != self.pid).collect())
            .unwrap_or_default();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Why process `pid` is gone, if it is.
    pub(super) fn gone(&self, pid: u32) -> Option<String> {
        self.st.lock().peers.get(&pid).and_then(|p| p.gone.clone())
    }

    /// The ranks nobody holds yet, and the processes seen (for a timeout's message).
    pub(super) fn progress(&self) -> (Vec<usize>, Vec<u32>) {
        let st = self.st.lock();
        let missing = (0..self.nranks)
            .filter(|r| st.owners[*r].is_none())
            .collect();
        (missing, st.peers.keys().copied().collect())
    }

    /// Sends `m` to process `pid` (nothing when it is gone: what needs it fails on its own).
    pub(super) fn send(&self, pid: u32, m: &Msg) {
        let link = {
            let st = self.st.lock();
            match st.peers.get(&pid) {
                Some(p) if p.gone.is_none() => p.out.clone(),
                _ => None,
            }
        };
        let Some(link) = link else {
            return;
        };
        let r = {
            let mut w = link.w.lock();
            wire::write(&mut *w, m)
        };
        if let Err(e) = r {
            // A half-written message cannot be followed by another: the link is done.
            link.shut();
            if !self.closed.load(Ordering::SeqCst) {
                self.peer_gone(pid, &format!("could not be written to ({e})"));
            }
        }
    }

    /// Queues `m` for process `pid`, without waiting (what reader threads send).
    pub(super) fn post(self: &Arc<Self>, pid: u32, m: Msg) {
        let link = {
            let st = self.st.lock();
            match st.peers.get(&pid) {
                Some(p) if p.gone.is_none() => p.out.clone(),
                _ => None,
            }
        };
        let Some(link) = link else {
            return;
        };
        let start = {
            let mut p = link.posted.lock();
            if p.closed {
                return;
            }
            p.msgs.push_back(m);
            !std::mem::replace(&mut p.writer, true)
        };
        link.posted_cv.notify_all();
        if start {
            let (l, n) = (link.clone(), Arc::downgrade(self));
            let failed = move |why: String| {
                if let Some(n) = n.upgrade()
                    && !n.closed.load(Ordering::SeqCst)
                {
                    n.peer_gone(pid, &why);
                }
            };
            let spawned = std::thread::Builder::new()
                .name("xthunk-emu-nccl-writer".into())
                .spawn(move || l.write_posted(failed));
            if spawned.is_err() {
                link.shut();
                self.peer_gone(pid, "could not be written to (no writer thread)");
            }
        }
    }

    /// Waits up to `limit` for every posted message to be written.
    fn flush(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let links: Vec<Arc<Link>> = {
            let st = self.st.lock();
            st.peers.values().filter_map(|p| p.out.clone()).collect()
        };
        for l in links {
            l.flush(deadline);
        }
    }

    /// Sends `m` to every peer process, then closes every connection (best effort: a peer
    /// that is stopped does not hold this up).
    fn close_with(&self, m: &Msg, flush: Duration) {
        self.flush(flush);
        self.closed.store(true, Ordering::SeqCst);
        let (links, inc, unlinked) = {
            let mut st = self.st.lock();
            let mut links: Vec<Arc<Link>> = vec![];
            let mut inc: Vec<UnixStream> = vec![];
            let mut unlinked: Vec<u32> = vec![];
            for (pid, p) in st.peers.iter_mut() {
                match p.out.take() {
                    Some(l) => links.push(l),
                    None if p.joined_in && p.gone.is_none() => unlinked.push(*pid),
                    None => {}
                }
                inc.append(&mut p.inc);
            }
            (links, inc, unlinked)
        };
        for l in &links {
            let _ = l.ctl.set_write_timeout(Some(Duration::from_millis(200)));
            if let Some(mut w) = l.w.try_lock_for(Duration::from_millis(200)) {
                let _ = wire::write(&mut *w, m);
            }
            l.shut();
        }
        // A peer that connected in but that this process had not connected to yet hears it
        // too, on a connection of its own (introduced by a join that claims no rank).
        let join = Msg::Join {
            version: wire::VERSION,
            pid: self.pid,
            nranks: self.nranks as u32,
            uid: Box::new(self.uid),
            ranks: vec![],
        };
        for pid in unlinked {
            send_once(&self.dir.join(format!("{pid}.sock")), &[&join, m]);
        }
        for s in inc {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.unlink();
        self.tick.notify_all();
    }

    /// `ncclCommAbort` or a failed initialization: peers are told why.
    pub(super) fn abort(&self, reason: &str) {
        if !self.closed.load(Ordering::SeqCst) {
            let m = Msg::Abort {
                reason: reason.to_string(),
            };
            self.close_with(&m, Duration::from_millis(100));
        }
    }

    /// The last local communicator was destroyed.
    pub(super) fn leave(&self) {
        if !self.closed.load(Ordering::SeqCst) {
            self.close_with(&Msg::Leave, Duration::from_secs(1));
        }
    }

    /// Removes this process's socket and tries to remove the folder (once).
    fn unlink(&self) {
        let mut st = self.st.lock();
        if !st.unlinked {
            st.unlinked = true;
            let _ = std::fs::remove_file(&self.sock);
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    /// Accepts, connects and announces until the clique is complete and every peer has
    /// connected in (or it failed, or the time is up).
    fn init_loop(self: Arc<Self>, listener: UnixListener) {
        let deadline = Instant::now() + timeout();
        loop {
            let Some(cl) = self.clique.upgrade() else {
                break;
            };
            if self.closed.load(Ordering::SeqCst) || cl.init_failed() {
                break;
            }
            while let Ok((s, _)) = listener.accept() {
                self.spawn_reader(s);
            }
            self.connect_peers();
            self.announce();
            if cl.is_forming()
                && let Some(owners) = self.complete()
            {
                let _ = self.fixed.set(owners);
                // Every peer is known from a join it sent in, so nobody needs the socket
                // any more: it is gone before the ranks' calls return.
                if self.all_joined_in() {
                    self.unlink();
                }
                cl.settle(Ok(()));
            }
            if !cl.is_forming() && self.all_joined_in() {
                break;
            }
            if Instant::now() >= deadline {
                if cl.is_forming() {
                    let (missing, seen) = self.progress();
                    let msg = format!(
                        "{}: timed out after {} s waiting for ranks {missing:?} to join (other processes seen: {seen:?})",
                        cl.label(),
                        timeout().as_secs()
                    );
                    diag::record(Kind::InvalidState, "ncclCommInitRank", msg.clone());
                    cl.settle(Err(Failure {
                        code: SYSTEM_ERROR,
                        msg: msg.clone(),
                    }));
                    self.abort(&msg);
                }
                break;
            }
            drop(cl);
            let mut st = self.st.lock();
            self.tick.wait_for(&mut st, Duration::from_millis(2));
        }
        drop(listener);
        self.unlink();
    }

    /// Connects to every process whose socket is in the folder, or that connected to us.
    fn connect_peers(self: &Arc<Self>) {
        let mut want: Vec<u32> = vec![];
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(pid) = name
                    .to_str()
                    .and_then(|n| n.strip_suffix(".sock"))
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                want.push(pid);
            }
        }
        {
            let st = self.st.lock();
            want.extend(
                st.peers
                    .iter()
                    .filter(|(_, p)| p.joined_in)
                    .map(|(k, _)| *k),
            );
            want.retain(|pid| {
                *pid != self.pid
                    && st
                        .peers
                        .get(pid)
                        .is_none_or(|p| p.out.is_none() && p.gone.is_none())
            });
        }
        want.sort_unstable();
        want.dedup();
        for pid in want {
            let path = self.dir.join(format!("{pid}.sock"));
            match UnixStream::connect(&path) {
                Ok(s) => {
                    let _ = s.set_write_timeout(Some(timeout()));
                    let Some(link) = Link::new(s).map(Arc::new) else {
                        continue;
                    };
                    self.watch_link(&link, pid);
                    let mut st = self.st.lock();
                    let p = st.peers.entry(pid).or_default();
                    p.out = Some(link);
                    p.announced = 0;
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    // A socket nobody listens on: its process died before unlinking it.
                    if !alive(pid) {
                        let _ = std::fs::remove_file(&path);
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// A peer that dies before it connected in (so no reader of ours would notice) is
    /// gone: the end of our connection to it shows it.
    fn watch_link(self: &Arc<Self>, link: &Link, pid: u32) {
        let net = Arc::downgrade(self);
        link.on_end(move || {
            let Some(n) = net.upgrade() else {
                return;
            };
            let joined = n.st.lock().peers.get(&pid).is_some_and(|p| p.joined_in);
            if !joined && !n.closed.load(Ordering::SeqCst) {
                let why = "closed its connection before joining (it exited or was killed)";
                n.peer_gone(pid, why);
            }
        });
    }

    /// Tells every connected peer about the local ranks it has not heard of.
    fn announce(&self) {
        let todo: Vec<(u32, Arc<Link>, Vec<u32>, usize)> = {
            let st = self.st.lock();
            st.peers
                .iter()
                .filter_map(|(pid, p)| {
                    let link = p.out.clone()?;
                    (p.announced < st.local.len()).then(|| {
                        let ranks = st.local[p.announced..].iter().map(|r| *r as u32);
                        (*pid, link, ranks.collect(), st.local.len())
                    })
                })
                .collect()
        };
        for (pid, link, ranks, upto) in todo {
            let m = Msg::Join {
                version: wire::VERSION,
                pid: self.pid,
                nranks: self.nranks as u32,
                uid: Box::new(self.uid),
                ranks,
            };
            let r = wire::write(&mut *link.w.lock(), &m);
            let mut st = self.st.lock();
            if let Some(p) = st.peers.get_mut(&pid) {
                match r {
                    Ok(()) => p.announced = upto,
                    Err(_) => p.out = None,
                }
            }
        }
    }

    /// Every rank's process, when every rank is held and every peer is connected and told.
    fn complete(&self) -> Option<Vec<u32>> {
        let st = self.st.lock();
        let owners: Vec<u32> = st.owners.iter().copied().collect::<Option<_>>()?;
        for pid in owners.iter().filter(|p| **p != self.pid) {
            let p = st.peers.get(pid)?;
            if p.out.is_none() || p.gone.is_some() || p.announced < st.local.len() {
                return None;
            }
        }
        Some(owners)
    }

    /// Whether every peer process has connected in (nobody needs our socket any more).
    fn all_joined_in(&self) -> bool {
        let st = self.st.lock();
        let owners = st.owners.iter().flatten();
        owners.filter(|p| **p != self.pid).all(|p| {
            st.peers
                .get(p)
                .is_some_and(|x| x.joined_in || x.gone.is_some())
        })
    }

    fn spawn_reader(self: &Arc<Self>, s: UnixStream) {
        let _ = s.set_nonblocking(false);
        let n = self.clone();
        let _ = std::thread::Builder::new()
            .name("xthunk-emu-nccl-reader".into())
            .spawn(move || n.reader(s));
    }

    /// Reads one incoming connection until it ends.
    fn reader(self: Arc<Self>, s: UnixStream) {
        let Ok(rs) = s.try_clone() else {
            return;
        };
        let max = crate::config::get().memory;
        let mut r = BufReader::new(rs);
        let mut from: Option<u32> = None;
        let mut stored = Some(s);
        loop {
            let m = wire::read(&mut r, max);
            let closed = self.closed.load(Ordering::SeqCst);
            let m = match m {
                Ok(Some(m)) => m,
                end => {
                    if let (Some(p), false) = (from, closed) {
                        let why = match end {
                            Err(e) => format!("broke its connection: {e}"),
                            _ => "closed its connection (it exited or was killed)".to_string(),
                        };
                        self.peer_gone(p, &why);
                    }
                    break;
                }
            };
            let pid = match (&m, from) {
                (Msg::Join { pid, .. }, None) => *pid,
                (_, Some(p)) => p,
                // The first message must say who is talking.
                (_, None) => break,
            };
            let Some(cl) = self.clique.upgrade() else {
                break;
            };
            let r = match m {
                Msg::Join {
                    version,
                    nranks,
                    uid,
                    ranks,
                    ..
                } => {
                    if from.is_some_and(|f| f != pid) {
                        Err("changed its process id".to_string())
                    } else {
                        from = Some(pid);
                        self.on_join(&cl, pid, version, nranks, &uid, &ranks, stored.take())
                    }
                }
                Msg::Data {
                    key,
                    place,
                    meta,
                    input,
                } => cl
                    .clone()
                    .on_data(&self, pid, key, place as usize, meta, input),
                Msg::Done { key, result } => cl.clone().on_done(&self, pid, key, result),
                Msg::Split {
                    round,
                    rank,
                    color,
                    key,
                } => cl
                    .clone()
                    .on_split(&self, pid, round, rank as usize, color, key),
                Msg::Abort { reason } => {
                    self.peer_gone(pid, &format!("aborted the clique: {reason}"));
                    break;
                }
                Msg::Leave => {
                    if let Some(p) = self.st.lock().peers.get_mut(&pid) {
                        p.left = true;
                    }
                    Ok(())
                }
            };
            if let Err(e) = r {
                self.peer_gone(pid, &format!("sent a message this process refuses: {e}"));
                break;
            }
        }
    }

    /// A peer's `Join`: its ranks, checked against what is known.
    #[allow(clippy::too_many_arguments)]
    fn on_join(
        &self,
        cl: &Arc<dyn Owner>,
        pid: u32,
        version: u32,
        nranks: u32,
        uid: &[u8; 128],
        ranks: &[u32],
        stream: Option<UnixStream>,
    ) -> Result<(), String> {
        if version != wire::VERSION {
            return Err(format!(
                "protocol version {version} (this process speaks {})",
                wire::VERSION
            ));
        }
        if *uid != self.uid {
            return Err("a join for another unique id".into());
        }
        let clash = {
            let mut st = self.st.lock();
            let mut clash = None;
            if nranks as usize != self.nranks {
                clash = Some(format!(
                    "process {pid} says the clique has {nranks} ranks, process {} says {}",
                    self.pid, self.nranks
                ));
            }
            for r in ranks {
                let r = *r as usize;
                match st.owners.get(r).copied() {
                    None => clash = Some(format!("process {pid} claims rank {r} of {nranks}")),
                    Some(Some(o)) if o != pid => {
                        clash = Some(format!(
                            "rank {r} joined twice: in process {o} and in process {pid}"
                        ))
                    }
                    Some(_) => {}
                }
            }
            // Nothing of a join that clashes is taken (the clique must not complete with it).
            if clash.is_none() {
                for r in ranks {
                    st.owners[*r as usize] = Some(pid);
                }
            }
            let p = st.peers.entry(pid).or_default();
            p.joined_in = true;
            p.inc.extend(stream);
            for r in ranks {
                if !p.ranks.contains(&(*r as usize)) {
                    p.ranks.push(*r as usize);
                }
            }
            clash
        };
        self.tick.notify_all();
        if let Some(msg) = clash {
            let msg = format!("{}: {msg}", cl.label());
            diag::record(Kind::InvalidValue, "ncclCommInitRank", msg.clone());
            if !cl.is_forming() {
                // A formed clique ignores a process that is none of its members.
                return Err(msg);
            }
            // Settling the failure tells every peer (Abort).
            cl.settle(Err(Failure {
                code: INVALID_USAGE,
                msg,
            }));
        }
        Ok(())
    }

    /// Process `pid` is gone (`why`): what needs it fails.
    pub(super) fn peer_gone(&self, pid: u32, why: &str) {
        let (msg, left) = {
            let mut st = self.st.lock();
            let p = st.peers.entry(pid).or_default();
            if p.gone.is_some() {
                return;
            }
            let mut ranks = p.ranks.clone();
            ranks.sort_unstable();
            let msg = if p.left {
                format!(
                    "process {pid} (ranks {ranks:?}) left the clique (it destroyed its communicators)"
                )
            } else {
                format!("process {pid} (ranks {ranks:?}) {why}")
            };
            p.gone = Some(msg.clone());
            if let Some(l) = p.out.take() {
                l.shut();
            }
            for s in p.inc.drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
            (msg, p.left)
        };
        self.tick.notify_all();
        if self.fixed.get().is_some_and(|f| !f.contains(&pid)) {
            // Not a member of the formed clique (a stray process): only its connections end.
            return;
        }
        // A peer that died before unlinking its socket: remove it for it (once it is dead:
        // a killed process closes its connections while it still exits).
        let sock = self.dir.join(format!("{pid}.sock"));
        if sock.exists() {
            let dir = self.dir.clone();
            let _ = std::thread::Builder::new()
                .name("xthunk-emu-nccl-reap".into())
                .spawn(move || {
                    let until = Instant::now() + Duration::from_secs(5);
                    while alive(pid) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if !alive(pid) {
                        let _ = std::fs::remove_file(&sock);
                        let _ = std::fs::remove_dir(&dir);
                    }
                });
        }
        let Some(cl) = self.clique.upgrade() else {
            return;
        };
        let failure = Failure {
            code: REMOTE_ERROR,
            msg: format!("{}: {msg}", cl.label()),
        };
        let state = cl.init_state();
        if matches!(state, Init::Forming) {
            diag::record(Kind::InvalidState, "ncclCommInitRank", failure.msg.clone());
            cl.settle(Err(failure.clone()));
        } else if matches!(state, Init::Ready) && !left {
            diag::record(
                Kind::InvalidState,
                "ncclCommGetAsyncError",
                format!("{}; its communicators report ncclRemoteError", failure.msg),
            );
            cl.set_remote_error(failure.msg.clone());
        }
        cl.peer_lost(self);
    }
}
