//! HIP streams: [`RocmStream`] is the shared layer's stream
//! ([`xthunk_gpu::gpu_stream::GpuStream`]: the range checks, copies, memsets, launches, events
//! and stream-ordered allocation, written once) over the HIP runtime's stream calls
//! ([`StreamVendor`] for [`Rocm`]) and what differs here ([`RocmParts`]: rocBLAS, graphs
//! recorded by hand).
//!
//! Streams are non-blocking HIP streams (no implicit ordering with the null stream, which
//! would invalidate captures); the device's synchronous copies synchronize the device first.
//! Every operation checks its pointer ranges against the device's live allocations before HIP
//! sees them. While a stream records a graph, each operation is captured natively or kept for
//! plain replay, as [`crate::graph`] describes.

use crate::blas::{self, BlasHandle, BlasLibrary};
use crate::context::DeviceContext;
use crate::graph::{Capture, Op, RocmGraph, Segment};
use crate::module::{self, RocmKernel};
use crate::result::{self, unsupported};
use crate::sys;
use crate::vendor::{MemPool, MemoryRegistry, Region, Rocm};
use parking_lot::Mutex;
use std::ffi::c_int;
use std::sync::Arc;
use xthunk_core::backend::{DevicePtr, GemmLaunch, Graph, KernelHandle, LaunchArg, LaunchDims};
use xthunk_core::ir::{MemorySpace, MemsetPattern};
use xthunk_core::{Error, Result};
use xthunk_gpu::args::KernelArgs;
use xthunk_gpu::gpu_stream::{GpuStream, StreamParts};
use xthunk_gpu::stream_base::StreamVendor;
use xthunk_gpu::vendor::device_ptr;

/// Makes `device` (a device of this backend) current on the calling thread (`hipSetDevice`,
/// per thread), as RCCL's `ncclCommInitRank` and `ncclCommSplit` need: they bind the new
/// communicator to the calling thread's current device. The hook `xthunk_nccl`'s clique
/// provider calls on each rank's thread. (`Device` has no downcast, so the device is reached
/// through a short-lived stream of it.)
pub fn bind_current(device: &dyn xthunk_core::backend::Device) -> Result<()> {
    xthunk_gpu::stream::bind_current::<Rocm, RocmStream>(device, |s| s.ctx())
}

/// A HIP stream: the shared stream ([`GpuStream`]: context, stream, memory registry, pool,
/// the plain operations) with rocBLAS and graph recording ([`RocmParts`]).
pub type RocmStream = GpuStream<RocmParts>;

/// What a HIP stream has beyond the shared stream: the device's rocBLAS and this stream's
/// handle of it, and the graph being recorded.
pub struct RocmParts {
    /// The device's rocBLAS, or why it is absent.
    rocblas: std::result::Result<Arc<BlasLibrary>, String>,
    capture: Mutex<Option<Capture>>,
    blas: Mutex<Option<BlasHandle>>,
}

// SAFETY: the capture state and the rocBLAS handle (raw HIP and rocBLAS handles, usable from
// any thread) are behind mutexes.
unsafe impl Send for RocmParts {}
// SAFETY: as above.
unsafe impl Sync for RocmParts {}

/// The HIP runtime's stream calls behind the shared stream operations.
impl StreamVendor for Rocm {
    type Kernel = RocmKernel;
    type LaunchArgs = KernelArgs<Rocm>;

    fn native_handle(raw: sys::hipStream_t) -> usize {
        raw.expose_provenance()
    }

    fn create_stream(ctx: &DeviceContext) -> Result<sys::hipStream_t> {
        let mut raw: sys::hipStream_t = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the device is current.
        let rc =
            unsafe { (ctx.hip.api.hipStreamCreateWithFlags)(&mut raw, sys::hipStreamNonBlocking) };
        result::hip("hipStreamCreateWithFlags", rc)?;
        Ok(raw)
    }

    unsafe fn copy_async(
        ctx: &DeviceContext,
        src: &Region,
        dst: &Region,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let api = &ctx.hip.api;
        if src.allocation().space() == MemorySpace::Device
            && dst.allocation().space() == MemorySpace::Device
        {
            // SAFETY: both ranges lie inside live device allocations of this device and do
            // not overlap (the caller's contract).
            let rc = unsafe { (api.hipMemcpyDtoDAsync)(dst.ptr(), src.ptr(), bytes, stream) };
            result::hip("hipMemcpyDtoDAsync", rc)
        } else {
            // SAFETY: as above; pinned and managed memory are addressed through unified
            // addressing (hipMemcpyDefault).
            let rc = unsafe {
                (api.hipMemcpyAsync)(dst.ptr(), src.ptr(), bytes, sys::hipMemcpyDefault, stream)
            };
            result::hip("hipMemcpyAsync", rc)
        }
    }

