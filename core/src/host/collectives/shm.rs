//! The host backend's collectives across processes of one host, one rank per process, through
//! POSIX shared memory segments (`/dev/shm` on Linux).
//!
//! # Setting a clique up
//!
//! A clique (a [`CliqueKey`]) gets one segment, named from the job id, a hash of the key and
//! a generation (`xthunk-shm@<job>@<hash>.<generation>`: two jobs never share a name, and a
//! clique made again after [`CliqueProvider::evict_aborted`] gets a new one). Every member
//! acquires it in the same order (the executor's program order), as NCCL's communicator
//! creation is a collective call:
//!
//! 1. the clique's first rank creates the segment (exclusively; a stale segment of the same
//!    name, left by a killed earlier run of this job id, is replaced), reserves its memory
//!    (`posix_fallocate`: a full `/dev/shm` is an error here, never a `SIGBUS` later), writes
//!    the header and announces the segment through the [`Coordinator`] (key
//!    `xthunk.shm/<hash>/<generation>`: the name and a random token);
//! 2. every other member reads the announcement (up to the terminate timeout: a first rank that
//!    never arrives is named), maps the segment and checks the header against it;
//! 3. each member marks itself joined in the segment and waits until every member did (the
//!    clique's barrier, with the timeouts below); then every member unlinks the name. From
//!    then on the segment lives only in the members' mappings: nothing is left in `/dev/shm`
//!    whatever happens to the processes later, killed ones included.
//!
//! A failed setup unlinks the name at once. The names a process may still have in `/dev/shm`
//! (a setup in progress) are also kept in a process-wide list, so that a failure handler can
//! remove them ([`remove_pending_segments`]); [`remove_job_segments`] removes every segment of
//! a job, for a process that is exiting because its job failed.
//!
//! # Moving data
//!
//! The segment holds a control block per rank (a phase counter and the description of its
//! current operation), two staging slots per rank (a bounded size: large buffers go through in
//! chunks), and two mailbox chunks per ordered pair of ranks for sends and receives. Every
//! word other processes read is an atomic in the shared memory.
//!
//! A collective runs in **phases**, one per chunk: each rank writes the operation's description
//! and its part of the chunk into its slot of the phase's parity, publishes the phase (release
//! store), waits until every rank published it (acquire loads), checks that every rank issued
//! the same operation (else every rank fails, with a message listing what each issued), then
//! reads what it needs from the others' slots — a reduction over every rank's slot, in rank
//! order, with the same code as the in-process host collectives, so results are bit-identical
//! to theirs. Slots alternate between two parities, so one barrier per chunk suffices: a rank
//! writes the slot of phase `p + 1` only after every rank arrived at `p`, hence finished
//! reading `p - 1`.
//!
//! **Send/receive** go through the mailbox of the ordered pair, a ring of two chunks with a
//! written and a read counter: the `k`-th send from `a` to `b` meets the `k`-th receive on `b`
//! from `a`, and the receiver checks that both name the same count and type. A group (a
//! permute) progresses all its sends and receives together, so no order of them deadlocks.
//!
//! # Failing loudly
//!
//! A waiting rank warns after [`Timeouts::warn_after`] naming the ranks it waits for, and fails
//! after [`Timeouts::terminate_after`] naming them; it polls the [`Coordinator`]'s failures, so
//! a rank the coordinator reports dead is named as soon as that is known. Any failure inside an
//! operation (a timeout, a mismatch, a dead peer, [`Communicator::abort`]) **poisons** the
//! segment with its message: every rank waiting in it, and every later operation, fails at once
//! with that message. Unlike the in-process collectives, no rank ever touches another rank's
//! memory (only the shared segment), so a rank may leave an operation at any moment.

use super::kernel::{self, P2pOp, RawBuf};
use super::ops::{OpDesc, OpKind, dtype_code, dtype_from_code};
use super::reduce;
use super::{HostComm, ShmCommunicator, Transport};
use crate::collectives::{
    CliqueKey, CliqueProvider, Communicator, ReduceOp, Timeouts, error_message, may_spin,
};
use crate::distributed::{Coordinator, DistributedError, list_ranks};
use crate::error::{Error, Result};
use crate::hash::Fnv1a;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BACKEND: &str = "host-shm";

// ---------------------------------------------------------------------------------------------
// Options.

/// Sizes and timeouts of the cliques of a [`ShmCliqueProvider`]. The sizes are upper bounds,
/// applied by each clique's first rank (the others take what its segment says); large cliques
/// get smaller slots so that a segment stays within about 32 MiB of `/dev/shm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOptions {
    /// Applied to every wait: clique setup, collective phases, sends and receives.
    pub timeouts: Timeouts,
    /// Bytes of one staging slot (each rank has two): the chunk size of collectives.
    pub slot_bytes: usize,
    /// Bytes of one mailbox chunk (two per ordered pair of ranks): the chunk size of sends.
    pub mailbox_bytes: usize,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            timeouts: Timeouts::default(),
            slot_bytes: 256 << 10,
            mailbox_bytes: 64 << 10,
        }
    }
}

impl ShmOptions {
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Operation descriptions (compared across ranks at every phase).

/// The words of a description as it is published in a rank's control block: the collective's
/// number, the [`OpDesc`] words, the chunk's number.
const DESC_WORDS: usize = 2 + super::ops::DESC_WORDS;

fn desc_words(desc: &OpDesc, seq: u64, chunk: u64) -> [u64; DESC_WORDS] {
    let mut w = [seq; DESC_WORDS];
    w[1..DESC_WORDS - 1].copy_from_slice(&desc.to_words());
    w[DESC_WORDS - 1] = chunk;
    w
}

/// A description as another rank published it, in words, for messages.
fn describe_words(w: &[u64; DESC_WORDS]) -> String {
    let mut d = [0; super::ops::DESC_WORDS];
    d.copy_from_slice(&w[1..DESC_WORDS - 1]);
    match OpDesc::from_words(&d) {
        Some(desc) => format!("{desc} (collective #{}, chunk {})", w[0], w[DESC_WORDS - 1]),
        None => format!("an unknown operation {w:?}"),
    }
}

fn shm_error(call: &str, message: impl Into<String>) -> Error {
    Error::backend(BACKEND, call, message)
}

// ---------------------------------------------------------------------------------------------
// Segment layout.

const MAGIC: u64 = u64::from_le_bytes(*b"XTSHM\0\x01\0");
const PAGE: usize = 4096;

// Header words (byte offsets).
const H_MAGIC: usize = 0;
const H_N: usize = 8;
const H_SLOT: usize = 16;
const H_MBOX: usize = 24;
const H_LEN: usize = 32;
const H_TOKEN: usize = 40;
const H_KEY: usize = 48;
const H_JOINED: usize = 64;
const H_POISON_STATE: usize = 128;
const H_POISON_LEN: usize = 136;
const H_POISON_MSG: usize = 192;
const POISON_MAX: usize = PAGE - H_POISON_MSG;

// A rank's control block.
const RANK_BLOCK: usize = 256;
const R_PHASE: usize = 0;
const R_JOINED: usize = 8;
const R_PID: usize = 16;
const R_DESC: usize = 64;

// A mailbox's control block: the sender's counter and a header per chunk parity (one cache
// line), then the receiver's counter (another).
const MBOX_BLOCK: usize = 192;
const M_WRITTEN: usize = 0;
const M_HDR: usize = 8;
const HDR_WORDS: usize = 4;
const M_READ: usize = 128;
const _: () = assert!(M_HDR + 2 * HDR_WORDS * 8 <= M_READ && M_READ + 8 <= MBOX_BLOCK);
const _: () = assert!(R_DESC + 2 * 64 <= RANK_BLOCK && DESC_WORDS * 8 <= 64);
const _: () = assert!(H_POISON_LEN < H_POISON_MSG && H_JOINED < H_POISON_STATE);

/// Where everything is in a segment of `n` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    n: usize,
    slot: usize,
    mbox: usize,
    ranks: usize,
    mbox_ctl: usize,
    slots: usize,
    mbox_data: usize,
    len: usize,
}

fn round_up(v: usize, to: usize) -> Option<usize> {
    v.checked_add(to - 1).map(|v| v / to * to)
}

impl Layout {
    fn new(n: usize, slot: usize, mbox: usize) -> Option<Layout> {
        let ranks = PAGE;
        let mbox_ctl = round_up(ranks.checked_add(n.checked_mul(RANK_BLOCK)?)?, PAGE)?;
        let slots = round_up(
            mbox_ctl.checked_add(n.checked_mul(n)?.checked_mul(MBOX_BLOCK)?)?,
            PAGE,
        )?;
        let mbox_data = slots.checked_add(n.checked_mul(2)?.checked_mul(slot)?)?;
        let len = round_up(
            mbox_data.checked_add(n.checked_mul(n)?.checked_mul(2)?.checked_mul(mbox)?)?,
            PAGE,
        )?;
        (slot % 64 == 0 && mbox % 64 == 0 && slot > 0 && mbox > 0 && n > 0).then_some(Layout {
            n,
            slot,
            mbox,
            ranks,
            mbox_ctl,
            slots,
            mbox_data,
            len,
        })
    }

