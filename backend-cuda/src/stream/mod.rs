//! Streams and events over `CUstream` and `CUevent`.
//!
//! Streams are created non-blocking (they do not synchronize with the legacy default
//! stream). Every pointer range is checked against the device's live allocations before it
//! reaches the driver. Kernel arguments are marshalled by [`crate::module`]. Recording a
//! graph is stream capture: [`Stream::begin_capture`] starts
//! `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL` capture, [`Stream::end_capture`] ends it and hands
//! the recording to [`crate::graph`].

mod conditional;

use crate::blas::BlasSlot;
use crate::conditional::ConditionalSlot;
use crate::context::DeviceContext;
use crate::graph::CudaGraph;
use crate::module::{self, CudaKernel};
use crate::result::cu;
use crate::sys::{self, CUstreamCaptureMode};
use crate::vendor::{self, Cuda, CudaEvent, MemPool, MemoryRegistry, RawStream};
use std::any::Any;
use std::sync::Arc;
use xthunk_core::backend::{
    Buffer, ConditionHandle, ConditionalKind, DevicePtr, Event, GemmLaunch, Graph, KernelHandle,
    LaunchArg, LaunchDims, SetCondition, Stream,
};
use xthunk_core::ir::MemsetPattern;
use xthunk_core::{Error, Result};
use xthunk_gpu::args::vendor_kernel;

/// Makes `device` (a device of this backend) current on the calling thread: its primary
/// context becomes the thread's current context (`cuCtxSetCurrent`), which is what libraries
/// built on the CUDA runtime take as the current device — NCCL's `ncclCommInitRank` and
/// `ncclCommSplit` bind the new communicator to it. The hook `xthunk_nccl`'s clique provider
/// calls on each rank's thread. (`Device` has no downcast, so the context is reached through
/// a short-lived stream of the device.)
pub fn bind_current(device: &dyn xthunk_core::backend::Device) -> Result<()> {
    xthunk_gpu::stream::bind_current::<Cuda, CudaStream>(device, |s| &s.ctx)
}

/// A CUDA stream.
pub struct CudaStream {
    pub(crate) ctx: Arc<DeviceContext>,
    /// `owner.raw`.
    pub(crate) raw: sys::CUstream,
    owner: Arc<RawStream>,
    pub(crate) memory: Arc<MemoryRegistry>,
    pub(crate) blas: Arc<BlasSlot>,
    pub(crate) conditional: Arc<ConditionalSlot>,
    /// The device's memory pool, where it has one (stream-ordered allocation).
    pool: Option<Arc<MemPool>>,
}

// SAFETY: a CUstream may be used from any thread once its context is made current, which
// every method does first; the handle is immutable after creation.
unsafe impl Send for CudaStream {}
// SAFETY: as above; the driver serializes concurrent submissions to one stream.
unsafe impl Sync for CudaStream {}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl CudaStream {
    pub(crate) fn new(
        ctx: Arc<DeviceContext>,
        memory: Arc<MemoryRegistry>,
        blas: Arc<BlasSlot>,
        conditional: Arc<ConditionalSlot>,
        pool: Option<Arc<MemPool>>,
    ) -> Result<Self> {
        ctx.bind()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the context is current.
        cu("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CU_STREAM_NON_BLOCKING)
        })?;
        // SAFETY: `raw` was just created for this context and is owned by `owner` alone.
        let owner = Arc::new(unsafe { RawStream::new(ctx.clone(), raw) });
        Ok(CudaStream {
            ctx,
            raw,
            owner,
            memory,
            blas,
            conditional,
            pool,
        })
    }
}

