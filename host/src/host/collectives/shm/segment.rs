//! One mapping of a clique's segment: creating, opening and checking it (its owner and mode,
//! then its header), the words and areas of the layout, and the clique's poison (the first
//! failure's message).

use super::layout::*;
use super::shm_error;
use crate::error::{Error, Result};
use std::ffi::CString;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

/// One mapping of a segment.
pub(super) struct Segment {
    ptr: *mut u8,
    pub(super) layout: Layout,
}

// SAFETY: the mapping is shared memory that lives until `Drop`; every word that more than one
// thread or process may access at once is accessed atomically, and the data areas are handed
// between ranks by the release/acquire protocol described in the shared memory transport's
// module documentation.
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
pub(super) fn unlink(name: &str) -> bool {
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

/// The only permission bits a segment may have: read and write for its owner.
pub(super) const SEGMENT_MODE: u32 = 0o600;

/// Checks that the open segment `fd` (named `name`) is a regular file owned by this process's
/// user with mode [`SEGMENT_MODE`] (`fstat` of the descriptor, so what is checked is what is
/// mapped); returns its size. Anything else is refused: another user may have created it to
/// read or change the clique's data.
// `mode_t` is `u32` here, `u16` on other systems.
#[allow(clippy::useless_conversion)]
fn check_owner(fd: &Fd, name: &str) -> Result<usize> {
    // SAFETY: `st` is plain old data, filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out pointer.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return Err(os_error("cannot stat", name));
    }
    // SAFETY: no preconditions.
    let me = unsafe { libc::geteuid() };
    let mode = u32::from(st.st_mode) & 0o7777;
    let regular = u32::from(st.st_mode) & u32::from(libc::S_IFMT) == u32::from(libc::S_IFREG);
    if st.st_uid != me || mode != SEGMENT_MODE || !regular {
        return Err(shm_error(
            "shared memory",
            format!(
                "refusing segment /dev/shm/{name}: it is {}owned by uid {} with mode {mode:04o}, \
                 but a segment of this job must be a file owned by this user (uid {me}) with \
                 mode {SEGMENT_MODE:04o} (another user may have created it to read or change \
                 the job's data)",
                if regular { "" } else { "not a regular file, " },
                st.st_uid
            ),
        ));
    }
    Ok(usize::try_from(st.st_size).unwrap_or(0))
}

impl Segment {
    /// Creates the segment `name` (exclusively, mode 0600) for `layout` and writes its header
    /// (magic last).
    pub(super) fn create(name: &str, layout: Layout, token: u64, key_hash: u64) -> Result<Segment> {
        let c = c_name(name)?;
        // SAFETY: `c` is a valid NUL-terminated string; plain flags and mode.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                SEGMENT_MODE as libc::mode_t,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(shm_error(
                "shared memory",
                if e.raw_os_error() == Some(libc::EEXIST) {
                    // The name carries a fresh 128-bit nonce: nobody of this job made it.
                    format!(
                        "cannot create {name}: a segment of that name exists already, made by \
                         someone else (it is left alone)"
                    )
                } else {
                    format!("cannot create {name}: {e}")
                },
            ));
        }
        let fd = Fd(fd);
        let created = || -> Result<Segment> {
            // The umask may have taken bits off the mode given to shm_open.
            // SAFETY: a descriptor of the segment just created; a plain mode.
            if unsafe { libc::fchmod(fd.0, SEGMENT_MODE as libc::mode_t) } != 0 {
                return Err(os_error("cannot set the mode of", name));
            }
            check_owner(&fd, name)?;
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

    /// Opens and maps the existing segment `name`, checking its owner and mode, then its
    /// header.
    pub(super) fn open(name: &str, token: u64, n: usize, key_hash: u64) -> Result<Segment> {
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
        let size = check_owner(&fd, name)?;
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
    pub(super) fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.layout.len);
        // SAFETY: in bounds (checked) and 8-aligned (the mapping is page-aligned); the memory
        // lives as long as `self`, and is only ever accessed atomically at this offset.
        unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast()) }
    }

    pub(super) fn n(&self) -> usize {
        self.layout.n
    }

    pub(super) fn rank_word(&self, r: usize, off: usize) -> &AtomicU64 {
        assert!(r < self.layout.n);
        self.word(self.layout.ranks + r * RANK_BLOCK + off)
    }

    pub(super) fn phase(&self, r: usize) -> &AtomicU64 {
        self.rank_word(r, R_PHASE)
    }

    pub(super) fn desc_word(&self, r: usize, parity: usize, i: usize) -> &AtomicU64 {
        self.rank_word(r, R_DESC + (parity & 1) * 64 + i * 8)
    }

    /// Slot `parity` of rank `r`: `slot` bytes.
    pub(super) fn slot(&self, r: usize, parity: usize) -> *mut u8 {
        assert!(r < self.layout.n);
        let off = self.layout.slots + (r * 2 + (parity & 1)) * self.layout.slot;
        // SAFETY: inside the mapping (the layout reserves `2n` slots there).
        unsafe { self.ptr.add(off) }
    }

    pub(super) fn mbox_word(&self, from: usize, to: usize, off: usize) -> &AtomicU64 {
        let n = self.layout.n;
        assert!(from < n && to < n);
        self.word(self.layout.mbox_ctl + (from * n + to) * MBOX_BLOCK + off)
    }

    pub(super) fn mbox_hdr(&self, from: usize, to: usize, parity: usize, i: usize) -> &AtomicU64 {
        self.mbox_word(from, to, M_HDR + ((parity & 1) * HDR_WORDS + i) * 8)
    }

    /// Chunk `parity` of the mailbox `from -> to`: `mbox` bytes.
    pub(super) fn mbox_data(&self, from: usize, to: usize, parity: usize) -> *mut u8 {
        let n = self.layout.n;
        assert!(from < n && to < n);
        let off = self.layout.mbox_data + ((from * n + to) * 2 + (parity & 1)) * self.layout.mbox;
        // SAFETY: inside the mapping (the layout reserves `2n²` chunks there).
        unsafe { self.ptr.add(off) }
    }

    /// Marks the clique failed with `msg` (the first message wins: true if it was this one).
    pub(super) fn poison(&self, msg: &str) -> bool {
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
    pub(super) fn poisoned(&self) -> Option<String> {
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
