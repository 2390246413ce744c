//! Emulated device memory: real host memory, with a registry of every live allocation so that
//! every access the emulator makes is checked.
//!
//! - Each allocation is padded with a red zone of at least 256 bytes, so an address just past
//!   the end is unambiguously an out-of-bounds access of that allocation, not some host
//!   pointer (host memory is anything the registry does not cover).
//! - Fresh memory is poisoned with `0xCD` ([`POISON`]); the red zone holds `0xFD`.
//! - Freed memory is poisoned with `0xDD` and kept in a quarantine (up to 256 MiB / 4096
//!   blocks, oldest released first), so that a use after free or a double free is recognised
//!   as such instead of hitting a newer allocation at the same address.
//! - Stream-ordered pools ([`crate::pool`]) reserve blocks here ([`reserve`], counted as
//!   allocator calls) and open and close allocations inside them ([`open_pooled`],
//!   [`close_pooled`]): a closed pool allocation is poisoned and known as freed (a use after
//!   free is recognised) while the pool keeps its memory.
//! - [`allocator_calls`] counts the calls that took memory from the host allocator for a
//!   device (plain allocations and pool growth), so tests can tell pool reuse from growth.

use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use parking_lot::Mutex;
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// The byte fresh allocations are filled with.
pub const POISON: u8 = 0xCD;
/// The byte freed memory is filled with.
pub const FREED: u8 = 0xDD;
/// The byte of the red zone after each allocation.
pub const RED_ZONE: u8 = 0xFD;

const QUARANTINE_BYTES: usize = 256 << 20;
const QUARANTINE_BLOCKS: usize = 4096;

/// What kind of memory an allocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// `cuMemAlloc`, `hipMalloc`.
    Device,
    /// `cuMemAllocHost`, `hipHostMalloc`: page-locked host memory, device-accessible.
    Pinned,
    /// `cuMemAllocManaged`, `hipMallocManaged`.
    Managed,
    /// `cuMemAllocAsync`, `hipMallocAsync`: an allocation inside a block of a stream-ordered
    /// memory pool ([`crate::pool`]), which owns the memory.
    Pooled,
}

impl MemKind {
    /// Device memory proper (plain or from a pool): not accessible from the host.
    pub fn device_only(self) -> bool {
        matches!(self, MemKind::Device | MemKind::Pooled)
    }

    pub fn name(self) -> &'static str {
        match self {
            MemKind::Device => "device",
            MemKind::Pinned => "pinned host",
            MemKind::Managed => "managed",
            MemKind::Pooled => "stream-ordered pool",
        }
    }
}

/// A live (or quarantined) allocation.
#[derive(Clone, Debug)]
pub struct AllocInfo {
    /// Serial number, from 1, in allocation order.
    pub id: u64,
    pub base: usize,
    /// Bytes requested.
    pub size: usize,
    /// Bytes reserved (size, rounded up, plus the red zone).
    cap: usize,
    align: usize,
    pub kind: MemKind,
    /// The context (CUDA context or HIP device) that owns it.
    pub ctx: u64,
    /// The call that made it.
    pub alloc_call: &'static str,
    /// The call that freed it (quarantined blocks only).
    pub free_call: Option<String>,
}

impl AllocInfo {
    pub fn describe(&self) -> String {
        format!(
            "allocation #{} ({} bytes of {} memory at {:#x}, from {})",
            self.id,
            self.size,
            self.kind.name(),
            self.base,
            self.alloc_call
        )
    }
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    live: BTreeMap<usize, AllocInfo>,
    freed: BTreeMap<usize, AllocInfo>,
    freed_order: VecDeque<usize>,
    freed_bytes: usize,
    live_bytes: HashMap<u64, u64>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// Calls that took memory from the host allocator for a device (see [`allocator_calls`]).
static ALLOCATOR_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many times the emulator took memory from the host allocator for a device since the
/// process started: every successful plain allocation (`cuMemAlloc`, `hipMalloc`, pinned,
/// managed) and every block a stream-ordered pool reserved; never an allocation a pool
/// served from memory it already held.
pub fn allocator_calls() -> u64 {
    ALLOCATOR_CALLS.load(Ordering::SeqCst)
}

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut g = REGISTRY.lock();
    f(g.get_or_insert_with(Registry::default))
}

fn layout(cap: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(cap, align).ok()
}

