//! The ROCm device's raw calls for the baselines of `xthunk bench` (the loops are
//! [`xthunk_gpu::bench`]'s; compiled with the crate's `bench` feature): bare
//! `hipModuleLaunchKernel`, `hipMemcpyDtoDAsync` and `hipStreamSynchronize` through the
//! device's HIP table ([`crate::loader::HipApi`]), and `rocblas_gemm_ex` on a rocBLAS handle
//! of the baseline's own (made as the backend makes its handles, host pointer mode), through
//! the backend's own call of a planned gemm ([`crate::blas`]) without its checks. The device is made current (`hipSetDevice`, per thread)
//! before the raw calls.

use crate::blas::{self, BlasHandle, BlasLibrary, GemmPlan};
use crate::context::DeviceContext;
use crate::module::RocmKernel;
use crate::result::{self, unsupported};
use crate::stream::RocmStream;

use crate::vendor::Rocm;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::baseline::{BaselineCalls, RawGemmCall};
use xthunk_core::backend::{DeviceMemory, GemmLaunch, LaunchDims};
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};
use xthunk_gpu::bench::BaselineVendor;

/// The device's raw calls for the baselines, as [`xthunk_gpu::bench::Baseline`] takes them.
pub(crate) struct RocmBaselines;

impl BaselineVendor for RocmBaselines {
    type Vendor = Rocm;
    type Stream = RocmStream;
    type Kernel = RocmKernel;
    type BlasLibrary = BlasLibrary;
    type BlasHandle = BlasHandle;
    type GemmCall = GemmPlan;

    const CALLS: BaselineCalls = BaselineCalls {
        launch: "hipModuleLaunchKernel",
        synchronize: "hipStreamSynchronize",
        copy: "hipMemcpyDtoDAsync",
        copy_symbol: "hipMemcpyDtoDAsync",
        blas: "rocBLAS",
        gemm: "rocblas_gemm_ex",
    };

    fn stream_context(stream: &RocmStream) -> &Arc<DeviceContext> {
        stream.ctx()
    }

    fn raw_sync(stream: &RocmStream) -> Result<()> {
        // SAFETY: the stream is live (borrowed).
        let rc = unsafe { (stream.ctx().hip.api.hipStreamSynchronize)(stream.raw()) };
        result::hip("hipStreamSynchronize", rc)
    }

    /// The backend itself calls hipMemcpyDtoDAsync only between device allocations.
    fn prepare_copy(
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
        let rc = unsafe { (stream.ctx().hip.api.hipMemcpyDtoDAsync)(b, a, bytes, stream.raw()) };
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
            (stream.ctx().hip.api.hipModuleLaunchKernel)(
                kernel.func,
                g.x,
                g.y,
                g.z,
                b.x,
                b.y,
                b.z,
                dims.shared_mem,
                stream.raw(),
                params,
                std::ptr::null_mut(),
            )
        };
        result::hip("hipModuleLaunchKernel", rc)
    }

    fn blas_path(library: &BlasLibrary) -> String {
        library.path.display().to_string()
    }

    /// A handle of its own, as the backend makes its handles (host pointer mode).
    fn blas_handle(lib: &Arc<BlasLibrary>, stream: &RocmStream) -> Result<BlasHandle> {
        BlasHandle::new(lib.clone(), stream.ctx(), stream.raw())
    }

    /// The backend's own plan of the checked gemm (dtype mapping, the row-major to
    /// column-major swap, D = C).
    fn prepare_gemm(_g: &RawGemmCall<'_>, checked: &GemmLaunch) -> Result<GemmPlan> {
        blas::plan(checked)?.ok_or_else(|| unsupported("raw rocBLAS gemm of an empty shape"))
    }

    /// One `rocblas_gemm_ex` (the backend's own call of a planned gemm, without its checks).
    unsafe fn raw_gemm(h: &BlasHandle, plan: &GemmPlan) -> Result<()> {
        h.run(plan)
    }
}
