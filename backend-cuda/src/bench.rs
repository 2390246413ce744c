//! The CUDA device's raw calls for the baselines of `xthunk bench` (the loops are
//! [`xthunk_gpu::bench`]'s; compiled with the crate's `bench` feature): bare `cuLaunchKernel`,
//! `cuMemcpyDtoDAsync_v2` and `cuStreamSynchronize` through cudarc's `sys` layer, and
//! `cublasGemmEx` on a cuBLAS handle of the baseline's own, through the device's cuBLAS table
//! ([`crate::loader::CublasApi`]). Every raw call relies on the device's context being
//! current, which the checked stream calls make it.
//!
//! `cuMemcpyDtoDAsync_v2` is the one driver entry point here that the backend itself does not
//! call (it is not in the driver symbols the probe checks, `DRIVER_SYMBOLS`), so its first
//! use is guarded against cudarc's panic on a missing symbol.

use crate::blas::BlasLibrary;
use crate::context::DeviceContext;
use crate::loader::guarded;
use crate::module::CudaKernel;
use crate::result::{BACKEND, cu, cublas};
use crate::stream::CudaStream;
use crate::sys::{
    self, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUDA_R_16BF,
    CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, cublasHandle_t,
};
use crate::vendor::Cuda;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};
use xthunk_core::backend::baseline::{BaselineCalls, RawGemmCall};
use xthunk_core::backend::{DeviceMemory, GemmLaunch, LaunchDims};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};
use xthunk_gpu::bench::BaselineVendor;

/// Whether `cuMemcpyDtoDAsync_v2` is present (checked once, with cudarc's panic on a missing
/// symbol caught).
static DTOD: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// A cuBLAS handle of the baseline's own.
pub(crate) struct CublasHandle {
    lib: Arc<BlasLibrary>,
    handle: cublasHandle_t,
}

// SAFETY: the handle is used by one gemm loop at a time (`RawGemm` borrows it) and destroyed
// once, in `drop`; cuBLAS handles may move between threads.
unsafe impl Send for CublasHandle {}
// SAFETY: as above.
unsafe impl Sync for CublasHandle {}

impl Drop for CublasHandle {
    fn drop(&mut self) {
        // SAFETY: created by cublasCreate_v2 in `blas_handle`, destroyed once, here, after the
        // stream's work (the baseline synchronized, which made the context current).
        let r = unsafe { (self.lib.table.cublasDestroy_v2)(self.handle) };
        if let Err(e) = cublas("cublasDestroy_v2", r) {
            tracing::error!("{e}");
        }
    }
}

/// The device's raw calls for the baselines, as [`xthunk_gpu::bench::Baseline`] takes them.
pub(crate) struct CudaBaselines;

impl BaselineVendor for CudaBaselines {
    type Vendor = Cuda;
    type Stream = CudaStream;
    type Kernel = CudaKernel;
    type BlasLibrary = BlasLibrary;
    type BlasHandle = CublasHandle;
    type GemmCall = CublasGemm;

    const CALLS: BaselineCalls = BaselineCalls {
        launch: "cuLaunchKernel",
        synchronize: "cuStreamSynchronize",
        copy: "cuMemcpyDtoDAsync",
        copy_symbol: "cuMemcpyDtoDAsync_v2",
        blas: "cuBLAS",
        gemm: "cublasGemmEx",
    };

    fn stream_context(stream: &CudaStream) -> &Arc<DeviceContext> {
        stream.ctx()
    }