/// Allocates `size` bytes of `kind` memory for context `ctx`, whose device has `limit` bytes.
/// Counts toward the injected-failure counter. `size` 0 is refused by the callers that must
/// refuse it; here it reserves a red zone only.
pub fn allocate(
    ctx: u64,
    limit: u64,
    size: usize,
    kind: MemKind,
    call: &'static str,
) -> EmuResult<usize> {
    let align = if kind == MemKind::Pinned { 4096 } else { 256 };
    allocate_aligned(ctx, limit, size, kind, align, call)
}

/// [`allocate`] at a multiple of `align` (a power of two; `ncclMemAlloc` uses 4096, the
/// alignment NCCL's windows need).
pub fn allocate_aligned(
    ctx: u64,
    limit: u64,
    size: usize,
    kind: MemKind,
    align: usize,
    call: &'static str,
) -> EmuResult<usize> {
    if crate::config::allocation_fails() {
        return Err(EmuError::new(
            Code::OutOfMemory,
            Kind::Injected,
            call,
            format!("injected out-of-memory for {size} bytes (XTHUNK_EMU_FAIL_ALLOC)"),
        ));
    }
    let oom = |why: String| EmuError::new(Code::OutOfMemory, Kind::OutOfMemory, call, why);
    // Pinned memory is host memory: it does not count against the device's memory.
    let used = with(|r| r.live_bytes.get(&ctx).copied().unwrap_or(0));
    if kind != MemKind::Pinned && used.saturating_add(size as u64) > limit {
        return Err(oom(format!(
            "out of memory: {size} bytes requested, {used} of {limit} bytes in use"
        )));
    }
    let cap = size
        .checked_add(align - 1)
        .map(|v| v & !(align - 1))
        .and_then(|v| v.checked_add(256))
        .ok_or_else(|| oom(format!("{size} bytes cannot be allocated")))?;
    let Some(l) = layout(cap, align) else {
        return Err(oom(format!("{size} bytes cannot be allocated")));
    };
    // SAFETY: `l` has a non-zero size (at least the 256-byte red zone).
    let p = unsafe { std::alloc::alloc(l) };
    if p.is_null() {
        return Err(oom(format!("the host could not provide {size} bytes")));
    }
    // SAFETY: `p` points to `cap` freshly allocated bytes, `size <= cap`.
    unsafe {
        std::ptr::write_bytes(p, POISON, size);
        std::ptr::write_bytes(p.add(size), RED_ZONE, cap - size);
    }
    let base = p as usize;
    ALLOCATOR_CALLS.fetch_add(1, Ordering::SeqCst);
    with(|r| {
        r.next_id += 1;
        let info = AllocInfo {
            id: r.next_id,
            base,
            size,
            cap,
            align,
            kind,
            ctx,
            alloc_call: call,
            free_call: None,
        };
        if kind != MemKind::Pinned {
            *r.live_bytes.entry(ctx).or_default() += size as u64;
        }
        r.live.insert(base, info);
    });
    Ok(base)
}

/// Frees the allocation starting at `ptr`, which must be live and of one of `kinds`.
pub fn free(ptr: usize, kinds: &[MemKind], call: &str) -> EmuResult<AllocInfo> {
    let r = with(|r| {
        if let Some(info) = r.live.get(&ptr) {
            if !kinds.contains(&info.kind) {
                return Err((
                    Kind::InvalidFree,
                    format!(
                        "{:#x} is {}: {call} cannot free {} memory",
                        ptr,
                        info.describe(),
                        info.kind.name()
                    ),
                ));
            }
            let mut info = r
                .live
                .remove(&ptr)
                .ok_or((Kind::InvalidFree, String::new()))?;
            if let Some(b) = r
                .live_bytes
                .get_mut(&info.ctx)
                .filter(|_| info.kind != MemKind::Pinned)
            {
                *b = b.saturating_sub(info.size as u64);
            }
            info.free_call = Some(call.to_string());
            quarantine(r, info.clone());
            return Ok(info);
        }
        if let Some(f) = r.freed.get(&ptr) {
            return Err((
                Kind::DoubleFree,
                format!(
                    "double free of {:#x}: {} was already freed by {}",
                    ptr,
                    f.describe(),
                    f.free_call.as_deref().unwrap_or("?")
                ),
            ));
        }
        if let Some(info) = containing(&r.live, ptr) {
            return Err((
                Kind::InvalidFree,
                format!(
                    "{:#x} is {} bytes inside {}, not its start",
                    ptr,
                    ptr - info.base,
                    info.describe()
                ),
            ));
        }
        if let Some(f) = containing(&r.freed, ptr) {
            return Err((
                Kind::DoubleFree,
                format!(
                    "{:#x} lies inside {}, already freed by {}",
                    ptr,
                    f.describe(),
                    f.free_call.as_deref().unwrap_or("?")
                ),
            ));
        }
        Err((
            Kind::InvalidFree,
            format!("{ptr:#x} was not returned by an emulated allocation call"),
        ))
    });
    r.map_err(|(kind, msg)| EmuError::new(Code::InvalidValue, kind, call, msg))
}

