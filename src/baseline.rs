//! The raw vendor baselines this build's backends provide, behind
//! [`xthunk_core::backend::baseline::RawBaseline`]: for now a thin adapter over the CUDA
//! backend's `bench` module (the ROCm backend has none yet). The vendor crates are to
//! implement the trait themselves; then this adapter goes.

use std::sync::Arc;
use std::time::Duration;
use xthunk_core::Result;
use xthunk_core::backend::baseline::{
    BaselineCalls, RawBaseline, RawGemm, RawGemmCall, RawLaunches,
};
use xthunk_core::backend::{DeviceMemory, KernelHandle, LaunchArg, LaunchDims, Stream};
use xthunk_cuda::bench as cuda;

/// The CUDA backend's raw baselines: the driver through cudarc's `sys` layer, and cuBLAS.
pub(crate) struct CudaBaseline;

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
        let raw = cuda::RawLaunchLoop::new(stream, kernel, dims, launches, buffers)?;
        Ok(Box::new(CudaLaunches(raw)))
    }

    fn copy_loop(
        &self,
        stream: &dyn Stream,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: u64,
        times: usize,
    ) -> Result<Duration> {
        cuda::raw_memcpy_dtod(stream, src, dst, bytes, times)
    }

    fn blas(&self, stream: Arc<dyn Stream>) -> Result<Box<dyn RawGemm>> {
        Ok(Box::new(CudaGemm(cuda::RawCublas::new(stream)?)))
    }
}

struct CudaLaunches<'a>(cuda::RawLaunchLoop<'a>);

impl RawLaunches for CudaLaunches<'_> {
    fn launches(&self) -> usize {
        self.0.launches()
    }

    fn run(&self) -> Result<Duration> {
        self.0.run()
    }
}

struct CudaGemm(cuda::RawCublas);

impl RawGemm for CudaGemm {
    fn library(&self) -> &str {
        self.0.library()
    }

    fn gemm_loop(&self, g: &RawGemmCall<'_>, reps: usize) -> Result<Duration> {
        self.0
            .gemm_loop(g.dtype, g.m, g.n, g.k, g.a, g.b, g.c, reps)
    }
}
