//! The one `Stream` implementation of every GPU vendor: [`GpuStream`], a [`StreamBase`] (the
//! shared state and operations) and the vendor's own parts ([`StreamParts`]: BLAS, graph
//! capture, conditional nodes, and where the vendor records graphs by hand, how copies,
//! memsets and launches are recorded and what is refused while recording). A vendor's stream
//! type is `GpuStream<ItsParts>` (`xthunk_cuda::CudaStream`, `xthunk_rocm::RocmStream`).

use crate::errors::unsupported;
use crate::memory::MemoryRegistry;
use crate::pool::MemPool;
use crate::stream_base::{StreamBase, StreamVendor};
use std::any::Any;
use std::sync::Arc;
use xthunk_core::Result;
use xthunk_core::backend::{
    Buffer, ConditionHandle, ConditionalKind, DevicePtr, Event, GemmLaunch, Graph, KernelHandle,
    LaunchArg, LaunchDims, SetCondition, Stream,
};
use xthunk_core::ir::MemsetPattern;

/// What a vendor's stream has and does beyond [`StreamBase`]. Each hook gets the whole
/// stream; the defaults are the plain path (check and queue on the base) or, for conditional
/// nodes, `Unsupported`.
pub trait StreamParts: Sized + Send + Sync + 'static {
    /// The vendor's raw calls.
    type Vendor: StreamVendor;

    /// Queues a copy (or records it, while the vendor records a graph by hand).
    fn copy(s: &GpuStream<Self>, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        s.base().copy(src, dst, size)
    }
    /// Queues a memset (or records it).
    fn memset(
        s: &GpuStream<Self>,
        dst: DevicePtr,
        size: u64,
        pattern: MemsetPattern,
    ) -> Result<()> {
        s.base().memset(dst, size, pattern)
    }
    /// Queues a kernel launch (or records it).
    fn launch_kernel(
        s: &GpuStream<Self>,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        s.base().launch(kernel, dims, args)
    }
    /// A gemm through the vendor's BLAS.
    fn gemm(s: &GpuStream<Self>, gemm: &GemmLaunch) -> Result<()>;
    /// Refuses `what` (recording or waiting for an event, synchronizing, querying, a
    /// stream-ordered allocation) where the stream cannot do it now; by default it always can.
    fn check_not_recording(s: &GpuStream<Self>, what: &str) -> Result<()> {
        let _ = (s, what);
        Ok(())
    }
    /// Starts recording a graph.
    fn begin_capture(s: &GpuStream<Self>) -> Result<()>;
    /// Ends recording: the graph (an update of `previous` where the vendor can).
    fn end_capture(
        s: &GpuStream<Self>,
        previous: Option<&Arc<dyn Graph>>,
    ) -> Result<Arc<dyn Graph>>;
    /// Launches a recorded graph.
    fn launch_graph(s: &GpuStream<Self>, graph: &Arc<dyn Graph>) -> Result<()>;
    /// A condition handle of the graph being captured.
    fn create_condition(s: &GpuStream<Self>) -> Result<ConditionHandle> {
        let _ = s;
        Err(no_conditionals::<Self>())
    }
    /// Sets a condition from device memory, in stream order.
    fn set_condition(
        s: &GpuStream<Self>,
        condition: ConditionHandle,
        how: SetCondition,
    ) -> Result<()> {
        let _ = (s, condition, how);
        Err(no_conditionals::<Self>())
    }
    /// Captures an IF or WHILE node whose body `body` records.
    fn capture_conditional(
        s: &GpuStream<Self>,
        kind: ConditionalKind,
        condition: ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        let _ = (s, kind, condition, body);
        Err(no_conditionals::<Self>())
    }
    /// Before the stream goes (what must be released before the raw stream).
    fn on_drop(s: &GpuStream<Self>) {
        let _ = s;
    }
}

/// `Unsupported`: conditional graph nodes.
fn no_conditionals<P: StreamParts>() -> xthunk_core::Error {
    unsupported(
        <P::Vendor as crate::Vendor>::BACKEND,
        "conditional graph nodes",
    )
}