/// Moves a freed block into the quarantine (poisoned), releasing the oldest blocks beyond the
/// limits.
fn quarantine(r: &mut Registry, info: AllocInfo) {
    // SAFETY: the block was allocated by `allocate` with `cap` bytes and is no longer live;
    // nothing the emulator runs can reach it any more (every access is checked against the
    // live registry first).
    unsafe { std::ptr::write_bytes(info.base as *mut u8, FREED, info.size) };
    r.freed_bytes += info.cap;
    r.freed_order.push_back(info.base);
    r.freed.insert(info.base, info);
    while r.freed_bytes > QUARANTINE_BYTES || r.freed_order.len() > QUARANTINE_BLOCKS {
        let Some(old) = r.freed_order.pop_front() else {
            break;
        };
        if let Some(o) = r.freed.remove(&old) {
            r.freed_bytes -= o.cap;
            release(&o);
        }
    }
}

fn release(info: &AllocInfo) {
    if let Some(l) = layout(info.cap, info.align) {
        // SAFETY: `base` was returned by `std::alloc::alloc` with exactly this layout and is
        // released once (it has just left the registry).
        unsafe { std::alloc::dealloc(info.base as *mut u8, l) };
    }
}

/// The allocation of `map` whose reserved range (including the red zone) contains `ptr`.
fn containing(map: &BTreeMap<usize, AllocInfo>, ptr: usize) -> Option<&AllocInfo> {
    map.range(..=ptr)
        .next_back()
        .map(|(_, i)| i)
        .filter(|i| ptr < i.base + i.cap)
}

/// Where a pointer range lies.
#[derive(Debug)]
pub enum Place {
    /// Entirely inside this live allocation.
    Device(AllocInfo),
    /// Not emulator memory at all (a host pointer).
    Host,
}

/// Describes why `len` bytes at `ptr` are not a valid range of emulator memory, or `None`
/// when they are inside a live allocation (or outside emulator memory entirely: `host_ok`).
fn classify(r: &Registry, ptr: usize, len: usize) -> Result<Place, (Kind, String)> {
    let end = ptr.checked_add(len);
    if let Some(info) = containing(&r.live, ptr) {
        let inside = end.is_some_and(|e| e <= info.base + info.size);
        if inside && ptr < info.base + info.size.max(1) {
            return Ok(Place::Device(info.clone()));
        }
        if ptr >= info.base + info.size {
            return Err((
                Kind::OutOfBounds,
                format!(
                    "{len} bytes at {ptr:#x} start {} bytes past the end of {}",
                    ptr - (info.base + info.size),
                    info.describe()
                ),
            ));
        }
        return Err((
            Kind::OutOfBounds,
            format!(
                "{len} bytes at {ptr:#x} (offset {}) overrun {} by {} bytes",
                ptr - info.base,
                info.describe(),
                (ptr - info.base).saturating_add(len) - info.size
            ),
        ));
    }
    if let Some(f) = containing(&r.freed, ptr) {
        return Err((
            Kind::UseAfterFree,
            format!(
                "{len} bytes at {ptr:#x} lie in {}, freed by {}",
                f.describe(),
                f.free_call.as_deref().unwrap_or("?")
            ),
        ));
    }
    // A range that starts outside but reaches into an allocation.
    if let Some(e) = end
        && let Some((_, info)) = r.live.range(ptr..e).next()
    {
        return Err((
            Kind::OutOfBounds,
            format!(
                "{len} bytes at {ptr:#x} start {} bytes before {}",
                info.base - ptr,
                info.describe()
            ),
        ));
    }
    Ok(Place::Host)
}

