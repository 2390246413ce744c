//! Emulated devices and contexts.
//!
//! CUDA: one primary context per device, reference counted by `cuDevicePrimaryCtxRetain` /
//! `Release`, plus any made by `cuCtxCreate`; the current context is per thread (a stack, for
//! `cuCtxPush/PopCurrent`). HIP: one context per device, made on first use and destroyed by
//! `hipDeviceReset`; the current device is per thread (0 by default).
//!
//! Destroying a context waits for its work, then reports what it still owns (allocations,
//! streams, events, modules, graphs, BLAS handles) as leaks and frees it.

pub use crate::api::{Api, device_count};
use crate::diag::{self, Kind};
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use crate::stream::{Owner, StreamCore, StreamKind};
use parking_lot::Mutex;
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once, Weak};

/// A context: the owner of allocations, streams, events, modules.
pub struct Ctx {
    pub id: u64,
    pub api: Api,
    pub device: i32,
    /// The legacy default stream (`NULL`, `CU_STREAM_LEGACY`, HIP's null stream).
    pub legacy: Arc<StreamCore>,
    /// Streams created in this context (the legacy stream orders with the blocking ones).
    pub streams: Mutex<Vec<Weak<StreamCore>>>,
    /// The first asynchronous error (a failed operation): returned by every later
    /// synchronization, as a real context is unusable after a device fault.
    pub sticky: Mutex<Option<EmuError>>,
    pub destroyed: AtomicBool,
    /// What other modules registered to run when the context is destroyed ([`Ctx::on_destroy`]):
    /// a module that keeps per-context state registers its release when it first makes some,
    /// so this module names none of them.
    cleanups: Mutex<Vec<(&'static str, Release)>>,
    /// The kinds of handle-named objects of other modules this context may own ([`Ctx::owns`]).
    owned: Mutex<Vec<Owned>>,
}

/// A release of per-context state: called with the context's id and the destroying call.
pub type Release = fn(u64, &str);

/// A kind of handle-named object that a module above this one makes in a context (modules,
/// BLAS handles): that module registers it ([`Ctx::owns`]) when it makes the first one, so
/// that destroying the context reports and destroys what is left without naming the module.
#[derive(Clone, Copy)]
pub struct Owned {
    /// The objects' handle kind: kinds are reported and destroyed in the order of their tags.
    pub kind: HandleKind,
    /// How the leak report counts them (`"module(s)"`).
    pub what: &'static str,
    /// How many objects of this kind the context with this id still owns.
    pub count: fn(u64) -> usize,
    /// Destroys them (their handles become "destroyed").
    pub destroy: fn(u64),
}

static NEXT_CTX: AtomicU64 = AtomicU64::new(1);

/// Every context, by handle.
pub static CONTEXTS: Table<Ctx> = Table::new(HandleKind::Context);

impl Ctx {
    /// A new context on `device`, registered, with its handle.
    pub fn create(api: Api, device: i32, call: &str) -> EmuResult<(usize, Arc<Ctx>)> {
        install_exit_hook();
        let id = NEXT_CTX.fetch_add(1, Ordering::SeqCst);
        let legacy = StreamCore::spawn(id, StreamKind::Legacy, Weak::<Ctx>::new(), call)?;
        let ctx = Arc::new(Ctx {
            id,
            api,
            device,
            legacy,
            streams: Mutex::new(Vec::new()),
            cleanups: Mutex::new(Vec::new()),
            owned: Mutex::new(Vec::new()),
            sticky: Mutex::new(None),
            destroyed: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&ctx);
        let owner: Weak<dyn Owner> = weak;
        ctx.legacy.set_owner(owner);
        let h = CONTEXTS.insert(ctx.clone());
        Ok((h, ctx))
    }

    /// Memory of the device in bytes (`XTHUNK_EMU_MEMORY`, read at each use).
    pub fn memory(&self) -> u64 {
        crate::config::get().memory
    }

    /// Live user streams of this context.
    pub fn user_streams(&self) -> Vec<Arc<StreamCore>> {
        let mut g = self.streams.lock();
        g.retain(|w| w.strong_count() > 0);
        g.iter()
            .filter_map(Weak::upgrade)
            .filter(|s| !s.is_destroyed())
            .collect()
    }

    /// Records the context's first asynchronous error.
    pub fn set_sticky(&self, e: &EmuError) {
        let mut g = self.sticky.lock();
        if g.is_none() {
            *g = Some(e.clone());
        }
    }

    /// The sticky error, as the error of a synchronizing call.
    pub fn sticky_error(&self) -> EmuResult<()> {
        match self.sticky.lock().as_ref() {
            Some(e) => Err(EmuError::quiet(e.code, e.message.clone())),
            None => Ok(()),
        }
    }

    /// Streams of this context still running queued work: the live user streams, and
    /// destroyed ones whose work has not finished (a destroyed stream's work still runs).
    fn draining_streams(&self) -> Vec<Arc<StreamCore>> {
        let mut g = self.streams.lock();
        g.retain(|w| w.strong_count() > 0);
        g.iter().filter_map(Weak::upgrade).collect()
    }

    /// Waits for all work of the context (`cuCtxSynchronize`, `hipDeviceSynchronize`),
    /// destroyed streams' queued work included.
    pub fn synchronize(&self) -> EmuResult<()> {
        let mut first = None;
        for s in std::iter::once(self.legacy.clone()).chain(self.draining_streams()) {
            if let Err(e) = s.wait_all() {
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => self.sticky_error(),
        }
    }

    /// Registers `release` (once per `key`) to run with the context's id and the destroying
    /// call when the context is destroyed, after its streams' objects and memory are released.
    pub fn on_destroy(&self, key: &'static str, release: Release) {
        let mut g = self.cleanups.lock();
        if !g.iter().any(|(k, _)| *k == key) {
            g.push((key, release));
        }
    }

    /// Registers a kind of object this context may own (once per kind), reported as a leak
    /// and destroyed with the context after its streams, events and graphs.
    pub fn owns(&self, owned: Owned) {
        let mut g = self.owned.lock();
        if !g.iter().any(|o| o.kind == owned.kind) {
            g.push(owned);
            g.sort_by_key(|o| o.kind as usize);
        }
    }

    /// Destroys the context: waits for its work, reports and frees what it still owns.
    pub fn destroy(self: &Arc<Ctx>, handle: usize, call: &str) {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = self.synchronize();
        let cfg = crate::config::get();
        let what = format!(
            "{} {} (context {:#x})",
            self.api.device_name(),
            self.device,
            handle
        );
        let owned = self.owned.lock().clone();
        if cfg.leak_check {
            report_leaks(Some(self.id), call, &format!("when {what} was destroyed"));
            let mut counts = crate::stream::context_objects(self.id).to_vec();
            counts.extend(owned.iter().map(|o| ((o.count)(self.id), o.what)));
            report_objects(&counts, call, &what);
        }
        crate::stream::destroy_context_objects(self.id);
        for o in &owned {
            (o.destroy)(self.id);
        }
        crate::memory::release_context(self.id, call);
        // Per-context state of other modules (memory pools: `pool::release_context`).
        let cleanups = self.cleanups.lock().clone();
        for (_, release) in cleanups {
            release(self.id, call);
        }
        for s in self.user_streams() {
            s.shutdown();
        }
        self.legacy.shutdown();
        let _ = CONTEXTS.remove(handle, call);
    }
}

/// The context a stream belongs to, while it lives.
pub fn of_stream(s: &StreamCore) -> Option<Arc<Ctx>> {
    s.owner()?.into_any().downcast::<Ctx>().ok()
}

/// What the streams of a context see of it.
impl Owner for Ctx {
    fn id(&self) -> u64 {
        self.id
    }

    fn legacy(&self) -> &Arc<StreamCore> {
        &self.legacy
    }

    fn user_streams(&self) -> Vec<Arc<StreamCore>> {
        Ctx::user_streams(self)
    }

    fn add_stream(&self, s: &Arc<StreamCore>) {
        self.streams.lock().push(Arc::downgrade(s));
    }

    fn set_sticky(&self, e: &EmuError) {
        Ctx::set_sticky(self, e)
    }

    fn sticky_error(&self) -> EmuResult<()> {
        Ctx::sticky_error(self)
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// Reports the objects a destroyed context still owns (`(count, kind)`, in order) as one leak.
fn report_objects(counts: &[(usize, &str)], call: &str, what: &str) {
    let leaked: Vec<String> = counts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, kind)| format!("{n} {kind}"))
        .collect();
    if !leaked.is_empty() {
        diag::record(
            Kind::Leak,
            call,
            format!("{} still live when {what} was destroyed", leaked.join(", ")),
        );
    }
}

/// Reports live allocations of `ctx` (all when `None`) as leaks, one diagnostic each (the
/// first 20) and a summary.
pub fn report_leaks(ctx: Option<u64>, call: &str, when: &str) {
    let leaks = crate::memory::live(ctx);
    if leaks.is_empty() {
        return;
    }
    let total: u64 = leaks.iter().map(|a| a.size as u64).sum();
    for a in leaks.iter().take(20) {
        diag::record(
            Kind::Leak,
            call,
            format!("{} still live {when}", a.describe()),
        );
    }
    if leaks.len() > 1 {
        diag::record(
            Kind::Leak,
            call,
            format!(
                "{} allocations ({} bytes) still live {when}",
                leaks.len(),
                total
            ),
        );
    }
}

/// Reports leaks at process exit (allocations still live anywhere), if enabled.
extern "C" fn at_exit() {
    let r = std::panic::catch_unwind(|| {
        if crate::config::get().leak_check {
            report_leaks(None, "process exit", "at process exit");
        }
    });
    let _ = r;
}

unsafe extern "C" {
    /// C's `atexit` (the C library is linked into every process that loads the emulator).
    fn atexit(cb: extern "C" fn()) -> std::ffi::c_int;
}

fn install_exit_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state; it only reads the
        // registry and writes diagnostics, which stay valid until the process ends (this
        // library is never unloaded by the backends while in use).
        let _ = unsafe { atexit(at_exit) };
    });
}

