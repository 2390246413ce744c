//! The raw vendor baselines' loops for `xthunk bench` ([`RawBaseline`], handed out by
//! [`xthunk_core::backend::Device::raw_baseline`]), written once over a vendor's raw calls
//! ([`BaselineVendor`]): the work the executor does, issued straight to the driver or runtime
//! and straight to the vendor BLAS.
//!
//! - launches: each a bare kernel launch with its arguments marshalled beforehand (as a
//!   hand-written program keeps them on the stack), then one stream synchronize;
//! - copies: a device-to-device copy a given number of times, then one stream synchronize;
//! - gemms: a BLAS handle of the baseline's own (from the library the device loaded) calling
//!   the vendor's gemm a given number of times, then one stream synchronize.
//!
//! Each takes a stream the device created and memory it allocated; the checks before anything
//! raw is issued are core's ([`xthunk_core::backend::baseline`]), and the same work goes once
//! through the backend's checked path first (validation and untimed warm-up). Every raw call
//! relies on the stream's device being current, which [`Vendor::bind`] makes it after the
//! checked path's synchronize.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::baseline::{
    BaselineCalls, MAX_LAUNCH_ARGS, RawBaseline, RawGemm, RawGemmCall, RawLaunches, check_copy,
    launch_slots,
};
use xthunk_core::backend::{DeviceMemory, GemmLaunch, KernelHandle, LaunchArg, LaunchDims, Stream};
use xthunk_core::{Error, Result};

use crate::args::{arg_slot, vendor_kernel};
use crate::errors;
use crate::vendor::Vendor;

/// A vendor's raw calls for the baselines (beside its [`Vendor`] calls). Implemented on a
/// marker of the vendor crate's bench module, so that its BLAS types stay private.
pub trait BaselineVendor: Send + Sync + 'static {
    /// The vendor.
    type Vendor: Vendor;
    /// The vendor's stream.
    type Stream: Stream + 'static;
    /// The vendor's kernel handle.
    type Kernel: KernelHandle + 'static;
    /// The BLAS library a device loaded.
    type BlasLibrary: Send + Sync + 'static;
    /// A BLAS handle of the baseline's own, bound to one stream; dropping it destroys it.
    type BlasHandle: Send + 'static;
    /// One gemm ready for the vendor's gemm call (types, shapes, addresses, scalars).
    type GemmCall;

    /// The vendor calls made.
    const CALLS: BaselineCalls;

    /// The state of the device `stream` belongs to.
    fn stream_context(stream: &Self::Stream) -> &Arc<Ctx<Self>>;
    /// Waits for `stream` with the raw call (its device current).
    fn raw_sync(stream: &Self::Stream) -> Result<()>;
    /// What must hold before raw copies from `src` to `dst` on `stream` (whose device is
    /// current): the vendor's own limits, its entry point present.
    fn prepare_copy(
        stream: &Self::Stream,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
    ) -> Result<()>;
    /// One raw device-to-device copy of `bytes` from `src` to `dst`.
    ///
    /// # Safety
    /// Both ranges lie inside live allocations of the stream's device and do not overlap; the
    /// stream is live and its device current.
    unsafe fn raw_copy(stream: &Self::Stream, src: u64, dst: u64, bytes: usize) -> Result<()>;
    /// One raw launch of `kernel`; `params` is null when it takes no argument.
    ///
    /// # Safety
    /// `params` holds one pointer per kernel argument, each to an 8-byte slot holding the
    /// value in the argument's C type, as the checked path accepted it; every buffer lies
    /// inside live allocations; the stream is live and its device current.
    unsafe fn raw_launch(
        stream: &Self::Stream,
        kernel: &Self::Kernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()>;
    /// The library's file, as the report names it.
    fn blas_path(library: &Self::BlasLibrary) -> String;
    /// A handle of `library` bound to `stream` (its device current).
    fn blas_handle(
        library: &Arc<Self::BlasLibrary>,
        stream: &Self::Stream,
    ) -> Result<Self::BlasHandle>;
    /// `g` (checked: `checked` is the same gemm as the backend's checked path runs it) as
    /// the vendor's gemm call, or `Unsupported`.
    fn prepare_gemm(g: &RawGemmCall<'_>, checked: &GemmLaunch) -> Result<Self::GemmCall>;
    /// One raw gemm.
    ///
    /// # Safety
    /// The handle is live and bound to a live stream whose device is current; the call's
    /// operands lie inside live allocations, C overlapping neither input.
    unsafe fn raw_gemm(handle: &Self::BlasHandle, call: &Self::GemmCall) -> Result<()>;
}

/// The device state of a baseline vendor.
type Ctx<V> = <<V as BaselineVendor>::Vendor as Vendor>::Context;

/// One device's raw baselines over its vendor's calls.
pub struct Baseline<V: BaselineVendor> {
    ctx: Arc<Ctx<V>>,
    /// The device's BLAS library, or why it has none.
    blas: std::result::Result<Arc<V::BlasLibrary>, String>,
}

impl<V: BaselineVendor> Baseline<V> {
    pub fn new(ctx: Arc<Ctx<V>>, blas: std::result::Result<Arc<V::BlasLibrary>, String>) -> Self {
        Baseline { ctx, blas }
    }

    /// `stream` as a stream of this device.
    fn stream<'s>(&self, stream: &'s dyn Stream) -> Result<&'s V::Stream> {
        let s = vendor_stream::<V>(stream)?;
        if Arc::ptr_eq(V::stream_context(s), &self.ctx) {
            Ok(s)
        } else {
            Err(Error::InvalidArgument(format!(
                "the stream belongs to another {} device than {}",
                V::Vendor::NAME,
                V::Vendor::device_name(&self.ctx)
            )))
        }
    }
}

