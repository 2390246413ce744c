//! Stream-ordered memory pools, what `cuMemPool*` / `cuMemAllocAsync` / `cuMemFreeAsync` and
//! `hipMemPool*` / `hipMallocAsync` / `hipFreeAsync` do alike (the shims are
//! `cuda/pool.rs` and `hip/pool.rs`).
//!
//! A pool holds blocks it reserved from the host allocator ([`memory::reserve`], counted by
//! [`memory::allocator_calls`]). An allocation on stream `s` takes the smallest block that
//! fits (the lowest address among equals) which is free, or which was freed in the order of
//! `s` itself (stream order makes the reuse safe, as the drivers allow); only when none
//! fits does the pool grow by a block. The allocation is live at once for checks made when
//! work is queued, and is poisoned ([`memory::POISON`]) in `s`'s order. A free is checked at
//! once (a pointer that is not a live pool allocation is an invalid or double free) and
//! takes effect in the stream's order: work queued before it on that stream still runs on
//! the memory, work that runs after it reads freed memory (a use after free), until a later
//! allocation reuses the block; it takes effect even after the stream failed (the program
//! gave the memory back, whatever its work did). When a free takes effect, the pool's unused memory above its
//! release threshold (attribute 4, 0 by default) goes back to the host allocator — at once,
//! where the drivers wait for the next synchronization: a caller that keeps memory only by
//! the threshold sees the same either way.
//!
//! Allocation and free while the stream is capturing (graph memory nodes) are not emulated:
//! `NOT_SUPPORTED`. Pools belong to the context that created them (CUDA: the current
//! context; HIP: the device's); destroying it releases them, and pool allocations still
//! live are reported as leaks like any other.
//!
//! Not detected: a use on another stream, without synchronization, of memory freed and
//! reused on its own stream; a use between a free and a reuse on the same stream.

use crate::context::Ctx;
use crate::diag::Kind;
use crate::driver::{Driver, Handle};
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::ffi::put;
use crate::handles::{HandleKind, Table};
use crate::memory;
use crate::stream::{self, StreamCore};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `CU_MEMPOOL_ATTR_*` / `hipMemPoolAttr*` (the same values).
pub mod attr {
    pub const REUSE_FOLLOW_EVENT_DEPENDENCIES: i32 = 1;
    pub const REUSE_ALLOW_OPPORTUNISTIC: i32 = 2;
    pub const REUSE_ALLOW_INTERNAL_DEPENDENCIES: i32 = 3;
    pub const RELEASE_THRESHOLD: i32 = 4;
    pub const RESERVED_MEM_CURRENT: i32 = 5;
    pub const RESERVED_MEM_HIGH: i32 = 6;
    pub const USED_MEM_CURRENT: i32 = 7;
    pub const USED_MEM_HIGH: i32 = 8;
}

/// What one reserved block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Reusable by any stream.
    Free,
    /// Allocation `id`.
    Live { id: u64 },
    /// Allocation `id`, freed in the order of stream `stream` (not yet reached there).
    Freeing { id: u64, stream: u64 },
}

#[derive(Debug)]
struct Block {
    cap: usize,
    usage: Use,
}

#[derive(Debug, Default)]
struct State {
    threshold: u64,
    blocks: BTreeMap<usize, Block>,
    reserved_high: u64,
    used_high: u64,
    destroyed: bool,
}

/// A memory pool.
#[derive(Debug)]
pub struct Pool {
    /// The context whose device memory it takes.
    pub ctx: u64,
    pub device: i32,
    /// The device's default pool (not destroyable).
    pub default: bool,
    state: Mutex<State>,
}

/// Every pool, by handle.
pub static POOLS: Table<Pool> = Table::new(HandleKind::MemPool);

/// The default pool of each (context, device), by handle.
static DEFAULTS: Mutex<BTreeMap<u64, usize>> = Mutex::new(BTreeMap::new());

impl State {
    fn reserved(&self) -> u64 {
        self.blocks.values().map(|b| b.cap as u64).sum()
    }
    fn used(&self) -> u64 {
        self.blocks
            .values()
            .filter(|b| b.usage != Use::Free)
            .map(|b| b.cap as u64)
            .sum()
    }
    fn note_high(&mut self) {
        self.reserved_high = self.reserved_high.max(self.reserved());
        self.used_high = self.used_high.max(self.used());
    }
}