/// Checks that `len` bytes at `ptr` lie inside one live allocation (device, pinned or
/// managed). `what` says what the range is (`source of the copy`); `code` is the error to
/// return (`InvalidValue` for API arguments, `IllegalAddress` for kernel accesses).
pub fn check(ptr: usize, len: usize, what: &str, call: &str, code: Code) -> EmuResult<AllocInfo> {
    if len == 0 {
        return Ok(AllocInfo {
            id: 0,
            base: ptr,
            size: 0,
            cap: 0,
            align: 1,
            kind: MemKind::Device,
            ctx: 0,
            alloc_call: "",
            free_call: None,
        });
    }
    let r = with(|r| classify(r, ptr, len));
    match r {
        Ok(Place::Device(info)) => Ok(info),
        Ok(Place::Host) => Err(EmuError::new(
            code,
            Kind::NotDeviceMemory,
            call,
            format!("{what}: {len} bytes at {ptr:#x} are not in any emulated allocation"),
        )),
        Err((kind, msg)) => Err(EmuError::new(code, kind, call, format!("{what}: {msg}"))),
    }
}

/// Where `len` bytes at `ptr` lie: inside a live allocation, or in host memory. A range that
/// touches emulator memory without lying inside one live allocation (overrun, red zone, freed
/// block) is an error.
pub fn locate(ptr: usize, len: usize, what: &str, call: &str, code: Code) -> EmuResult<Place> {
    if len == 0 {
        return Ok(Place::Host);
    }
    let r = with(|r| classify(r, ptr, len));
    r.map_err(|(kind, msg)| EmuError::new(code, kind, call, format!("{what}: {msg}")))
}

/// The live allocation starting exactly at `ptr`.
pub fn allocation_at(ptr: usize) -> Option<AllocInfo> {
    with(|r| r.live.get(&ptr).cloned())
}

/// The live allocation containing `ptr`.
pub fn allocation_containing(ptr: usize) -> Option<AllocInfo> {
    with(|r| {
        containing(&r.live, ptr)
            .filter(|i| ptr < i.base + i.size.max(1))
            .cloned()
    })
}

/// Live allocations of context `ctx` (all contexts when `None`).
pub fn live(ctx: Option<u64>) -> Vec<AllocInfo> {
    with(|r| {
        r.live
            .values()
            .filter(|i| ctx.is_none_or(|c| i.ctx == c))
            .cloned()
            .collect()
    })
}

/// Device bytes in use by context `ctx` (pinned host memory excluded).
pub fn live_bytes(ctx: u64) -> u64 {
    with(|r| r.live_bytes.get(&ctx).copied().unwrap_or(0))
}

/// Frees every allocation of `ctx` (after its leaks were reported), into the quarantine.
pub fn release_context(ctx: u64, call: &str) {
    with(|r| {
        let bases: Vec<usize> = r
            .live
            .values()
            .filter(|i| i.ctx == ctx)
            .map(|i| i.base)
            .collect();
        for b in bases {
            if let Some(mut info) = r.live.remove(&b) {
                info.free_call = Some(format!("{call} (context destroyed)"));
                if info.kind == MemKind::Pooled {
                    // The pool owns the memory (released with the pool).
                    r.freed.insert(info.base, info);
                } else {
                    quarantine(r, info);
                }
            }
        }
        r.live_bytes.remove(&ctx);
    });
}

// ---- stream-ordered pools -------------------------------------------------------------------

/// Reserves a pool block able to hold `size` bytes for context `ctx` (whose device has
/// `limit` bytes): host memory counted against the device, one allocator call, the
/// injected-failure counter included. Returns its base and reserved size (a red zone of at
/// least 256 bytes included). Nothing may access it until [`open_pooled`].
pub fn reserve(ctx: u64, limit: u64, size: usize, call: &'static str) -> EmuResult<(usize, usize)> {
    if crate::config::allocation_fails() {
        return Err(EmuError::new(
            Code::OutOfMemory,
            Kind::Injected,
            call,
            format!("injected out-of-memory for {size} bytes (XTHUNK_EMU_FAIL_ALLOC)"),
        ));
    }
    let oom = |why: String| EmuError::new(Code::OutOfMemory, Kind::OutOfMemory, call, why);
    let cap = size
        .checked_add(255)
        .map(|v| v & !255)
        .and_then(|v| v.checked_add(256))
        .ok_or_else(|| oom(format!("{size} bytes cannot be allocated")))?;
    let used = with(|r| r.live_bytes.get(&ctx).copied().unwrap_or(0));
    if used.saturating_add(cap as u64) > limit {
        return Err(oom(format!(
            "out of memory: a pool block of {cap} bytes requested, {used} of {limit} bytes in use"
        )));
    }
    let Some(l) = layout(cap, 256) else {
        return Err(oom(format!("{size} bytes cannot be allocated")));
    };
    // SAFETY: `l` has a non-zero size (at least the 256-byte red zone).
    let p = unsafe { std::alloc::alloc(l) };
    if p.is_null() {
        return Err(oom(format!("the host could not provide {size} bytes")));
    }
    // SAFETY: `p` points to `cap` freshly allocated bytes.
    unsafe { std::ptr::write_bytes(p, FREED, cap) };
    ALLOCATOR_CALLS.fetch_add(1, Ordering::SeqCst);
    with(|r| *r.live_bytes.entry(ctx).or_default() += cap as u64);
    Ok((p as usize, cap))
}

