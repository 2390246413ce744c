//! Raw vendor baselines for benchmarks: the work the executor issues (kernel launches,
//! device-to-device copies, gemms) issued instead straight to a vendor's driver and BLAS
//! library, so that `xthunk bench` can report the executor's cost as a ratio against
//! hand-written vendor code measured on the same device in the same run.
//!
//! A vendor crate implements [`RawBaseline`] for its devices and hands it out through
//! [`super::Device::raw_baseline`] (built with the crate's `bench` feature; the default is
//! `None`). CUDA: the driver's `cuLaunchKernel` / `cuMemcpyDtoDAsync_v2` and cuBLAS's
//! `cublasGemmEx`; ROCm: `hipModuleLaunchKernel` / `hipMemcpyDtoDAsync` and rocBLAS's
//! `rocblas_gemm_ex`. The benchmarks never ask which backend they run on: they use the
//! baseline the device provides, or report that it has none.
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
//!
//! The vendor-neutral half of those checks is here, shared by both vendors:
//! [`launch_slots`], [`check_copy`] and [`RawGemmCall::checked_launch`].

use super::stream::Stream;
use super::types::{DeviceMemory, DeviceRange, GemmLaunch, KernelHandle, LaunchArg, LaunchDims};
use crate::error::{Error, Result};
use crate::ir::{DType, GemmOperand};
use std::sync::Arc;
use std::time::Duration;

/// The vendor calls a baseline makes, named as a benchmark report names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaselineCalls {
    /// The kernel launch (`cuLaunchKernel`, `hipModuleLaunchKernel`).
    pub launch: &'static str,
    /// The stream wait that ends every timed loop (`cuStreamSynchronize`,
    /// `hipStreamSynchronize`).
    pub synchronize: &'static str,
    /// The device-to-device copy by its API name (`cuMemcpyDtoDAsync`, `hipMemcpyDtoDAsync`) ...
    pub copy: &'static str,
    /// ... and by the entry point called (`cuMemcpyDtoDAsync_v2`, `hipMemcpyDtoDAsync`).
    pub copy_symbol: &'static str,
    /// The BLAS library (`cuBLAS`, `rocBLAS`).
    pub blas: &'static str,
    /// Its gemm (`cublasGemmEx`, `rocblas_gemm_ex`).
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

/// The most arguments a raw launch takes (every standard kernel has fewer).
pub const MAX_LAUNCH_ARGS: usize = 16;