/// A vendor's stream: the shared base and the vendor's parts.
pub struct GpuStream<P: StreamParts> {
    /// Declared first: dropped before the base's raw stream.
    parts: P,
    base: StreamBase<P::Vendor>,
}

impl<P: StreamParts> std::fmt::Debug for GpuStream<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuStream")
            .field("vendor", &<P::Vendor as crate::Vendor>::NAME)
            .field("raw", &self.base.raw())
            .finish_non_exhaustive()
    }
}

impl<P: StreamParts> Drop for GpuStream<P> {
    fn drop(&mut self) {
        P::on_drop(self);
    }
}

type Ctx<P> = <<P as StreamParts>::Vendor as crate::Vendor>::Context;

impl<P: StreamParts> GpuStream<P> {
    /// A new stream of the device of `ctx` (see [`StreamBase::new`]) with the vendor's parts.
    pub fn new(
        ctx: Arc<Ctx<P>>,
        memory: Arc<MemoryRegistry<P::Vendor>>,
        pool: Option<Arc<MemPool<P::Vendor>>>,
        parts: P,
    ) -> Result<Self> {
        Ok(GpuStream {
            parts,
            base: StreamBase::new(ctx, memory, pool)?,
        })
    }

    /// The shared part.
    pub fn base(&self) -> &StreamBase<P::Vendor> {
        &self.base
    }

    /// The vendor's parts.
    pub fn parts(&self) -> &P {
        &self.parts
    }

    /// The device's state.
    pub fn ctx(&self) -> &Arc<Ctx<P>> {
        self.base.ctx()
    }

    /// The raw stream (live as long as `self`).
    pub fn raw(&self) -> <P::Vendor as crate::Vendor>::RawStream {
        self.base.raw()
    }
}

impl<P: StreamParts> Stream for GpuStream<P> {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        P::copy(self, src, dst, size)
    }

    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        P::memset(self, dst, size, pattern)
    }

    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        P::launch_kernel(self, kernel, dims, args)
    }

    fn gemm(&self, gemm: &GemmLaunch) -> Result<()> {
        P::gemm(self, gemm)
    }

    fn record(&self, event: &dyn Event) -> Result<()> {
        P::check_not_recording(self, "recording an event")?;
        self.base.record(event)
    }

    fn wait(&self, event: &dyn Event) -> Result<()> {
        P::check_not_recording(self, "waiting for an event")?;
        self.base.wait(event)
    }

    fn synchronize(&self) -> Result<()> {
        P::check_not_recording(self, "synchronizing")?;
        self.base.synchronize()
    }

    fn query(&self) -> Result<bool> {
        P::check_not_recording(self, "querying")?;
        self.base.query()
    }

    fn begin_capture(&self) -> Result<()> {
        P::begin_capture(self)
    }

    fn end_capture(&self) -> Result<Arc<dyn Graph>> {
        P::end_capture(self, None)
    }

    fn end_capture_reusing(&self, previous: Option<&Arc<dyn Graph>>) -> Result<Arc<dyn Graph>> {
        P::end_capture(self, previous)
    }

    fn create_condition(&self) -> Result<ConditionHandle> {
        P::create_condition(self)
    }

    fn set_condition(&self, condition: ConditionHandle, how: SetCondition) -> Result<()> {
        P::set_condition(self, condition, how)
    }

    fn capture_conditional(
        &self,
        kind: ConditionalKind,
        condition: ConditionHandle,
        body: &mut dyn FnMut(&dyn Stream) -> Result<()>,
    ) -> Result<()> {
        P::capture_conditional(self, kind, condition, body)
    }

    fn allocate_ordered(&self, size: u64, alignment: u64) -> Result<Buffer> {
        let pool = self.base.pool()?;
        P::check_not_recording(self, "stream-ordered allocation")?;
        Ok(Box::new(self.base.allocate_from(pool, size, alignment)?))
    }

    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        P::launch_graph(self, graph)
    }

    /// The raw stream (for NCCL/RCCL and other vendor libraries that take one).
    fn native_handle(&self) -> Option<usize> {
        Some(<P::Vendor as StreamVendor>::native_handle(self.base.raw()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
