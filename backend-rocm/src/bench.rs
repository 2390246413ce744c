//! The ROCm device's raw vendor baselines for `xthunk bench` ([`RawBaseline`], handed out by
//! [`xthunk_core::backend::Device::raw_baseline`]; compiled with the crate's `bench` feature):
//! the work the executor does, issued straight to the HIP runtime through the device's HIP
//! table ([`crate::loader::HipApi`]), or straight to rocBLAS through the device's rocBLAS
//! table ([`crate::loader::RocblasApi`]).
//!
//! - launches: each a bare `hipModuleLaunchKernel` with its arguments marshalled beforehand
//!   (as a hand-written HIP program keeps them on the stack), then one `hipStreamSynchronize`;
//! - copies: `hipMemcpyDtoDAsync` a given number of times, then one `hipStreamSynchronize`;
//! - gemms: a rocBLAS handle of its own (from the library the device loaded, host pointer
//!   mode) calling `rocblas_gemm_ex` a given number of times, then one `hipStreamSynchronize`.
//!
//! Each takes a stream the device created and memory it allocated; the checks before anything
//! raw is issued are core's ([`xthunk_core::backend::baseline`]), and the same work goes once
//! through the backend's checked path first (validation and untimed warm-up). The device is
//! made current (`hipSetDevice`, per thread) before the raw calls.

use crate::blas::BlasLibrary;
use crate::context::DeviceContext;
use crate::module::{RocmKernel, scalar_slot};
use crate::result::{self, BACKEND, unsupported};
use crate::stream::RocmStream;
use crate::sys;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::baseline::{
    BaselineCalls, MAX_LAUNCH_ARGS, RawBaseline, RawGemm, RawGemmCall, RawLaunches, check_copy,
    launch_slots,
};
use xthunk_core::backend::{DeviceMemory, KernelHandle, LaunchArg, LaunchDims, Stream};
use xthunk_core::ir::{DType, MemorySpace};
use xthunk_core::{Error, Result};

/// One ROCm device's raw baselines.
pub(crate) struct RocmBaseline {
    ctx: Arc<DeviceContext>,
    /// The device's rocBLAS, or why it has none.
    blas: std::result::Result<Arc<BlasLibrary>, String>,
}

impl RocmBaseline {
    pub(crate) fn new(
        ctx: Arc<DeviceContext>,
        blas: std::result::Result<Arc<BlasLibrary>, String>,
    ) -> Self {
        RocmBaseline { ctx, blas }
    }

    /// `stream` as a stream of this device.
    fn stream<'s>(&self, stream: &'s dyn Stream) -> Result<&'s RocmStream> {
        let s = rocm_stream(stream)?;
        if Arc::ptr_eq(&s.ctx, &self.ctx) {
            Ok(s)
        } else {
            Err(Error::InvalidArgument(format!(
                "the stream belongs to another ROCm device than {}",
                self.ctx.name
            )))
        }
    }
}

fn rocm_stream(stream: &dyn Stream) -> Result<&RocmStream> {
    stream.as_any().downcast_ref::<RocmStream>().ok_or_else(|| {
        Error::InvalidArgument("the stream does not belong to the ROCm backend".into())
    })
}

/// Waits for `stream` through the checked path, then makes its device current on this thread
/// (every raw call below relies on that).
fn sync(stream: &RocmStream) -> Result<()> {
    Stream::synchronize(stream)?;
    stream.ctx.bind()
}

/// Waits for the stream with the raw call.
fn raw_sync(stream: &RocmStream) -> Result<()> {
    // SAFETY: the stream is live (borrowed).
    let rc = unsafe { (stream.ctx.hip.api.hipStreamSynchronize)(stream.raw) };
    result::hip("hipStreamSynchronize", rc)
}

/// A launch argument's 8-byte slot, as the backend marshals it (`crate::module::marshal`).
fn arg_slot(arg: &LaunchArg) -> u64 {
    match arg {
        LaunchArg::Buffer { ptr, .. } => ptr.0,
        LaunchArg::Scalar(s) => scalar_slot(s),
    }
}

