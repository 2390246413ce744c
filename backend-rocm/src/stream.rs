//! Streams and events.
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
use crate::vendor::{MemPool, MemoryRegistry, RawStream, Region, Rocm, RocmEvent};
use parking_lot::Mutex;
use std::any::Any;
use std::ffi::c_int;
use std::sync::Arc;
use xthunk_core::backend::{
    Buffer, DevicePtr, Event, GemmLaunch, Graph, KernelHandle, LaunchArg, LaunchDims, Stream,
};
use xthunk_core::ir::{MemorySpace, MemsetPattern};
use xthunk_core::{Error, Result};
use xthunk_gpu::args::vendor_kernel;

/// Makes `device` (a device of this backend) current on the calling thread (`hipSetDevice`,
/// per thread), as RCCL's `ncclCommInitRank` and `ncclCommSplit` need: they bind the new
/// communicator to the calling thread's current device. The hook `xthunk_nccl`'s clique
/// provider calls on each rank's thread. (`Device` has no downcast, so the device is reached
/// through a short-lived stream of it.)
pub fn bind_current(device: &dyn xthunk_core::backend::Device) -> Result<()> {
    xthunk_gpu::stream::bind_current::<Rocm, RocmStream>(device, |s| &s.ctx)
}

/// A HIP stream.
pub struct RocmStream {
    pub(crate) ctx: Arc<DeviceContext>,
    /// `owner.raw`.
    pub(crate) raw: sys::hipStream_t,
    owner: Arc<RawStream>,
    memory: Arc<MemoryRegistry>,
    /// The device's memory pool, where it has one (stream-ordered allocation).
    pool: Option<Arc<MemPool>>,
    /// The device's rocBLAS, or why it is absent.
    rocblas: std::result::Result<Arc<BlasLibrary>, String>,
    capture: Mutex<Option<Capture>>,
    blas: Mutex<Option<BlasHandle>>,
}

// SAFETY: a hipStream_t may be used from any thread; the capture state and the rocBLAS handle
// are behind mutexes; the stream is destroyed once, in `drop`.
unsafe impl Send for RocmStream {}
// SAFETY: as above.
unsafe impl Sync for RocmStream {}

impl RocmStream {
    pub(crate) fn new(
        ctx: Arc<DeviceContext>,
        memory: Arc<MemoryRegistry>,
        rocblas: std::result::Result<Arc<BlasLibrary>, String>,
        pool: Option<Arc<MemPool>>,
    ) -> Result<Self> {
        ctx.bind()?;
        let mut raw: sys::hipStream_t = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the device is current.
        let rc =
            unsafe { (ctx.hip.api.hipStreamCreateWithFlags)(&mut raw, sys::hipStreamNonBlocking) };
        result::hip("hipStreamCreateWithFlags", rc)?;
        // SAFETY: `raw` was just created for this device and is owned by `owner` alone.
        let owner = Arc::new(unsafe { RawStream::new(ctx.clone(), raw) });
        Ok(RocmStream {
            ctx,
            raw,
            owner,
            memory,
            pool,
            rocblas,
            capture: Mutex::new(None),
            blas: Mutex::new(None),
        })
    }

    fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region> {
        self.memory.region(ptr, len)
    }

