//! What the CUDA driver API ([`crate::cuda`]) and the HIP runtime API ([`crate::hip`]) do
//! alike: one body behind the two exported shims.
//!
//! Each API resolves its own context and stream handles ([`Driver`]: CUDA's current context,
//! HIP's current device) and names its own parameters (the `what` arguments, as the vendor
//! headers spell them, for the messages); everything after that is here, once. Where the two
//! APIs really differ (a 0-byte allocation, synchronous memsets, the words of a message), the
//! difference is a [`Driver`] item, so that it is stated in one place.

use crate::context::{Api, Ctx};
use crate::copy::{self, Dir};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::ffi::{put, string};
use crate::launch::{ExtraTags, FUNCTIONS};
use crate::memory::{self, MemKind};
use crate::stream::{self, EVENTS, EXECS, GRAPHS, HostFn, StreamCore, StreamKind};
use std::ffi::{c_char, c_uint, c_void};
use std::sync::Arc;

/// An opaque handle (`CUstream`, `hipEvent_t`, …).
pub type Handle = usize;

/// How one vendor API names its context and streams, and where its semantics differ.
pub trait Driver {
    const API: Api;
    /// The launch API's `extra` tags.
    const EXTRA: ExtraTags;

    /// The context of calls that name no stream (CUDA: the current context; HIP: the current
    /// device's).
    fn ctx(call: &str) -> EmuResult<Arc<Ctx>>;

    /// The stream a handle names (NULL and the special handles: the legacy stream).
    fn stream(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>>;

    /// What a 0-byte allocation gives (CUDA: an error; HIP: NULL).
    fn empty_allocation(call: &str) -> EmuResult<usize>;

    /// Whether a synchronous memset of `dst` is complete when it returns (CUDA: on page-locked
    /// host memory; HIP: always).
    fn sync_memset_completes(dst: usize) -> bool;
}

/// A query's answer: `NOT_READY` (no diagnostic) while work is pending.
pub fn ready(done: bool) -> EmuResult<()> {
    if done {
        Ok(())
    } else {
        Err(EmuError::quiet(Code::NotReady, "work pending"))
    }
}

/// The error of an out-pointer that must not be null.
fn null(what: &str, call: &str) -> EmuError {
    invalid(call, format!("`{what}` is a null pointer"))
}

// ---- memory --------------------------------------------------------------------------------

/// Allocates `size` bytes of `kind` in the API's context and writes `to(address)` to `out`.
///
/// # Safety
/// `out` must be null or valid for writing a `T`.
pub unsafe fn allocate_into<D: Driver, T>(
    out: *mut T,
    what: &str,
    size: usize,
    kind: MemKind,
    to: impl FnOnce(usize) -> T,
    call: &'static str,
) -> EmuResult<()> {
    if out.is_null() {
        return Err(null(what, call));
    }
    let c = D::ctx(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    let p = if size == 0 {
        D::empty_allocation(call)?
    } else {
        memory::allocate(c.id, c.memory(), size, kind, call)?
    };
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, to(p), what, call) }
}

/// Frees `p` (an allocation of one of `kinds`) once the device is idle, as `cuMemFree` and
/// `hipFree` do; a null `p` is a no-op where `null_is_noop`.
pub fn free<D: Driver>(
    p: usize,
    kinds: &[MemKind],
    null_is_noop: bool,
    call: &str,
) -> EmuResult<()> {
    let c = D::ctx(call)?;
    stream::check_capture_rules(call, Code::CaptureUnsupported)?;
    if null_is_noop && p == 0 {
        return Ok(());
    }
    let _ = c.synchronize();
    memory::free(p, kinds, call).map(|_| ())
}

/// `cuMemGetInfo` / `hipMemGetInfo`.
///
/// # Safety
/// `free` and `total` must be null or valid for writing.
pub unsafe fn mem_info<D: Driver>(
    free: *mut usize,
    total: *mut usize,
    call: &str,
) -> EmuResult<()> {
    let c = D::ctx(call)?;
    let used = memory::live_bytes(c.id);
    // SAFETY: the caller's out-pointers.
    unsafe {
        put(free, c.memory().saturating_sub(used) as usize, "free", call)?;
        put(total, c.memory() as usize, "total", call)
    }
}

/// A synchronous copy in the API's context.
pub fn copy_sync<D: Driver>(
    dst: usize,
    src: usize,
    n: usize,
    dir: Dir,
    call: &str,
) -> EmuResult<()> {
    copy::copy_sync(&*D::ctx(call)?, dst, src, n, dir, call)
}

/// An asynchronous copy on the stream `s`.
pub fn copy_async<D: Driver>(
    dst: usize,
    src: usize,
    n: usize,
    dir: Dir,
    s: Handle,
    call: &str,
) -> EmuResult<()> {
    copy::copy_async(&D::stream(s, call)?, dst, src, n, dir, call)
}

