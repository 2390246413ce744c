//! What every vendor's stream is made of and does the same way: [`StreamBase`] (the device's
//! state, the owned raw stream, the memory registry every pointer range is checked against,
//! the device's pool) and the stream operations written once over [`StreamVendor`]'s raw
//! calls: copies, memsets and kernel launches (each checked first, then issued, so that a
//! vendor recording a graph can check an operation without queueing it), event record and
//! wait, synchronize, query, and stream-ordered allocation. A vendor's stream type embeds a
//! `StreamBase` and adds what differs (BLAS, capture, conditional nodes).

use crate::args::vendor_kernel;
use crate::errors::unsupported;
use crate::event::GpuEvent;
use crate::memory::{Buffer, MemoryRegistry, Region};
use crate::pool::{MemPool, PoolVendor};
use crate::stream::RawStream;
use crate::vendor::Vendor;
use std::sync::Arc;
use xthunk_core::backend::{DevicePtr, Event, KernelHandle, LaunchArg, LaunchDims};
use xthunk_core::ir::MemsetPattern;
use xthunk_core::{Error, Result};

/// A vendor's raw stream calls. Each is called with the device current (bound by
/// [`StreamBase`] first) and with ranges already checked against the device's live
/// allocations.
pub trait StreamVendor: PoolVendor {
    /// The vendor's kernel handle type.
    type Kernel: KernelHandle + 'static;
    /// A kernel's arguments laid out for the vendor's launch call.
    type LaunchArgs;

    /// The raw stream as the integer `Stream::native_handle` gives out.
    fn native_handle(raw: Self::RawStream) -> usize;
    /// Creates a non-blocking stream (no implicit order with the legacy null stream).
    fn create_stream(ctx: &Self::Context) -> Result<Self::RawStream>;
    /// Queues a copy of `bytes` from `src` to `dst` (disjoint).
    ///
    /// # Safety
    /// `stream` is a live stream of `ctx`'s device; both regions lie in live allocations of it.
    unsafe fn copy_async(
        ctx: &Self::Context,
        src: &Region<Self>,
        dst: &Region<Self>,
        bytes: usize,
        stream: Self::RawStream,
    ) -> Result<()>;
    /// Queues a memset of `count` elements of `pattern`'s width at `addr`.
    ///
    /// # Safety
    /// `stream` is live; the `count` elements lie in a live allocation, aligned to the width.
    unsafe fn memset_async(
        ctx: &Self::Context,
        addr: u64,
        pattern: MemsetPattern,
        count: usize,
        stream: Self::RawStream,
    ) -> Result<()>;
    /// Records `event` on `stream`.
    ///
    /// # Safety
    /// Both handles are live and of `ctx`'s device.
    unsafe fn record_event(
        ctx: &Self::Context,
        event: Self::RawEvent,
        stream: Self::RawStream,
    ) -> Result<()>;
    /// Makes `stream` wait for `event`.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn wait_event(
        ctx: &Self::Context,
        stream: Self::RawStream,
        event: Self::RawEvent,
    ) -> Result<()>;
    /// Waits for the work queued on `stream`.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn synchronize_stream(ctx: &Self::Context, stream: Self::RawStream) -> Result<()>;
    /// Whether the work queued on `stream` has completed.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn query_stream(ctx: &Self::Context, stream: Self::RawStream) -> Result<bool>;

    /// What the vendor checks of a launch before its arguments are marshalled (the kernel's
    /// device, the launch shape).
    fn check_launch(
        ctx: &Self::Context,
        kernel: &Self::Kernel,
        name: &str,
        dims: &LaunchDims,
    ) -> Result<()>;
    /// The arguments checked against the kernel's parameters and the live allocations, laid
    /// out for the launch call.
    fn marshal(
        kernel: &Self::Kernel,
        args: &[LaunchArg],
        memory: &MemoryRegistry<Self>,
    ) -> Result<Self::LaunchArgs>;
    /// Queues the kernel with its marshalled arguments.
    ///
    /// # Safety
    /// `stream` is a live stream of `ctx`'s device; the kernel is of that device and `args`
    /// came from [`StreamVendor::marshal`] for it.
    unsafe fn launch(
        ctx: &Self::Context,
        kernel: &Self::Kernel,
        dims: &LaunchDims,
        args: &mut Self::LaunchArgs,
        stream: Self::RawStream,
    ) -> Result<()>;
}

