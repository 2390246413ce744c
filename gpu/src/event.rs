//! Events (`Device::create_event`, `Stream::record` / `Stream::wait`), over the vendor's raw
//! event calls: one type for every vendor, created without timing unless asked, destroyed
//! when dropped.

use crate::vendor::Vendor;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;
use xthunk_core::backend::Event;
use xthunk_core::{Error, Result};

/// An event of one device.
pub struct GpuEvent<V: Vendor> {
    ctx: Arc<V::Context>,
    raw: V::RawEvent,
}

// SAFETY: an event handle may be used from any thread (the `Vendor` contract: its calls make
// the device current where the vendor needs it); it is immutable after creation and
// destroyed once, in `drop`.
unsafe impl<V: Vendor> Send for GpuEvent<V> {}
// SAFETY: as above.
unsafe impl<V: Vendor> Sync for GpuEvent<V> {}

impl<V: Vendor> std::fmt::Debug for GpuEvent<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuEvent")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl<V: Vendor> GpuEvent<V> {
    /// An event without timing.
    pub fn new(ctx: Arc<V::Context>) -> Result<Self> {
        let raw = V::create_event(&ctx, false)?;
        Ok(GpuEvent { ctx, raw })
    }

    /// An event with timing (for [`Event::elapsed_since`]).
    pub fn timing(ctx: Arc<V::Context>) -> Result<Self> {
        let raw = V::create_event(&ctx, true)?;
        Ok(GpuEvent { ctx, raw })
    }

    /// `event` as an event of this vendor.
    pub fn downcast(event: &dyn Event) -> Result<&Self> {
        event.as_any().downcast_ref::<Self>().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "the event was not created by the {} backend",
                V::NAME
            ))
        })
    }

    /// The raw handle (live as long as `self`).
    pub fn raw(&self) -> V::RawEvent {
        self.raw
    }

    /// The device state it belongs to.
    pub fn context(&self) -> &Arc<V::Context> {
        &self.ctx
    }
}

impl<V: Vendor> Drop for GpuEvent<V> {
    fn drop(&mut self) {
        // SAFETY: created by `create_event` for this device, destroyed once, here.
        if let Err(e) = unsafe { V::destroy_event(&self.ctx, self.raw) } {
            tracing::error!("{e}");
        }
    }
}

impl<V: Vendor> Event for GpuEvent<V> {
    fn elapsed_since(&self, start: &dyn Event) -> Result<Duration> {
        let start = Self::downcast(start)?;
        // SAFETY: both events are live (borrowed).
        let ms = unsafe { V::event_elapsed_ms(&self.ctx, start.raw, self.raw) }?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    fn synchronize(&self) -> Result<()> {
        // SAFETY: the event is live (borrowed).
        unsafe { V::event_synchronize(&self.ctx, self.raw) }
    }

    fn query(&self) -> Result<bool> {
        // SAFETY: the event is live (borrowed).
        unsafe { V::event_query(&self.ctx, self.raw) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