// ---- CUDA ----------------------------------------------------------------------------------

struct Primary {
    handle: usize,
    ctx: Arc<Ctx>,
    refs: u32,
}

static PRIMARY: Mutex<Option<HashMap<i32, Primary>>> = Mutex::new(None);
static CUDA_INIT: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The CUDA context stack of this thread (top = current), as handles.
    static CURRENT: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// The current HIP device of this thread.
    static HIP_DEVICE: RefCell<i32> = const { RefCell::new(0) };
}

/// `cuInit`.
pub fn cuda_init(flags: u32, call: &str) -> EmuResult<()> {
    if flags != 0 {
        return Err(crate::error::invalid(
            call,
            format!("flags must be 0, got {flags}"),
        ));
    }
    CUDA_INIT.store(true, Ordering::SeqCst);
    Ok(())
}

/// Fails with `NOT_INITIALIZED` before `cuInit`.
pub fn cuda_initialized(call: &str) -> EmuResult<()> {
    if CUDA_INIT.load(Ordering::SeqCst) {
        Ok(())
    } else {
        Err(EmuError::new(
            Code::NotInitialized,
            Kind::InvalidState,
            call,
            "cuInit has not been called",
        ))
    }
}

/// Checks a device ordinal.
pub fn check_device(dev: i32, call: &str) -> EmuResult<()> {
    if dev >= 0 && dev < device_count() {
        Ok(())
    } else {
        Err(EmuError::new(
            Code::InvalidDevice,
            Kind::InvalidValue,
            call,
            format!("device {dev} does not exist ({} devices)", device_count()),
        ))
    }
}