    unsafe fn memset_async(
        ctx: &DeviceContext,
        addr: u64,
        pattern: MemsetPattern,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let api = &ctx.hip.api;
        let ptr = device_ptr(addr);
        // SAFETY: `count` elements of the pattern's width at `addr` lie inside a live
        // allocation of this device, aligned to that width (the caller's contract).
        let (call, rc) = unsafe {
            match pattern {
                MemsetPattern::U8(v) => (
                    "hipMemsetD8Async",
                    (api.hipMemsetD8Async)(ptr, v, count, stream),
                ),
                MemsetPattern::U16(v) => (
                    "hipMemsetD16Async",
                    (api.hipMemsetD16Async)(ptr, v, count, stream),
                ),
                MemsetPattern::U32(v) => (
                    "hipMemsetD32Async",
                    (api.hipMemsetD32Async)(ptr, v as c_int, count, stream),
                ),
            }
        };
        result::hip(call, rc)
    }

    unsafe fn record_event(
        ctx: &DeviceContext,
        event: sys::hipEvent_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the event and stream are live handles (the caller's contract).
        let rc = unsafe { (ctx.hip.api.hipEventRecord)(event, stream) };
        result::hip("hipEventRecord", rc)
    }

    unsafe fn wait_event(
        ctx: &DeviceContext,
        stream: sys::hipStream_t,
        event: sys::hipEvent_t,
    ) -> Result<()> {
        // SAFETY: the event and stream are live handles (the caller's contract); flags must
        // be 0.
        let rc = unsafe { (ctx.hip.api.hipStreamWaitEvent)(stream, event, 0) };
        result::hip("hipStreamWaitEvent", rc)
    }

    unsafe fn synchronize_stream(ctx: &DeviceContext, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the stream is live (the caller's contract).
        let rc = unsafe { (ctx.hip.api.hipStreamSynchronize)(stream) };
        result::hip("hipStreamSynchronize", rc)
    }

    unsafe fn query_stream(ctx: &DeviceContext, stream: sys::hipStream_t) -> Result<bool> {
        // SAFETY: the stream is live (the caller's contract).
        let rc = unsafe { (ctx.hip.api.hipStreamQuery)(stream) };
        match rc {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            _ => Err(result::hip_error("hipStreamQuery", rc)),
        }
    }

    fn check_launch(
        ctx: &DeviceContext,
        kernel: &RocmKernel,
        name: &str,
        _dims: &LaunchDims,
    ) -> Result<()> {
        if kernel.ordinal != ctx.ordinal {
            return Err(Error::InvalidArgument(format!(
                "kernel `{name}` was loaded on rocm:{}, the stream is on rocm:{}",
                kernel.ordinal, ctx.ordinal
            )));
        }
        Ok(())
    }

    fn marshal(
        kernel: &RocmKernel,
        args: &[LaunchArg],
        memory: &MemoryRegistry,
    ) -> Result<KernelArgs<Rocm>> {
        module::marshal(kernel, args, memory)
    }

    unsafe fn launch(
        ctx: &DeviceContext,
        kernel: &RocmKernel,
        dims: &LaunchDims,
        args: &mut KernelArgs<Rocm>,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        module::launch(ctx, kernel, dims, args, stream)
    }
}

/// A new stream of the device of `ctx` (non-blocking: no implicit order with the null stream,
/// which would invalidate captures).
pub(crate) fn create(
    ctx: Arc<DeviceContext>,
    memory: Arc<MemoryRegistry>,
    rocblas: std::result::Result<Arc<BlasLibrary>, String>,
    pool: Option<Arc<MemPool>>,
) -> Result<RocmStream> {
    let parts = RocmParts {
        rocblas,
        capture: Mutex::new(None),
        blas: Mutex::new(None),
    };
    GpuStream::new(ctx, memory, pool, parts)
}

fn region(s: &RocmStream, ptr: DevicePtr, len: u64) -> Result<Region> {
    s.base().memory().region(ptr, len)
}

/// Checks an operation and, unless `dry`, queues it on the stream.
fn issue(s: &RocmStream, op: &Op, dry: bool) -> Result<()> {
    match op {
        Op::Copy { src, dst, size } => {
            let c = s.base().check_copy(*src, *dst, *size)?;
            if dry {
                return Ok(());
            }
            s.base().issue_copy(c)
        }
        Op::Memset { dst, size, pattern } => {
            let m = s.base().check_memset(*dst, *size, *pattern)?;
            if dry {
                return Ok(());
            }
            s.base().issue_memset(m)
        }
        Op::Launch { kernel, dims, args } => {
            let l = s.base().check_launch(kernel, *dims, args)?;
            if dry {
                return Ok(());
            }
            s.base().issue_launch(l)
        }
        Op::Gemm(g) => {
            let lib = match &s.parts().rocblas {
                Ok(lib) => lib,
                Err(why) => {
                    return Err(unsupported(format!("gemm: rocBLAS is unavailable ({why})")));
                }
            };
            let Some(plan) = blas::plan(g)? else {
                return Ok(());
            };
            region(s, g.a.ptr, g.a.len)?;
            region(s, g.b.ptr, g.b.len)?;
            region(s, g.c.ptr, g.c.len)?;
            if dry {
                return Ok(());
            }
            let mut h = s.parts().blas.lock();
            if h.is_none() {
                *h = Some(BlasHandle::new(lib.clone(), s.ctx(), s.raw())?);
            }
            s.ctx().bind()?;
            match h.as_ref() {
                Some(h) => h.run(&plan),
                None => Err(Error::backend(
                    result::BACKEND,
                    "rocblas_create_handle",
                    "no handle",
                )),
            }
        }
    }
}

/// Queues an operation, or records it when the stream is capturing.
fn submit(s: &RocmStream, op: Op) -> Result<()> {
    let mut cap = s.parts().capture.lock();
    let Some(c) = cap.as_mut() else {
        drop(cap);
        return issue(s, &op, false);
    };
    if matches!(op, Op::Gemm(_)) {
        issue(s, &op, true)?;
        c.close_native(s.ctx(), s.raw());
        c.segments.push(Segment::Plain(vec![op]));
        c.open_native(s.ctx(), s.raw());
        return Ok(());
    }
    if !c.native {
        issue(s, &op, true)?;
        c.pending.push(op);
        return Ok(());
    }
    match issue(s, &op, false) {
        Ok(()) => {
            c.pending.push(op);
            Ok(())
        }
        Err(Error::Unsupported { feature, .. }) => {
            tracing::debug!("not capturable, replayed as plain stream work: {feature}");
            c.abort_native(s.ctx(), s.raw());
            c.pending.push(op);
            let ops = std::mem::take(&mut c.pending);
            c.segments.push(Segment::Plain(ops));
            c.open_native(s.ctx(), s.raw());
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn not_while_capturing(s: &RocmStream, what: &str) -> Result<()> {
    if s.parts().capture.lock().is_some() {
        return Err(Error::InvalidArgument(format!(
            "{what} on a ROCm stream that is recording a graph"
        )));
    }
    Ok(())
}

/// What differs on a HIP stream: rocBLAS, and graphs recorded by hand (each operation
/// captured natively or kept for plain replay), so that the plain operations go through
/// `submit` and what cannot be recorded is refused while recording.
impl StreamParts for RocmParts {
    type Vendor = Rocm;

    fn copy(s: &RocmStream, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        submit(s, Op::Copy { src, dst, size })
    }

    fn memset(s: &RocmStream, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        submit(s, Op::Memset { dst, size, pattern })
    }

    fn launch_kernel(
        s: &RocmStream,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        submit(
            s,
            Op::Launch {
                kernel: kernel.clone(),
                dims,
                args: args.to_vec(),
            },
        )
    }

    fn gemm(s: &RocmStream, gemm: &GemmLaunch) -> Result<()> {
        submit(s, Op::Gemm(*gemm))
    }

    fn check_not_recording(s: &RocmStream, what: &str) -> Result<()> {
        not_while_capturing(s, what)
    }

    fn begin_capture(s: &RocmStream) -> Result<()> {
        let api = &s.ctx().hip.api;
        if !api.has_graphs() {
            return Err(unsupported(format!(
                "HIP graphs (the runtime at {} lacks the stream-capture entry points)",
                s.ctx().hip.path.display()
            )));
        }
        let mut cap = s.parts().capture.lock();
        if cap.is_some() {
            return Err(Error::InvalidArgument(
                "the ROCm stream is already recording a graph".into(),
            ));
        }
        let mut c = Capture::default();
        c.open_native(s.ctx(), s.raw());
        if !c.native {
            return Err(unsupported(
                "HIP stream capture (hipStreamBeginCapture failed)",
            ));
        }
        *cap = Some(c);
        Ok(())
    }

    fn end_capture(s: &RocmStream, _previous: Option<&Arc<dyn Graph>>) -> Result<Arc<dyn Graph>> {
        let Some(mut c) = s.parts().capture.lock().take() else {
            return Err(Error::InvalidArgument(
                "the ROCm stream is not recording a graph".into(),
            ));
        };
        c.close_native(s.ctx(), s.raw());
        let g = RocmGraph::new(s.ctx().ordinal, c.segments);
        tracing::debug!(
            native_nodes = g.native_nodes(),
            plain_ops = g.plain_ops(),
            "recorded a HIP graph"
        );
        Ok(Arc::new(g))
    }

    fn launch_graph(s: &RocmStream, graph: &Arc<dyn Graph>) -> Result<()> {
        not_while_capturing(s, "launching a graph")?;
        let Some(g) = graph.as_any().downcast_ref::<RocmGraph>() else {
            return Err(Error::InvalidArgument(
                "the graph was not recorded by the ROCm backend".into(),
            ));
        };
        if g.ordinal != s.ctx().ordinal {
            return Err(Error::InvalidArgument(format!(
                "the graph was recorded on rocm:{}, the stream is on rocm:{}",
                g.ordinal,
                s.ctx().ordinal
            )));
        }
        for seg in &g.segments {
            match seg {
                Segment::Native(n) => n.launch(s.raw())?,
                Segment::Plain(ops) => {
                    for op in ops {
                        issue(s, op, false)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn on_drop(s: &RocmStream) {
        if let Some(mut c) = s.parts().capture.lock().take() {
            c.abort_native(s.ctx(), s.raw());
        }
        // The rocBLAS handle goes before its stream (the base's, destroyed after the last
        // stream-ordered allocation made on it).
        s.parts().blas.lock().take();
    }
}