impl Pool {
    /// Gives free blocks back to the host allocator until at most `keep` bytes of unused
    /// memory remain (largest blocks first).
    fn trim(&self, st: &mut State, keep: u64) {
        let mut unused: Vec<(usize, usize)> = st
            .blocks
            .iter()
            .filter(|(_, b)| b.usage == Use::Free)
            .map(|(base, b)| (*base, b.cap))
            .collect();
        let mut total: u64 = unused.iter().map(|(_, c)| *c as u64).sum();
        unused.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (base, cap) in unused {
            if total <= keep {
                break;
            }
            st.blocks.remove(&base);
            memory::unreserve(self.ctx, base, cap);
            total -= cap as u64;
        }
    }

    /// The free taking effect (run in the freeing stream's order).
    fn retire(&self, base: usize, id: u64, call: &str) {
        let mut st = self.state.lock();
        let Some(b) = st.blocks.get_mut(&base) else {
            return;
        };
        if !matches!(b.usage, Use::Freeing { id: i, .. } if i == id) {
            // Reused on the freeing stream meanwhile: the newer allocation owns the block.
            return;
        }
        memory::close_pooled(base, id, call);
        b.usage = Use::Free;
        let keep = if st.destroyed { 0 } else { st.threshold };
        self.trim(&mut st, keep);
    }
}

/// Creates a pool for `device` in context `c` and returns its handle.
pub fn create(c: &Ctx, device: i32, default: bool) -> usize {
    // Every pool of a context is made here: the context releases them when it is destroyed.
    c.on_destroy("memory pools", release_context);
    POOLS.insert(Arc::new(Pool {
        ctx: c.id,
        device,
        default,
        state: Mutex::new(State::default()),
    }))
}

/// The default pool of `device` in context `c` (made on first use).
pub fn default_pool(c: &Ctx, device: i32) -> usize {
    let mut d = DEFAULTS.lock();
    if let Some(h) = d.get(&c.id)
        && POOLS.try_get(*h).is_some()
    {
        return *h;
    }
    let h = create(c, device, true);
    d.insert(c.id, h);
    h
}

/// Destroys pool `h`: its unused memory is released now, the rest when freed.
pub fn destroy(h: usize, call: &str) -> EmuResult<()> {
    let p = POOLS.get(h, call)?;
    if p.default {
        return Err(invalid(call, "the default memory pool cannot be destroyed"));
    }
    let p = POOLS.remove(h, call)?;
    let mut st = p.state.lock();
    st.destroyed = true;
    p.trim(&mut st, 0);
    drop(st);
    orphan(p);
    Ok(())
}

/// `cuMemPoolSetAttribute` / `hipMemPoolSetAttribute` (`value`: the attribute's `int` or
/// `uint64` value, as the attribute defines).
pub fn set_attribute(h: usize, attribute: i32, value: u64, call: &str) -> EmuResult<()> {
    let p = POOLS.get(h, call)?;
    let mut st = p.state.lock();
    match attribute {
        attr::REUSE_FOLLOW_EVENT_DEPENDENCIES
        | attr::REUSE_ALLOW_OPPORTUNISTIC
        | attr::REUSE_ALLOW_INTERNAL_DEPENDENCIES => Ok(()),
        attr::RELEASE_THRESHOLD => {
            st.threshold = value;
            Ok(())
        }
        attr::RESERVED_MEM_HIGH | attr::USED_MEM_HIGH if value == 0 => {
            if attribute == attr::RESERVED_MEM_HIGH {
                st.reserved_high = st.reserved();
            } else {
                st.used_high = st.used();
            }
            Ok(())
        }
        a => Err(invalid(
            call,
            format!("memory pool attribute {a} cannot be set to {value}"),
        )),
    }
}

