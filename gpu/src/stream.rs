//! What every vendor's streams share: [`RawStream`], a raw stream handle destroyed when its
//! last owner goes (the vendor's stream, and the stream-ordered allocations made on it, which
//! are freed in its order and so keep it alive).

use crate::vendor::Vendor;
use std::sync::Arc;

/// A raw stream, destroyed when the last owner goes.
pub struct RawStream<V: Vendor> {
    raw: V::RawStream,
    ctx: Arc<V::Context>,
}

// SAFETY: a stream handle may be used from any thread (the `Vendor` contract); the handle is
// immutable after creation and destroyed once, in `drop`.
unsafe impl<V: Vendor> Send for RawStream<V> {}
// SAFETY: as above; the vendor serializes concurrent submissions to one stream.
unsafe impl<V: Vendor> Sync for RawStream<V> {}

impl<V: Vendor> std::fmt::Debug for RawStream<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawStream")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl<V: Vendor> RawStream<V> {
    /// Takes ownership of `raw`.
    ///
    /// # Safety
    /// `raw` is a live stream of `ctx`'s device that nothing else destroys.
    pub unsafe fn new(ctx: Arc<V::Context>, raw: V::RawStream) -> Self {
        RawStream { raw, ctx }
    }

    /// The handle (live as long as `self`).
    pub fn raw(&self) -> V::RawStream {
        self.raw
    }
}

impl<V: Vendor> Drop for RawStream<V> {
    fn drop(&mut self) {
        // Work already queued still completes after the stream is destroyed.
        // SAFETY: `raw` is a live stream of this device, owned here, destroyed once.
        let r = V::bind(&self.ctx).and_then(|()| unsafe { V::destroy_stream(&self.ctx, self.raw) });
        if let Err(e) = r {
            tracing::error!("{e}");
        }
    }
}