/// A memset of `n` elements of `width` bytes: on the stream `s`, or synchronous (`None`: on
/// the legacy stream, complete on return where [`Driver::sync_memset_completes`]).
pub fn memset<D: Driver>(
    dst: usize,
    width: usize,
    v: u32,
    n: usize,
    s: Option<Handle>,
    call: &str,
) -> EmuResult<()> {
    let st = match s {
        Some(h) => D::stream(h, call)?,
        None => D::ctx(call)?.legacy.clone(),
    };
    copy::memset(&st, dst, width, v, n, call)?;
    if s.is_none()
        && D::sync_memset_completes(dst)
        && let Some(c) = st.owner()
    {
        stream::legacy_barrier(&*c, call)?;
    }
    Ok(())
}

// ---- streams and events --------------------------------------------------------------------

/// Creates a stream (`flags`: 0 blocking, 1 non-blocking) and writes its handle to `out`.
///
/// # Safety
/// `out` must be null or valid for writing a handle.
pub unsafe fn create_stream<D: Driver>(
    out: *mut Handle,
    flags: c_uint,
    what: &str,
    call: &str,
) -> EmuResult<()> {
    let c = D::ctx(call)?;
    let kind = match flags {
        0 => StreamKind::Blocking,
        1 => StreamKind::NonBlocking,
        f => return Err(invalid(call, format!("unknown stream flags {f:#x}"))),
    };
    if out.is_null() {
        return Err(null(what, call));
    }
    let h = stream::create_stream(&c, kind, call)?;
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, h, what, call) }
}

/// `cuStreamQuery` / `hipStreamQuery`.
pub fn query_stream<D: Driver>(s: Handle, call: &str) -> EmuResult<()> {
    ready(stream::query_stream(&D::stream(s, call)?, call)?)
}

/// `cuLaunchHostFunc` / `hipLaunchHostFunc`.
pub fn launch_host_func<D: Driver>(
    s: Handle,
    f: Option<HostFn>,
    data: *mut c_void,
    call: &str,
) -> EmuResult<()> {
    let st = D::stream(s, call)?;
    let f = f.ok_or_else(|| invalid(call, "`fn` is null"))?;
    let work = stream::Work::HostFn {
        f,
        data: data as usize,
    };
    stream::submit(&st, stream::Op::new(work, call)).map(|_| ())
}

/// Ends the capture of stream `s`, writing the new graph (NULL on failure, as CUDA does).
///
/// # Safety
/// `out` must be null or valid for writing a handle.
pub unsafe fn end_capture<D: Driver>(
    s: Handle,
    out: *mut Handle,
    what: &str,
    call: &str,
) -> EmuResult<()> {
    if out.is_null() {
        return Err(null(what, call));
    }
    let r = stream::end_capture(&D::stream(s, call)?, call);
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, *r.as_ref().unwrap_or(&0), what, call)? };
    r.map(|_| ())
}

/// Creates an event with (already checked) `flags` in `c` and writes its handle to `out`.
///
/// # Safety
/// `out` must be null or valid for writing a handle.
pub unsafe fn create_event(
    c: &Ctx,
    out: *mut Handle,
    flags: c_uint,
    what: &str,
    call: &str,
) -> EmuResult<()> {
    if out.is_null() {
        return Err(null(what, call));
    }
    let h = stream::create_event(c, flags);
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, h, what, call) }
}

/// `cuEventRecord` / `hipEventRecord`.
pub fn record_event<D: Driver>(e: Handle, s: Handle, call: &str) -> EmuResult<()> {
    let ev = EVENTS.get(e, call)?;
    let st = D::stream(s, call)?;
    if st.ctx_id != ev.ctx_id {
        return Err(EmuError::new(
            Code::InvalidHandle,
            Kind::InvalidHandle,
            call,
            format!(
                "the event and the stream belong to different {}s",
                D::API.owner()
            ),
        ));
    }
    stream::record_event(&ev, &st, call)
}

/// `cuEventQuery` / `hipEventQuery`.
pub fn query_event(e: Handle, call: &str) -> EmuResult<()> {
    ready(stream::query_event(&EVENTS.get(e, call)?, call)?)
}

// ---- modules and launches ------------------------------------------------------------------

/// Loads a module from `image` in the API's context and writes its handle to `out`.
///
/// # Safety
/// `out` must be null or valid for writing a handle; `image` a complete image.
pub unsafe fn load_module<D: Driver>(
    out: *mut Handle,
    image: *const c_void,
    call: &str,
) -> EmuResult<()> {
    let c = D::ctx(call)?;
    if out.is_null() {
        return Err(null("module", call));
    }
    // SAFETY: `image` is a complete image (the caller's contract).
    let h = unsafe { crate::launch::load_module(&c, image, call)? };
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, h, "module", call) }
}

/// Looks up the function `name` of module `m` and writes its handle to `out` (`names`: the
/// API's names of the name and out parameters).
///
/// # Safety
/// `name` must be null or NUL-terminated; `out` null or valid for writing a handle.
pub unsafe fn get_function(
    out: *mut Handle,
    m: Handle,
    name: *const c_char,
    names: (&str, &str),
    call: &str,
) -> EmuResult<()> {
    // SAFETY: NUL-terminated (the caller's contract).
    let name = unsafe { string(name, names.0, call)? };
    if out.is_null() {
        return Err(null(names.1, call));
    }
    let h = crate::launch::get_function(m, &name, call)?;
    // SAFETY: the caller's out-pointer (checked non-null).
    unsafe { put(out, h, names.1, call) }
}