fn vendor_stream<V: BaselineVendor>(stream: &dyn Stream) -> Result<&V::Stream> {
    stream.as_any().downcast_ref::<V::Stream>().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "the stream does not belong to the {} backend",
            V::Vendor::NAME
        ))
    })
}

/// Waits for `stream` through the checked path, then makes its device current on this
/// thread (every raw call relies on that).
fn sync<V: BaselineVendor>(stream: &V::Stream) -> Result<()> {
    Stream::synchronize(stream)?;
    V::Vendor::bind(V::stream_context(stream))
}

impl<V: BaselineVendor> RawBaseline for Baseline<V> {
    fn calls(&self) -> BaselineCalls {
        V::CALLS
    }

    fn launch_loop<'a>(
        &self,
        stream: &'a dyn Stream,
        kernel: &'a Arc<dyn KernelHandle>,
        dims: LaunchDims,
        launches: &[Vec<LaunchArg>],
        buffers: &'a [&'a dyn DeviceMemory],
    ) -> Result<Box<dyn RawLaunches + 'a>> {
        let s = self.stream(stream)?;
        let k = vendor_kernel::<V::Vendor, V::Kernel>(kernel)?;
        let slots = launch_slots(launches, buffers, arg_slot)?;
        for args in launches {
            stream.launch(kernel, dims, args)?;
        }
        sync::<V>(s)?;
        Ok(Box::new(Launches::<V> {
            stream: s,
            kernel: k,
            dims,
            slots,
            _buffers: buffers,
        }))
    }

    fn copy_loop(
        &self,
        stream: &dyn Stream,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: u64,
        times: usize,
    ) -> Result<Duration> {
        let s = self.stream(stream)?;
        let n = check_copy(src, dst, bytes)?;
        stream.copy(src.ptr(), dst.ptr(), bytes)?;
        sync::<V>(s)?;
        V::prepare_copy(s, src, dst)?;
        let (a, b) = (src.ptr().0, dst.ptr().0);
        let start = Instant::now();
        for _ in 0..times {
            // SAFETY: both ranges lie inside the borrowed, live buffers (checked above, and by
            // the backend's checked copy) and do not overlap; the stream is live and its device
            // current (bound by `sync`); the vendor's own limits were checked by
            // `prepare_copy`.
            unsafe { V::raw_copy(s, a, b, n) }?;
        }
        V::raw_sync(s)?;
        Ok(start.elapsed())
    }

    fn blas(&self, stream: Arc<dyn Stream>) -> Result<Box<dyn RawGemm>> {
        let s = self.stream(stream.as_ref())?;
        let library = match &self.blas {
            Ok(lib) => lib.clone(),
            Err(why) => {
                return Err(errors::unsupported(
                    V::Vendor::BACKEND,
                    format!("raw {0} gemm: {0} is unavailable ({why})", V::CALLS.blas),
                ));
            }
        };
        sync::<V>(s)?;
        let handle = V::blas_handle(&library, s)?;
        let path = V::blas_path(&library);
        drop(library);
        Ok(Box::new(Gemm::<V> {
            stream,
            path,
            handle: Some(handle),
        }))
    }
}

