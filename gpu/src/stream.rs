//! What every vendor's streams share: [`RawStream`], a raw stream handle destroyed when its
//! last owner goes (the vendor's stream, and the stream-ordered allocations made on it, which
//! are freed in its order and so keep it alive), and [`bind_current`].

use crate::vendor::Vendor;
use std::sync::Arc;
use xthunk_core::backend::{Device, Stream};
use xthunk_core::{Error, Result};

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

/// Makes `device` (a device of vendor `V` whose streams are `S`) current on the calling
/// thread, as libraries built on the vendor's runtime expect of a thread that creates their
/// objects (NCCL's and RCCL's communicators bind to the current device). `Device` has no
/// downcast, so the device is reached through a short-lived stream of it, whose state
/// `context` gives.
pub fn bind_current<V: Vendor, S: Stream + 'static>(
    device: &dyn Device,
    context: impl Fn(&S) -> &V::Context,
) -> Result<()> {
    let stream = device.create_stream()?;
    let Some(s) = stream.as_any().downcast_ref::<S>() else {
        return Err(Error::InvalidArgument(format!(
            "{} is not a {} device (backend `{}`)",
            device.info().name,
            V::NAME,
            device.backend_name()
        )));
    };
    V::bind(context(s))
}
