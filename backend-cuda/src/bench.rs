//! The CUDA device's raw vendor baselines for `xthunk bench` ([`RawBaseline`], handed out by
//! [`xthunk_core::backend::Device::raw_baseline`]; compiled with the crate's `bench` feature):
//! the work the executor does, issued straight to the driver through cudarc's `sys` layer, or
//! straight to cuBLAS through the device's own cuBLAS table ([`crate::loader::CublasApi`]).
//!
//! - launches: each a bare `cuLaunchKernel` with its arguments marshalled beforehand (as a
//!   hand-written CUDA program keeps them on the stack), then one `cuStreamSynchronize`;
//! - copies: `cuMemcpyDtoDAsync_v2` a given number of times, then one `cuStreamSynchronize`;
//! - gemms: a cuBLAS handle of its own (from the library the device loaded) calling
//!   `cublasGemmEx` a given number of times, then one `cuStreamSynchronize`.
//!
//! Each takes a stream the device created and memory it allocated; the checks before anything
//! raw is issued are core's ([`xthunk_core::backend::baseline`]), and the same work goes once
//! through the backend's checked path first (validation and untimed warm-up). Every raw call
//! relies on the device's context being current, which the checked stream calls make it.
//!
//! `cuMemcpyDtoDAsync_v2` is the one driver entry point here that the backend itself does not
//! call (it is not in the driver symbols the probe checks, `DRIVER_SYMBOLS`), so its first
//! use is guarded against cudarc's panic on a missing symbol.

use crate::blas::BlasLibrary;
use crate::context::DeviceContext;
use crate::loader::guarded;
use crate::module::{CudaKernel, arg_slot};
use crate::result::{BACKEND, cu, cublas, unsupported};
use crate::stream::CudaStream;
use crate::sys::{
    self, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUDA_R_16BF,
    CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, cublasHandle_t,
};
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use xthunk_core::backend::baseline::{
    BaselineCalls, MAX_LAUNCH_ARGS, RawBaseline, RawGemm, RawGemmCall, RawLaunches, check_copy,
    launch_slots,
};
use xthunk_core::backend::{DeviceMemory, KernelHandle, LaunchArg, LaunchDims, Stream};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// One CUDA device's raw baselines.
pub(crate) struct CudaBaseline {
    ctx: Arc<DeviceContext>,
    /// The device's cuBLAS, if it found one.
    blas: Option<Arc<BlasLibrary>>,
}

impl CudaBaseline {
    pub(crate) fn new(ctx: Arc<DeviceContext>, blas: Option<Arc<BlasLibrary>>) -> Self {
        CudaBaseline { ctx, blas }
    }

    /// `stream` as a stream of this device.
    fn stream<'s>(&self, stream: &'s dyn Stream) -> Result<&'s CudaStream> {
        let s = cuda_stream(stream)?;
        if Arc::ptr_eq(&s.ctx, &self.ctx) {
            Ok(s)
        } else {
            Err(Error::InvalidArgument(format!(
                "the stream belongs to another CUDA device than {}",
                self.ctx.name
            )))
        }
    }
}

fn cuda_stream(stream: &dyn Stream) -> Result<&CudaStream> {
    stream.as_any().downcast_ref::<CudaStream>().ok_or_else(|| {
        Error::InvalidArgument("the stream does not belong to the CUDA backend".into())
    })
}

/// Waits for `stream` (which also makes its context current on this thread: every raw call
/// below relies on that).
fn sync(stream: &CudaStream) -> Result<()> {
    Stream::synchronize(stream)
}

/// Waits for the stream with the raw call (the context is current).
fn raw_sync(stream: &CudaStream) -> Result<()> {
    // SAFETY: the stream is live (borrowed) and its context is current on this thread.
    cu("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream.raw)
    })
}

/// Whether `cuMemcpyDtoDAsync_v2` is present (checked once, with cudarc's panic on a missing
/// symbol caught).
static DTOD: OnceLock<std::result::Result<(), String>> = OnceLock::new();