/// Launches of one kernel on one stream, ready to be issued with bare launch calls.
struct Launches<'a, V: BaselineVendor> {
    stream: &'a V::Stream,
    kernel: &'a V::Kernel,
    dims: LaunchDims,
    /// Each launch's argument values, one 8-byte slot per argument.
    slots: Vec<Vec<u64>>,
    _buffers: &'a [&'a dyn DeviceMemory],
}

impl<V: BaselineVendor> RawLaunches for Launches<'_, V> {
    fn launches(&self) -> usize {
        self.slots.len()
    }

    fn run(&self) -> Result<Duration> {
        sync::<V>(self.stream)?;
        let mut values = [0u64; MAX_LAUNCH_ARGS];
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_LAUNCH_ARGS];
        let start = Instant::now();
        for slots in &self.slots {
            values[..slots.len()].copy_from_slice(slots);
            for (p, v) in params.iter_mut().zip(values.iter_mut()) {
                *p = (v as *mut u64).cast();
            }
            let kernel_params = if slots.is_empty() {
                std::ptr::null_mut()
            } else {
                params.as_mut_ptr()
            };
            // SAFETY: the function belongs to a module kept loaded by the borrowed kernel
            // handle; `kernel_params` holds one pointer per kernel argument, each to an 8-byte
            // slot holding the value in the argument's C type (marshalled as the backend does,
            // and the same launch was accepted by the checked path); every buffer lies inside
            // the borrowed, live buffers; the stream is live and its device current (bound by
            // `sync`); the driver copies the values before returning.
            unsafe { V::raw_launch(self.stream, self.kernel, self.dims, kernel_params) }?;
        }
        V::raw_sync(self.stream)?;
        Ok(start.elapsed())
    }
}

/// The vendor BLAS called directly: a handle of its own on one stream.
struct Gemm<V: BaselineVendor> {
    stream: Arc<dyn Stream>,
    /// The file of the library loaded, as the report names it.
    path: String,
    /// Destroyed in `drop`, after the stream's work.
    handle: Option<V::BlasHandle>,
}

impl<V: BaselineVendor> RawGemm for Gemm<V> {
    fn library(&self) -> &str {
        &self.path
    }

    /// `C = A B`, alpha 1 and beta 0, as the vendor's gemm call prepared it.
    fn gemm_loop(&self, g: &RawGemmCall<'_>, reps: usize) -> Result<Duration> {
        let s = vendor_stream::<V>(self.stream.as_ref())?;
        let Some(handle) = &self.handle else {
            return Err(Error::InvalidArgument("the BLAS handle is gone".into()));
        };
        let checked = g.checked_launch()?;
        let call = V::prepare_gemm(g, &checked)?;
        self.stream.gemm(&checked)?;
        sync::<V>(s)?;
        let start = Instant::now();
        for _ in 0..reps {
            // SAFETY: the handle is live and bound to this live stream, whose device is
            // current (bound by `sync`); A, B and C lie inside the borrowed, live buffers with
            // the leading dimensions given, C overlaps neither input (checked by
            // `checked_launch` and by the backend's checked gemm).
            unsafe { V::raw_gemm(handle, &call) }?;
        }
        V::raw_sync(s)?;
        Ok(start.elapsed())
    }
}

impl<V: BaselineVendor> Drop for Gemm<V> {
    fn drop(&mut self) {
        if let Ok(s) = vendor_stream::<V>(self.stream.as_ref())
            && let Err(e) = sync::<V>(s)
        {
            tracing::error!("raw {}: {e}", V::CALLS.blas);
        }
        // The handle goes after its stream's work (its own `Drop` destroys it).
        self.handle = None;
    }
}