impl Stream for CudaStream {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        let (s, d) = self.memory.copy_regions(src, dst, size)?;
        if size == 0 {
            return Ok(());
        }
        let n = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("copy of {size} bytes")))?;
        self.ctx.bind()?;
        // SAFETY: both ranges lie inside live allocations of this context (unified addressing
        // lets the driver infer the direction); the stream is live.
        cu("cuMemcpyAsync", unsafe {
            sys::cuMemcpyAsync(d.addr(), s.addr(), n, self.raw)
        })
    }

    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        let w = pattern.width();
        if size % w != 0 {
            return Err(Error::InvalidArgument(format!(
                "memset of {size} bytes is not a multiple of the {w}-byte pattern"
            )));
        }
        let d = self.memory.region(dst, size)?;
        if size == 0 {
            return Ok(());
        }
        if d.addr() % w != 0 {
            return Err(Error::InvalidArgument(format!(
                "a {w}-byte memset needs a {w}-byte aligned address, got {dst}"
            )));
        }
        let count = usize::try_from(size / w)
            .map_err(|_| Error::InvalidArgument(format!("memset of {size} bytes")))?;
        self.ctx.bind()?;
        let (addr, raw) = (d.addr(), self.raw);
        // `count` elements of the pattern width at `addr` lie inside a live allocation
        // (checked above), aligned to the width; the stream is live.
        let r = match pattern {
            // SAFETY: see above.
            MemsetPattern::U8(v) => unsafe { sys::cuMemsetD8Async(addr, v, count, raw) },
            // SAFETY: see above.
            MemsetPattern::U16(v) => unsafe { sys::cuMemsetD16Async(addr, v, count, raw) },
            // SAFETY: see above.
            MemsetPattern::U32(v) => unsafe { sys::cuMemsetD32Async(addr, v, count, raw) },
        };
        let call = match pattern {
            MemsetPattern::U8(_) => "cuMemsetD8Async",
            MemsetPattern::U16(_) => "cuMemsetD16Async",
            MemsetPattern::U32(_) => "cuMemsetD32Async",
        };
        cu(call, r)
    }

    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        let k = vendor_kernel::<Cuda, CudaKernel>(kernel)?;
        if dims.grid.count() == 0 || dims.block.count() == 0 {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}`: empty launch (grid {}, block {})",
                k.name(),
                dims.grid,
                dims.block
            )));
        }
        let mut marshalled = module::marshal(k, args, &self.memory)?;
        module::launch(&self.ctx, k, &dims, &mut marshalled, self.raw)
    }

    fn gemm(&self, g: &GemmLaunch) -> Result<()> {
        self.blas.gemm(self.raw, &self.memory, g)
    }

    fn record(&self, event: &dyn Event) -> Result<()> {
        let e = CudaEvent::downcast(event)?;
        self.ctx.bind()?;
        // SAFETY: both handles are live and of this context.
        cu("cuEventRecord", unsafe {
            sys::cuEventRecord(e.raw(), self.raw)
        })
    }

    fn wait(&self, event: &dyn Event) -> Result<()> {
        let e = CudaEvent::downcast(event)?;
        self.ctx.bind()?;
        // SAFETY: both handles are live.
        cu("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, e.raw(), 0)
        })
    }

    fn synchronize(&self) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: the stream is live.
        cu("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    fn query(&self) -> Result<bool> {
        self.ctx.bind()?;
        // SAFETY: the stream is live.
        vendor::ready("cuStreamQuery", unsafe { sys::cuStreamQuery(self.raw) })
    }

    fn begin_capture(&self) -> Result<()> {
        // The set-condition module is built now, not during the capture (no module loading
        // while capturing); where it cannot be, conditional nodes are reported unsupported.
        conditional::prepare(self);
        self.ctx.bind()?;
        // SAFETY: the stream is live.
        cu("cuStreamBeginCapture_v2", unsafe {
            sys::cuStreamBeginCapture_v2(
                self.raw,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        })
    }

    fn end_capture(&self) -> Result<Arc<dyn Graph>> {
        self.end_capture_reusing(None)
    }

    fn end_capture_reusing(&self, previous: Option<&Arc<dyn Graph>>) -> Result<Arc<dyn Graph>> {
        self.ctx.bind()?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is live; writes one graph handle.
        cu("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(self.raw, &mut graph)
        })?;
        let previous = previous
            .and_then(|p| p.as_any().downcast_ref::<CudaGraph>())
            .filter(|p| Arc::ptr_eq(p.context(), &self.ctx));
        if let Some(prev) = previous {
            return Ok(Arc::new(CudaGraph::update(prev, graph)?));
        }
        Ok(Arc::new(CudaGraph::instantiate(self.ctx.clone(), graph)?))
    }

    fn allocate_ordered(&self, size: u64, alignment: u64) -> Result<Buffer> {
        let Some(pool) = &self.pool else {
            return Err(Error::Unsupported {
                backend: crate::result::BACKEND.into(),
                feature: format!("stream-ordered allocation on {}", self.ctx.name),
            });
        };
        let buffer = self
            .memory
            .allocate_pooled(&self.ctx, size, alignment, pool, &self.owner)?;
        Ok(Box::new(buffer))
    }

    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        let Some(g) = graph.as_any().downcast_ref::<CudaGraph>() else {
            return Err(Error::InvalidArgument(
                "graph does not belong to the CUDA backend".into(),
            ));
        };
        g.launch(self.raw)
    }

    /// Conditional graph nodes (CUDA 12.4+; see [`crate::conditional`] and `conditional`).
    fn create_condition(&self) -> Result<ConditionHandle> {
        conditional::create(self)
    }

    fn set_condition(&self, condition: ConditionHandle, how: SetCondition) -> Result<()> {
        conditional::set(self, condition, how)
    }

    fn capture_conditional(
        &self,
        kind: ConditionalKind,
        condition: ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        conditional::capture(self, kind, condition, body)
    }

    /// The `CUstream` (for NCCL/RCCL and other vendor libraries that take one).
    fn native_handle(&self) -> Option<usize> {
        Some(self.raw.expose_provenance())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
