//! The ROCm device's raw calls for the baselines of `xthunk bench` (the loops are
//! [`xthunk_gpu::bench`]'s; compiled with the crate's `bench` feature): bare
//! `hipModuleLaunchKernel`, `hipMemcpyDtoDAsync` and `hipStreamSynchronize` through the
//! device's HIP table ([`crate::loader::HipApi`]), and `rocblas_gemm_ex` on a rocBLAS handle
//! of the baseline's own (host pointer mode) through the device's rocBLAS table
//! ([`crate::loader::RocblasApi`]). The device is made current (`hipSetDevice`, per thread)
//! before the raw calls.

use crate::blas::BlasLibrary;
use crate::context::DeviceContext;
use crate::module::{RocmKernel, scalar_slot};
use crate::result::{self, BACKEND, unsupported};
use crate::stream::RocmStream;
use crate::sys;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::baseline::BaselineCalls;
use xthunk_core::backend::{DeviceMemory, LaunchArg, LaunchDims};
use xthunk_core::ir::{DType, MemorySpace};
use xthunk_core::{Error, Result};
use xthunk_gpu::bench::BaselineVendor;

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
}

/// A rocBLAS handle of the baseline's own.
pub(crate) struct RocblasHandle {
    lib: Arc<BlasLibrary>,
    handle: sys::rocblas_handle,
}

// SAFETY: the handle is used by one gemm loop at a time (`RawGemm` borrows it) and destroyed
// once, in `drop`; rocBLAS handles may move between threads.
unsafe impl Send for RocblasHandle {}
// SAFETY: as above.
unsafe impl Sync for RocblasHandle {}

impl Drop for RocblasHandle {
    fn drop(&mut self) {
        // SAFETY: created by rocblas_create_handle in `blas_handle`, destroyed once, here,
        // after its stream's work (the baseline synchronized).
        let rc = unsafe { (self.lib.api.rocblas_destroy_handle)(self.handle) };
        if let Err(e) = result::rocblas("rocblas_destroy_handle", rc) {
            tracing::error!("{e}");
        }
    }
}

impl BaselineVendor for RocmBaseline {
    type Stream = RocmStream;
    type Kernel = RocmKernel;
    type BlasLibrary = BlasLibrary;
    type BlasHandle = RocblasHandle;
    type GemmTypes = (sys::rocblas_datatype, sys::rocblas_datatype);

    const NAME: &'static str = "ROCm";
    const BACKEND: &'static str = BACKEND;
    const CALLS: BaselineCalls = BaselineCalls {
        launch: "hipModuleLaunchKernel",
        synchronize: "hipStreamSynchronize",
        copy: "hipMemcpyDtoDAsync",
        copy_symbol: "hipMemcpyDtoDAsync",
        blas: "rocBLAS",
        gemm: "rocblas_gemm_ex",
    };

    fn device_name(&self) -> &str {
        &self.ctx.name
    }

    fn owns(&self, stream: &RocmStream) -> bool {
        Arc::ptr_eq(&stream.ctx, &self.ctx)
    }

    fn bind(stream: &RocmStream) -> Result<()> {
        stream.ctx.bind()
    }

    fn raw_sync(stream: &RocmStream) -> Result<()> {
        // SAFETY: the stream is live (borrowed).
        let rc = unsafe { (stream.ctx.hip.api.hipStreamSynchronize)(stream.raw) };
        result::hip("hipStreamSynchronize", rc)
    }

    /// As the backend marshals it (`crate::module::marshal`).
    fn arg_slot(arg: &LaunchArg) -> u64 {
        match arg {
            LaunchArg::Buffer { ptr, .. } => ptr.0,
            LaunchArg::Scalar(s) => scalar_slot(s),
        }
    }

    /// The backend itself calls hipMemcpyDtoDAsync only between device allocations.
    fn prepare_copy(
        &self,
        _stream: &RocmStream,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
    ) -> Result<()> {
        if src.space() != MemorySpace::Device || dst.space() != MemorySpace::Device {
            return Err(Error::InvalidArgument(format!(
                "raw hipMemcpyDtoDAsync between {:?} and {:?} memory (device memory only)",
                src.space(),
                dst.space()
            )));
        }
        Ok(())
    }

    unsafe fn raw_copy(stream: &RocmStream, src: u64, dst: u64, bytes: usize) -> Result<()> {
        let (a, b) = (src as usize as *mut c_void, dst as usize as *mut c_void);
        // SAFETY: the caller's contract (live, disjoint device ranges, checked device memory
        // by `prepare_copy`; live stream, device current).
        let rc = unsafe { (stream.ctx.hip.api.hipMemcpyDtoDAsync)(b, a, bytes, stream.raw) };
        result::hip("hipMemcpyDtoDAsync", rc)
    }