/// Gives a block [`reserve`] returned back to the host allocator. No allocation may be open
/// in it.
pub fn unreserve(ctx: u64, base: usize, cap: usize) {
    with(|r| {
        if r.freed
            .get(&base)
            .is_some_and(|i| i.kind == MemKind::Pooled)
        {
            r.freed.remove(&base);
        }
        if let Some(b) = r.live_bytes.get_mut(&ctx) {
            *b = b.saturating_sub(cap as u64);
        }
    });
    if let Some(l) = layout(cap, 256) {
        // SAFETY: `base` came from `std::alloc::alloc` with this layout in `reserve` and is
        // released once (its pool forgets it now); nothing is open in it.
        unsafe { std::alloc::dealloc(base as *mut u8, l) };
    }
}

/// Opens an allocation of `size` bytes at the start of the pool block at `base` (`cap` bytes
/// reserved): it is live from now on (for checks made when work is queued). Returns its id.
pub fn open_pooled(ctx: u64, base: usize, size: usize, cap: usize, call: &'static str) -> u64 {
    with(|r| {
        if r.freed
            .get(&base)
            .is_some_and(|i| i.kind == MemKind::Pooled)
        {
            r.freed.remove(&base);
        }
        r.next_id += 1;
        let info = AllocInfo {
            id: r.next_id,
            base,
            size,
            cap,
            align: 256,
            kind: MemKind::Pooled,
            ctx,
            alloc_call: call,
            free_call: None,
        };
        r.live.insert(base, info);
        r.next_id
    })
}

/// Fills pool allocation `id` at `base` with [`POISON`] (fresh memory), if it is still open.
pub fn poison_pooled(base: usize, id: u64) {
    with(|r| {
        if let Some(info) = r.live.get(&base).filter(|i| i.id == id) {
            // SAFETY: the allocation's `size` bytes lie in its pool's live block.
            unsafe { std::ptr::write_bytes(base as *mut u8, POISON, info.size) };
        }
    });
}

/// Closes pool allocation `id` at `base` (poisoned, known as freed by `call`); false when it
/// is not open (already closed, or the block serves a newer allocation).
pub fn close_pooled(base: usize, id: u64, call: &str) -> bool {
    with(|r| {
        if r.live.get(&base).is_none_or(|i| i.id != id) {
            return false;
        }
        let Some(mut info) = r.live.remove(&base) else {
            return false;
        };
        // SAFETY: the allocation's bytes lie in its pool's block, which stays reserved.
        unsafe { std::ptr::write_bytes(base as *mut u8, FREED, info.size) };
        info.free_call = Some(call.to_string());
        r.freed.insert(base, info);
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_bounds_and_quarantine() {
        let p = allocate(u64::MAX, u64::MAX, 100, MemKind::Device, "t").unwrap_or(0);
        assert_ne!(p, 0);
        // SAFETY: `p` is a live 100-byte allocation.
        let first = unsafe { *(p as *const u8) };
        assert_eq!(first, POISON);
        assert!(check(p, 100, "x", "t", Code::InvalidValue).is_ok());
        let e = check(p + 50, 51, "x", "t", Code::InvalidValue).err();
        assert!(e.is_some_and(|e| e.message.contains("overrun")));
        let e = check(p + 100, 1, "x", "t", Code::InvalidValue).err();
        assert!(e.is_some_and(|e| e.message.contains("past the end")));
        assert!(free(p, &[MemKind::Device], "free").is_ok());
        let e = check(p, 4, "x", "t", Code::InvalidValue).err();
        assert!(e.is_some_and(|e| e.message.contains("freed by free")));
        let e = free(p, &[MemKind::Device], "free").err();
        assert!(e.is_some_and(|e| e.message.contains("double free")));
        let _ = crate::diag::take();
    }
}
