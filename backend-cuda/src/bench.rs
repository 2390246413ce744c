//! Raw CUDA baselines for `xthunk bench`: the same work the executor does, issued straight to
//! the driver through cudarc's `sys` layer, or straight to cuBLAS, so that a benchmark run can
//! report the executor's cost as a ratio against hand-written CUDA measured on the same
//! device in the same run.
//!
//! - [`RawLaunchLoop`]: a list of launches of one kernel, each a bare `cuLaunchKernel` with
//!   its arguments marshalled beforehand (as a hand-written CUDA program keeps them on the
//!   stack), then one `cuStreamSynchronize`.
//! - [`raw_memcpy_dtod`]: `cuMemcpyDtoDAsync_v2` a given number of times, then one
//!   `cuStreamSynchronize`.
//! - [`RawCublas`]: its own cuBLAS handle (the crate's cuBLAS table, bound by the same search
//!   as the backend's, see [`crate::loader`]) calling `cublasGemmEx` a given number of times, then one
//!   `cuStreamSynchronize`.
//!
//! Each runs on a stream created by the CUDA device ([`xthunk_core::backend::Device::create_stream`])
//! and takes device memory allocated by it. Before anything raw is issued, every buffer range
//! is checked to lie inside the buffers the caller lends for the call (which therefore stay
//! alive), and the same work is issued once through the backend's checked path
//! ([`Stream::launch`], [`Stream::copy`], [`Stream::gemm`]), which checks the ranges against
//! the device's live allocations, the kernel signature and the gemm shapes; that pass is also
//! the warm-up and is not timed. Times are wall-clock on the host from the first call issued
//! to the end of the synchronization, exactly as `LoadedExecutable::execute` is timed.
//!
//! `cuMemcpyDtoDAsync_v2` is the one driver entry point here that the backend itself does not
//! call (it is not in the driver symbols the probe checks, `DRIVER_SYMBOLS`), so its first
//! use is guarded against cudarc's panic on a missing symbol.

use crate::blas::BlasLibrary;
use crate::loader::{SearchConfig, guarded};
use crate::module::{CudaKernel, arg_slot};
use crate::result::{BACKEND, cu, cublas};
use crate::stream::CudaStream;
use crate::sys::{
    CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUDA_R_16BF,
    CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, cublasHandle_t,
};
use cudarc::driver::sys;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use xthunk_core::backend::{
    DeviceMemory, DeviceRange, GemmLaunch, KernelHandle, LaunchArg, LaunchDims, Stream,
};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// The most arguments a raw launch takes (every standard kernel has fewer).
const MAX_ARGS: usize = 16;

fn cuda_stream(stream: &dyn Stream) -> Result<&CudaStream> {
    stream.as_any().downcast_ref::<CudaStream>().ok_or_else(|| {
        Error::InvalidArgument("the stream does not belong to the CUDA backend".into())
    })
}

/// Checks that `len` bytes at `ptr` lie inside one of `buffers`.
fn covered(what: &str, ptr: u64, len: u64, buffers: &[&dyn DeviceMemory]) -> Result<()> {
    let inside = buffers.iter().any(|b| {
        let base = b.ptr().0;
        ptr >= base
            && ptr
                .checked_add(len)
                .is_some_and(|end| end <= base.saturating_add(b.size()))
    });
    if inside {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: {len} bytes at {ptr:#x} are not inside the buffers lent to the benchmark"
        )))
    }
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

/// Launches of one kernel on one stream, ready to be issued with bare `cuLaunchKernel` calls.
pub struct RawLaunchLoop<'a> {
    stream: &'a CudaStream,
    kernel: &'a CudaKernel,
    dims: LaunchDims,
    /// Each launch's argument values, one 8-byte slot per argument.
    slots: Vec<Vec<u64>>,
    _buffers: &'a [&'a dyn DeviceMemory],
}