/// `cuDevicePrimaryCtxRetain`.
pub fn primary_retain(dev: i32, call: &str) -> EmuResult<usize> {
    cuda_initialized(call)?;
    check_device(dev, call)?;
    let mut g = PRIMARY.lock();
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get_mut(&dev) {
        p.refs += 1;
        return Ok(p.handle);
    }
    let (handle, ctx) = Ctx::create(Api::Cuda, dev, call)?;
    map.insert(
        dev,
        Primary {
            handle,
            ctx,
            refs: 1,
        },
    );
    Ok(handle)
}

/// `cuDevicePrimaryCtxRelease`: the last release destroys the context.
pub fn primary_release(dev: i32, call: &str) -> EmuResult<()> {
    cuda_initialized(call)?;
    check_device(dev, call)?;
    let done = {
        let mut g = PRIMARY.lock();
        let map = g.get_or_insert_with(HashMap::new);
        let Some(p) = map.get_mut(&dev) else {
            return Err(EmuError::new(
                Code::InvalidContext,
                Kind::InvalidState,
                call,
                format!("the primary context of device {dev} is not retained"),
            ));
        };
        p.refs -= 1;
        if p.refs == 0 { map.remove(&dev) } else { None }
    };
    if let Some(p) = done {
        p.ctx.destroy(p.handle, call);
    }
    Ok(())
}