/// A checked copy, ready to issue (`None` inside: nothing to copy).
pub struct CheckedCopy<V: Vendor> {
    regions: Option<(Region<V>, Region<V>, usize)>,
}

/// A checked memset, ready to issue.
pub struct CheckedMemset<V: Vendor> {
    /// The destination, the pattern and the element count (`None`: zero bytes).
    what: Option<(Region<V>, MemsetPattern, usize)>,
}

/// A checked launch, ready to issue.
pub struct CheckedLaunch<'a, V: StreamVendor> {
    kernel: &'a V::Kernel,
    dims: LaunchDims,
    args: V::LaunchArgs,
}

/// The part of a vendor's stream that every vendor has and uses alike.
pub struct StreamBase<V: StreamVendor> {
    ctx: Arc<V::Context>,
    /// The stream, shared with the stream-ordered allocations made on it.
    owner: Arc<RawStream<V>>,
    memory: Arc<MemoryRegistry<V>>,
    /// The device's memory pool, where it has one (stream-ordered allocation).
    pool: Option<Arc<MemPool<V>>>,
}

impl<V: StreamVendor> std::fmt::Debug for StreamBase<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBase")
            .field("raw", &self.owner.raw())
            .finish_non_exhaustive()
    }
}

impl<V: StreamVendor> StreamBase<V> {
    /// A new non-blocking stream of the device of `ctx`, its ranges checked against `memory`,
    /// allocating in stream order from `pool` where there is one.
    pub fn new(
        ctx: Arc<V::Context>,
        memory: Arc<MemoryRegistry<V>>,
        pool: Option<Arc<MemPool<V>>>,
    ) -> Result<Self> {
        V::bind(&ctx)?;
        let raw = V::create_stream(&ctx)?;
        // SAFETY: `raw` was just created for this device and is owned by `owner` alone.
        let owner = Arc::new(unsafe { RawStream::new(ctx.clone(), raw) });
        Ok(StreamBase {
            ctx,
            owner,
            memory,
            pool,
        })
    }

    /// The device's state.
    pub fn ctx(&self) -> &Arc<V::Context> {
        &self.ctx
    }

    /// The raw stream (live as long as `self`).
    pub fn raw(&self) -> V::RawStream {
        self.owner.raw()
    }

    /// The device's live allocations.
    pub fn memory(&self) -> &Arc<MemoryRegistry<V>> {
        &self.memory
    }