    fn raw_sync(stream: &CudaStream) -> Result<()> {
        // SAFETY: the stream is live (borrowed) and its context is current on this thread.
        cu("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream.raw())
        })
    }

    fn prepare_copy(
        stream: &CudaStream,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
    ) -> Result<()> {
        let (a, b) = (src.ptr().0, dst.ptr().0);
        // Only whether the symbol exists is remembered for the process; the first call's own
        // result belongs to this call (a device's error must not stick to every later one).
        let mut first = None;
        DTOD.get_or_init(|| {
            // SAFETY: a copy of 0 bytes between live allocations on a live stream whose
            // context is current (bound by the checked synchronize).
            guarded("cuMemcpyDtoDAsync_v2", || unsafe {
                sys::cuMemcpyDtoDAsync_v2(b, a, 0, stream.raw())
            })
            .map(|r| first = Some(r))
        })
        .clone()
        .map_err(|reason| Error::Unavailable {
            backend: BACKEND.into(),
            reason,
        })?;
        match first {
            Some(r) => cu("cuMemcpyDtoDAsync_v2", r),
            None => Ok(()),
        }
    }

    unsafe fn raw_copy(stream: &CudaStream, src: u64, dst: u64, bytes: usize) -> Result<()> {
        // SAFETY: the caller's contract (live, disjoint ranges; live stream, context
        // current); the symbol was checked present by `prepare_copy`.
        cu("cuMemcpyDtoDAsync_v2", unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.raw())
        })
    }

    unsafe fn raw_launch(
        stream: &CudaStream,
        kernel: &CudaKernel,
        d: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's contract (the arguments as the checked path accepted them,
        // live buffers, live stream with its context current); the function belongs to a
        // module the borrowed kernel keeps loaded; the driver copies the values before
        // returning.
        let r = unsafe {
            sys::cuLaunchKernel(
                kernel.function(),
                d.grid.x,
                d.grid.y,
                d.grid.z,
                d.block.x,
                d.block.y,
                d.block.z,
                d.shared_mem,
                stream.raw(),
                params,
                std::ptr::null_mut(),
            )
        };
        cu("cuLaunchKernel", r)
    }

    fn blas_path(library: &BlasLibrary) -> String {
        library.path.display().to_string()
    }

    fn blas_handle(lib: &Arc<BlasLibrary>, stream: &CudaStream) -> Result<CublasHandle> {
        let mut handle: cublasHandle_t = std::ptr::null_mut();
        // SAFETY: writes one handle; the device's context is current (bound by the caller).
        cublas("cublasCreate_v2", unsafe {
            (lib.table.cublasCreate_v2)(&mut handle)
        })?;
        let me = CublasHandle {
            lib: lib.clone(),
            handle,
        };
        // SAFETY: live handle; the stream is live and of the current context.
        cublas("cublasSetStream_v2", unsafe {
            (me.lib.table.cublasSetStream_v2)(me.handle, stream.raw())
        })?;
        Ok(me)
    }

    /// `C = A B` column-major with no transposes (`lda = m`, `ldb = k`, `ldc = m`).
    fn prepare_gemm(g: &RawGemmCall<'_>, _checked: &GemmLaunch) -> Result<CublasGemm> {
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
        Ok(CublasGemm {
            ty,
            compute,
            mnk: g.dims_i32("cuBLAS")?,
            abc: [g.a.ptr().0, g.b.ptr().0, g.c.ptr().0],
        })
    }

    /// Through `cublasGemmEx`, f32 compute (f64 for f64), the default algorithm.
    unsafe fn raw_gemm(h: &CublasHandle, g: &CublasGemm) -> Result<()> {
        let [m, n, k] = g.mnk;
        let (alpha32, beta32) = (1.0f32, 0.0f32);
        let (alpha64, beta64) = (1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if g.compute == CUBLAS_COMPUTE_64F {
            ((&raw const alpha64).cast(), (&raw const beta64).cast())
        } else {
            ((&raw const alpha32).cast(), (&raw const beta32).cast())
        };
        let [a, b, c] = g.abc.map(|p| p as usize as *mut c_void);
        // SAFETY: the caller's contract (live handle bound to a live stream of the current
        // context, A, B and C inside live buffers, C disjoint from the inputs); alpha and
        // beta are host scalars of the compute type that outlive the call.
        cublas("cublasGemmEx", unsafe {
            (h.lib.table.cublasGemmEx)(
                h.handle,
                CUBLAS_OP_N,
                CUBLAS_OP_N,
                m,
                n,
                k,
                alpha,
                a,
                g.ty,
                m,
                b,
                g.ty,
                k,
                beta,
                c,
                g.ty,
                m,
                g.compute,
                CUBLAS_GEMM_DEFAULT,
            )
        })
    }
}

/// One `cublasGemmEx` call: data and compute types, `m`, `n`, `k`, and A, B, C.
pub(crate) struct CublasGemm {
    ty: c_int,
    compute: c_int,
    mnk: [i32; 3],
    abc: [u64; 3],
}
