//! The [`Vendor`] trait: a GPU vendor's raw calls and handle types, which the shared layer's
//! allocations, streams and events are generic over. A vendor crate implements it once, on a
//! marker type (`xthunk_cuda::Cuda`, `xthunk_rocm::Rocm`).
//!
//! Contract for every implementation: the raw handles may be used and destroyed from any
//! thread (with the device made current first, which the calls below do where the vendor
//! needs it), and the driver or runtime serializes concurrent use of one handle. The shared
//! types rely on that for their `Send`/`Sync`.

use std::ffi::c_void;
use std::fmt::Debug;
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};

/// A GPU vendor's raw calls.
pub trait Vendor: Debug + Sized + Send + Sync + 'static {
    /// How messages name the vendor (`CUDA`, `ROCm`).
    const NAME: &'static str;
    /// The backend's name in errors (`cuda`, `rocm`).
    const BACKEND: &'static str;
    /// What a range check names as the owner of the memory (`CUDA device`).
    const DEVICE: &'static str;

    /// The per-device state every object of a device shares.
    type Context: Debug + Send + Sync + 'static;
    /// A raw stream handle (`CUstream`, `hipStream_t`).
    type RawStream: Copy + Debug + 'static;
    /// A raw event handle (`CUevent`, `hipEvent_t`).
    type RawEvent: Copy + Debug + 'static;
    /// What an allocation gives back when it goes (its memory, and what that memory keeps
    /// alive: a pooled allocation's stream and pool).
    type RawMemory: Debug + 'static;

    /// Makes the device of `ctx` current on this thread.
    fn bind(ctx: &Self::Context) -> Result<()>;
    /// The device's name, for messages.
    fn device_name(ctx: &Self::Context) -> &str;

    /// The alignment every allocation of `space` has (so a larger one is met by padding up
    /// front), or `None`: allocate as asked, and pad and retry only when the address comes
    /// back misaligned.
    fn guaranteed_alignment(space: MemorySpace) -> Option<u64>;
    /// Allocates `bytes` of `space` (the device current): what to give back, and the device
    /// address. Out of memory is `oom()`.
    fn allocate(
        ctx: &Self::Context,
        space: MemorySpace,
        bytes: u64,
        oom: &dyn Fn() -> Error,
    ) -> Result<(Self::RawMemory, u64)>;
    /// Gives an allocation back (the device current): after the work using it (the free
    /// calls synchronize), or in its stream's order for pooled memory.
    ///
    /// # Safety
    /// `raw` came from [`Vendor::allocate`] (or the vendor's pool) for `ctx`'s device and is
    /// given back once.
    unsafe fn free(ctx: &Self::Context, raw: &Self::RawMemory) -> Result<()>;

    /// Destroys a stream (work already queued still completes).
    ///
    /// # Safety
    /// `raw` is a live stream of `ctx`'s device, destroyed once.
    unsafe fn destroy_stream(ctx: &Self::Context, raw: Self::RawStream) -> Result<()>;

    /// Creates an event, with timing or without.
    fn create_event(ctx: &Self::Context, timing: bool) -> Result<Self::RawEvent>;
    /// Destroys an event.
    ///
    /// # Safety
    /// `raw` is a live event of `ctx`'s device, destroyed once.
    unsafe fn destroy_event(ctx: &Self::Context, raw: Self::RawEvent) -> Result<()>;
    /// Milliseconds between two recorded timing events.
    ///
    /// # Safety
    /// The events are live events of `ctx`'s device.
    unsafe fn event_elapsed_ms(
        ctx: &Self::Context,
        start: Self::RawEvent,
        end: Self::RawEvent,
    ) -> Result<f32>;
    /// Waits for an event.
    ///
    /// # Safety
    /// The events are live events of `ctx`'s device.
    unsafe fn event_synchronize(ctx: &Self::Context, raw: Self::RawEvent) -> Result<()>;
    /// Whether an event has completed.
    ///
    /// # Safety
    /// The events are live events of `ctx`'s device.
    unsafe fn event_query(ctx: &Self::Context, raw: Self::RawEvent) -> Result<bool>;
}

/// A device address as the pointer vendor calls take.
pub fn device_ptr(addr: u64) -> *mut c_void {
    addr as usize as *mut c_void
}