    /// Checks a copy of `size` bytes from `src` to `dst`.
    pub fn check_copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<CheckedCopy<V>> {
        let (s, d) = self.memory.copy_regions(src, dst, size)?;
        if size == 0 {
            return Ok(CheckedCopy { regions: None });
        }
        let n = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("copy of {size} bytes")))?;
        Ok(CheckedCopy {
            regions: Some((s, d, n)),
        })
    }

    /// Queues a checked copy.
    pub fn issue_copy(&self, c: CheckedCopy<V>) -> Result<()> {
        let Some((s, d, n)) = c.regions else {
            return Ok(());
        };
        V::bind(&self.ctx)?;
        // SAFETY: both ranges lie inside live allocations of this device (kept alive by the
        // regions until the call returns; a free waits for queued work) and do not overlap;
        // the stream is live.
        unsafe { V::copy_async(&self.ctx, &s, &d, n, self.raw()) }
    }

    /// Checks and queues a copy.
    pub fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        let c = self.check_copy(src, dst, size)?;
        self.issue_copy(c)
    }

    /// Checks a memset of `size` bytes at `dst`: a whole number of patterns, in a live
    /// allocation, at an address aligned to the pattern's width.
    pub fn check_memset(
        &self,
        dst: DevicePtr,
        size: u64,
        pattern: MemsetPattern,
    ) -> Result<CheckedMemset<V>> {
        let w = pattern.width();
        if !size.is_multiple_of(w) {
            return Err(Error::InvalidArgument(format!(
                "memset of {size} bytes is not a multiple of the {w}-byte pattern"
            )));
        }
        let d = self.memory.region(dst, size)?;
        if size == 0 {
            return Ok(CheckedMemset { what: None });
        }
        if d.addr() % w != 0 {
            return Err(Error::InvalidArgument(format!(
                "a {w}-byte memset needs a {w}-byte aligned address, got {dst}"
            )));
        }
        let count = usize::try_from(size / w)
            .map_err(|_| Error::InvalidArgument(format!("memset of {size} bytes")))?;
        Ok(CheckedMemset {
            what: Some((d, pattern, count)),
        })
    }

    /// Queues a checked memset.
    pub fn issue_memset(&self, m: CheckedMemset<V>) -> Result<()> {
        let Some((d, pattern, count)) = m.what else {
            return Ok(());
        };
        V::bind(&self.ctx)?;
        // SAFETY: `count` elements of the pattern's width at `d` lie inside a live allocation
        // (checked, held by `d`), aligned to the width; the stream is live.
        unsafe { V::memset_async(&self.ctx, d.addr(), pattern, count, self.raw()) }
    }

    /// Checks and queues a memset.
    pub fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        let m = self.check_memset(dst, size, pattern)?;
        self.issue_memset(m)
    }

    /// Checks a launch: the kernel is this vendor's, the vendor's own checks, the arguments
    /// marshalled.
    pub fn check_launch<'a>(
        &self,
        kernel: &'a Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<CheckedLaunch<'a, V>> {
        let k = vendor_kernel::<V, V::Kernel>(kernel)?;
        V::check_launch(&self.ctx, k, kernel.name(), &dims)?;
        let args = V::marshal(k, args, &self.memory)?;
        Ok(CheckedLaunch {
            kernel: k,
            dims,
            args,
        })
    }

    /// Queues a checked launch.
    pub fn issue_launch(&self, mut l: CheckedLaunch<'_, V>) -> Result<()> {
        V::bind(&self.ctx)?;
        // SAFETY: the kernel is this vendor's and was checked against this device; its
        // arguments were marshalled for it; the stream is live.
        unsafe { V::launch(&self.ctx, l.kernel, &l.dims, &mut l.args, self.raw()) }
    }

    /// Checks and queues a launch.
    pub fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        let l = self.check_launch(kernel, dims, args)?;
        self.issue_launch(l)
    }

    /// Records `event` (an event of this vendor) on the stream.
    pub fn record(&self, event: &dyn Event) -> Result<()> {
        let e = GpuEvent::<V>::downcast(event)?;
        V::bind(&self.ctx)?;
        // SAFETY: both handles are live and of this device.
        unsafe { V::record_event(&self.ctx, e.raw(), self.raw()) }
    }

    /// Makes the stream wait for `event` (an event of this vendor).
    pub fn wait(&self, event: &dyn Event) -> Result<()> {
        let e = GpuEvent::<V>::downcast(event)?;
        V::bind(&self.ctx)?;
        // SAFETY: both handles are live.
        unsafe { V::wait_event(&self.ctx, self.raw(), e.raw()) }
    }

    /// Waits for the stream's work.
    pub fn synchronize(&self) -> Result<()> {
        V::bind(&self.ctx)?;
        // SAFETY: the stream is live.
        unsafe { V::synchronize_stream(&self.ctx, self.raw()) }
    }

    /// Whether the stream's work has completed.
    pub fn query(&self) -> Result<bool> {
        V::bind(&self.ctx)?;
        // SAFETY: the stream is live.
        unsafe { V::query_stream(&self.ctx, self.raw()) }
    }

    /// The device's pool, or `Unsupported` where it has none.
    pub fn pool(&self) -> Result<&Arc<MemPool<V>>> {
        self.pool.as_ref().ok_or_else(|| {
            unsupported(
                V::BACKEND,
                format!("stream-ordered allocation on {}", V::device_name(&self.ctx)),
            )
        })
    }

    /// `size` bytes from `pool` (the device's, from [`StreamBase::pool`]) in the stream's
    /// order, freed in that order when the buffer is dropped.
    pub fn allocate_from(
        &self,
        pool: &Arc<MemPool<V>>,
        size: u64,
        alignment: u64,
    ) -> Result<Buffer<V>> {
        self.memory
            .allocate_pooled(&self.ctx, size, alignment, pool, &self.owner)
    }
}