    unsafe fn raw_launch(
        stream: &RocmStream,
        kernel: &RocmKernel,
        dims: LaunchDims,
        params: *mut *mut c_void,
    ) -> Result<()> {
        let (g, b) = (dims.grid, dims.block);
        // SAFETY: the caller's contract (the arguments as the checked path accepted them,
        // which also checked them against the code object's metadata; live buffers; live
        // stream, device current); the function belongs to a module the borrowed kernel
        // keeps loaded; HIP copies the values before returning; `extra` is null.
        let rc = unsafe {
            (stream.ctx.hip.api.hipModuleLaunchKernel)(
                kernel.func,
                g.x,
                g.y,
                g.z,
                b.x,
                b.y,
                b.z,
                dims.shared_mem,
                stream.raw,
                params,
                std::ptr::null_mut(),
            )
        };
        result::hip("hipModuleLaunchKernel", rc)
    }

    fn blas_library(&self) -> Result<Arc<BlasLibrary>> {
        self.blas
            .clone()
            .map_err(|why| unsupported(format!("raw rocBLAS gemm: rocBLAS is unavailable ({why})")))
    }

    fn blas_path(library: &BlasLibrary) -> String {
        library.path.display().to_string()
    }

    fn blas_handle(lib: &Arc<BlasLibrary>, stream: &RocmStream) -> Result<RocblasHandle> {
        let mut handle: sys::rocblas_handle = std::ptr::null_mut();
        // SAFETY: writes one handle; the device is current on this thread (bound by the
        // caller).
        let rc = unsafe { (lib.api.rocblas_create_handle)(&mut handle) };
        result::rocblas("rocblas_create_handle", rc)?;
        let me = RocblasHandle {
            lib: lib.clone(),
            handle,
        };
        // SAFETY: live handle; the stream is a live stream of the same device.
        let rc = unsafe { (me.lib.api.rocblas_set_stream)(me.handle, stream.raw) };
        result::rocblas("rocblas_set_stream", rc)?;
        // SAFETY: live handle.
        let rc = unsafe {
            (me.lib.api.rocblas_set_pointer_mode)(me.handle, sys::rocblas_pointer_mode_host)
        };
        result::rocblas("rocblas_set_pointer_mode", rc)?;
        Ok(me)
    }

    fn gemm_types(dtype: DType) -> Option<Self::GemmTypes> {
        Some(match dtype {
            DType::F32 => (sys::rocblas_datatype_f32_r, sys::rocblas_datatype_f32_r),
            DType::F16 => (sys::rocblas_datatype_f16_r, sys::rocblas_datatype_f32_r),
            DType::BF16 => (sys::rocblas_datatype_bf16_r, sys::rocblas_datatype_f32_r),
            DType::F64 => (sys::rocblas_datatype_f64_r, sys::rocblas_datatype_f64_r),
            _ => return None,
        })
    }

    /// Through `rocblas_gemm_ex` (D = C), f32 compute (f64 for f64), the standard
    /// algorithm.
    unsafe fn raw_gemm(
        h: &RocblasHandle,
        (ty, compute): Self::GemmTypes,
        [m, n, k]: [i32; 3],
        [a, b, c]: [u64; 3],
    ) -> Result<()> {
        let (alpha32, beta32) = (1.0f32, 0.0f32);
        let (alpha64, beta64) = (1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) =
            if compute == sys::rocblas_datatype_f64_r {
                ((&raw const alpha64).cast(), (&raw const beta64).cast())
            } else {
                ((&raw const alpha32).cast(), (&raw const beta32).cast())
            };
        let (pa, pb, pc) = (
            a as usize as *const c_void,
            b as usize as *const c_void,
            c as usize as *mut c_void,
        );
        // SAFETY: the caller's contract (live handle bound to a live stream whose device is
        // current; A, B and C = D inside live buffers, C disjoint from the inputs); alpha and
        // beta are host scalars of the compute type (host pointer mode) that outlive the
        // call.
        let rc = unsafe {
            (h.lib.api.rocblas_gemm_ex)(
                h.handle,
                sys::rocblas_operation_none,
                sys::rocblas_operation_none,
                m,
                n,
                k,
                alpha,
                pa,
                ty,
                m,
                pb,
                ty,
                k,
                beta,
                pc,
                ty,
                m,
                pc,
                ty,
                m,
                compute,
                sys::rocblas_gemm_algo_standard,
                0,
                0,
            )
        };
        result::rocblas("rocblas_gemm_ex", rc)
    }
}