impl RawBaseline for RocmBaseline {
    fn calls(&self) -> BaselineCalls {
        BaselineCalls {
            launch: "hipModuleLaunchKernel",
            synchronize: "hipStreamSynchronize",
            copy: "hipMemcpyDtoDAsync",
            copy_symbol: "hipMemcpyDtoDAsync",
            blas: "rocBLAS",
            gemm: "rocblas_gemm_ex",
        }
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
        let Some(k) = kernel.as_any().downcast_ref::<RocmKernel>() else {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` was not loaded by the ROCm backend",
                kernel.name()
            )));
        };
        let slots = launch_slots(launches, buffers, arg_slot)?;
        for args in launches {
            stream.launch(kernel, dims, args)?;
        }
        sync(s)?;
        Ok(Box::new(Launches {
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
        // The backend itself calls hipMemcpyDtoDAsync only between device allocations.
        if src.space() != MemorySpace::Device || dst.space() != MemorySpace::Device {
            return Err(Error::InvalidArgument(format!(
                "raw hipMemcpyDtoDAsync between {:?} and {:?} memory (device memory only)",
                src.space(),
                dst.space()
            )));
        }
        let (a, b) = (
            src.ptr().0 as usize as *mut c_void,
            dst.ptr().0 as usize as *mut c_void,
        );
        stream.copy(src.ptr(), dst.ptr(), bytes)?;
        sync(s)?;
        let copy = s.ctx.hip.api.hipMemcpyDtoDAsync;
        let start = Instant::now();
        for _ in 0..times {
            // SAFETY: both ranges lie inside the borrowed, live device buffers (checked above,
            // and by the backend's checked copy) and do not overlap; the stream is live and its
            // device current (bound by `sync`).
            let rc = unsafe { copy(b, a, n, s.raw) };
            result::hip("hipMemcpyDtoDAsync", rc)?;
        }
        raw_sync(s)?;
        Ok(start.elapsed())
    }

    fn blas(&self, stream: Arc<dyn Stream>) -> Result<Box<dyn RawGemm>> {
        let s = self.stream(stream.as_ref())?;
        let lib = match &self.blas {
            Ok(lib) => lib.clone(),
            Err(why) => {
                return Err(unsupported(format!(
                    "raw rocBLAS gemm: rocBLAS is unavailable ({why})"
                )));
            }
        };
        sync(s)?;
        let raw_stream = s.raw;
        let mut handle: sys::rocblas_handle = std::ptr::null_mut();
        // SAFETY: writes one handle; the device is current on this thread (bound by `sync`).
        let rc = unsafe { (lib.api.rocblas_create_handle)(&mut handle) };
        result::rocblas("rocblas_create_handle", rc)?;
        let me = Gemm {
            stream,
            library: lib.path.display().to_string(),
            lib,
            handle,
        };
        // SAFETY: live handle; the stream is a live stream of the same device.
        let rc = unsafe { (me.lib.api.rocblas_set_stream)(me.handle, raw_stream) };
        result::rocblas("rocblas_set_stream", rc)?;
        // SAFETY: live handle.
        let rc = unsafe {
            (me.lib.api.rocblas_set_pointer_mode)(me.handle, sys::rocblas_pointer_mode_host)
        };
        result::rocblas("rocblas_set_pointer_mode", rc)?;
        Ok(Box::new(me))
    }
}

/// Launches of one kernel on one stream, ready to be issued with bare `hipModuleLaunchKernel`
/// calls.
struct Launches<'a> {
    stream: &'a RocmStream,
    kernel: &'a RocmKernel,
    dims: LaunchDims,
    /// Each launch's argument values, one 8-byte slot per argument.
    slots: Vec<Vec<u64>>,
    _buffers: &'a [&'a dyn DeviceMemory],
}

impl RawLaunches for Launches<'_> {
    fn launches(&self) -> usize {
        self.slots.len()
    }

    fn run(&self) -> Result<Duration> {
        sync(self.stream)?;
        let launch = self.stream.ctx.hip.api.hipModuleLaunchKernel;
        let mut values = [0u64; MAX_LAUNCH_ARGS];
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_LAUNCH_ARGS];
        let (g, b) = (self.dims.grid, self.dims.block);
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
            // and the same launch was accepted by the checked path, which also checked the
            // arguments against the code object's metadata); every buffer lies inside the
            // borrowed, live buffers; the stream is live and its device current (bound by
            // `sync`); HIP copies the values before returning; `extra` is null.
            let rc = unsafe {
                launch(
                    self.kernel.func,
                    g.x,
                    g.y,
                    g.z,
                    b.x,
                    b.y,
                    b.z,
                    self.dims.shared_mem,
                    self.stream.raw,
                    kernel_params,
                    std::ptr::null_mut(),
                )
            };
            result::hip("hipModuleLaunchKernel", rc)?;
        }
        raw_sync(self.stream)?;
        Ok(start.elapsed())
    }
}

/// rocBLAS called directly: a handle of its own on one stream.
struct Gemm {
    stream: Arc<dyn Stream>,
    lib: Arc<BlasLibrary>,
    /// The library file, as text.
    library: String,
    handle: sys::rocblas_handle,
}

impl RawGemm for Gemm {
    fn library(&self) -> &str {
        &self.library
    }

    /// `C = A B` column-major with no transposes (`lda = m`, `ldb = k`, `ldc = m`, D = C)
    /// through `rocblas_gemm_ex`, f32 compute (f64 for f64), the standard algorithm.
    fn gemm_loop(&self, g: &RawGemmCall<'_>, reps: usize) -> Result<Duration> {
        let s = rocm_stream(self.stream.as_ref())?;
        let (ty, compute) = match g.dtype {
            DType::F32 => (sys::rocblas_datatype_f32_r, sys::rocblas_datatype_f32_r),
            DType::F16 => (sys::rocblas_datatype_f16_r, sys::rocblas_datatype_f32_r),
            DType::BF16 => (sys::rocblas_datatype_bf16_r, sys::rocblas_datatype_f32_r),
            DType::F64 => (sys::rocblas_datatype_f64_r, sys::rocblas_datatype_f64_r),
            other => {
                return Err(Error::Unsupported {
                    backend: BACKEND.into(),
                    feature: format!("raw rocBLAS gemm of {other}"),
                });
            }
        };
        let checked = g.checked_launch()?;
        let [mi, ni, ki] = g.dims_i32("rocBLAS")?;
        self.stream.gemm(&checked)?;
        sync(s)?;
        let (alpha32, beta32) = (1.0f32, 0.0f32);
        let (alpha64, beta64) = (1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) =
            if compute == sys::rocblas_datatype_f64_r {
                ((&raw const alpha64).cast(), (&raw const beta64).cast())
            } else {
                ((&raw const alpha32).cast(), (&raw const beta32).cast())
            };
        let (pa, pb, pc) = (
            g.a.ptr().0 as usize as *const c_void,
            g.b.ptr().0 as usize as *const c_void,
            g.c.ptr().0 as usize as *mut c_void,
        );
        let gemm_ex = self.lib.api.rocblas_gemm_ex;
        let start = Instant::now();
        for _ in 0..reps {
            // SAFETY: the handle is live and bound to this live stream, whose device is
            // current (bound by `sync`); A (m x k), B (k x n) and C = D (m x n) lie inside the
            // borrowed, live buffers with the leading dimensions given, C overlaps neither
            // input (checked by `checked_launch` and by the backend's checked gemm); alpha and
            // beta are host scalars of the compute type (host pointer mode) that outlive the
            // call.
            let rc = unsafe {
                gemm_ex(
                    self.handle,
                    sys::rocblas_operation_none,
                    sys::rocblas_operation_none,
                    mi,
                    ni,
                    ki,
                    alpha,
                    pa,
                    ty,
                    mi,
                    pb,
                    ty,
                    ki,
                    beta,
                    pc,
                    ty,
                    mi,
                    pc,
                    ty,
                    mi,
                    compute,
                    sys::rocblas_gemm_algo_standard,
                    0,
                    0,
                )
            };
            result::rocblas("rocblas_gemm_ex", rc)?;
        }
        raw_sync(s)?;
        Ok(start.elapsed())
    }
}

impl Drop for Gemm {
    fn drop(&mut self) {
        if let Ok(s) = rocm_stream(self.stream.as_ref()) {
            if let Err(e) = sync(s) {
                tracing::error!("raw rocBLAS: {e}");
            }
        }
        // SAFETY: created by rocblas_create_handle in `RocmBaseline::blas`, destroyed once,
        // here, after its stream's work.
        let rc = unsafe { (self.lib.api.rocblas_destroy_handle)(self.handle) };
        if let Err(e) = result::rocblas("rocblas_destroy_handle", rc) {
            tracing::error!("{e}");
        }
    }
}