impl<'a> RawLaunchLoop<'a> {
    /// Prepares `launches` (one argument list per launch) of `kernel` with `dims` on `stream`.
    /// Every buffer argument must lie inside `buffers`, which stay borrowed (alive) for as long
    /// as the loop exists. Issues every launch once through the backend's checked
    /// [`Stream::launch`] and waits (untimed warm-up and validation).
    pub fn new(
        stream: &'a dyn Stream,
        kernel: &'a Arc<dyn KernelHandle>,
        dims: LaunchDims,
        launches: &[Vec<LaunchArg>],
        buffers: &'a [&'a dyn DeviceMemory],
    ) -> Result<Self> {
        let s = cuda_stream(stream)?;
        let Some(k) = kernel.as_any().downcast_ref::<CudaKernel>() else {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` was not loaded by the CUDA backend",
                kernel.name()
            )));
        };
        let mut slots = Vec::with_capacity(launches.len());
        for (i, args) in launches.iter().enumerate() {
            if args.len() > MAX_ARGS {
                return Err(Error::InvalidArgument(format!(
                    "launch {i}: {} arguments (at most {MAX_ARGS})",
                    args.len()
                )));
            }
            for a in args {
                if let LaunchArg::Buffer { ptr, len } = *a {
                    covered(&format!("launch {i}"), ptr.0, len, buffers)?;
                }
            }
            slots.push(args.iter().map(arg_slot).collect());
        }
        for args in launches {
            stream.launch(kernel, dims, args)?;
        }
        sync(s)?;
        Ok(RawLaunchLoop {
            stream: s,
            kernel: k,
            dims,
            slots,
            _buffers: buffers,
        })
    }

    /// How many launches one [`Self::run`] issues.
    pub fn launches(&self) -> usize {
        self.slots.len()
    }

    /// Issues every launch with `cuLaunchKernel` and waits for the stream; returns the time
    /// from the first launch to the end of the wait.
    pub fn run(&self) -> Result<Duration> {
        sync(self.stream)?;
        let mut values = [0u64; MAX_ARGS];
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
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
            // the same launch was accepted by the checked path in `new`); every buffer lies
            // inside the borrowed, live buffers; the stream is live and its context current
            // (bound by `sync`); the driver copies the values before returning.
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

/// Whether `cuMemcpyDtoDAsync_v2` can be called (checked once, with cudarc's panic on a missing
/// symbol caught).
static DTOD: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Copies `bytes` from `src` to `dst` `times` times with `cuMemcpyDtoDAsync_v2` on `stream`,
/// then waits; returns the time from the first copy to the end of the wait. The ranges must not
/// overlap. The same copy is issued once through the backend's checked [`Stream::copy`] first
/// (untimed warm-up and validation).
pub fn raw_memcpy_dtod(
    stream: &dyn Stream,
    src: &dyn DeviceMemory,
    dst: &dyn DeviceMemory,
    bytes: u64,
    times: usize,
) -> Result<Duration> {
    let s = cuda_stream(stream)?;
    covered("copy source", src.ptr().0, bytes, &[src])?;
    covered("copy destination", dst.ptr().0, bytes, &[dst])?;
    let (a, b) = (src.ptr().0, dst.ptr().0);
    if bytes > 0 && a < b.saturating_add(bytes) && b < a.saturating_add(bytes) {
        return Err(Error::InvalidArgument(
            "raw copy: source and destination overlap".into(),
        ));
    }
    let n = usize::try_from(bytes)
        .map_err(|_| Error::InvalidArgument(format!("raw copy of {bytes} bytes")))?;
    stream.copy(src.ptr(), dst.ptr(), bytes)?;
    sync(s)?;
    DTOD.get_or_init(|| {
        // SAFETY: a copy of 0 bytes between live allocations on a live stream whose context
        // is current (bound by `sync`).
        guarded("cuMemcpyDtoDAsync_v2", || unsafe {
            sys::cuMemcpyDtoDAsync_v2(b, a, 0, s.raw)
        })
        .and_then(|r| cu("cuMemcpyDtoDAsync_v2", r).map_err(|e| e.to_string()))
    })
    .clone()
    .map_err(|reason| Error::Unavailable {
        backend: BACKEND.into(),
        reason,
    })?;
    let start = Instant::now();
    for _ in 0..times {
        // SAFETY: both ranges lie inside the borrowed, live buffers (checked above, and by the
        // backend's checked copy), do not overlap, and the stream is live with its context
        // current; the symbol was checked present above.
        cu("cuMemcpyDtoDAsync_v2", unsafe {
            sys::cuMemcpyDtoDAsync_v2(b, a, n, s.raw)
        })?;
    }
    raw_sync(s)?;
    Ok(start.elapsed())
}

/// cuBLAS called directly: its own handle on one stream.
pub struct RawCublas {
    stream: Arc<dyn Stream>,
    handle: cublasHandle_t,
    lib: BlasLibrary,
    path: String,
}

impl RawCublas {
    /// Opens cuBLAS (the first library the backend's search finds: `XTHUNK_CUDA_PATH`, the
    /// toolkit, pip wheels, the loader) and creates a handle for `stream`'s device.
    pub fn new(stream: Arc<dyn Stream>) -> Result<Self> {
        let s = cuda_stream(stream.as_ref())?;
        sync(s)?;
        let raw_stream = s.raw;
        let lib = BlasLibrary::load(&SearchConfig::from_env()).map_err(|e| Error::Unavailable {
            backend: BACKEND.into(),
            reason: e.to_string(),
        })?;
        let mut handle: cublasHandle_t = std::ptr::null_mut();
        // SAFETY: writes one handle; the device's context is current (bound by `sync`).
        cublas("cublasCreate_v2", unsafe {
            (lib.table.cublasCreate_v2)(&mut handle)
        })?;
        let me = RawCublas {
            stream,
            handle,
            path: lib.path.display().to_string(),
            lib,
        };
        // SAFETY: live handle; the stream is live and of the current context.
        cublas("cublasSetStream_v2", unsafe {
            (me.lib.table.cublasSetStream_v2)(me.handle, raw_stream)
        })?;
        Ok(me)
    }

    /// The cuBLAS library file used.
    pub fn library(&self) -> &str {
        &self.path
    }

    /// `reps` times `C = A B` (column-major, no transposes, `lda = m`, `ldb = k`, `ldc = m`:
    /// the same shapes and operation count as the row-major thunk) with `cublasGemmEx`,
    /// operands of `dtype` and f32 accumulation (f64 for f64), then waits; returns the time from
    /// the first call to the end of the wait. One gemm of the same shapes is issued through the
    /// backend's checked [`Stream::gemm`] first (untimed warm-up and validation).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_loop(
        &self,
        dtype: DType,
        m: u64,
        n: u64,
        k: u64,
        a: &dyn DeviceMemory,
        b: &dyn DeviceMemory,
        c: &dyn DeviceMemory,
        reps: usize,
    ) -> Result<Duration> {
        let s = cuda_stream(self.stream.as_ref())?;
        let (ty, compute) = match dtype {
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
        let es = dtype.size() as u64;
        let bytes = |r: u64, c: u64| {
            r.checked_mul(c)
                .and_then(|x| x.checked_mul(es))
                .ok_or_else(|| Error::InvalidArgument("raw gemm: shape too large".into()))
        };
        let (la, lb, lc) = (bytes(m, k)?, bytes(k, n)?, bytes(m, n)?);
        covered("gemm operand a", a.ptr().0, la, &[a])?;
        covered("gemm operand b", b.ptr().0, lb, &[b])?;
        covered("gemm operand c", c.ptr().0, lc, &[c])?;
        let overlaps = |p: u64, pl: u64, q: u64, ql: u64| {
            pl > 0 && ql > 0 && p < q.saturating_add(ql) && q < p.saturating_add(pl)
        };
        if overlaps(c.ptr().0, lc, a.ptr().0, la) || overlaps(c.ptr().0, lc, b.ptr().0, lb) {
            return Err(Error::InvalidArgument(
                "raw gemm: the output overlaps an input".into(),
            ));
        }
        let int = |what: &str, v: u64| {
            c_int::try_from(v).map_err(|_| {
                Error::InvalidArgument(format!("raw gemm: {what} = {v} exceeds cuBLAS's int"))
            })
        };
        let (mi, ni, ki) = (int("m", m)?, int("n", n)?, int("k", k)?);
        self.stream.gemm(&GemmLaunch {
            a: DeviceRange {
                ptr: a.ptr(),
                len: la,
            },
            b: DeviceRange {
                ptr: b.ptr(),
                len: lb,
            },
            c: DeviceRange {
                ptr: c.ptr(),
                len: lc,
            },
            m,
            n,
            k,
            lda: k,
            ldb: n,
            ldc: n,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            dtype,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        })?;
        sync(s)?;
        let (alpha32, beta32) = (1.0f32, 0.0f32);
        let (alpha64, beta64) = (1.0f64, 0.0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if compute == CUBLAS_COMPUTE_64F {
            ((&raw const alpha64).cast(), (&raw const beta64).cast())
        } else {
            ((&raw const alpha32).cast(), (&raw const beta32).cast())
        };
        let (pa, pb, pc) = (
            a.ptr().0 as usize as *const c_void,
            b.ptr().0 as usize as *const c_void,
            c.ptr().0 as usize as *mut c_void,
        );
        let start = Instant::now();
        for _ in 0..reps {
            // SAFETY: the handle is live and bound to this live stream, whose context is
            // current (bound by `sync`); A (m x k), B (k x n) and C (m x n) lie inside the
            // borrowed, live buffers with the leading dimensions given, C overlaps neither
            // input (checked above and by the backend's checked gemm); alpha and beta are host
            // scalars of the compute type that outlive the call.
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

impl Drop for RawCublas {
    fn drop(&mut self) {
        let Ok(s) = cuda_stream(self.stream.as_ref()) else {
            return;
        };
        if let Err(e) = sync(s) {
            tracing::error!("raw cuBLAS: {e}");
        }
        // SAFETY: created by cublasCreate_v2 in `new`, destroyed once, here, with the
        // device's context current (bound by `sync`).
        let r = unsafe { (self.lib.table.cublasDestroy_v2)(self.handle) };
        if let Err(e) = cublas("cublasDestroy_v2", r) {
            tracing::error!("{e}");
        }
    }
}