/// Queues a launch of function `f` on stream `s` (`dims`: grid, block, shared bytes).
///
/// # Safety
/// `params` / `extra` follow the launch API's contract.
pub unsafe fn launch_kernel<D: Driver>(
    f: Handle,
    dims: ([c_uint; 3], [c_uint; 3], c_uint),
    s: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    call: &str,
) -> EmuResult<()> {
    let func = FUNCTIONS.get(f, call)?;
    let st = D::stream(s, call)?;
    let current = D::ctx(call)?;
    if st.ctx_id != current.id {
        return Err(EmuError::new(
            Code::InvalidHandle,
            Kind::InvalidHandle,
            call,
            format!(
                "stream {s:#x} belongs to another {} than the current one ({} {}): a kernel \
                 launch must go to a stream of the current {}",
                D::API.owner(),
                D::API.device_name(),
                current.device,
                D::API.owner()
            ),
        ));
    }
    if st.ctx_id != func.ctx_id {
        return Err(EmuError::new(
            Code::InvalidContext,
            Kind::InvalidState,
            call,
            format!(
                "`{}` belongs to another {} than the stream",
                func.name,
                D::API.owner()
            ),
        ));
    }
    // SAFETY: `params`/`extra` follow the launch API contract.
    let launch =
        unsafe { crate::launch::prepare(&func, D::API, dims, params, extra, D::EXTRA, call)? };
    let op_call = format!("{call}({})", func.name);
    let work = stream::Work::Kernel(Arc::new(launch));
    stream::submit(&st, stream::Op::new(work, &op_call)).map(|_| ())
}

// ---- graphs --------------------------------------------------------------------------------

/// Creates an empty graph (`flags` must be 0) and writes its handle to `out`.
///
/// # Safety
/// `out` must be null or valid for writing a handle.
pub unsafe fn create_graph<D: Driver>(
    out: *mut Handle,
    flags: c_uint,
    what: &str,
    call: &str,
) -> EmuResult<()> {
    let c = D::ctx(call)?;
    if flags != 0 {
        return Err(invalid(call, "flags must be 0"));
    }
    let h = GRAPHS.insert(Arc::new(stream::GraphCore::new(c.id, None)));
    // SAFETY: the caller's out-pointer.
    unsafe { put(out, h, what, call) }
}

/// `cuGraphGetNodes` / `hipGraphGetNodes`: the node count, or the first `*num` node handles
/// (CUDA also sets the entries past the graph's nodes to NULL: `clear_rest`).
///
/// # Safety
/// `num` must be null or valid; `nodes` null or holding `*num` entries.
pub unsafe fn graph_nodes(
    graph: Handle,
    nodes: *mut Handle,
    num: *mut usize,
    clear_rest: bool,
    call: &str,
) -> EmuResult<()> {
    let g = GRAPHS.get(graph, call)?;
    let count = g.nodes.lock().len();
    if num.is_null() {
        return Err(null("numNodes", call));
    }
    if nodes.is_null() {
        // SAFETY: the caller's out-pointer (checked non-null).
        return unsafe { put(num, count, "numNodes", call) };
    }
    // SAFETY: `num` is valid (checked non-null); `nodes` holds `*num` entries.
    unsafe {
        let cap = *num;
        for i in 0..cap.min(count) {
            *nodes.add(i) = stream::node_handle(graph, i);
        }
        if clear_rest {
            for i in count..cap {
                *nodes.add(i) = 0;
            }
        }
        *num = cap.min(count);
    }
    Ok(())
}

/// The outcome of an executable-graph update, for the API's out-parameters.
pub struct ExecUpdate {
    /// `CUgraphExecUpdateResult` / `hipGraphExecUpdateResult` (0: success).
    pub result: u32,
    /// The node that prevented the update (NULL when none).
    pub node: Handle,
    failure: Option<String>,
}

impl ExecUpdate {
    /// The call's result, once the out-parameters are written.
    pub fn finish(self, call: &str) -> EmuResult<()> {
        match self.failure {
            None => Ok(()),
            Some(msg) => Err(EmuError::new(
                Code::GraphExecUpdateFailure,
                Kind::InvalidValue,
                call,
                msg,
            )),
        }
    }
}

/// Updates the executable graph `exec` with the parameters of `graph`.
pub fn update_exec(exec: Handle, graph: Handle, call: &str) -> EmuResult<ExecUpdate> {
    let e = EXECS.get(exec, call)?;
    let g = GRAPHS.get(graph, call)?;
    Ok(match stream::update_exec(&e, &g) {
        Ok(()) => ExecUpdate {
            result: 0,
            node: 0,
            failure: None,
        },
        Err((result, idx, msg)) => ExecUpdate {
            result,
            node: idx.map(|i| stream::node_handle(graph, i)).unwrap_or(0),
            failure: Some(msg),
        },
    })
}