/// `cuMemPoolGetAttribute` / `hipMemPoolGetAttribute`; `Ok((value, is_u64))`.
pub fn get_attribute(h: usize, attribute: i32, call: &str) -> EmuResult<(u64, bool)> {
    let p = POOLS.get(h, call)?;
    let st = p.state.lock();
    Ok(match attribute {
        attr::REUSE_FOLLOW_EVENT_DEPENDENCIES
        | attr::REUSE_ALLOW_OPPORTUNISTIC
        | attr::REUSE_ALLOW_INTERNAL_DEPENDENCIES => (0, false),
        attr::RELEASE_THRESHOLD => (st.threshold, true),
        attr::RESERVED_MEM_CURRENT => (st.reserved(), true),
        attr::RESERVED_MEM_HIGH => (st.reserved_high, true),
        attr::USED_MEM_CURRENT => (st.used(), true),
        attr::USED_MEM_HIGH => (st.used_high, true),
        a => return Err(invalid(call, format!("unknown memory pool attribute {a}"))),
    })
}

/// `cuMemPoolTrimTo` / `hipMemPoolTrimTo`.
pub fn trim_to(h: usize, keep: u64, call: &str) -> EmuResult<()> {
    let p = POOLS.get(h, call)?;
    let mut st = p.state.lock();
    p.trim(&mut st, keep);
    Ok(())
}

fn not_capturing(s: &StreamCore, call: &str) -> EmuResult<()> {
    if s.capture().is_some() {
        return Err(EmuError::new(
            Code::NotSupported,
            Kind::Unsupported,
            call,
            "stream-ordered allocation while the stream is capturing (graph memory nodes) is \
             not emulated",
        ));
    }
    Ok(())
}

/// Allocates `size` bytes from pool `h` in the order of stream `s` (of context `c`).
pub fn allocate(
    c: &Ctx,
    h: usize,
    size: usize,
    s: &Arc<StreamCore>,
    call: &'static str,
) -> EmuResult<usize> {
    let p = POOLS.get(h, call)?;
    if s.ctx_id != p.ctx {
        return Err(invalid(
            call,
            format!(
                "the stream belongs to another context than the memory pool of device {}",
                p.device
            ),
        ));
    }
    not_capturing(s, call)?;
    if size == 0 {
        return Err(invalid(call, "0 bytes requested"));
    }
    let mut st = p.state.lock();
    let fits = st
        .blocks
        .iter()
        .filter(|(_, b)| {
            b.cap - 256 >= size
                && match b.usage {
                    Use::Free => true,
                    Use::Freeing { stream, .. } => stream == s.id,
                    Use::Live { .. } => false,
                }
        })
        .min_by_key(|(base, b)| (b.cap, **base))
        .map(|(base, b)| (*base, b.cap));
    let (base, cap) = match fits {
        Some(f) => f,
        None => {
            let (base, cap) = memory::reserve(p.ctx, c.memory(), size, call)?;
            st.blocks.insert(
                base,
                Block {
                    cap,
                    usage: Use::Free,
                },
            );
            (base, cap)
        }
    };
    let id = memory::open_pooled(p.ctx, base, size, cap, call);
    if let Some(b) = st.blocks.get_mut(&base) {
        b.usage = Use::Live { id };
    }
    st.note_high();
    drop(st);
    let work = stream::Work::Host(Arc::new(move |_call: &str| {
        memory::poison_pooled(base, id);
        Ok(())
    }));
    stream::submit(s, stream::Op::new(work, call))?;
    Ok(base)
}

/// Frees pool allocation `ptr` in the order of stream `s`.
pub fn free(ptr: usize, s: &Arc<StreamCore>, call: &'static str) -> EmuResult<()> {
    not_capturing(s, call)?;
    let owner = POOLS
        .all()
        .into_iter()
        .map(|(_, p)| p)
        .chain(orphans())
        .find(|p| p.state.lock().blocks.contains_key(&ptr));
    let Some(p) = owner else {
        return Err(not_pooled(ptr, call));
    };
    let mut st = p.state.lock();
    let usage = st.blocks.get(&ptr).map(|b| b.usage);
    let id = match usage {
        Some(Use::Live { id, .. }) => id,
        Some(Use::Freeing { .. } | Use::Free) | None => {
            return Err(EmuError::new(
                Code::InvalidValue,
                Kind::DoubleFree,
                call,
                format!("double free of {ptr:#x}: the stream-ordered allocation was already freed"),
            ));
        }
    };
    if s.ctx_id != p.ctx {
        return Err(invalid(
            call,
            format!("{ptr:#x} belongs to a memory pool of another context than the stream"),
        ));
    }
    if let Some(b) = st.blocks.get_mut(&ptr) {
        b.usage = Use::Freeing { id, stream: s.id };
    }
    drop(st);
    let pool = p.clone();
    let work = stream::Work::Release(Arc::new(move |call: &str| {
        pool.retire(ptr, id, call);
        Ok(())
    }));
    stream::submit(s, stream::Op::new(work, call)).map(|_| ())
}