/// Checks that `len` bytes at `ptr` lie inside one of `buffers` (those lent to the baseline).
pub fn check_lent(what: &str, ptr: u64, len: u64, buffers: &[&dyn DeviceMemory]) -> Result<()> {
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

/// The argument values of [`RawBaseline::launch_loop`]'s launches, one 8-byte slot per
/// argument (`slot` lays one out in the vendor's way), after checking that no launch has more
/// than [`MAX_LAUNCH_ARGS`] arguments and that every buffer lies inside `buffers`.
pub fn launch_slots(
    launches: &[Vec<LaunchArg>],
    buffers: &[&dyn DeviceMemory],
    slot: impl Fn(&LaunchArg) -> u64,
) -> Result<Vec<Vec<u64>>> {
    let mut slots = Vec::with_capacity(launches.len());
    for (i, args) in launches.iter().enumerate() {
        if args.len() > MAX_LAUNCH_ARGS {
            return Err(Error::InvalidArgument(format!(
                "launch {i}: {} arguments (at most {MAX_LAUNCH_ARGS})",
                args.len()
            )));
        }
        for a in args {
            if let LaunchArg::Buffer { ptr, len } = *a {
                check_lent(&format!("launch {i}"), ptr.0, len, buffers)?;
            }
        }
        slots.push(args.iter().map(&slot).collect());
    }
    Ok(slots)
}

/// Checks [`RawBaseline::copy_loop`]'s ranges (`bytes` at the start of each buffer, inside
/// it, not overlapping); returns the size for the vendor call.
pub fn check_copy(src: &dyn DeviceMemory, dst: &dyn DeviceMemory, bytes: u64) -> Result<usize> {
    check_lent("copy source", src.ptr().0, bytes, &[src])?;
    check_lent("copy destination", dst.ptr().0, bytes, &[dst])?;
    let range = |m: &dyn DeviceMemory| DeviceRange {
        ptr: m.ptr(),
        len: bytes,
    };
    if range(src).overlaps(&range(dst)) {
        return Err(Error::InvalidArgument(
            "raw copy: source and destination overlap".into(),
        ));
    }
    usize::try_from(bytes).map_err(|_| Error::InvalidArgument(format!("raw copy of {bytes} bytes")))
}

impl RawGemmCall<'_> {
    /// Checks the operands (each matrix inside its buffer, the output overlapping no input)
    /// and returns the gemm to issue once through the checked path: the row-major gemm of the
    /// same sizes over the same ranges (`lda = k`, `ldb = n`, `ldc = n`), which has the same
    /// shapes and operation count.
    pub fn checked_launch(&self) -> Result<GemmLaunch> {
        let es = self.dtype.size() as u64;
        let bytes = |r: u64, c: u64| {
            r.checked_mul(c)
                .and_then(|x| x.checked_mul(es))
                .ok_or_else(|| Error::InvalidArgument("raw gemm: shape too large".into()))
        };
        let (m, n, k) = (self.m, self.n, self.k);
        let (la, lb, lc) = (bytes(m, k)?, bytes(k, n)?, bytes(m, n)?);
        let (a, b, c) = (self.a.ptr(), self.b.ptr(), self.c.ptr());
        check_lent("gemm operand a", a.0, la, &[self.a])?;
        check_lent("gemm operand b", b.0, lb, &[self.b])?;
        check_lent("gemm operand c", c.0, lc, &[self.c])?;
        let launch = GemmLaunch {
            a: DeviceRange { ptr: a, len: la },
            b: DeviceRange { ptr: b, len: lb },
            c: DeviceRange { ptr: c, len: lc },
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
            dtype: self.dtype,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        launch
            .check_disjoint()
            .map_err(|e| Error::InvalidArgument(format!("raw gemm: {}", e.message)))?;
        Ok(launch)
    }

    /// `m`, `n` and `k` as the 32-bit `int`s a vendor BLAS (`blas`, for the message) takes.
    pub fn dims_i32(&self, blas: &str) -> Result<[i32; 3]> {
        let int = |what: &str, v: u64| {
            i32::try_from(v).map_err(|_| {
                Error::InvalidArgument(format!("raw gemm: {what} = {v} exceeds {blas}'s int"))
            })
        };
        Ok([int("m", self.m)?, int("n", self.n)?, int("k", self.k)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DevicePtr;
    use crate::ir::{MemorySpace, Scalar};

    #[derive(Debug)]
    struct Lent(u64, u64);

    impl DeviceMemory for Lent {
        fn ptr(&self) -> DevicePtr {
            DevicePtr(self.0)
        }
        fn size(&self) -> u64 {
            self.1
        }
        fn space(&self) -> MemorySpace {
            MemorySpace::Device
        }
    }

    fn message<T>(r: Result<T>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn launches_stay_inside_the_lent_buffers() {
        let (x, y) = (Lent(0x1000, 64), Lent(0x2000, 64));
        let lent: [&dyn DeviceMemory; 2] = [&x, &y];
        let buffer = |ptr, len| LaunchArg::Buffer {
            ptr: DevicePtr(ptr),
            len,
        };
        let slot = |a: &LaunchArg| match a {
            LaunchArg::Buffer { ptr, .. } => ptr.0,
            LaunchArg::Scalar(_) => 7,
        };
        let ok = vec![
            vec![buffer(0x1000, 64), LaunchArg::Scalar(Scalar::I64(1))],
            vec![buffer(0x2010, 48)],
        ];
        let slots = launch_slots(&ok, &lent, slot).ok();
        assert_eq!(slots, Some(vec![vec![0x1000, 7], vec![0x2010]]));
        let outside = vec![vec![buffer(0x1000, 8)], vec![buffer(0x2010, 49)]];
        let e = message(launch_slots(&outside, &lent, slot));
        assert!(
            e.contains("launch 1: 49 bytes at 0x2010 are not inside"),
            "{e}"
        );
        let many = vec![vec![LaunchArg::Scalar(Scalar::I32(0)); MAX_LAUNCH_ARGS + 1]];
        assert!(message(launch_slots(&many, &lent, slot)).contains("at most 16"));
    }

    #[test]
    fn copies_are_inside_and_disjoint() {
        let (x, y) = (Lent(0x1000, 64), Lent(0x2000, 32));
        assert_eq!(check_copy(&x, &y, 32).ok(), Some(32));
        assert!(message(check_copy(&x, &y, 33)).contains("copy destination: 33 bytes"));
        let (p, q) = (Lent(0x1000, 64), Lent(0x1010, 64));
        assert!(message(check_copy(&p, &q, 32)).contains("overlap"));
        assert_eq!(check_copy(&p, &q, 0).ok(), Some(0));
    }

    #[test]
    fn gemms_are_checked_and_issued_with_the_same_shapes() {
        let (a, b, c) = (
            Lent(0x1000, 2 * 3 * 4),
            Lent(0x2000, 3 * 4 * 4),
            Lent(0x3000, 32),
        );
        let call = RawGemmCall {
            dtype: DType::F32,
            m: 2,
            n: 4,
            k: 3,
            a: &a,
            b: &b,
            c: &c,
        };
        let g = call.checked_launch().ok();
        assert!(
            g.is_some_and(|g| (g.a.len, g.b.len, g.c.len) == (24, 48, 32)
                && (g.lda, g.ldb, g.ldc) == (3, 4, 4)
                && g.check().is_ok())
        );
        assert_eq!(call.dims_i32("cuBLAS").ok(), Some([2, 4, 3]));
        let short = Lent(0x3000, 31);
        let e = message(RawGemmCall { c: &short, ..call }.checked_launch());
        assert!(e.contains("gemm operand c: 32 bytes"), "{e}");
        let inside_a = Lent(0x1000, 64);
        let e = message(
            RawGemmCall {
                c: &inside_a,
                ..call
            }
            .checked_launch(),
        );
        assert!(e.contains("overlaps an input"), "{e}");
        let big = RawGemmCall { m: 1 << 31, ..call };
        assert!(message(big.dims_i32("rocBLAS")).contains("exceeds rocBLAS's int"));
    }
}
