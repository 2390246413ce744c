//! Collective memory, strictly: `ncclMemAlloc` / `ncclMemFree` (device memory of the current
//! context, 4096-byte aligned, remembered as the library's), user-buffer registration
//! (`ncclCommRegister` / `ncclCommDeregister`: any live device memory) and window
//! registration (`ncclCommWindowRegister` / `ncclCommWindowDeregister`), which refuses what
//! NCCL refuses: memory not from `ncclMemAlloc`, a window not aligned to
//! `NCCL_WIN_REQUIRED_ALIGNMENT` (4096), and — the ranks of a clique meet at their n-th
//! window registration, as the call is collective — windows of differing sizes or at
//! differing offsets into their allocations across ranks (every rank fails, naming them).
//! A clique that spans processes checks its local ranks only.
//!
//! Every call is counted ([`counters`], `xthunk_emu_nccl_counters`), so tests can check one
//! allocation and one registration per buffer and clique, and that all went back.
//!
//! Modes (`XTHUNK_EMU_NCCL_MODE`): `old` (NCCL 2.18.6) has none of these calls (each fails with
//! `ncclInvalidUsage`: a caller must gate them on the version); `rccl-no-windows` (2.27.5)
//! hands back an empty window (`NULL`, success) from `ncclCommWindowRegister`.

use super::comm::{comm_of, current_ctx, ready_comm};
use super::{INVALID_ARGUMENT, INVALID_USAGE, NcclResult, SYSTEM_ERROR, api_try, fail, timeout};
use crate::config::NcclMode;
use crate::diag::Kind;
use crate::error::Code;
use crate::memory::{self, MemKind};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// `NCCL_WIN_REQUIRED_ALIGNMENT`.
pub const WINDOW_ALIGNMENT: usize = 4096;

/// The counters, in the order `xthunk_emu_nccl_counters` writes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub mem_allocs: u64,
    pub mem_frees: u64,
    pub windows_registered: u64,
    pub windows_deregistered: u64,
    pub buffers_registered: u64,
    pub buffers_deregistered: u64,
    pub empty_windows: u64,
    pub scalable_inits: u64,
    /// The roots (unique ids) those ranks named, summed over the ranks.
    pub scalable_roots: u64,
}

impl Counters {
    pub fn as_array(&self) -> [u64; 9] {
        [
            self.mem_allocs,
            self.mem_frees,
            self.windows_registered,
            self.windows_deregistered,
            self.buffers_registered,
            self.buffers_deregistered,
            self.empty_windows,
            self.scalable_inits,
            self.scalable_roots,
        ]
    }
}

static COUNTS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];
const MEM_ALLOCS: usize = 0;
const MEM_FREES: usize = 1;
const WIN_REG: usize = 2;
const WIN_DEREG: usize = 3;
const BUF_REG: usize = 4;
const BUF_DEREG: usize = 5;
const EMPTY_WIN: usize = 6;
const SCALABLE: usize = 7;
const SCALABLE_ROOTS: usize = 8;

fn count(which: usize) {
    COUNTS[which].fetch_add(1, Ordering::SeqCst);
}

/// Counts one rank of `ncclCommInitRankScalable` with `roots` unique ids.
pub(super) fn count_scalable(roots: u64) {
    count(SCALABLE);
    COUNTS[SCALABLE_ROOTS].fetch_add(roots, Ordering::SeqCst);
}

/// The counters since the process started.
pub fn counters() -> Counters {
    let c = |i: usize| COUNTS[i].load(Ordering::SeqCst);
    Counters {
        mem_allocs: c(MEM_ALLOCS),
        mem_frees: c(MEM_FREES),
        windows_registered: c(WIN_REG),
        windows_deregistered: c(WIN_DEREG),
        buffers_registered: c(BUF_REG),
        buffers_deregistered: c(BUF_DEREG),
        empty_windows: c(EMPTY_WIN),
        scalable_inits: c(SCALABLE),
        scalable_roots: c(SCALABLE_ROOTS),
    }
}

/// Live `ncclMemAlloc` allocations: address -> size.
static ALLOCS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// Live registrations: handle -> (communicator handle, is a window).
static REGISTRATIONS: Mutex<Vec<(usize, usize, bool)>> = Mutex::new(Vec::new());
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// One window-registration round of a clique: each rank's (size, offset), then the verdict.
#[derive(Default)]
struct Round {
    entries: Vec<Option<(usize, usize)>>,
    verdict: Option<Result<(), String>>,
    taken: usize,
}