/// The error of a stream-ordered free of something no pool allocated.
fn not_pooled(ptr: usize, call: &str) -> EmuError {
    let what = match memory::allocation_containing(ptr) {
        Some(a) if a.base == ptr => format!(
            "{ptr:#x} is {}, not a stream-ordered allocation: {call} frees only memory from \
             cuMemAllocAsync / hipMallocAsync",
            a.describe()
        ),
        Some(a) => format!("{ptr:#x} lies inside {}, not at its start", a.describe()),
        None => format!("{ptr:#x} was not returned by a stream-ordered allocation"),
    };
    EmuError::new(Code::InvalidValue, Kind::InvalidFree, call, what)
}

/// Pools destroyed while allocations were live (kept until those are freed).
static ORPHANS: Mutex<Vec<Arc<Pool>>> = Mutex::new(Vec::new());

fn orphans() -> Vec<Arc<Pool>> {
    let mut o = ORPHANS.lock();
    o.retain(|p| !p.state.lock().blocks.is_empty());
    o.clone()
}

/// Keeps destroyed pool `p` findable by frees while it still has blocks.
fn orphan(p: Arc<Pool>) {
    if !p.state.lock().blocks.is_empty() {
        ORPHANS.lock().push(p);
    }
}

/// Bytes every pool holds now (reserved blocks, used or not), and of those the bytes in use.
pub fn held_bytes() -> (u64, u64) {
    POOLS
        .all()
        .into_iter()
        .map(|(_, p)| p)
        .chain(orphans())
        .map(|p| {
            let st = p.state.lock();
            (st.reserved(), st.used())
        })
        .fold((0, 0), |(r, u), (a, b)| (r + a, u + b))
}

/// Releases every pool of context `ctx` (being destroyed; its live allocations were
/// reported as leaks).
pub fn release_context(ctx: u64, call: &str) {
    for h in POOLS.handles_where(|p| p.ctx == ctx) {
        if let Ok(p) = POOLS.remove(h, call) {
            let mut st = p.state.lock();
            for (base, b) in std::mem::take(&mut st.blocks) {
                memory::unreserve(ctx, base, b.cap);
            }
            st.destroyed = true;
        }
    }
    DEFAULTS.lock().remove(&ctx);
    ORPHANS.lock().retain(|p| p.ctx != ctx);
}

// ---- the entry points' shared bodies --------------------------------------------------------

/// `Err(NOT_SUPPORTED)` where the emulated devices have no memory pools
/// (`XTHUNK_EMU_MEMORY_POOLS=0`).
pub fn supported(call: &str) -> EmuResult<()> {
    if crate::config::get().memory_pools {
        return Ok(());
    }
    Err(EmuError::new(
        Code::NotSupported,
        Kind::Unsupported,
        call,
        "the emulated devices have no memory pools (XTHUNK_EMU_MEMORY_POOLS=0)",
    ))
}

/// `cuMemPoolCreate` / `hipMemPoolCreate` from the properties' first fields (allocation
/// type, handle types, location type and id; the rest is reserved), in context `c`.
///
/// # Safety
/// `out` must be null or valid for writing a handle; `props` null or valid for reading four
/// `int`s.
pub unsafe fn create_from_props(
    c: &Ctx,
    out: *mut Handle,
    props: *const std::ffi::c_int,
    call: &str,
) -> EmuResult<()> {
    supported(call)?;
    if props.is_null() || out.is_null() {
        return Err(invalid(
            call,
            "`pool` or the pool properties are a null pointer",
        ));
    }
    // SAFETY: the caller's properties: at least four `int`s.
    let [alloc_type, handle_types, location_type, id] =
        unsafe { [0, 1, 2, 3].map(|i| *props.add(i)) };
    if alloc_type != 1 {
        return Err(invalid(
            call,
            format!("allocation type {alloc_type} (only PINNED, 1)"),
        ));
    }
    if handle_types != 0 {
        return Err(EmuError::new(
            Code::NotSupported,
            Kind::Unsupported,
            call,
            format!("shareable handle types {handle_types:#x} are not emulated"),
        ));
    }
    if location_type != 1 || id != c.device {
        return Err(invalid(
            call,
            format!(
                "location (type {location_type}, id {id}): the emulator makes pools on the \
                 device of the current context, {}",
                c.device
            ),
        ));
    }
    let h = create(c, id, false);
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, h, "pool", call) }
}