    /// Checks an operation and, unless `dry`, queues it on the stream.
    fn issue(&self, op: &Op, dry: bool) -> Result<()> {
        let api = &self.ctx.hip.api;
        match op {
            Op::Copy { src, dst, size } => {
                let (s, d) = self.memory.copy_regions(*src, *dst, *size)?;
                if dry || *size == 0 {
                    return Ok(());
                }
                let n = usize::try_from(*size)
                    .map_err(|_| Error::InvalidArgument("copy too large".into()))?;
                self.ctx.bind()?;
                if s.allocation().space() == MemorySpace::Device
                    && d.allocation().space() == MemorySpace::Device
                {
                    // SAFETY: both ranges lie inside live device allocations of this device
                    // (kept alive by `s`/`d` until the call returns; a free waits for queued
                    // work) and do not overlap.
                    let rc = unsafe { (api.hipMemcpyDtoDAsync)(d.ptr(), s.ptr(), n, self.raw) };
                    result::hip("hipMemcpyDtoDAsync", rc)
                } else {
                    // SAFETY: as above; pinned and managed memory are addressed through
                    // unified addressing (hipMemcpyDefault).
                    let rc = unsafe {
                        (api.hipMemcpyAsync)(d.ptr(), s.ptr(), n, sys::hipMemcpyDefault, self.raw)
                    };
                    result::hip("hipMemcpyAsync", rc)
                }
            }
            Op::Memset { dst, size, pattern } => {
                let w = pattern.width();
                if size % w != 0 || dst.0 % w != 0 {
                    return Err(Error::InvalidArgument(format!(
                        "a {}-bit memset needs a size ({size}) and address ({dst}) that are multiples of {w}",
                        w * 8
                    )));
                }
                let d = self.region(*dst, *size)?;
                if dry || *size == 0 {
                    return Ok(());
                }
                let count = usize::try_from(size / w)
                    .map_err(|_| Error::InvalidArgument("memset too large".into()))?;
                self.ctx.bind()?;
                // SAFETY: `count` elements of the pattern's width at `dst` lie inside a live
                // allocation of this device, aligned to that width.
                let (call, rc) = unsafe {
                    match *pattern {
                        MemsetPattern::U8(v) => (
                            "hipMemsetD8Async",
                            (api.hipMemsetD8Async)(d.ptr(), v, count, self.raw),
                        ),
                        MemsetPattern::U16(v) => (
                            "hipMemsetD16Async",
                            (api.hipMemsetD16Async)(d.ptr(), v, count, self.raw),
                        ),
                        MemsetPattern::U32(v) => (
                            "hipMemsetD32Async",
                            (api.hipMemsetD32Async)(d.ptr(), v as c_int, count, self.raw),
                        ),
                    }
                };
                result::hip(call, rc)
            }
            Op::Launch { kernel, dims, args } => {
                let k = vendor_kernel::<Rocm, RocmKernel>(kernel)?;
                if k.ordinal != self.ctx.ordinal {
                    return Err(Error::InvalidArgument(format!(
                        "kernel `{}` was loaded on rocm:{}, the stream is on rocm:{}",
                        kernel.name(),
                        k.ordinal,
                        self.ctx.ordinal
                    )));
                }
                let mut marshalled = module::marshal(k, args, &self.memory)?;
                if dry {
                    return Ok(());
                }
                self.ctx.bind()?;
                module::launch(&self.ctx, k, dims, &mut marshalled, self.raw)
            }
            Op::Gemm(g) => {
                let lib = match &self.rocblas {
                    Ok(lib) => lib,
                    Err(why) => {
                        return Err(unsupported(format!("gemm: rocBLAS is unavailable ({why})")));
                    }
                };
                let Some(plan) = blas::plan(g)? else {
                    return Ok(());
                };
                self.region(g.a.ptr, g.a.len)?;
                self.region(g.b.ptr, g.b.len)?;
                self.region(g.c.ptr, g.c.len)?;
                if dry {
                    return Ok(());
                }
                let mut h = self.blas.lock();
                if h.is_none() {
                    *h = Some(BlasHandle::new(lib.clone(), &self.ctx, self.raw)?);
                }
                self.ctx.bind()?;
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
    fn submit(&self, op: Op) -> Result<()> {
        let mut cap = self.capture.lock();
        let Some(c) = cap.as_mut() else {
            drop(cap);
            return self.issue(&op, false);
        };
        if matches!(op, Op::Gemm(_)) {
            self.issue(&op, true)?;
            c.close_native(&self.ctx, self.raw);
            c.segments.push(Segment::Plain(vec![op]));
            c.open_native(&self.ctx, self.raw);
            return Ok(());
        }
        if !c.native {
            self.issue(&op, true)?;
            c.pending.push(op);
            return Ok(());
        }
        match self.issue(&op, false) {
            Ok(()) => {
                c.pending.push(op);
                Ok(())
            }
            Err(Error::Unsupported { feature, .. }) => {
                tracing::debug!("not capturable, replayed as plain stream work: {feature}");
                c.abort_native(&self.ctx, self.raw);
                c.pending.push(op);
                let ops = std::mem::take(&mut c.pending);
                c.segments.push(Segment::Plain(ops));
                c.open_native(&self.ctx, self.raw);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn not_while_capturing(&self, what: &str) -> Result<()> {
        if self.capture.lock().is_some() {
            return Err(Error::InvalidArgument(format!(
                "{what} on a ROCm stream that is recording a graph"
            )));
        }
        Ok(())
    }
}

impl Drop for RocmStream {
    fn drop(&mut self) {
        if let Some(mut c) = self.capture.lock().take() {
            c.abort_native(&self.ctx, self.raw);
        }
        // The rocBLAS handle goes before its stream (`owner`, destroyed after the last
        // stream-ordered allocation made on it).
        self.blas.lock().take();
    }
}

impl Stream for RocmStream {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        self.submit(Op::Copy { src, dst, size })
    }

    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        self.submit(Op::Memset { dst, size, pattern })
    }

    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        self.submit(Op::Launch {
            kernel: kernel.clone(),
            dims,
            args: args.to_vec(),
        })
    }

    fn gemm(&self, gemm: &GemmLaunch) -> Result<()> {
        self.submit(Op::Gemm(*gemm))
    }

    fn record(&self, event: &dyn Event) -> Result<()> {
        self.not_while_capturing("recording an event")?;
        let e = RocmEvent::downcast(event)?;
        self.ctx.bind()?;
        // SAFETY: the event and stream are live handles.
        let rc = unsafe { (self.ctx.hip.api.hipEventRecord)(e.raw(), self.raw) };
        result::hip("hipEventRecord", rc)
    }

    fn wait(&self, event: &dyn Event) -> Result<()> {
        self.not_while_capturing("waiting for an event")?;
        let e = RocmEvent::downcast(event)?;
        self.ctx.bind()?;
        // SAFETY: the event and stream are live handles; flags must be 0.
        let rc = unsafe { (self.ctx.hip.api.hipStreamWaitEvent)(self.raw, e.raw(), 0) };
        result::hip("hipStreamWaitEvent", rc)
    }

    fn synchronize(&self) -> Result<()> {
        self.not_while_capturing("synchronizing")?;
        // SAFETY: the stream is live.
        let rc = unsafe { (self.ctx.hip.api.hipStreamSynchronize)(self.raw) };
        result::hip("hipStreamSynchronize", rc)
    }

    fn query(&self) -> Result<bool> {
        self.not_while_capturing("querying")?;
        // SAFETY: the stream is live.
        let rc = unsafe { (self.ctx.hip.api.hipStreamQuery)(self.raw) };
        match rc {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            _ => Err(result::hip_error("hipStreamQuery", rc)),
        }
    }

    fn begin_capture(&self) -> Result<()> {
        let api = &self.ctx.hip.api;
        if !api.has_graphs() {
            return Err(unsupported(format!(
                "HIP graphs (the runtime at {} lacks the stream-capture entry points)",
                self.ctx.hip.path.display()
            )));
        }
        let mut cap = self.capture.lock();
        if cap.is_some() {
            return Err(Error::InvalidArgument(
                "the ROCm stream is already recording a graph".into(),
            ));
        }
        let mut c = Capture::default();
        c.open_native(&self.ctx, self.raw);
        if !c.native {
            return Err(unsupported(
                "HIP stream capture (hipStreamBeginCapture failed)",
            ));
        }
        *cap = Some(c);
        Ok(())
    }

    fn end_capture(&self) -> Result<Arc<dyn Graph>> {
        let Some(mut c) = self.capture.lock().take() else {
            return Err(Error::InvalidArgument(
                "the ROCm stream is not recording a graph".into(),
            ));
        };
        c.close_native(&self.ctx, self.raw);
        let g = RocmGraph::new(self.ctx.ordinal, c.segments);
        tracing::debug!(
            native_nodes = g.native_nodes(),
            plain_ops = g.plain_ops(),
            "recorded a HIP graph"
        );
        Ok(Arc::new(g))
    }

    fn allocate_ordered(&self, size: u64, alignment: u64) -> Result<Buffer> {
        let Some(pool) = &self.pool else {
            return Err(unsupported(format!(
                "stream-ordered allocation on {}",
                self.ctx.name
            )));
        };
        if self.capture.lock().is_some() {
            return Err(Error::InvalidArgument(
                "stream-ordered allocation while the stream records a graph".into(),
            ));
        }
        let buffer = self
            .memory
            .allocate_pooled(&self.ctx, size, alignment, pool, &self.owner)?;
        Ok(Box::new(buffer))
    }

    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        self.not_while_capturing("launching a graph")?;
        let Some(g) = graph.as_any().downcast_ref::<RocmGraph>() else {
            return Err(Error::InvalidArgument(
                "the graph was not recorded by the ROCm backend".into(),
            ));
        };
        if g.ordinal != self.ctx.ordinal {
            return Err(Error::InvalidArgument(format!(
                "the graph was recorded on rocm:{}, the stream is on rocm:{}",
                g.ordinal, self.ctx.ordinal
            )));
        }
        for s in &g.segments {
            match s {
                Segment::Native(n) => n.launch(self.raw)?,
                Segment::Plain(ops) => {
                    for op in ops {
                        self.issue(op, false)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The `hipStream_t` (for NCCL/RCCL and other vendor libraries that take one).
    fn native_handle(&self) -> Option<usize> {
        Some(self.raw.expose_provenance())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
