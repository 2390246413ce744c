//! Stream-ordered allocation (`Stream::allocate_ordered`): a memory pool of the device's own
//! whose release threshold is the largest, so that memory freed in stream order stays in the
//! pool and a repeated allocation of a size it held calls no allocator. A pool of its own
//! (not the device's default pool) leaves the threshold of other users of the default pool
//! alone. The vendor's part ([`PoolVendor`]) is the raw pool calls; allocations from the pool
//! keep it and their stream alive ([`crate::memory`]).

use crate::memory::{Buffer, MemoryRegistry};
use crate::stream::RawStream;
use crate::vendor::Vendor;
use std::sync::Arc;
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};

/// A vendor's raw memory-pool calls.
pub trait PoolVendor: Vendor {
    /// A raw pool handle (`CUmemoryPool`, `hipMemPool_t`).
    type RawPool: Copy + std::fmt::Debug + 'static;

    /// Creates the device's pool with the largest release threshold (where the vendor
    /// reports `supported` for memory pools and has the entry points), or says why there is
    /// none. The pool is given to `made` as soon as it exists, so that it is destroyed if a
    /// later step fails.
    fn create_pool(
        ctx: &Self::Context,
        supported: bool,
        made: &mut dyn FnMut(Self::RawPool),
    ) -> std::result::Result<(), String>;
    /// Destroys a pool (frees still queued complete first).
    ///
    /// # Safety
    /// `raw` is a live pool of `ctx`'s device with no live allocation, destroyed once.
    unsafe fn destroy_pool(ctx: &Self::Context, raw: Self::RawPool) -> Result<()>;
    /// `bytes` from the pool in the order of `stream` (the device current); out of memory is
    /// `oom()`.
    ///
    /// # Safety
    /// The pool and the stream are live handles of the device.
    unsafe fn pool_allocate(
        ctx: &Self::Context,
        pool: Self::RawPool,
        bytes: u64,
        stream: Self::RawStream,
        oom: &dyn Fn() -> Error,
    ) -> Result<u64>;
    /// What a pooled allocation gives back: `ptr`, freed in `stream`'s order, keeping the
    /// stream and the pool alive until then.
    fn pooled(ptr: u64, stream: Arc<RawStream<Self>>, pool: Arc<MemPool<Self>>) -> Self::RawMemory;
}

/// A device's memory pool.
pub struct MemPool<V: PoolVendor> {
    raw: V::RawPool,
    ctx: Arc<V::Context>,
}

// SAFETY: a pool handle may be used from any thread (the `Vendor` contract); it is immutable
// after creation and destroyed once, in `drop`.
unsafe impl<V: PoolVendor> Send for MemPool<V> {}
// SAFETY: as above; the vendor serializes use of the pool.
unsafe impl<V: PoolVendor> Sync for MemPool<V> {}

impl<V: PoolVendor> std::fmt::Debug for MemPool<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl<V: PoolVendor> Drop for MemPool<V> {
    fn drop(&mut self) {
        // Allocations hold the pool, so none is live; frees still queued complete first.
        let r = V::bind(&self.ctx).and_then(|()| {
            // SAFETY: `raw` came from `create_pool` and is destroyed once, here.
            unsafe { V::destroy_pool(&self.ctx, self.raw) }
        });
        if let Err(e) = r {
            tracing::warn!("destroying the memory pool: {e}");
        }
    }
}

impl<V: PoolVendor> MemPool<V> {
    /// The pool of the device of `ctx` (whose vendor reports `supported` for memory pools),
    /// or why there is none.
    pub fn create(
        ctx: &Arc<V::Context>,
        supported: bool,
    ) -> std::result::Result<Arc<MemPool<V>>, String> {
        let mut pool = None;
        let made = V::create_pool(ctx, supported, &mut |raw| {
            pool = Some(Arc::new(MemPool {
                raw,
                ctx: ctx.clone(),
            }))
        });
        match (made, pool) {
            (Ok(()), Some(pool)) => Ok(pool),
            (Ok(()), None) => Err("the pool was not made".into()),
            // A pool made before the failure is destroyed here.
            (Err(why), _) => Err(why),
        }
    }
}

impl<V: PoolVendor> MemoryRegistry<V> {
    /// Allocates `size` bytes of device memory from `pool` in the order of `stream`.
    pub fn allocate_pooled(
        self: &Arc<Self>,
        ctx: &Arc<V::Context>,
        size: u64,
        alignment: u64,
        pool: &Arc<MemPool<V>>,
        stream: &Arc<RawStream<V>>,
    ) -> Result<Buffer<V>> {
        self.allocate_with(ctx, size, alignment, MemorySpace::Device, &|n, oom| {
            // SAFETY: the pool and the stream are live (held); the device is current (bound
            // by `allocate_with`).
            let ptr = unsafe { V::pool_allocate(ctx, pool.raw, n, stream.raw(), oom) }?;
            Ok((V::pooled(ptr, stream.clone(), pool.clone()), ptr))
        })
    }
}