impl RawBaseline for CudaBaseline {
    fn calls(&self) -> BaselineCalls {
        BaselineCalls {
            launch: "cuLaunchKernel",
            synchronize: "cuStreamSynchronize",
            copy: "cuMemcpyDtoDAsync",
            copy_symbol: "cuMemcpyDtoDAsync_v2",
            blas: "cuBLAS",
            gemm: "cublasGemmEx",
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
        let Some(k) = kernel.as_any().downcast_ref::<CudaKernel>() else {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` was not loaded by the CUDA backend",
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
        let (a, b) = (src.ptr().0, dst.ptr().0);
        stream.copy(src.ptr(), dst.ptr(), bytes)?;
        sync(s)?;
        // Only whether the symbol exists is remembered for the process; the first call's own
        // result belongs to this call (a device's error must not stick to every later one).
        let mut first = None;
        DTOD.get_or_init(|| {
            // SAFETY: a copy of 0 bytes between live allocations on a live stream whose
            // context is current (bound by `sync`).
            guarded("cuMemcpyDtoDAsync_v2", || unsafe {
                sys::cuMemcpyDtoDAsync_v2(b, a, 0, s.raw)
            })
            .map(|r| first = Some(r))
        })
        .clone()
        .map_err(|reason| Error::Unavailable {
            backend: BACKEND.into(),
            reason,
        })?;
        if let Some(r) = first {
            cu("cuMemcpyDtoDAsync_v2", r)?;
        }
        let start = Instant::now();
        for _ in 0..times {
            // SAFETY: both ranges lie inside the borrowed, live buffers (checked above, and by
            // the backend's checked copy), do not overlap, and the stream is live with its
            // context current; the symbol was checked present above.
            cu("cuMemcpyDtoDAsync_v2", unsafe {
                sys::cuMemcpyDtoDAsync_v2(b, a, n, s.raw)
            })?;
        }
        raw_sync(s)?;
        Ok(start.elapsed())
    }

    fn blas(&self, stream: Arc<dyn Stream>) -> Result<Box<dyn RawGemm>> {
        let s = self.stream(stream.as_ref())?;
        let Some(lib) = &self.blas else {
            return Err(unsupported(
                "raw cuBLAS gemm: cuBLAS (libcublas.so.13/.12) was not found",
            ));
        };
        sync(s)?;
        let raw_stream = s.raw;
        let mut handle: cublasHandle_t = std::ptr::null_mut();
        // SAFETY: writes one handle; the device's context is current (bound by `sync`).
        cublas("cublasCreate_v2", unsafe {
            (lib.table.cublasCreate_v2)(&mut handle)
        })?;
        let me = Gemm {
            stream,
            lib: lib.clone(),
            path: lib.path.display().to_string(),
            handle,
        };
        // SAFETY: live handle; the stream is live and of the current context.
        cublas("cublasSetStream_v2", unsafe {
            (me.lib.table.cublasSetStream_v2)(me.handle, raw_stream)
        })?;
        Ok(Box::new(me))
    }
}

/// Launches of one kernel on one stream, ready to be issued with bare `cuLaunchKernel` calls.
struct Launches<'a> {
    stream: &'a CudaStream,
    kernel: &'a CudaKernel,
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
        let mut values = [0u64; MAX_LAUNCH_ARGS];
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_LAUNCH_ARGS];
        let d = self.dims;
        let start = Instant::now();
        for slots in &self.slots {
            values[..slots.len()].copy_from_slice(slots);
            for (p, v) in params.iter_mut().zip(values.iter_mut()) {
                *p = (v as *mut u64).cast();
            }
            // SAFETY: the function belongs to a module kept loaded by the borrowed kernel
            // handle; `params` holds one pointer per kernel argument, each to an 8-byte slot
            // holding the value in the argument's C type (marshalled as the backend does, and
            // the same launch was accepted by the checked path); every buffer lies inside the
            // borrowed, live buffers; the stream is live and its context current (bound by
            // `sync`); the driver copies the values before returning.
            let r = unsafe {
                sys::cuLaunchKernel(
                    self.kernel.function(),
                    d.grid.x,
                    d.grid.y,
                    d.grid.z,
                    d.block.x,
                    d.block.y,
                    d.block.z,
                    d.shared_mem,
                    self.stream.raw,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            cu("cuLaunchKernel", r)?;
        }
        raw_sync(self.stream)?;
        Ok(start.elapsed())
    }
}

/// cuBLAS called directly: a handle of its own on one stream.
struct Gemm {
    stream: Arc<dyn Stream>,
    lib: Arc<BlasLibrary>,
    /// The file of the cuBLAS loaded, as the report names it.
    path: String,
    handle: cublasHandle_t,
}

impl RawGemm for Gemm {
    fn library(&self) -> &str {
        &self.path
    }

    /// `C = A B` column-major with no transposes (`lda = m`, `ldb = k`, `ldc = m`) through
    /// `cublasGemmEx`, f32 compute (f64 for f64), the default algorithm.
    fn gemm_loop(&self, g: &RawGemmCall<'_>, reps: usize) -> Result<Duration> {
        let s = cuda_stream(self.stream.as_ref())?;
        let (ty, compute) = match g.dtype {
            DType::F32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F),
            DType::F16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F),
            DType::BF16 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F),
            DType::F64 => (CUDA_R_64F, CUBLAS_COMPUTE_64F),
            other => {
                return Err(Error::Unsupported {
                    backend: BACKEND.into(),
                    feature: format!("raw cuBLAS gemm of {other}"),
                });
            }
        };
        let checked = g.checked_launch()?;
        let [mi, ni, ki] = g.dims_i32("cuBLAS")?;
        self.stream.gemm(&checked)?;
        sync(s)?;
        let (alpha32, beta32) = (1.0f32, 0.0f32);
        let (alpha64, beta64) = (1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if compute == CUBLAS_COMPUTE_64F {
            ((&raw const alpha64).cast(), (&raw const beta64).cast())
        } else {
            ((&raw const alpha32).cast(), (&raw const beta32).cast())
        };
        let (pa, pb, pc) = (
            g.a.ptr().0 as usize as *const c_void,
            g.b.ptr().0 as usize as *const c_void,
            g.c.ptr().0 as usize as *mut c_void,
        );
        let start = Instant::now();
        for _ in 0..reps {
            // SAFETY: the handle is live and bound to this live stream, whose context is
            // current (bound by `sync`); A (m x k), B (k x n) and C (m x n) lie inside the
            // borrowed, live buffers with the leading dimensions given, C overlaps neither
            // input (checked by `checked_launch` and by the backend's checked gemm); alpha and
            // beta are host scalars of the compute type that outlive the call.
            cublas("cublasGemmEx", unsafe {
                (self.lib.table.cublasGemmEx)(
                    self.handle,
                    CUBLAS_OP_N,
                    CUBLAS_OP_N,
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
                    compute,
                    CUBLAS_GEMM_DEFAULT,
                )
            })?;
        }
        raw_sync(s)?;
        Ok(start.elapsed())
    }
}

impl Drop for Gemm {
    fn drop(&mut self) {
        let Ok(s) = cuda_stream(self.stream.as_ref()) else {
            return;
        };
        if let Err(e) = sync(s) {
            tracing::error!("raw cuBLAS: {e}");
        }
        // SAFETY: created by cublasCreate_v2 in `CudaBaseline::blas`, destroyed once, here,
        // with the device's context current (bound by `sync`).
        let r = unsafe { (self.lib.table.cublasDestroy_v2)(self.handle) };
        if let Err(e) = cublas("cublasDestroy_v2", r) {
            tracing::error!("{e}");
        }
    }
}