/// `cuDeviceGetDefaultMemPool` / `hipDeviceGetDefaultMemPool` for device `dev` of context `c`.
///
/// # Safety
/// `out` must be null or valid for writing a handle.
pub unsafe fn get_default(c: &Ctx, out: *mut Handle, call: &str) -> EmuResult<()> {
    supported(call)?;
    let h = default_pool(c, c.device);
    // SAFETY: the caller's out-pointer.
    unsafe { put(out, h, "pool", call) }
}

/// `cuMemPoolSetAttribute` / `hipMemPoolSetAttribute`.
///
/// # Safety
/// `value` must be null or valid for reading the attribute's type.
pub unsafe fn set_attribute_from(
    h: Handle,
    attribute: i32,
    value: *const std::ffi::c_void,
    call: &str,
) -> EmuResult<()> {
    if value.is_null() {
        return Err(invalid(call, "`value` is a null pointer"));
    }
    let v = if attribute >= attr::RELEASE_THRESHOLD {
        // SAFETY: the attribute's type is a 64-bit unsigned integer (the caller's value).
        unsafe { *value.cast::<u64>() }
    } else {
        // SAFETY: the attribute's type is an `int` (the caller's value).
        u64::from(unsafe { *value.cast::<std::ffi::c_int>() } != 0)
    };
    set_attribute(h, attribute, v, call)
}

/// `cuMemPoolGetAttribute` / `hipMemPoolGetAttribute`.
///
/// # Safety
/// `value` must be null or valid for writing the attribute's type.
pub unsafe fn get_attribute_into(
    h: Handle,
    attribute: i32,
    value: *mut std::ffi::c_void,
    call: &str,
) -> EmuResult<()> {
    let (v, wide) = get_attribute(h, attribute, call)?;
    // SAFETY: the caller's out-pointer, of the attribute's type.
    unsafe {
        if wide {
            put(value.cast::<u64>(), v, "value", call)
        } else {
            put(
                value.cast::<std::ffi::c_int>(),
                v as std::ffi::c_int,
                "value",
                call,
            )
        }
    }
}

/// `cuMemAllocAsync` / `hipMallocAsync` (`pool` `None`: the default pool of the stream's
/// context) and the `FromPool` variants: allocates on stream `s`, writes `to(address)`.
///
/// # Safety
/// `out` must be null or valid for writing a `T`.
pub unsafe fn allocate_into<D: Driver, T>(
    out: *mut T,
    size: usize,
    pool: Option<Handle>,
    s: Handle,
    to: impl FnOnce(usize) -> T,
    call: &'static str,
) -> EmuResult<()> {
    supported(call)?;
    if out.is_null() {
        return Err(invalid(call, "the pointer to write the address to is null"));
    }
    let st = D::stream(s, call)?;
    let Some(c) = crate::context::of_stream(&st) else {
        return Err(EmuError::new(
            Code::InvalidContext,
            Kind::InvalidState,
            call,
            "the stream's context was destroyed",
        ));
    };
    let p = if size == 0 {
        D::empty_allocation(call)?
    } else {
        let h = pool.unwrap_or_else(|| default_pool(&c, c.device));
        allocate(&c, h, size, &st, call)?
    };
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, to(p), "ptr", call) }
}

/// `cuMemFreeAsync` / `hipFreeAsync`.
pub fn free_on<D: Driver>(ptr: usize, s: Handle, call: &'static str) -> EmuResult<()> {
    supported(call)?;
    let st = D::stream(s, call)?;
    free(ptr, &st, call)
}
