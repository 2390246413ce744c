//! The plumbing of a clique across processes: the rendezvous folder (its name, making and
//! checking it), whether this process made a unique id, whether a peer process still runs, and an outgoing connection to a peer
//! ([`Link`]) with its queue of posted messages.

use super::wire::{self, Msg};
use parking_lot::{Condvar, Mutex};
use std::io::ErrorKind;
use std::net::Shutdown;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

unsafe extern "C" {
    fn geteuid() -> u32;
}

/// The longest socket path (`sun_path` holds 108 bytes with its NUL).
pub(super) const MAX_SOCKET_PATH: usize = 107;

/// 64-bit FNV-1a of `b`, starting from `seed`.
fn fnv(seed: u64, b: &[u8]) -> u64 {
    b.iter().fold(seed, |h, x| {
        (h ^ u64::from(*x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A 128-bit hash of a unique id, in hex: the name of its rendezvous folder and of its
/// clique in messages (the same in every process).
pub fn id_hash(uid: &[u8; 128]) -> String {
    let a = fnv(0xcbf2_9ce4_8422_2325, uid);
    let b = fnv(
        0x84222325_cbf29ce4,
        &uid.iter().rev().copied().collect::<Vec<u8>>(),
    );
    format!("{a:016x}{b:016x}")
}

/// The folder where the processes of the clique made from `uid` meet.
pub fn rendezvous_dir(uid: &[u8; 128]) -> PathBuf {
    std::env::temp_dir().join(format!("xthunk-emu-nccl-{}", id_hash(uid)))
}

/// A value unique to this process (never zero): ids carry their maker's.
pub(super) fn process_token() -> [u8; 8] {
    static T: OnceLock<[u8; 8]> = OnceLock::new();
    *T.get_or_init(|| {
        let local = 0u8;
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mix = t
            ^ (u64::from(std::process::id()) << 32)
            ^ (&local as *const u8 as u64).rotate_left(17);
        (mix | 1).to_le_bytes()
    })
}

/// Whether `uid` was made by this process's `ncclGetUniqueId`.
pub(super) fn made_here(uid: &[u8; 128]) -> bool {
    uid[36..44] == process_token()
}

/// An outgoing connection: writes are whole messages, one at a time.
pub(super) struct Link {
    pub(super) w: Mutex<UnixStream>,
    /// The same socket, to shut it down while a writer is blocked.
    pub(super) ctl: UnixStream,
    /// Messages posted by reader threads, which must never block on a write (two processes
    /// whose readers both wait for the other's to read would deadlock), written by the link's
    /// writer thread.
    pub(super) posted: Mutex<Posted>,
    pub(super) posted_cv: Condvar,
}

#[derive(Default)]
pub(super) struct Posted {
    pub(super) msgs: std::collections::VecDeque<Msg>,
    /// The writer is writing one.
    pub(super) busy: bool,
    pub(super) writer: bool,
    pub(super) closed: bool,
}

impl Link {
    pub(super) fn new(s: UnixStream) -> Option<Link> {
        let ctl = s.try_clone().ok()?;
        Some(Link {
            w: Mutex::new(s),
            ctl,
            posted: Mutex::new(Posted::default()),
            posted_cv: Condvar::new(),
        })
    }

    /// Runs `f` on a thread when the connection ends (nothing comes back on an outgoing
    /// connection, but its end shows), a moment later: a peer that aborts tells why on
    /// another connection, which comes first.
    pub(super) fn on_end(&self, f: impl FnOnce() + Send + 'static) {
        let Ok(mut r) = self.ctl.try_clone() else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("xthunk-emu-nccl-watch-link".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                while matches!(std::io::Read::read(&mut r, &mut buf), Ok(n) if n > 0) {}
                std::thread::sleep(std::time::Duration::from_millis(100));
                f();
            });
    }

    /// Ends the link: its writer stops, a blocked write fails.
    pub(super) fn shut(&self) {
        self.posted.lock().closed = true;
        self.posted_cv.notify_all();
        let _ = self.ctl.shutdown(Shutdown::Both);
    }

    /// Waits (until `deadline`) for the posted messages to be written.
    pub(super) fn flush(&self, deadline: Instant) {
        let mut p = self.posted.lock();
        while (!p.msgs.is_empty() || p.busy) && !p.closed {
            if self.posted_cv.wait_until(&mut p, deadline).timed_out() {
                break;
            }
        }
    }

    /// The writer thread of posted messages; `failed` is told why writing failed.
    pub(super) fn write_posted(self: Arc<Self>, failed: impl FnOnce(String)) {
        loop {
            let m = {
                let mut p = self.posted.lock();
                loop {
                    if p.closed {
                        return;
                    }
                    if let Some(m) = p.msgs.pop_front() {
                        p.busy = true;
                        break m;
                    }
                    self.posted_cv.wait(&mut p);
                }
            };
            let r = wire::write(&mut *self.w.lock(), &m);
            self.posted.lock().busy = false;
            self.posted_cv.notify_all();
            if let Err(e) = r {
                self.shut();
                failed(format!("could not be written to ({e})"));
                return;
            }
        }
    }
}

/// Whether process `pid` still runs (a zombie does not: it died, unreaped).
pub(super) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Makes (or checks) the rendezvous folder.
pub(super) fn make_dir(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(format!(
            "{} exists but is not a private folder of this user",
            dir.display()
        ));
    }
    Ok(())
}

/// Connects to the socket at `path`, writes `msgs` (briefly: 200 ms at most per write) and
/// closes the connection; best effort.
pub(super) fn send_once(path: &Path, msgs: &[&Msg]) {
    if let Ok(mut s) = UnixStream::connect(path) {
        let _ = s.set_write_timeout(Some(std::time::Duration::from_millis(200)));
        for m in msgs {
            if wire::write(&mut s, m).is_err() {
                break;
            }
        }
        let _ = s.shutdown(Shutdown::Both);
    }
}
