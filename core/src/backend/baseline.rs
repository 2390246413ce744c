//! Raw vendor baselines for benchmarks: the work the executor issues (kernel launches,
//! device-to-device copies, gemms) issued instead straight to a vendor's driver and BLAS
//! library, so that `xthunk bench` can report the executor's cost as a ratio against
//! hand-written vendor code measured on the same device in the same run.
//!
//! A vendor crate implements [`RawBaseline`] for its devices (CUDA: the driver's
//! `cuLaunchKernel` / `cuMemcpyDtoDAsync_v2` and cuBLAS's `cublasGemmEx`; ROCm:
//! `hipModuleLaunchKernel` / `hipMemcpyDtoDAsync` and rocBLAS's `rocblas_gemm_ex`). The
//! benchmarks never ask which backend they run on: they use the baseline the backend provides,
//! or report that it has none.
//!
//! The contract every implementation keeps:
//! - It works on streams the same device created ([`super::Device::create_stream`]) and on
//!   memory that device allocated; anything else is `InvalidArgument`.
//! - Before anything raw is issued, every buffer range is checked to lie inside the buffers the
//!   caller lends (which therefore stay alive), and the same work is issued once through the
//!   backend's checked path ([`Stream::launch`], [`Stream::copy`], [`Stream::gemm`]): that pass
//!   validates it against the device's live allocations and is the untimed warm-up.
//! - A timed call returns the wall-clock time on the host from the first vendor call issued to
//!   the end of the stream's synchronization, as `LoadedExecutable::execute` is timed.

use super::{DeviceMemory, KernelHandle, LaunchArg, LaunchDims, Stream};
use crate::error::Result;
use crate::ir::DType;
use std::sync::Arc;
use std::time::Duration;

/// The vendor calls a baseline makes, named as a benchmark report names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaselineCalls {
    /// The kernel launch (`cuLaunchKernel`).
    pub launch: &'static str,
    /// The stream wait that ends every timed loop (`cuStreamSynchronize`).
    pub synchronize: &'static str,
    /// The device-to-device copy by its API name (`cuMemcpyDtoDAsync`) ...
    pub copy: &'static str,
    /// ... and by the entry point called (`cuMemcpyDtoDAsync_v2`).
    pub copy_symbol: &'static str,
    /// The BLAS library (`cuBLAS`).
    pub blas: &'static str,
    /// Its gemm (`cublasGemmEx`).
    pub gemm: &'static str,
}

/// A device's raw baselines.
pub trait RawBaseline: Send + Sync {
    /// The vendor calls made.
    fn calls(&self) -> BaselineCalls;

    /// Prepares `launches` (one argument list per launch) of `kernel` with `dims` on
    /// `stream`, to be issued as bare vendor launches with the arguments marshalled
    /// beforehand. Every buffer argument must lie inside `buffers`, which stay borrowed for as
    /// long as the loop exists. Issues every launch once through the checked path and waits.
    fn launch_loop<'a>(
        &self,
        stream: &'a dyn Stream,
        kernel: &'a Arc<dyn KernelHandle>,
        dims: LaunchDims,
        launches: &[Vec<LaunchArg>],
        buffers: &'a [&'a dyn DeviceMemory],
    ) -> Result<Box<dyn RawLaunches + 'a>>;

    /// Copies `bytes` from the start of `src` to the start of `dst` `times` times with the
    /// vendor's asynchronous device-to-device copy on `stream`, then waits; returns the time.
    /// The ranges must not overlap. One checked copy is issued first.
    fn copy_loop(
        &self,
        stream: &dyn Stream,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: u64,
        times: usize,
    ) -> Result<Duration>;

    /// Opens the vendor's BLAS library (found as the backend finds it) with its own handle
    /// bound to `stream`.
    fn blas(&self, stream: Arc<dyn Stream>) -> Result<Box<dyn RawGemm>>;
}

/// Prepared launches (see [`RawBaseline::launch_loop`]).
pub trait RawLaunches {
    /// How many launches one [`RawLaunches::run`] issues.
    fn launches(&self) -> usize;
    /// Issues every launch, then waits for the stream; returns the time.
    fn run(&self) -> Result<Duration>;
}

/// A vendor BLAS handle on one stream (see [`RawBaseline::blas`]).
pub trait RawGemm {
    /// The library file opened.
    fn library(&self) -> &str;
    /// `reps` times `gemm` with f32 accumulation (f64 for f64) and the library's default
    /// algorithm, then waits; returns the time. One checked gemm of the same shapes is issued
    /// first.
    fn gemm_loop(&self, gemm: &RawGemmCall<'_>, reps: usize) -> Result<Duration>;
}

/// One gemm of [`RawGemm::gemm_loop`]: `C = A B` of `dtype` operands, with the `m x k`,
/// `k x n` and `m x n` matrices at the start of `a`, `b` and `c` (column-major, no transposes,
/// packed: the same shapes and operation count as a row-major gemm of the same sizes).
#[derive(Clone, Copy, Debug)]
pub struct RawGemmCall<'a> {
    pub dtype: DType,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: &'a dyn DeviceMemory,
    pub b: &'a dyn DeviceMemory,
    pub c: &'a dyn DeviceMemory,
}