    /// The sizes a clique of `n` ranks gets from `opts`: at most about 16 MiB of slots and
    /// 16 MiB of mailboxes, slots of at least 8 bytes per rank (a chunk of reduce-scatter
    /// holds one element of every rank), multiples of 64 bytes.
    fn for_clique(n: usize, opts: &ShmOptions) -> Option<Layout> {
        const BUDGET: usize = 16 << 20;
        let floor64 = |v: usize| (v / 64 * 64).max(64);
        let min_slot = round_up(n.checked_mul(8)?, 64)?;
        let slot = floor64(opts.slot_bytes.min(BUDGET / (2 * n))).max(min_slot);
        let mbox = floor64(opts.mailbox_bytes.min(BUDGET / (2 * n * n).max(1)));
        Layout::new(n, slot, mbox)
    }
}

/// One mapping of a segment.
struct Segment {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the mapping is shared memory that lives until `Drop`; every word that more than one
// thread or process may access at once is accessed atomically, and the data areas are handed
// between ranks by the release/acquire protocol described in the module documentation.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` is a mapping made by `map` and never unmapped elsewhere; no
        // reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.layout.len) };
    }
}

fn os_error(what: &str, name: &str) -> Error {
    shm_error(
        "shared memory",
        format!("{what} {name}: {}", std::io::Error::last_os_error()),
    )
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(format!("/{name}"))
        .map_err(|_| Error::InvalidArgument(format!("bad shared memory name {name:?}")))
}

/// Removes the name `name` from `/dev/shm` (mappings stay valid). False if it was not there.
fn unlink(name: &str) -> bool {
    let Ok(c) = c_name(name) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string.
    unsafe { libc::shm_unlink(c.as_ptr()) == 0 }
}

/// Closes `fd` when dropped.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: an open descriptor this struct owns.
        unsafe { libc::close(self.0) };
    }
}