/// Rounds by (clique, round number); the next round number by (clique, rank).
static ROUNDS: Mutex<Option<HashMap<(u64, u64), Round>>> = Mutex::new(None);
static ROUNDS_CV: Condvar = Condvar::new();
static NEXT_ROUND: Mutex<Option<HashMap<(u64, usize), u64>>> = Mutex::new(None);

/// Fails a call the `old` mode's library does not have.
fn refuse_in_old_mode(call: &str) -> Result<(), NcclResult> {
    if crate::config::get().nccl_mode == NcclMode::Old {
        return Err(fail(
            INVALID_USAGE,
            call,
            Kind::InvalidState,
            "not in NCCL 2.18.6 (XTHUNK_EMU_NCCL_MODE=old): gate it on the version",
        ));
    }
    Ok(())
}

/// An emulator error (already recorded as a diagnostic) as the result `r`.
fn emu(r: NcclResult) -> impl FnOnce(crate::error::EmuError) -> NcclResult {
    move |e| {
        super::LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        r
    }
}

fn invalid(call: &str, msg: impl Into<String>) -> NcclResult {
    fail(INVALID_ARGUMENT, call, Kind::InvalidValue, msg)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> NcclResult {
    const C: &str = "ncclMemAlloc";
    api_try(C, || {
        refuse_in_old_mode(C)?;
        if ptr.is_null() || size == 0 {
            return Err(invalid(C, format!("ptr {ptr:?}, size {size}")));
        }
        let Some(ctx) = current_ctx(C) else {
            return Err(fail(
                super::UNHANDLED_CUDA_ERROR,
                C,
                Kind::InvalidState,
                "no current device",
            ));
        };
        let p = memory::allocate_aligned(
            ctx.id,
            ctx.memory(),
            size,
            MemKind::Device,
            WINDOW_ALIGNMENT,
            C,
        )
        .map_err(emu(SYSTEM_ERROR))?;
        ALLOCS.lock().push((p, size));
        count(MEM_ALLOCS);
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *ptr = p as *mut c_void };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> NcclResult {
    const C: &str = "ncclMemFree";
    api_try(C, || {
        refuse_in_old_mode(C)?;
        let p = ptr as usize;
        {
            let mut a = ALLOCS.lock();
            let Some(i) = a.iter().position(|(base, _)| *base == p) else {
                return Err(invalid(
                    C,
                    format!("{p:#x} was not allocated by ncclMemAlloc"),
                ));
            };
            a.swap_remove(i);
        }
        memory::free(p, &[MemKind::Device], C).map_err(emu(INVALID_ARGUMENT))?;
        count(MEM_FREES);
        Ok(())
    })
}

/// The `ncclMemAlloc` allocation `[p, p + len)` lies in: (base, size).
fn library_allocation(p: usize, len: usize) -> Option<(usize, usize)> {
    ALLOCS
        .lock()
        .iter()
        .copied()
        .find(|(base, size)| p >= *base && p.saturating_add(len) <= base + size)
}

fn new_handle(comm: usize, window: bool) -> usize {
    let h = NEXT_HANDLE.fetch_add(1, Ordering::SeqCst) as usize * 16;
    REGISTRATIONS.lock().push((h, comm, window));
    h
}

/// Removes registration `h` of `comm` (a window or not).
fn take_handle(h: usize, comm: usize, window: bool, call: &str) -> Result<(), NcclResult> {
    let mut r = REGISTRATIONS.lock();
    match r.iter().position(|e| *e == (h, comm, window)) {
        Some(i) => {
            r.swap_remove(i);
            Ok(())
        }
        None => Err(invalid(
            call,
            format!("{h:#x} is not a live registration of communicator {comm:#x}"),
        )),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRegister(
    comm: usize,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> NcclResult {
    const C: &str = "ncclCommRegister";
    api_try(C, || {
        refuse_in_old_mode(C)?;
        let _ = ready_comm(comm, C)?;
        if handle.is_null() {
            return Err(invalid(C, "null handle pointer"));
        }
        memory::check(buff as usize, size, "buff", C, Code::InvalidValue)
            .map_err(emu(INVALID_ARGUMENT))?;
        let h = new_handle(comm, false);
        count(BUF_REG);
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *handle = h as *mut c_void };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDeregister(comm: usize, handle: *mut c_void) -> NcclResult {
    const C: &str = "ncclCommDeregister";
    api_try(C, || {
        refuse_in_old_mode(C)?;
        let _ = comm_of(comm, C)?;
        take_handle(handle as usize, comm, false, C)?;
        count(BUF_DEREG);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: usize,
    buff: *mut c_void,
    size: usize,
    win: *mut *mut c_void,
    _flags: c_int,
) -> NcclResult {
    const C: &str = "ncclCommWindowRegister";
    api_try(C, || {
        refuse_in_old_mode(C)?;
        let c = ready_comm(comm, C)?;
        if win.is_null() {
            return Err(invalid(C, "null window pointer"));
        }
        if crate::config::get().nccl_mode == NcclMode::RcclNoWindows {
            count(EMPTY_WIN);
            // SAFETY: the caller's non-null out-pointer.
            unsafe { *win = std::ptr::null_mut() };
            return Ok(());
        }
        let p = buff as usize;
        let Some((base, _)) = library_allocation(p, size) else {
            return Err(invalid(
                C,
                format!("{size} bytes at {p:#x} are not memory from ncclMemAlloc"),
            ));
        };
        if !p.is_multiple_of(WINDOW_ALIGNMENT) {
            return Err(invalid(
                C,
                format!(
                    "window at {p:#x} is not aligned to {WINDOW_ALIGNMENT} bytes (NCCL_WIN_REQUIRED_ALIGNMENT)"
                ),
            ));
        }
        if c.clique.net.get().is_none() {
            meet(c.clique.id, c.clique.nranks, c.rank, (size, p - base))
                .map_err(|m| fail(INVALID_USAGE, C, Kind::InvalidValue, m))?;
        }
        let h = new_handle(comm, true);
        count(WIN_REG);
        // SAFETY: the caller's non-null out-pointer.
        unsafe { *win = h as *mut c_void };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommWindowDeregister(comm: usize, win: *mut c_void) -> NcclResult {
    const C: &str = "ncclCommWindowDeregister";
    api_try(C, || {
        refuse_in_old_mode(C)?;
        let _ = comm_of(comm, C)?;
        take_handle(win as usize, comm, true, C)?;
        count(WIN_DEREG);
        Ok(())
    })
}

/// Rank `rank` of clique `clique` (of `nranks`) registers a window of (size, offset into its
/// allocation); waits for every rank's n-th registration and checks they agree.
fn meet(clique: u64, nranks: usize, rank: usize, entry: (usize, usize)) -> Result<(), String> {
    let round = {
        let mut next = NEXT_ROUND.lock();
        let n = next
            .get_or_insert_with(HashMap::new)
            .entry((clique, rank))
            .or_insert(0);
        *n += 1;
        *n
    };
    let key = (clique, round);
    let deadline = Instant::now() + timeout();
    let mut rounds = ROUNDS.lock();
    let all = rounds.get_or_insert_with(HashMap::new);
    let r = all.entry(key).or_default();
    if r.entries.len() < nranks {
        r.entries.resize(nranks, None);
    }
    if let Some(slot) = r.entries.get_mut(rank) {
        *slot = Some(entry);
    }
    if r.entries.iter().all(Option::is_some) {
        r.verdict = Some(verdict(&r.entries));
        ROUNDS_CV.notify_all();
    }
    loop {
        let all = rounds.get_or_insert_with(HashMap::new);
        let Some(r) = all.get_mut(&key) else {
            return Err("internal: window round lost".into());
        };
        if let Some(v) = r.verdict.clone() {
            r.taken += 1;
            if r.taken >= nranks {
                all.remove(&key);
            }
            return v;
        }
        if ROUNDS_CV.wait_until(&mut rounds, deadline).timed_out() {
            let missing: Vec<usize> = r_missing(rounds.as_ref(), key);
            return Err(format!(
                "window registration {round}: ranks {missing:?} did not register within {:?}",
                timeout()
            ));
        }
    }
}

fn r_missing(rounds: Option<&HashMap<(u64, u64), Round>>, key: (u64, u64)) -> Vec<usize> {
    rounds
        .and_then(|a| a.get(&key))
        .map(|r| {
            r.entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_none())
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether every rank's window has the same size and offset.
fn verdict(entries: &[Option<(usize, usize)>]) -> Result<(), String> {
    let all: Vec<(usize, usize)> = entries.iter().flatten().copied().collect();
    let Some(first) = all.first() else {
        return Ok(());
    };
    if all.iter().all(|e| e.0 == first.0) && all.iter().all(|e| e.1 == first.1) {
        return Ok(());
    }
    let list: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(r, (s, o))| format!("rank {r}: {s} bytes at offset {o}"))
        .collect();
    Err(format!(
        "the ranks' windows differ in size or offset into their ncclMemAlloc memory ({})",
        list.join(", ")
    ))
}