/// `(flags, active)` of a primary context.
pub fn primary_state(dev: i32) -> (u32, bool) {
    let g = PRIMARY.lock();
    let active = g.as_ref().is_some_and(|m| m.contains_key(&dev));
    (0, active)
}

/// Sets the current CUDA context of this thread (0 = none).
pub fn set_current(handle: usize, call: &str) -> EmuResult<()> {
    if handle != 0 {
        CONTEXTS.get(handle, call)?;
    }
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.pop();
        if handle != 0 {
            c.push(handle);
        }
    });
    Ok(())
}

pub fn push_current(handle: usize, call: &str) -> EmuResult<()> {
    CONTEXTS.get(handle, call)?;
    CURRENT.with(|c| c.borrow_mut().push(handle));
    Ok(())
}

pub fn pop_current() -> Option<usize> {
    CURRENT.with(|c| c.borrow_mut().pop())
}

/// The current CUDA context handle (0 when none).
pub fn current_handle() -> usize {
    CURRENT.with(|c| c.borrow().last().copied().unwrap_or(0))
}

/// The current CUDA context, or `INVALID_CONTEXT`.
pub fn current(call: &str) -> EmuResult<Arc<Ctx>> {
    cuda_initialized(call)?;
    let h = current_handle();
    if h == 0 {
        return Err(EmuError::new(
            Code::InvalidContext,
            Kind::InvalidState,
            call,
            "no current context (call cuCtxSetCurrent or cuCtxPushCurrent first)",
        ));
    }
    match CONTEXTS.try_get(h) {
        Some(c) if !c.destroyed.load(Ordering::SeqCst) => Ok(c),
        _ => Err(EmuError::new(
            Code::InvalidContext,
            Kind::InvalidState,
            call,
            format!("the current context {h:#x} was destroyed"),
        )),
    }
}

// ---- HIP -----------------------------------------------------------------------------------

/// HIP device contexts: device -> (handle, context).
type HipContexts = HashMap<i32, (usize, Arc<Ctx>)>;

static HIP_CTX: Mutex<Option<HipContexts>> = Mutex::new(None);

pub fn hip_set_device(dev: i32, call: &str) -> EmuResult<()> {
    check_device(dev, call)?;
    HIP_DEVICE.with(|d| *d.borrow_mut() = dev);
    Ok(())
}

pub fn hip_current_device() -> i32 {
    HIP_DEVICE.with(|d| *d.borrow())
}

/// The context of HIP device `dev` (made on first use).
pub fn hip_ctx_of(dev: i32, call: &str) -> EmuResult<Arc<Ctx>> {
    if device_count() == 0 {
        return Err(EmuError::new(
            Code::NoDevice,
            Kind::InvalidState,
            call,
            "no emulated device (XTHUNK_EMU_DEVICES=0)",
        ));
    }
    check_device(dev, call)?;
    let mut g = HIP_CTX.lock();
    let map = g.get_or_insert_with(HashMap::new);
    if let Some((_, c)) = map.get(&dev) {
        return Ok(c.clone());
    }
    let (h, c) = Ctx::create(Api::Hip, dev, call)?;
    map.insert(dev, (h, c.clone()));
    Ok(c)
}

/// The context of the calling thread's current HIP device.
pub fn hip_ctx(call: &str) -> EmuResult<Arc<Ctx>> {
    hip_ctx_of(hip_current_device(), call)
}

/// `hipDeviceReset`: destroys the current device's context (reporting leaks).
pub fn hip_reset(call: &str) -> EmuResult<()> {
    let dev = hip_current_device();
    let taken = HIP_CTX.lock().as_mut().and_then(|m| m.remove(&dev));
    if let Some((h, c)) = taken {
        c.destroy(h, call);
    }
    Ok(())
}

/// The context with internal id `id`, if still live.
pub fn by_id(id: u64) -> Option<Arc<Ctx>> {
    CONTEXTS
        .all()
        .into_iter()
        .map(|(_, c)| c)
        .find(|c| c.id == id)
}