impl Segment {
    /// Creates the segment `name` for `layout` and writes its header (magic last).
    fn create(name: &str, layout: Layout, token: u64, key_hash: u64) -> Result<Segment> {
        let c = c_name(name)?;
        let open = || {
            // SAFETY: `c` is a valid NUL-terminated string; plain flags and mode.
            unsafe {
                libc::shm_open(
                    c.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                    0o600 as libc::mode_t,
                )
            }
        };
        let mut fd = open();
        if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
            // Left by an earlier run of this job id that was killed while setting this clique
            // up (a live run of the same job and rank cannot exist: the coordinator refuses
            // a second registration of a rank).
            tracing::warn!(segment = name, "replacing a stale shared memory segment");
            unlink(name);
            fd = open();
        }
        if fd < 0 {
            return Err(os_error("cannot create", name));
        }
        let fd = Fd(fd);
        let created = || -> Result<Segment> {
            let len = libc::off_t::try_from(layout.len)
                .map_err(|_| shm_error("shared memory", "segment too large"))?;
            // SAFETY: a descriptor of the segment just created.
            if unsafe { libc::ftruncate(fd.0, len) } != 0 {
                return Err(os_error("cannot size", name));
            }
            // Reserve the memory now: a full /dev/shm is then an error here instead of a
            // SIGBUS on first touch.
            // SAFETY: as above.
            match unsafe { libc::posix_fallocate(fd.0, 0, len) } {
                0 | libc::EOPNOTSUPP | libc::EINVAL => {}
                e => {
                    return Err(shm_error(
                        "shared memory",
                        format!(
                            "cannot reserve {} bytes for {name} in /dev/shm: {}",
                            layout.len,
                            std::io::Error::from_raw_os_error(e)
                        ),
                    ));
                }
            }
            let seg = Segment::map(&fd, layout, name)?;
            for (off, v) in [
                (H_N, layout.n as u64),
                (H_SLOT, layout.slot as u64),
                (H_MBOX, layout.mbox as u64),
                (H_LEN, layout.len as u64),
                (H_TOKEN, token),
                (H_KEY, key_hash),
            ] {
                seg.word(off).store(v, Ordering::Relaxed);
            }
            seg.word(H_MAGIC).store(MAGIC, Ordering::Release);
            Ok(seg)
        };
        created().inspect_err(|_| {
            unlink(name);
        })
    }

    /// Opens and maps the existing segment `name`, checking its header.
    fn open(name: &str, token: u64, n: usize, key_hash: u64) -> Result<Segment> {
        let c = c_name(name)?;
        // SAFETY: `c` is a valid NUL-terminated string; plain flags.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(shm_error(
                "shared memory",
                if e.raw_os_error() == Some(libc::ENOENT) {
                    format!(
                        "segment {name} is gone: the clique's setup was given up (by a rank that failed or timed out)"
                    )
                } else {
                    format!("cannot open {name}: {e}")
                },
            ));
        }
        let fd = Fd(fd);
        // SAFETY: `st` is plain old data, filled by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a valid out pointer.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(os_error("cannot stat", name));
        }
        let size = usize::try_from(st.st_size).unwrap_or(0);
        let bad = |why: &str| shm_error("shared memory", format!("segment {name}: {why}"));
        if size < PAGE {
            return Err(bad("too small"));
        }
        // The header first, to learn the layout.
        let head = Segment::map(
            &fd,
            Layout {
                n: 0,
                slot: 0,
                mbox: 0,
                ranks: 0,
                mbox_ctl: 0,
                slots: 0,
                mbox_data: 0,
                len: PAGE,
            },
            name,
        )?;
        if head.word(H_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(bad("not an xthunk segment, or not initialized"));
        }
        let get = |off| usize::try_from(head.word(off).load(Ordering::Relaxed)).unwrap_or(0);
        if head.word(H_TOKEN).load(Ordering::Relaxed) != token
            || head.word(H_KEY).load(Ordering::Relaxed) != key_hash
        {
            return Err(bad(
                "it belongs to another setup of this clique (a stale segment)",
            ));
        }
        let layout = Layout::new(get(H_N), get(H_SLOT), get(H_MBOX))
            .filter(|l| l.n == n && l.len == get(H_LEN) && l.len <= size)
            .ok_or_else(|| bad("its header does not match the clique"))?;
        drop(head);
        Segment::map(&fd, layout, name)
    }

    fn map(fd: &Fd, layout: Layout, name: &str) -> Result<Segment> {
        // SAFETY: a fresh shared mapping of an open descriptor; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                layout.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.0,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_error("cannot map", name));
        }
        Ok(Segment {
            ptr: p.cast(),
            layout,
        })
    }

    /// The 8-byte word at byte offset `off`.
    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.layout.len);
        // SAFETY: in bounds (checked) and 8-aligned (the mapping is page-aligned); the memory
        // lives as long as `self`, and is only ever accessed atomically at this offset.
        unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast()) }
    }

    fn n(&self) -> usize {
        self.layout.n
    }

    fn rank_word(&self, r: usize, off: usize) -> &AtomicU64 {
        assert!(r < self.layout.n);
        self.word(self.layout.ranks + r * RANK_BLOCK + off)
    }

    fn phase(&self, r: usize) -> &AtomicU64 {
        self.rank_word(r, R_PHASE)
    }

    fn desc_word(&self, r: usize, parity: usize, i: usize) -> &AtomicU64 {
        self.rank_word(r, R_DESC + (parity & 1) * 64 + i * 8)
    }

    /// Slot `parity` of rank `r`: `slot` bytes.
    fn slot(&self, r: usize, parity: usize) -> *mut u8 {
        assert!(r < self.layout.n);
        let off = self.layout.slots + (r * 2 + (parity & 1)) * self.layout.slot;
        // SAFETY: inside the mapping (the layout reserves `2n` slots there).
        unsafe { self.ptr.add(off) }
    }

    fn mbox_word(&self, from: usize, to: usize, off: usize) -> &AtomicU64 {
        let n = self.layout.n;
        assert!(from < n && to < n);
        self.word(self.layout.mbox_ctl + (from * n + to) * MBOX_BLOCK + off)
    }

    fn mbox_hdr(&self, from: usize, to: usize, parity: usize, i: usize) -> &AtomicU64 {
        self.mbox_word(from, to, M_HDR + ((parity & 1) * HDR_WORDS + i) * 8)
    }

    /// Chunk `parity` of the mailbox `from -> to`: `mbox` bytes.
    fn mbox_data(&self, from: usize, to: usize, parity: usize) -> *mut u8 {
        let n = self.layout.n;
        assert!(from < n && to < n);
        let off = self.layout.mbox_data + ((from * n + to) * 2 + (parity & 1)) * self.layout.mbox;
        // SAFETY: inside the mapping (the layout reserves `2n²` chunks there).
        unsafe { self.ptr.add(off) }
    }

    /// Marks the clique failed with `msg` (the first message wins: true if it was this one).
    fn poison(&self, msg: &str) -> bool {
        let state = self.word(H_POISON_STATE);
        let first = state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if first {
            let mut len = msg.len().min(POISON_MAX);
            while !msg.is_char_boundary(len) {
                len -= 1;
            }
            // SAFETY: the message area is `POISON_MAX` bytes of the header page; only the
            // winner of the exchange above writes it, and readers read it only after the
            // release store of state 2 below.
            unsafe { ptr::copy_nonoverlapping(msg.as_ptr(), self.ptr.add(H_POISON_MSG), len) };
            self.word(H_POISON_LEN).store(len as u64, Ordering::Relaxed);
            state.store(2, Ordering::Release);
        }
        first
    }

    /// The message the clique was poisoned with, if it was.
    fn poisoned(&self) -> Option<String> {
        let state = self.word(H_POISON_STATE);
        let mut s = state.load(Ordering::Acquire);
        if s == 0 {
            return None;
        }
        for _ in 0..10_000 {
            if s == 2 {
                break;
            }
            std::hint::spin_loop();
            s = state.load(Ordering::Acquire);
        }
        if s != 2 {
            return Some("the clique was aborted (by a rank that died while saying why)".into());
        }
        let len = usize::try_from(self.word(H_POISON_LEN).load(Ordering::Relaxed))
            .unwrap_or(0)
            .min(POISON_MAX);
        let mut bytes = vec![0u8; len];
        // SAFETY: written before the release store of state 2 that we acquired; never
        // written again.
        unsafe { ptr::copy_nonoverlapping(self.ptr.add(H_POISON_MSG), bytes.as_mut_ptr(), len) };
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

// ---------------------------------------------------------------------------------------------
// Names and their removal.

/// Names this process created or learned and that may still be in `/dev/shm`.
static PENDING: Mutex<BTreeSet<String>> = parking_lot::const_mutex(BTreeSet::new());

/// The prefix of the name of every segment of `job_id` (a job id never contains `@`).
pub fn job_segment_prefix(job_id: &str) -> String {
    format!("xthunk-shm@{job_id}@")
}

fn segment_name(job_id: &str, key_hash: u64, generation: u64) -> String {
    format!("{}{key_hash:016x}.{generation}", job_segment_prefix(job_id))
}

/// Removes every segment whose setup is in progress in this process (the others are already
/// unlinked); returns how many names went. Safe to call from any thread at any time (e.g. a
/// failure handler about to exit): mappings stay valid, only the names go.
pub fn remove_pending_segments() -> usize {
    let names: Vec<String> = PENDING.lock().iter().cloned().collect();
    names.iter().filter(|n| unlink(n)).count()
}

/// The segments of `job_id` now in `/dev/shm` (Linux; empty elsewhere).
pub fn job_segments(job_id: &str) -> Vec<String> {
    let prefix = job_segment_prefix(job_id);
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    v.sort();
    v
}

/// Removes every segment of `job_id` from `/dev/shm` — this process's pending ones and any
/// other (left by a rank killed during a setup): for a process leaving a failed job. Returns
/// how many names went.
pub fn remove_job_segments(job_id: &str) -> usize {
    let prefix = job_segment_prefix(job_id);
    let mut gone = 0;
    let pending: Vec<String> = PENDING
        .lock()
        .iter()
        .filter(|n| n.starts_with(&prefix))
        .cloned()
        .collect();
    for n in pending.iter().chain(&job_segments(job_id)) {
        if unlink(n) {
            gone += 1;
        }
    }
    gone
}

/// A deterministic hash of a clique key (FNV-1a 64 over its ranks, stream kind and color).
fn key_hash(key: &CliqueKey) -> u64 {
    let h = key
        .ranks()
        .iter()
        .fold(Fnv1a::new().u64(key.size() as u64), |h, r| h.u64(*r as u64));
    h.u64(key.stream_kind() as u64)
        .u64(key.color().map_or(u64::MAX, |c| c))
        .finish()
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

// ---------------------------------------------------------------------------------------------
// One rank's state.

/// What a rank counts as operations run (on the stream, so command-buffer replays count).
struct RunState {
    /// Phases published so far (the next phase is `phase + 1`).
    phase: u64,
    /// Collectives run so far.
    seq: u64,
    /// Per peer (clique rank): messages sent to it and received from it so far.
    sent: Vec<u64>,
    received: Vec<u64>,
}

/// This process's rank in one shared memory clique: the [`Transport`] of a
/// [`ShmCommunicator`].
pub struct ShmRank {
    seg: Segment,
    key: CliqueKey,
    rank: usize,
    global: usize,
    coordinator: Arc<dyn Coordinator>,
    timeouts: Timeouts,
    run: Mutex<RunState>,
}

/// How a wait checks the world while it is not satisfied: poison, dead ranks, timeouts.
struct Waiter {
    start: Instant,
    next_warn: Instant,
    next_poll: Instant,
    idle: u32,
    spin: bool,
}

/// How often a waiting rank asks the coordinator about failures.
const FAILURE_POLL: Duration = Duration::from_millis(20);

impl Waiter {
    fn new(st: &ShmRank) -> Waiter {
        let now = Instant::now();
        Waiter {
            start: now,
            next_warn: now + st.timeouts.warn_after,
            next_poll: now,
            idle: 0,
            spin: may_spin(st.seg.n()),
        }
    }

    /// Progress was made: the timeouts count from now.
    fn progressed(&mut self, st: &ShmRank) {
        let now = Instant::now();
        self.start = now;
        self.next_warn = now + st.timeouts.warn_after;
        self.idle = 0;
    }

    /// Called each time the awaited condition does not hold: fails on poison, on a failure the
    /// coordinator knows, or after the terminate timeout (naming `missing()`: the global ranks
    /// waited for, and those that arrived); warns after the warn timeout; then backs off.
    fn idle(
        &mut self,
        st: &ShmRank,
        what: &dyn Fn() -> String,
        missing: &dyn Fn() -> (Vec<usize>, Vec<usize>),
    ) -> Result<()> {
        if let Some(msg) = st.seg.poisoned() {
            return Err(shm_error("collective", msg));
        }
        let now = Instant::now();
        if now >= self.next_poll {
            self.next_poll = now + FAILURE_POLL;
            if let Some(f) = st.coordinator.failures().into_iter().next() {
                return Err(shm_error(
                    "collective",
                    format!(
                        "{}: {f} (reported by the {} coordinator of job `{}`)",
                        what(),
                        st.coordinator.backend(),
                        st.coordinator.job_id()
                    ),
                ));
            }
        }
        let waited = now.duration_since(self.start);
        if waited >= st.timeouts.terminate_after {
            let (waiting, arrived) = missing();
            return Err(shm_error(
                "collective",
                format!(
                    "{}: {} did not arrive within {:?} (arrived: {}); it never reached this \
                     operation, or is stuck before it",
                    what(),
                    list_ranks(&waiting),
                    st.timeouts.terminate_after,
                    if arrived.is_empty() {
                        "none".to_string()
                    } else {
                        list_ranks(&arrived)
                    }
                ),
            ));
        }
        if now >= self.next_warn {
            self.next_warn = now + st.timeouts.warn_after;
            let (waiting, _) = missing();
            tracing::warn!(
                "{} (rank {} of job `{}`): waiting {waited:.1?} for {}",
                what(),
                st.global,
                st.coordinator.job_id(),
                list_ranks(&waiting)
            );
        }
        self.idle = self.idle.saturating_add(1);
        match self.idle {
            0..64 if self.spin => {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
            0..128 => std::thread::yield_now(),
            i => {
                let us = 1u64 << ((i - 128) / 8).min(10);
                std::thread::sleep(Duration::from_micros(us.min(1000)));
            }
        }
        Ok(())
    }
}

impl ShmRank {
    /// Poisons the clique with `what` failed because of `e`, and returns the error.
    fn fail(&self, what: &str, e: Error) -> Error {
        let msg = format!("{what} on {}: {}", self.describe(), error_message(&e));
        self.seg.poison(&msg);
        shm_error("collective", msg)
    }

    /// Every rank of the clique, as global ranks, split by `pred` (true: arrived).
    fn split_ranks(&self, pred: impl Fn(usize) -> bool) -> (Vec<usize>, Vec<usize>) {
        let mut missing = vec![];
        let mut arrived = vec![];
        for q in 0..self.seg.n() {
            let g = self.key.global_rank(q).unwrap_or(q);
            if pred(q) {
                arrived.push(g);
            } else {
                missing.push(g);
            }
        }
        (missing, arrived)
    }

    /// Waits until every rank published phase `target`.
    fn wait_phase(&self, target: u64, what: &dyn Fn() -> String) -> Result<()> {
        let n = self.seg.n();
        let all = || (0..n).all(|q| self.seg.phase(q).load(Ordering::Acquire) >= target);
        let mut w = Waiter::new(self);
        while !all() {
            w.idle(self, what, &|| {
                self.split_ranks(|q| self.seg.phase(q).load(Ordering::Acquire) >= target)
            })?;
        }
        Ok(())
    }

    /// # Safety
    /// `src` and `dst` are valid for their lengths (those `desc` implies, checked by the
    /// caller) for the whole call.
    unsafe fn collective(
        &self,
        run: &mut RunState,
        seq: u64,
        desc: OpDesc,
        src: RawBuf,
        dst: RawBuf,
    ) -> Result<()> {
        let seg = &self.seg;
        let n = seg.n();
        let r = self.rank;
        let s = desc.dtype.size();
        let count = usize::try_from(desc.count)
            .map_err(|_| Error::InvalidArgument("count does not fit in memory".into()))?;
        let blocks = match desc.kind {
            OpKind::ReduceScatter | OpKind::AllToAll => n,
            _ => 1,
        };
        let per = (seg.layout.slot / (blocks * s)).max(1);
        let chunks = count.div_ceil(per).max(1);
        let op = desc.op.unwrap_or(ReduceOp::Sum);
        let root = desc.root;
        if desc.kind == OpKind::Broadcast && root >= n {
            return Err(Error::InvalidArgument(format!(
                "broadcast root {root} out of range"
            )));
        }
        for k in 0..chunks {
            let lo = k * per;
            let hi = count.min(lo + per);
            let len = (hi - lo) * s;
            let p = run.phase;
            let parity = (p % 2) as usize;
            let words = desc_words(&desc, seq, k as u64);
            for (i, w) in words.iter().enumerate() {
                seg.desc_word(r, parity, i).store(*w, Ordering::Relaxed);
            }
            let mine = seg.slot(r, parity);
            // Stage this rank's part of chunk k. Nobody reads this slot until this rank
            // publishes phase p + 1, and everyone finished reading it (phase p - 1) before
            // this rank could pass phase p.
            // SAFETY: (every copy) the source ranges lie inside `src` (chunk k of each block
            // of `count` elements); the destination ranges inside this rank's slot
            // (`blocks * len <= slot` bytes); nothing is copied when `len` is 0 (buffers may
            // then be null).
            unsafe {
                match desc.kind {
                    _ if len == 0 => {}
                    OpKind::AllReduce | OpKind::AllGather => {
                        ptr::copy_nonoverlapping(src.ptr.add(lo * s), mine, len);
                    }
                    OpKind::Broadcast => {
                        if r == root {
                            ptr::copy_nonoverlapping(src.ptr.add(lo * s), mine, len);
                        }
                    }
                    OpKind::ReduceScatter | OpKind::AllToAll => {
                        for d in 0..n {
                            ptr::copy_nonoverlapping(
                                src.ptr.add((d * count + lo) * s),
                                mine.add(d * len),
                                len,
                            );
                        }
                    }
                    OpKind::P2p => {}
                }
            }
            seg.phase(r).store(p + 1, Ordering::Release);
            run.phase = p + 1;
            self.wait_phase(p + 1, &|| format!("chunk {} of {chunks}", k + 1))?;
            // Every rank issued the same operation?
            let theirs: Vec<[u64; DESC_WORDS]> = (0..n)
                .map(|q| {
                    let mut w = [0u64; DESC_WORDS];
                    for (i, x) in w.iter_mut().enumerate() {
                        *x = seg.desc_word(q, parity, i).load(Ordering::Relaxed);
                    }
                    w
                })
                .collect();
            if theirs.iter().any(|w| *w != words) {
                let each: Vec<String> = theirs
                    .iter()
                    .enumerate()
                    .map(|(q, w)| {
                        format!(
                            "rank {}: {}",
                            self.key.global_rank(q).unwrap_or(q),
                            describe_words(w)
                        )
                    })
                    .collect();
                return Err(shm_error(
                    "collective",
                    format!(
                        "the ranks issued different collectives at #{seq}: {}",
                        each.join(", ")
                    ),
                ));
            }
            if len == 0 {
                continue;
            }
            // Read what this rank receives. The slots of phase p + 1 stay unwritten until
            // every rank (this one included) published phase p + 2.
            // SAFETY: (every access) the slot ranges lie inside the slots (`blocks * len`
            // bytes each), the destination ranges inside `dst` (chunk k of each block of
            // `count` elements of the output); outputs are this rank's own memory.
            unsafe {
                match desc.kind {
                    OpKind::AllReduce => {
                        let ins: Vec<*const u8> =
                            (0..n).map(|q| seg.slot(q, parity).cast_const()).collect();
                        reduce::reduce(
                            desc.dtype,
                            op,
                            &ins,
                            &[dst.ptr.add(lo * s)],
                            hi - lo,
                            false,
                        )?;
                    }
                    OpKind::ReduceScatter => {
                        let ins: Vec<*const u8> = (0..n)
                            .map(|q| seg.slot(q, parity).add(r * len).cast_const())
                            .collect();
                        reduce::reduce(
                            desc.dtype,
                            op,
                            &ins,
                            &[dst.ptr.add(lo * s)],
                            hi - lo,
                            false,
                        )?;
                    }
                    OpKind::AllGather => {
                        for q in 0..n {
                            ptr::copy_nonoverlapping(
                                seg.slot(q, parity),
                                dst.ptr.add((q * count + lo) * s),
                                len,
                            );
                        }
                    }
                    OpKind::AllToAll => {
                        for q in 0..n {
                            ptr::copy_nonoverlapping(
                                seg.slot(q, parity).add(r * len),
                                dst.ptr.add((q * count + lo) * s),
                                len,
                            );
                        }
                    }
                    OpKind::Broadcast => {
                        if r == root {
                            if src.ptr != dst.ptr {
                                ptr::copy_nonoverlapping(
                                    src.ptr.add(lo * s),
                                    dst.ptr.add(lo * s),
                                    len,
                                );
                            }
                        } else {
                            ptr::copy_nonoverlapping(
                                seg.slot(root, parity),
                                dst.ptr.add(lo * s),
                                len,
                            );
                        }
                    }
                    OpKind::P2p => {}
                }
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`Transport::run_group`].
    unsafe fn p2p_group(&self, run: &mut RunState, ops: &[P2pOp]) -> Result<()> {
        let seg = &self.seg;
        let me = self.rank;
        let mb = seg.layout.mbox;
        struct Transfer {
            item: usize,
            send: bool,
            peer: usize,
            /// Message number on this (ordered) pair.
            msg: u64,
            chunks: u64,
            done: u64,
        }
        let mut transfers: Vec<Transfer> = vec![];
        for (i, op) in ops.iter().enumerate() {
            let (send, peer) = (op.send, op.peer);
            if peer == me {
                // Sends to and receives from this rank itself are copied locally.
                continue;
            }
            let counter = if send {
                &mut run.sent[peer]
            } else {
                &mut run.received[peer]
            };
            let msg = *counter;
            *counter += 1;
            transfers.push(Transfer {
                item: i,
                send,
                peer,
                msg,
                chunks: op.buf.len.div_ceil(mb).max(1) as u64,
                done: 0,
            });
        }
        kernel::copy_to_self(ops, me)?;
        let global = |q: usize| self.key.global_rank(q).unwrap_or(q);
        let mut w = Waiter::new(self);
        loop {
            let mut progressed = false;
            let mut busy: BTreeSet<(bool, usize)> = BTreeSet::new();
            for t in transfers.iter_mut() {
                if t.done == t.chunks {
                    continue;
                }
                // Messages on one mailbox go in order: only the first unfinished one moves.
                if !busy.insert((t.send, t.peer)) {
                    continue;
                }
                let P2pOp {
                    count, dtype, buf, ..
                } = ops[t.item];
                let bytes = buf.len;
                let (from, to) = if t.send { (me, t.peer) } else { (t.peer, me) };
                let written = seg.mbox_word(from, to, M_WRITTEN);
                let read = seg.mbox_word(from, to, M_READ);
                loop {
                    if t.done == t.chunks {
                        break;
                    }
                    let off = (t.done as usize) * mb;
                    let len = bytes.saturating_sub(off).min(mb);
                    if t.send {
                        let wr = written.load(Ordering::Relaxed);
                        if wr.saturating_sub(read.load(Ordering::Acquire)) >= 2 {
                            break;
                        }
                        let parity = (wr % 2) as usize;
                        for (i, v) in [t.msg, count, dtype_code(dtype), len as u64]
                            .into_iter()
                            .enumerate()
                        {
                            seg.mbox_hdr(from, to, parity, i)
                                .store(v, Ordering::Relaxed);
                        }
                        // SAFETY: `off + len <= bytes`, inside the send buffer; the chunk is
                        // `mb >= len` bytes, free (the receiver consumed it: checked above).
                        unsafe {
                            ptr::copy_nonoverlapping(
                                buf.ptr.add(off),
                                seg.mbox_data(from, to, parity),
                                len,
                            )
                        };
                        written.store(wr + 1, Ordering::Release);
                    } else {
                        let rd = read.load(Ordering::Relaxed);
                        if written.load(Ordering::Acquire) <= rd {
                            break;
                        }
                        let parity = (rd % 2) as usize;
                        let hdr: Vec<u64> = (0..HDR_WORDS)
                            .map(|i| seg.mbox_hdr(from, to, parity, i).load(Ordering::Relaxed))
                            .collect();
                        let (g_from, g_to) = (global(from), global(to));
                        if hdr[0] != t.msg {
                            return Err(shm_error(
                                "send/recv",
                                format!(
                                    "send #{} from rank {g_from} to rank {g_to}: got a chunk of \
                                     message #{} instead (the ranks are out of step)",
                                    t.msg, hdr[0]
                                ),
                            ));
                        }
                        if (hdr[1], hdr[2]) != (count, dtype_code(dtype)) {
                            let theirs = dtype_from_code(hdr[2])
                                .map_or_else(|| format!("type #{}", hdr[2]), |d| d.to_string());
                            return Err(shm_error(
                                "send/recv",
                                format!(
                                    "send #{} from rank {g_from} to rank {g_to}: the sender \
                                     sends {} {theirs} but the receiver expects {count} {dtype}",
                                    t.msg, hdr[1]
                                ),
                            ));
                        }
                        if hdr[3] != len as u64 {
                            return Err(shm_error(
                                "send/recv",
                                format!(
                                    "send #{} from rank {g_from} to rank {g_to}: a chunk of {} \
                                     bytes where {len} were expected",
                                    t.msg, hdr[3]
                                ),
                            ));
                        }
                        // SAFETY: the chunk holds `len` bytes written before the release
                        // store of `written` acquired above; `off + len` lies inside the
                        // receive buffer, this rank's own memory.
                        unsafe {
                            ptr::copy_nonoverlapping(
                                seg.mbox_data(from, to, parity),
                                buf.ptr.add(off),
                                len,
                            )
                        };
                        read.store(rd + 1, Ordering::Release);
                    }
                    t.done += 1;
                    progressed = true;
                }
            }
            if transfers.iter().all(|t| t.done == t.chunks) {
                return Ok(());
            }
            if progressed {
                w.progressed(self);
                continue;
            }
            let stuck: Vec<&Transfer> = transfers.iter().filter(|t| t.done < t.chunks).collect();
            let what = || {
                stuck
                    .iter()
                    .map(|t| {
                        let (a, b) = if t.send {
                            (self.global, global(t.peer))
                        } else {
                            (global(t.peer), self.global)
                        };
                        format!(
                            "{} #{} from rank {a} to rank {b}",
                            if t.send { "send" } else { "receive" },
                            t.msg
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let missing = || {
                let mut peers: Vec<usize> = stuck.iter().map(|t| global(t.peer)).collect();
                peers.sort_unstable();
                peers.dedup();
                let mut arrived = vec![self.global];
                arrived.extend(
                    transfers
                        .iter()
                        .filter(|t| t.done == t.chunks)
                        .map(|t| global(t.peer))
                        .filter(|g| !peers.contains(g)),
                );
                arrived.sort_unstable();
                arrived.dedup();
                (peers, arrived)
            };
            w.idle(self, &what, &missing)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clique setup.

/// The coordinator key announcing a clique's segment.
fn announce_key(hash: u64, generation: u64) -> String {
    format!("xthunk.shm/{hash:016x}/{generation}")
}

/// Sets the clique `key` up for this process's rank `global` (see the module documentation).
fn join(
    coordinator: &Arc<dyn Coordinator>,
    key: &CliqueKey,
    generation: u64,
    global: usize,
    opts: &ShmOptions,
) -> Result<Arc<ShmRank>> {
    let Some(rank) = key.rank_of(global) else {
        return Err(Error::InvalidArgument(format!(
            "rank {global} is not a member of {key}"
        )));
    };
    let n = key.size();
    let hash = key_hash(key);
    let job = coordinator.job_id().to_string();
    let name = segment_name(&job, hash, generation);
    let announce = announce_key(hash, generation);
    let root = key.global_rank(0).unwrap_or(0);
    let t = opts.timeouts.terminate_after;
    PENDING.lock().insert(name.clone());
    let mapped = (|| -> Result<Segment> {
        if rank == 0 {
            let layout = Layout::for_clique(n, opts).ok_or_else(|| {
                shm_error(
                    "shared memory",
                    format!("{key}: a segment of {n} ranks is too large"),
                )
            })?;
            let token = random_u64();
            let seg = Segment::create(&name, layout, token, hash)?;
            let value = format!("{token:016x} {name} {key}");
            coordinator.set(&announce, value.as_bytes())?;
            Ok(seg)
        } else {
            let value = coordinator.get(&announce, t).map_err(|e| match e {
                DistributedError::GetTimeout { .. } => shm_error(
                    "setup",
                    format!(
                        "rank {root} did not arrive within {t:?}: it creates the shared memory \
                         segment of {key}, and never announced it (it never reached this \
                         operation, or is stuck before it)"
                    ),
                ),
                e => Error::Distributed(e),
            })?;
            let value = String::from_utf8_lossy(&value).into_owned();
            let mut parts = value.splitn(3, ' ');
            let token = parts.next().and_then(|t| u64::from_str_radix(t, 16).ok());
            let (Some(token), Some(announced)) = (token, parts.next()) else {
                return Err(shm_error(
                    "setup",
                    format!("{key}: malformed announcement {value:?}"),
                ));
            };
            if announced != name {
                return Err(shm_error(
                    "setup",
                    format!("{key}: rank {root} announced segment {announced}, expected {name}"),
                ));
            }
            Segment::open(&name, token, n, hash)
        }
    })();
    let result = mapped.and_then(|seg| {
        let st = Arc::new(ShmRank {
            seg,
            key: key.clone(),
            rank,
            global,
            coordinator: coordinator.clone(),
            timeouts: opts.timeouts,
            run: Mutex::new(RunState {
                phase: 0,
                seq: 0,
                sent: vec![0; n],
                received: vec![0; n],
            }),
        });
        let seg = &st.seg;
        seg.rank_word(rank, R_PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        seg.rank_word(rank, R_JOINED).store(1, Ordering::Release);
        seg.word(H_JOINED).fetch_add(1, Ordering::AcqRel);
        let what = || format!("setup of {key} (segment {name})");
        let mut w = Waiter::new(&st);
        while seg.word(H_JOINED).load(Ordering::Acquire) < n as u64 {
            if let Err(e) = w.idle(&st, &what, &|| {
                st.split_ranks(|q| seg.rank_word(q, R_JOINED).load(Ordering::Acquire) != 0)
            }) {
                return Err(st.fail("setup", e));
            }
        }
        Ok(st)
    });
    // Every member mapped the segment, or the setup failed: either way the name goes.
    unlink(&name);
    PENDING.lock().remove(&name);
    let st = result?;
    tracing::debug!(%key, rank, global, segment = %name, len = st.seg.layout.len, "joined a shared memory clique");
    Ok(st)
}

// ---------------------------------------------------------------------------------------------
// The provider.

/// Host collectives among the processes of one job on one host: this process is one rank
/// (the coordinator's), and every clique's data goes through a shared memory segment. See the
/// [module documentation](self).
pub struct ShmCliqueProvider {
    coordinator: Arc<dyn Coordinator>,
    options: ShmOptions,
    cliques: Mutex<BTreeMap<CliqueKey, Arc<ShmCommunicator>>>,
    /// Serializes setups (they block), apart from the map that `abort_all` locks.
    creating: Mutex<()>,
    generations: Mutex<BTreeMap<CliqueKey, u64>>,
    splits: Mutex<BTreeMap<CliqueKey, u64>>,
}

impl fmt::Debug for ShmCliqueProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmCliqueProvider")
            .field("job", &self.coordinator.job_id())
            .field("rank", &self.coordinator.rank())
            .field("world", &self.coordinator.world_size())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ShmCliqueProvider {
    /// The provider of the rank `coordinator.rank()` of `coordinator`'s job.
    pub fn new(coordinator: Arc<dyn Coordinator>, options: ShmOptions) -> Self {
        ShmCliqueProvider {
            coordinator,
            options,
            cliques: Mutex::new(BTreeMap::new()),
            creating: Mutex::new(()),
            generations: Mutex::new(BTreeMap::new()),
            splits: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn options(&self) -> ShmOptions {
        self.options
    }

    pub fn coordinator(&self) -> &Arc<dyn Coordinator> {
        &self.coordinator
    }

    /// The cliques set up so far, in key order.
    pub fn cliques(&self) -> Vec<CliqueKey> {
        self.cliques.lock().keys().cloned().collect()
    }

    /// Why a clique of this provider failed, if one did (the first in key order).
    pub fn failure(&self) -> Option<String> {
        let comms: Vec<Arc<ShmCommunicator>> = self.cliques.lock().values().cloned().collect();
        comms.iter().find_map(|c| c.transport().seg.poisoned())
    }

    /// Aborts every clique (its operations fail on every rank, at once) and removes the
    /// segments whose setup is in progress.
    pub fn abort_all(&self, reason: &str) {
        let comms: Vec<Arc<ShmCommunicator>> = self.cliques.lock().values().cloned().collect();
        for c in comms {
            c.abort(reason);
        }
        remove_pending_segments();
    }

    /// As [`CliqueProvider::acquire`], typed.
    pub fn communicator(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<Arc<ShmCommunicator>> {
        let world = self.coordinator.world_size();
        let me = self.coordinator.rank();
        if let Some(bad) = key.ranks().iter().find(|r| **r >= world) {
            return Err(Error::InvalidArgument(format!(
                "{key}: rank {bad} does not exist (a job of {world} ranks)"
            )));
        }
        if global_rank != me {
            return Err(Error::InvalidArgument(format!(
                "this process is rank {me} of job `{}`: it cannot act as rank {global_rank} \
                 (shared memory cliques serve one rank per process)",
                self.coordinator.job_id()
            )));
        }
        if key.rank_of(global_rank).is_none() {
            return Err(Error::InvalidArgument(format!(
                "rank {global_rank} is not a member of {key}"
            )));
        }
        if let Some(c) = self.cliques.lock().get(key) {
            return Ok(c.clone());
        }
        let _one = self.creating.lock();
        if let Some(c) = self.cliques.lock().get(key) {
            return Ok(c.clone());
        }
        let generation = {
            let mut g = self.generations.lock();
            let e = g.entry(key.clone()).or_insert(0);
            let v = *e;
            *e += 1;
            v
        };
        let st = join(
            &self.coordinator,
            key,
            generation,
            global_rank,
            &self.options,
        )?;
        let comm = Arc::new(HostComm::new(st));
        self.cliques.lock().insert(key.clone(), comm.clone());
        Ok(comm)
    }
}

impl CliqueProvider for ShmCliqueProvider {
    fn num_ranks(&self) -> usize {
        self.coordinator.world_size()
    }

    fn acquire(&self, key: &CliqueKey, global_rank: usize) -> Result<Arc<dyn Communicator>> {
        Ok(self.communicator(key, global_rank)?)
    }

    /// Colors are exchanged through the coordinator (key
    /// `xthunk.shm-split/<parent hash>/<n>/<rank>`), then the new clique is set up as by
    /// `acquire`.
    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        let comm = self.communicator(parent, global_rank)?;
        let n = {
            let mut s = self.splits.lock();
            let e = s.entry(parent.clone()).or_insert(0);
            let v = *e;
            *e += 1;
            v
        };
        let hash = key_hash(parent);
        let k = |r: usize| format!("xthunk.shm-split/{hash:016x}/{n}/{r}");
        let enc = color.map_or_else(|| "none".to_string(), |c| c.to_string());
        let fail = |e: DistributedError| shm_error("split", format!("{}: {e}", comm.describe()));
        self.coordinator
            .set(&k(global_rank), enc.as_bytes())
            .map_err(&fail)?;
        let Some(color) = color else {
            return Ok(None);
        };
        let t = comm.transport().timeouts.terminate_after;
        let mut members = vec![];
        for &g in parent.ranks() {
            let theirs = if g == global_rank {
                enc.clone().into_bytes()
            } else {
                self.coordinator.get(&k(g), t).map_err(&fail)?
            };
            if theirs == enc.as_bytes() {
                members.push(g);
            }
        }
        let key = CliqueKey::new(members, parent.stream_kind())?.with_color(color);
        Ok(Some(self.communicator(&key, global_rank)?))
    }

    fn evict_aborted(&self) -> Vec<CliqueKey> {
        let mut map = self.cliques.lock();
        let dead: Vec<CliqueKey> = map
            .iter()
            .filter(|(_, c)| c.transport().seg.poisoned().is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for k in &dead {
            map.remove(k);
        }
        dead
    }
}

// ---------------------------------------------------------------------------------------------
// The transport.

impl ShmCommunicator {
    /// The bytes of one staging slot (the chunk size of collectives) and of one mailbox chunk.
    pub fn chunk_bytes(&self) -> (usize, usize) {
        let l = &self.transport().seg.layout;
        (l.slot, l.mbox)
    }
}

impl Transport for ShmRank {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn key(&self) -> &CliqueKey {
        &self.key
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn global_rank(&self) -> usize {
        self.global
    }

    fn describe(&self) -> String {
        format!(
            "rank {} (global rank {}) of {} over shared memory",
            self.rank, self.global, self.key
        )
    }

    unsafe fn run_collective(&self, desc: OpDesc, src: RawBuf, dst: RawBuf) -> Result<()> {
        let mut run = self.run.lock();
        let seq = run.seq;
        run.seq += 1;
        if let Some(msg) = self.seg.poisoned() {
            return Err(shm_error("collective", msg));
        }
        let what = format!("{desc} (collective #{seq})");
        // SAFETY: forwarded.
        unsafe { self.collective(&mut run, seq, desc, src, dst) }.map_err(|e| self.fail(&what, e))
    }

    unsafe fn run_group(&self, ops: &[P2pOp]) -> Result<()> {
        let mut run = self.run.lock();
        if let Some(msg) = self.seg.poisoned() {
            return Err(shm_error("send/recv", msg));
        }
        // SAFETY: forwarded.
        unsafe { self.p2p_group(&mut run, ops) }.map_err(|e| self.fail("send/recv group", e))
    }

    /// The clique's poison, or a failure the coordinator knows of.
    fn async_error(&self) -> Result<()> {
        if let Some(msg) = self.seg.poisoned() {
            return Err(shm_error(
                "collective",
                format!("{}: {msg}", self.describe()),
            ));
        }
        if let Some(f) = self.coordinator.failures().into_iter().next() {
            return Err(shm_error("collective", format!("{}: {f}", self.describe())));
        }
        Ok(())
    }

    fn abort(&self, reason: &str) {
        let first = self.seg.poison(&format!(
            "{} aborted by rank {}: {reason}",
            self.key, self.global
        ));
        if first {
            tracing::warn!(communicator = %self.describe(), reason, "aborted shared memory communicator");
        } else {
            tracing::debug!(communicator = %self.describe(), reason, "abort of a failed shared memory communicator");
        }
    }

    /// The ranks that have not reached the latest phase any rank published, if any.
    fn pending(&self) -> Option<String> {
        let seg = &self.seg;
        let phases: Vec<u64> = (0..seg.n())
            .map(|q| seg.phase(q).load(Ordering::Acquire))
            .collect();
        let top = phases.iter().copied().max().unwrap_or(0);
        let (missing, arrived) = self.split_ranks(|q| phases[q] >= top);
        (!missing.is_empty()).then(|| {
            format!(
                "{}: phase {top} waiting for {} (arrived: {})",
                self.key,
                list_ranks(&missing),
                list_ranks(&arrived)
            )
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_bounded_and_aligned() {
        for n in [1, 2, 3, 4, 8, 64, 256] {
            let l = Layout::for_clique(n, &ShmOptions::default()).unwrap();
            assert_eq!(l.slot % 64, 0);
            assert_eq!(l.mbox % 64, 0);
            assert!(l.slot >= n * 8);
            assert_eq!(l.len % PAGE, 0);
            assert!(l.len <= 48 << 20, "n={n}: {l:?}");
            assert!(l.mbox_ctl >= l.ranks + n * RANK_BLOCK);
            assert!(l.slots >= l.mbox_ctl + n * n * MBOX_BLOCK);
        }
        let tiny = ShmOptions {
            slot_bytes: 1,
            mailbox_bytes: 1,
            ..Default::default()
        };
        let l = Layout::for_clique(4, &tiny).unwrap();
        assert_eq!((l.slot, l.mbox), (64, 64));
    }

    #[test]
    fn names_hold_the_job() {
        let k = CliqueKey::new([0, 1], crate::collectives::StreamKind::Compute).unwrap();
        let name = segment_name("job-1", key_hash(&k), 3);
        assert!(name.starts_with(&job_segment_prefix("job-1")));
        assert!(!name.starts_with(&job_segment_prefix("job")));
        assert!(name.ends_with(".3"));
        assert_ne!(
            key_hash(&k),
            key_hash(
                &CliqueKey::new([0, 1], crate::collectives::StreamKind::Communication).unwrap()
            )
        );
    }

    #[test]
    fn a_job_s_segments_can_be_listed_and_removed() {
        let j = job("remove");
        let k = CliqueKey::new([0, 1, 2], crate::collectives::StreamKind::Compute).unwrap();
        let layout = Layout::for_clique(3, &ShmOptions::default()).unwrap();
        let names: Vec<String> = (0..2).map(|g| segment_name(&j, key_hash(&k), g)).collect();
        let segs: Vec<Segment> = names
            .iter()
            .map(|n| Segment::create(n, layout, 7, key_hash(&k)).unwrap())
            .collect();
        assert_eq!(job_segments(&j), names);
        // A stale segment of the same name is replaced; a wrong token is refused.
        let again = Segment::create(&names[0], layout, 8, key_hash(&k)).unwrap();
        assert!(Segment::open(&names[0], 7, 3, key_hash(&k)).is_err());
        assert!(Segment::open(&names[0], 8, 3, key_hash(&k)).is_ok());
        assert!(Segment::open(&names[0], 8, 4, key_hash(&k)).is_err());
        assert_eq!(remove_job_segments(&j), 2);
        assert!(job_segments(&j).is_empty());
        // The mappings outlive the names.
        segs[1].word(H_JOINED).fetch_add(1, Ordering::Relaxed);
        assert!(again.poison("x") && !again.poison("y"));
        assert_eq!(again.poisoned().as_deref(), Some("x"));
    }

    // -----------------------------------------------------------------------------------------
    // Ranks as threads, each with its own coordinator, provider and mapping of the segments
    // (the protocol is the same as across processes), against the in-process host collectives.

    use super::super::HostCliqueProvider;
    use crate::backend::{Backend, Buffer, Device, Stream};
    use crate::collectives::StreamKind;
    use crate::distributed::LocalCoordinator;
    use crate::host::HostBackend;
    use crate::ir::DType;
    use crate::ir::MemorySpace;
    use rand::{RngCore, SeedableRng};

    fn job(name: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!(
            "shmtest-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn tiny(timeouts: Timeouts) -> ShmOptions {
        // Chunks of a few elements: every operation goes through many phases.
        ShmOptions {
            timeouts,
            slot_bytes: 64,
            mailbox_bytes: 64,
        }
    }

    fn patient() -> Timeouts {
        Timeouts::new(Duration::from_secs(5), Duration::from_secs(30))
    }

    fn all(n: usize) -> CliqueKey {
        CliqueKey::new(0..n, StreamKind::Compute).unwrap()
    }

    /// One rank: its device, stream and providers (shared memory, and for the reference the
    /// in-process provider of all ranks).
    struct Rank {
        rank: usize,
        device: Arc<dyn Device>,
        stream: Arc<dyn Stream>,
    }

    impl Rank {
        fn buf(&self, bytes: &[u8], len: usize) -> Buffer {
            let b = self
                .device
                .allocate(len.max(1) as u64, 64, MemorySpace::Device)
                .unwrap();
            let mut init = bytes.to_vec();
            init.resize(len.max(1), 0xEE);
            self.device.copy_from_host(&init, b.ptr()).unwrap();
            b
        }
        fn read(&self, b: &Buffer, len: usize) -> Vec<u8> {
            let mut v = vec![0u8; len];
            self.device.copy_to_host(b.ptr(), &mut v).unwrap();
            v
        }
    }

    /// Runs `body` on `n` threads, one rank each, with the shared memory provider of that rank
    /// (`job_id`, `opts`); every thread is joined. `hold` lets a rank keep its coordinator
    /// alive (false: it is dropped without shutdown when the body returns: a dead rank).
    fn with_ranks<T: Send>(
        n: usize,
        job_id: &str,
        opts: ShmOptions,
        body: impl Fn(&Rank, &ShmCliqueProvider) -> T + Sync,
    ) -> Vec<T> {
        let backend = HostBackend::with_devices(n);
        let coords = LocalCoordinator::job(job_id, n).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = coords
                .into_iter()
                .enumerate()
                .map(|(rank, c)| {
                    let device = backend.device(rank).unwrap();
                    let body = &body;
                    s.spawn(move || {
                        let c: Arc<dyn Coordinator> = Arc::new(c);
                        let provider = ShmCliqueProvider::new(c.clone(), opts);
                        let stream = device.create_stream().unwrap();
                        let r = Rank {
                            rank,
                            device,
                            stream,
                        };
                        let out = body(&r, &provider);
                        // A clean exit: every rank shuts down together.
                        let _ = c.shutdown(Duration::from_secs(30));
                        out
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// The same, with the in-process host provider (the reference).
    fn with_host_ranks<T: Send>(
        n: usize,
        body: impl Fn(&Rank, &dyn CliqueProvider) -> T + Sync,
    ) -> Vec<T> {
        let backend = HostBackend::with_devices(n);
        let devices: Vec<Arc<dyn Device>> = (0..n).map(|i| backend.device(i).unwrap()).collect();
        let provider = HostCliqueProvider::new(devices.clone(), patient()).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(rank, device)| {
                    let (body, provider) = (&body, &provider);
                    let device = device.clone();
                    s.spawn(move || {
                        let stream = device.create_stream().unwrap();
                        body(
                            &Rank {
                                rank,
                                device,
                                stream,
                            },
                            provider,
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[derive(Clone, Copy, Debug)]
    enum Case {
        AllReduce(ReduceOp),
        AllReduceInPlace,
        AllGather,
        ReduceScatter(ReduceOp),
        AllToAll,
        AllToAllInPlace,
        Broadcast(usize),
    }

    /// Issues `case` on `comm` with this rank's `input`; returns the output bytes.
    fn issue(
        r: &Rank,
        comm: &dyn Communicator,
        case: Case,
        d: DType,
        count: usize,
    ) -> Result<Vec<u8>> {
        let n = comm.size();
        let s = d.size();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64((r.rank * 7919 + count) as u64);
        let mut bytes = |len: usize| {
            let mut v = vec![0u8; len];
            rng.fill_bytes(&mut v);
            if matches!(d, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
                // Finite values: small integers as floats.
                for c in v.chunks_mut(s) {
                    let x = (c[0] % 16) as f64 - 8.0;
                    let e: Vec<u8> = match d {
                        DType::F16 => half::f16::from_f64(x).to_le_bytes().to_vec(),
                        DType::BF16 => half::bf16::from_f64(x).to_le_bytes().to_vec(),
                        DType::F32 => (x as f32 + 0.125).to_le_bytes().to_vec(),
                        _ => (x + 1.0 / 3.0).to_le_bytes().to_vec(),
                    };
                    c.copy_from_slice(&e);
                }
            }
            v
        };
        let (sl, dl) = match case {
            Case::AllReduce(_) | Case::AllReduceInPlace | Case::Broadcast(_) => {
                (count * s, count * s)
            }
            Case::AllGather => (count * s, n * count * s),
            Case::ReduceScatter(_) => (n * count * s, count * s),
            Case::AllToAll | Case::AllToAllInPlace => (n * count * s, n * count * s),
        };
        let input = bytes(sl);
        let src = r.buf(&input, sl);
        let dst = r.buf(&[], dl);
        let st = r.stream.as_ref();
        let res = match case {
            Case::AllReduce(op) => comm.all_reduce(st, src.ptr(), dst.ptr(), count as u64, d, op),
            Case::AllReduceInPlace => {
                comm.all_reduce(st, src.ptr(), src.ptr(), count as u64, d, ReduceOp::Sum)
            }
            Case::AllGather => comm.all_gather(st, src.ptr(), dst.ptr(), count as u64, d),
            Case::ReduceScatter(op) => {
                comm.reduce_scatter(st, src.ptr(), dst.ptr(), count as u64, d, op)
            }
            Case::AllToAll => comm.all_to_all(st, src.ptr(), dst.ptr(), count as u64, d),
            Case::AllToAllInPlace => comm.all_to_all(st, src.ptr(), src.ptr(), count as u64, d),
            Case::Broadcast(root) => {
                comm.broadcast(st, src.ptr(), dst.ptr(), count as u64, d, root)
            }
        };
        res.and_then(|()| r.stream.synchronize())?;
        Ok(match case {
            Case::AllReduceInPlace | Case::AllToAllInPlace => r.read(&src, sl),
            _ => r.read(&dst, dl),
        })
    }

    #[test]
    fn every_operation_matches_the_in_process_collectives_bit_for_bit() {
        let cases = [
            Case::AllReduce(ReduceOp::Sum),
            Case::AllReduce(ReduceOp::Max),
            Case::AllReduce(ReduceOp::Prod),
            Case::AllReduceInPlace,
            Case::AllGather,
            Case::ReduceScatter(ReduceOp::Sum),
            Case::ReduceScatter(ReduceOp::Min),
            Case::AllToAll,
            Case::AllToAllInPlace,
            Case::Broadcast(0),
            Case::Broadcast(1),
        ];
        let dtypes = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::F64,
            DType::I32,
            DType::U8,
        ];
        let counts = [0usize, 1, 7, 100];
        for n in [2usize, 3, 4] {
            let key = all(n);
            let body = |r: &Rank, p: &dyn CliqueProvider| {
                let comm = p.acquire(&key, r.rank).unwrap();
                let mut outs = vec![];
                for case in cases {
                    for d in dtypes {
                        for count in counts {
                            let out = issue(r, comm.as_ref(), case, d, count)
                                .unwrap_or_else(|e| panic!("{case:?} {d} x{count}: {e}"));
                            outs.push((format!("{case:?} {d} x{count}"), out));
                        }
                    }
                }
                outs
            };
            let want = with_host_ranks(n, |r, p| body(r, p));
            let got = with_ranks(n, &job("ops"), tiny(patient()), |r, p| body(r, p));
            for (rank, (g, w)) in got.iter().zip(&want).enumerate() {
                for ((name, a), (_, b)) in g.iter().zip(w) {
                    assert!(a == b, "n={n} rank {rank} {name}: {a:?} != {b:?}");
                }
            }
        }
    }

    #[test]
    fn large_buffers_go_through_in_chunks() {
        // Default sizes: 1 MiB of f32 is 4 slots per rank.
        let n = 3;
        let key = all(n);
        let body = |r: &Rank, p: &dyn CliqueProvider| {
            let comm = p.acquire(&key, r.rank).unwrap();
            issue(
                r,
                comm.as_ref(),
                Case::AllReduce(ReduceOp::Sum),
                DType::F32,
                1 << 18,
            )
            .unwrap()
        };
        let want = with_host_ranks(n, |r, p| body(r, p));
        let got = with_ranks(n, &job("large"), ShmOptions::default(), |r, p| {
            let comm = p.communicator(&key, r.rank).unwrap();
            assert!(comm.chunk_bytes().0 < 1 << 20);
            body(r, p)
        });
        assert!(got == want);
    }

    /// A ring of sends and receives (one group per rank), many chunks each.
    #[test]
    fn permute_rings_and_repeated_sends() {
        for n in [2usize, 3, 4] {
            let key = all(n);
            let count = 1000usize;
            let outs = with_ranks(n, &job("ring"), tiny(patient()), |r, p| {
                let comm = p.acquire(&key, r.rank).unwrap();
                let mine: Vec<u8> = (0..count * 4)
                    .map(|i| (i * 31 + r.rank * 7) as u8)
                    .collect();
                let src = r.buf(&mine, count * 4);
                let dst = r.buf(&[], count * 4);
                let dst2 = r.buf(&[], 8);
                let st = r.stream.as_ref();
                for _ in 0..3 {
                    comm.group_start().unwrap();
                    comm.send(st, src.ptr(), count as u64, DType::F32, (r.rank + 1) % n)
                        .unwrap();
                    comm.recv(
                        st,
                        dst.ptr(),
                        count as u64,
                        DType::F32,
                        (r.rank + n - 1) % n,
                    )
                    .unwrap();
                    // A second, small message on the same pair in the same group.
                    comm.send(st, src.ptr(), 2, DType::F32, (r.rank + 1) % n)
                        .unwrap();
                    comm.recv(st, dst2.ptr(), 2, DType::F32, (r.rank + n - 1) % n)
                        .unwrap();
                    comm.group_end_on(st).unwrap();
                }
                st.synchronize().unwrap();
                (r.read(&dst, count * 4), r.read(&dst2, 8))
            });
            for (rank, (got, got2)) in outs.iter().enumerate() {
                let from = (rank + n - 1) % n;
                let want: Vec<u8> = (0..count * 4).map(|i| (i * 31 + from * 7) as u8).collect();
                assert!(*got == want, "n={n} rank {rank}");
                assert_eq!(got2[..], want[..8], "n={n} rank {rank}");
            }
        }
    }

    #[test]
    fn mismatched_operations_fail_on_every_rank() {
        let outs = with_ranks(3, &job("mismatch"), tiny(patient()), |r, p| {
            let comm = p.acquire(&all(3), r.rank).unwrap();
            let count = if r.rank == 1 { 8 } else { 9 };
            issue(
                r,
                comm.as_ref(),
                Case::AllReduce(ReduceOp::Sum),
                DType::F32,
                count,
            )
            .unwrap_err()
            .to_string()
        });
        for m in outs {
            assert!(m.contains("issued different collectives"), "{m}");
            assert!(m.contains("8 elements") && m.contains("9 elements"), "{m}");
        }
    }

    #[test]
    fn a_rank_that_never_arrives_is_named_at_the_terminate_timeout() {
        let t = Timeouts::new(Duration::from_millis(100), Duration::from_millis(700));
        let start = Instant::now();
        let outs = with_ranks(4, &job("late"), tiny(t), |r, p| {
            let comm = p.acquire(&all(4), r.rank).unwrap();
            issue(
                r,
                comm.as_ref(),
                Case::AllReduce(ReduceOp::Sum),
                DType::F32,
                40,
            )
            .unwrap();
            if r.rank == 3 {
                // Rank 3 skips the second collective (and waits for the others to give up).
                std::thread::sleep(Duration::from_millis(1500));
                return String::new();
            }
            let e = issue(
                r,
                comm.as_ref(),
                Case::AllReduce(ReduceOp::Sum),
                DType::F32,
                40,
            )
            .unwrap_err();
            e.to_string()
        });
        assert!(start.elapsed() < Duration::from_secs(10));
        for m in &outs[..3] {
            assert!(m.contains("rank 3 did not arrive"), "{m}");
        }
    }

    #[test]
    fn a_first_rank_that_never_sets_up_is_named() {
        let t = Timeouts::new(Duration::from_millis(100), Duration::from_millis(500));
        let j = job("setup");
        let outs = with_ranks(3, &j, tiny(t), |r, p| {
            if r.rank == 0 {
                std::thread::sleep(Duration::from_millis(1200));
                return String::new();
            }
            p.acquire(&all(3), r.rank).err().unwrap().to_string()
        });
        for m in &outs[1..] {
            assert!(m.contains("rank 0 did not arrive"), "{m}");
        }
        // A member that never joins: the first rank names it and removes the segment.
        let outs = with_ranks(3, &j, tiny(t), |r, p| {
            if r.rank == 2 {
                std::thread::sleep(Duration::from_millis(1200));
                return String::new();
            }
            p.acquire(&all(3), r.rank).err().unwrap().to_string()
        });
        for m in &outs[..2] {
            assert!(m.contains("rank 2 did not arrive"), "{m}");
        }
        assert!(job_segments(&j).is_empty(), "{:?}", job_segments(&j));
    }

    #[test]
    fn an_abort_fails_the_others_at_once() {
        let start = Instant::now();
        let outs = with_ranks(3, &job("abort"), tiny(patient()), |r, p| {
            let comm = p.acquire(&all(3), r.rank).unwrap();
            if r.rank == 0 {
                std::thread::sleep(Duration::from_millis(200));
                comm.abort("test abort");
                assert!(comm.async_error().is_err());
                return String::new();
            }
            issue(r, comm.as_ref(), Case::AllGather, DType::I32, 5)
                .unwrap_err()
                .to_string()
        });
        assert!(start.elapsed() < Duration::from_secs(5));
        for m in &outs[1..] {
            assert!(m.contains("test abort"), "{m}");
        }
    }

    #[test]
    fn a_dead_rank_is_named_as_soon_as_the_coordinator_knows() {
        let j = job("dead");
        let mut coords: Vec<Option<LocalCoordinator>> = LocalCoordinator::job(&j, 3)
            .unwrap()
            .into_iter()
            .map(Some)
            .collect();
        let victim = coords[1].take().unwrap();
        let start = Instant::now();
        let outs: Vec<String> = std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                drop(victim);
            });
            let hs: Vec<_> = [0usize, 2]
                .into_iter()
                .map(|rank| {
                    let c: Arc<dyn Coordinator> = Arc::new(coords[rank].take().unwrap());
                    s.spawn(move || {
                        let p = ShmCliqueProvider::new(c, tiny(patient()));
                        match p.acquire(&all(3), rank) {
                            Ok(_) => String::from("acquired?"),
                            Err(e) => e.to_string(),
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        for m in outs {
            assert!(m.contains("rank 1 failed"), "{m}");
        }
        assert!(job_segments(&j).is_empty());
    }

    #[test]
    fn no_segment_outlives_the_setup_and_jobs_do_not_mix() {
        let (a, b) = (job("mix-a"), job("mix-b"));
        let results: Vec<Vec<u8>> = std::thread::scope(|s| {
            let ha = s.spawn(|| {
                with_ranks(2, &a, tiny(patient()), |r, p| {
                    let comm = p.acquire(&all(2), r.rank).unwrap();
                    assert!(job_segments(&a).is_empty());
                    issue(r, comm.as_ref(), Case::AllGather, DType::U8, 300).unwrap()
                })
            });
            let hb = s.spawn(|| {
                with_ranks(2, &b, tiny(patient()), |r, p| {
                    let comm = p.acquire(&all(2), r.rank).unwrap();
                    issue(r, comm.as_ref(), Case::AllGather, DType::U8, 300).unwrap()
                })
            });
            vec![ha.join().unwrap().concat(), hb.join().unwrap().concat()]
        });
        assert_eq!(results[0], results[1]);
        let want = with_host_ranks(2, |r, p| {
            let comm = p.acquire(&all(2), r.rank).unwrap();
            issue(r, comm.as_ref(), Case::AllGather, DType::U8, 300).unwrap()
        });
        assert_eq!(results[0], want.concat());
        assert!(job_segments(&a).is_empty() && job_segments(&b).is_empty());
    }

    #[test]
    fn send_receive_mismatches_and_missing_receivers_are_named() {
        let t = Timeouts::new(Duration::from_millis(100), Duration::from_millis(600));
        let outs = with_ranks(2, &job("p2p-mismatch"), tiny(t), |r, p| {
            let comm = p.acquire(&all(2), r.rank).unwrap();
            let b = r.buf(&[0u8; 64], 64);
            let st = r.stream.as_ref();
            let res = if r.rank == 0 {
                // An eager send of one chunk completes; the failure shows at the next operation
                // (or in `async_error`).
                comm.send(st, b.ptr(), 8, DType::F32, 1)
                    .and_then(|()| st.synchronize())
                    .unwrap();
                issue(r, comm.as_ref(), Case::AllGather, DType::U8, 4)
            } else {
                comm.recv(st, b.ptr(), 9, DType::F32, 0)
                    .and_then(|()| st.synchronize())
                    .map(|()| vec![])
            };
            res.unwrap_err().to_string()
        });
        for m in outs {
            assert!(
                m.contains("the sender sends 8 f32 but the receiver expects 9 f32"),
                "{m}"
            );
        }
        // A send of many chunks whose receiver never comes: named at the timeout.
        let outs = with_ranks(2, &job("p2p-missing"), tiny(t), |r, p| {
            let comm = p.acquire(&all(2), r.rank).unwrap();
            if r.rank == 1 {
                std::thread::sleep(Duration::from_millis(1200));
                return String::new();
            }
            let b = r.buf(&[0u8; 4000], 4000);
            let st = r.stream.as_ref();
            comm.send(st, b.ptr(), 1000, DType::F32, 1)
                .and_then(|()| st.synchronize())
                .unwrap_err()
                .to_string()
        });
        assert!(
            outs[0].contains("send #0 from rank 0 to rank 1")
                && outs[0].contains("rank 1 did not arrive"),
            "{}",
            outs[0]
        );
    }

    #[test]
    fn splits_and_sub_cliques() {
        let outs = with_ranks(4, &job("split"), tiny(patient()), |r, p| {
            let parent = all(4);
            let color = (r.rank % 2) as u64;
            let sub = p.split(&parent, r.rank, Some(color)).unwrap().unwrap();
            assert_eq!(sub.size(), 2);
            issue(r, sub.as_ref(), Case::AllGather, DType::I32, 3).unwrap()
        });
        let want = with_host_ranks(4, |r, p| {
            let key = CliqueKey::new([r.rank % 2, r.rank % 2 + 2], StreamKind::Compute)
                .unwrap()
                .with_color((r.rank % 2) as u64);
            let comm = p.acquire(&key, r.rank).unwrap();
            issue(r, comm.as_ref(), Case::AllGather, DType::I32, 3).unwrap()
        });
        assert_eq!(outs, want);
    }
}
