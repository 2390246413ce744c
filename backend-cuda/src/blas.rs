//! Gemm through cuBLAS, loaded at run time by the crate's own `libloading` table
//! (`libcublas.so.13`, `.12` in the places NVRTC is searched, with the wheel folders
//! `nvidia/cublas/lib` and `nvidia/cu13/lib`). Declarations follow cuBLAS 12 (`cublas_api.h`;
//! enum values checked against cudarc's generated bindings): `cublasGemmEx` and
//! `cublasGemmStridedBatchedEx` with f32 / f16 / bf16 operands and `CUBLAS_COMPUTE_32F`, and
//! f64 with `CUBLAS_COMPUTE_64F`; alpha and beta are host scalars of the compute type.
//!
//! The IR's gemm is **row-major**; cuBLAS is column-major. A row-major `C = op(A) op(B)`
//! (m×n) is, read column-major, `Cᵀ = op(B)ᵀ op(A)ᵀ` (n×m): cuBLAS gets B as its first
//! operand and A as its second, `m` and `n` swapped, each operand's transpose flag kept with
//! the operand, and the leading dimensions and batch strides as stored
//! ([`xthunk_core::ir::Gemm::column_major`]).

use crate::device::Context;
use crate::loader::{NotFound, SearchConfig, check_symbols};
use crate::memory::MemoryRegistry;
use crate::result::{BACKEND, cublas};
use crate::stream::unsupported;
use cudarc::driver::sys;
use parking_lot::Mutex;
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::Arc;
use xthunk_core::backend::GemmLaunch;
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

type Handle = *mut c_void;
type Status = c_int;
type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type DestroyFn = unsafe extern "C" fn(Handle) -> Status;
type SetStreamFn = unsafe extern "C" fn(Handle, sys::CUstream) -> Status;
type VersionFn = unsafe extern "C" fn(Handle, *mut c_int) -> Status;
#[allow(clippy::type_complexity)]
type GemmExFn = unsafe extern "C" fn(
    Handle,
    c_int,         // transa
    c_int,         // transb
    c_int,         // m
    c_int,         // n
    c_int,         // k
    *const c_void, // alpha
    *const c_void, // A
    c_int,         // Atype
    c_int,         // lda
    *const c_void, // B
    c_int,         // Btype
    c_int,         // ldb
    *const c_void, // beta
    *mut c_void,   // C
    c_int,         // Ctype
    c_int,         // ldc
    c_int,         // computeType
    c_int,         // algo
) -> Status;
#[allow(clippy::type_complexity)]
type GemmStridedBatchedExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    c_longlong, // strideA
    *const c_void,
    c_int,
    c_int,
    c_longlong, // strideB
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_longlong, // strideC
    c_int,      // batchCount
    c_int,
    c_int,
) -> Status;

const CUBLAS_OP_N: c_int = 0;
const CUBLAS_OP_T: c_int = 1;
const CUDA_R_32F: c_int = 0;
const CUDA_R_64F: c_int = 1;
const CUDA_R_16F: c_int = 2;
const CUDA_R_16BF: c_int = 14;
const CUBLAS_COMPUTE_32F: c_int = 68;
const CUBLAS_COMPUTE_64F: c_int = 70;
const CUBLAS_GEMM_DEFAULT: c_int = -1;

/// Library file names, newest first.
pub const LIBRARY_NAMES: [&str; 2] = ["libcublas.so.13", "libcublas.so.12"];
/// Wheel library folders under a Python package folder.
pub const WHEEL_DIRS: [&str; 2] = ["nvidia/cublas/lib", "nvidia/cu13/lib"];

const REQUIRED: [&str; 5] = [
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasGemmEx",
    "cublasGemmStridedBatchedEx",
];

struct Table {
    create: CreateFn,
    destroy: DestroyFn,
    set_stream: SetStreamFn,
    gemm_ex: GemmExFn,
    gemm_strided_batched_ex: GemmStridedBatchedExFn,
    version: Option<VersionFn>,
}

/// A loaded cuBLAS.
pub(crate) struct BlasLibrary {
    table: Table,
    path: String,
    _lib: libloading::Library,
}

impl BlasLibrary {
    pub(crate) fn load(config: &SearchConfig) -> std::result::Result<Self, NotFound> {
        let search = config.library("cuBLAS", &LIBRARY_NAMES, &WHEEL_DIRS);
        let (opened, _) = search.open(|lib, _| check_symbols(lib, &REQUIRED))?;
        let lib = opened.lib;
        // SAFETY: every type is the cuBLAS 12 declaration; all symbols were checked present.
        let table = unsafe {
            Table {
                create: *lib
                    .get::<CreateFn>(b"cublasCreate_v2")
                    .map_err(|e| missing(&e))?,
                destroy: *lib
                    .get::<DestroyFn>(b"cublasDestroy_v2")
                    .map_err(|e| missing(&e))?,
                set_stream: *lib
                    .get::<SetStreamFn>(b"cublasSetStream_v2")
                    .map_err(|e| missing(&e))?,
                gemm_ex: *lib
                    .get::<GemmExFn>(b"cublasGemmEx")
                    .map_err(|e| missing(&e))?,
                gemm_strided_batched_ex: *lib
                    .get::<GemmStridedBatchedExFn>(b"cublasGemmStridedBatchedEx")
                    .map_err(|e| missing(&e))?,
                version: lib
                    .get::<VersionFn>(b"cublasGetVersion_v2")
                    .ok()
                    .map(|s| *s),
            }
        };
        tracing::info!(path = %opened.path, "loaded cuBLAS");
        Ok(BlasLibrary {
            table,
            path: opened.path,
            _lib: lib,
        })
    }
}

fn missing(e: &libloading::Error) -> NotFound {
    NotFound {
        what: "cuBLAS",
        attempts: vec![crate::loader::Attempt {
            place: "cuBLAS".into(),
            outcome: e.to_string(),
        }],
    }
}

/// A cuBLAS handle, destroyed on drop.
struct BlasHandle {
    raw: Handle,
    lib: Arc<BlasLibrary>,
    ctx: Arc<Context>,
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created by cublasCreate_v2, destroyed once.
            let r = unsafe { (self.lib.table.destroy)(self.raw) };
            if let Err(e) = cublas("cublasDestroy_v2", r) {
                tracing::error!("{e}");
            }
        }
    }
}

/// A device's cuBLAS: the library (if found) and a handle created on first use. Calls are
/// serialized by the mutex (a handle is not safe to use from two threads at once).
pub(crate) struct BlasSlot {
    lib: Option<Arc<BlasLibrary>>,
    ctx: Arc<Context>,
    cc: (i32, i32),
    handle: Mutex<Option<BlasHandle>>,
}

// SAFETY: the handle is only used under the mutex, with the context made current first.
unsafe impl Send for BlasSlot {}
// SAFETY: as above.
unsafe impl Sync for BlasSlot {}

fn int(what: &str, v: u64) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| {
        unsupported(format!(
            "gemm with {what} = {v} (cuBLAS's 32-bit API takes at most {})",
            c_int::MAX
        ))
    })
}

fn long(what: &str, v: u64) -> Result<c_longlong> {
    c_longlong::try_from(v)
        .map_err(|_| Error::InvalidArgument(format!("gemm {what} = {v} is too large")))
}

impl BlasSlot {
    pub(crate) fn new(lib: Option<Arc<BlasLibrary>>, ctx: Arc<Context>, cc: (i32, i32)) -> Self {
        BlasSlot {
            lib,
            ctx,
            cc,
            handle: Mutex::new(None),
        }
    }

    /// Checks the operands against the device's live allocations and the shape.
    fn check(g: &GemmLaunch, memory: &MemoryRegistry) -> Result<()> {
        let mut regions = vec![];
        for op in [g.a, g.b, g.c] {
            regions.push(memory.region(op.ptr, op.len)?);
        }
        g.check()
            .map_err(|e| Error::InvalidArgument(format!("gemm: {e}")))?;
        if let [a, b, c] = regions.as_slice() {
            if c.overlaps(a) || c.overlaps(b) {
                return Err(Error::InvalidArgument(
                    "gemm output overlaps an input".into(),
                ));
            }
        }
        Ok(())
    }

    /// Enqueues `g` on `stream`.
    pub(crate) fn gemm(
        &self,
        stream: sys::CUstream,
        memory: &MemoryRegistry,
        g: &GemmLaunch,
    ) -> Result<()> {
        let Some(lib) = &self.lib else {
            return Err(unsupported(
                "gemm: cuBLAS (libcublas.so.13/.12) was not found",
            ));
        };
        let (dtype, compute) = match g.dtype {
            DType::F32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F),
            DType::F16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F),
            DType::BF16 if self.cc.0 >= 8 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F),
            DType::F64 => (CUDA_R_64F, CUBLAS_COMPUTE_64F),
            other => {
                return Err(unsupported(format!(
                    "gemm of {other} on compute capability {}.{}",
                    self.cc.0, self.cc.1
                )));
            }
        };
        Self::check(g, memory)?;
        if g.m == 0 || g.n == 0 {
            return Ok(());
        }
        let cm = g.column_major();
        // With k = 0 nothing of A or B is read; cuBLAS still wants legal leading dimensions.
        let (min_lda, min_ldb) = (
            if cm.trans_a { cm.k } else { cm.m }.max(1),
            if cm.trans_b { cm.n } else { cm.k }.max(1),
        );
        let lda = if cm.k == 0 {
            cm.lda.max(min_lda)
        } else {
            cm.lda
        };
        let ldb = if cm.k == 0 {
            cm.ldb.max(min_ldb)
        } else {
            cm.ldb
        };
        let (m, n, k) = (int("n", cm.m)?, int("m", cm.n)?, int("k", cm.k)?);
        let (lda, ldb, ldc) = (int("ldb", lda)?, int("lda", ldb)?, int("ldc", cm.ldc)?);
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let (alpha32, beta32) = (g.alpha as f32, g.beta as f32);
        let (alpha64, beta64) = (g.alpha, g.beta);
        let (alpha, beta): (*const c_void, *const c_void) = if compute == CUBLAS_COMPUTE_64F {
            (
                (&alpha64 as *const f64).cast(),
                (&beta64 as *const f64).cast(),
            )
        } else {
            (
                (&alpha32 as *const f32).cast(),
                (&beta32 as *const f32).cast(),
            )
        };

        let mut slot = self.handle.lock();
        self.ctx.bind()?;
        if slot.is_none() {
            let mut raw: Handle = std::ptr::null_mut();
            // SAFETY: writes one handle; the device's context is current.
            cublas("cublasCreate_v2", unsafe { (lib.table.create)(&mut raw) })?;
            if let Some(v) = lib.table.version {
                let mut ver = 0;
                // SAFETY: writes one int for a live handle.
                if unsafe { v(raw, &mut ver) } == 0 {
                    tracing::info!(path = %lib.path, "cuBLAS version {ver}");
                }
            }
            *slot = Some(BlasHandle {
                raw,
                lib: lib.clone(),
                ctx: self.ctx.clone(),
            });
        }
        let Some(h) = slot.as_ref() else {
            return Err(Error::backend(BACKEND, "cublasCreate_v2", "no handle"));
        };
        // SAFETY: live handle and stream of this context.
        cublas("cublasSetStream_v2", unsafe {
            (lib.table.set_stream)(h.raw, stream)
        })?;
        let (a, b, c) = (
            cm.a.ptr.0 as usize as *const c_void,
            cm.b.ptr.0 as usize as *const c_void,
            cm.c.ptr.0 as usize as *mut c_void,
        );
        if g.batch == 1 {
            // SAFETY: the operands were checked to lie inside live allocations with the sizes
            // their shapes need, aligned, C not overlapping A or B; alpha and beta point at
            // host scalars of the compute type that outlive the call (cuBLAS reads them
            // before returning in host pointer mode).
            cublas("cublasGemmEx", unsafe {
                (lib.table.gemm_ex)(
                    h.raw,
                    op(cm.trans_a),
                    op(cm.trans_b),
                    m,
                    n,
                    k,
                    alpha,
                    a,
                    dtype,
                    lda,
                    b,
                    dtype,
                    ldb,
                    beta,
                    c,
                    dtype,
                    ldc,
                    compute,
                    CUBLAS_GEMM_DEFAULT,
                )
            })
        } else {
            let (sa, sb, sc) = (
                long("stride_b", cm.stride_a)?,
                long("stride_a", cm.stride_b)?,
                long("stride_c", cm.stride_c)?,
            );
            let batch = int("batch", g.batch)?;
            // SAFETY: as for cublasGemmEx, with every batch entry inside the checked ranges.
            cublas("cublasGemmStridedBatchedEx", unsafe {
                (lib.table.gemm_strided_batched_ex)(
                    h.raw,
                    op(cm.trans_a),
                    op(cm.trans_b),
                    m,
                    n,
                    k,
                    alpha,
                    a,
                    dtype,
                    lda,
                    sa,
                    b,
                    dtype,
                    ldb,
                    sb,
                    beta,
                    c,
                    dtype,
                    ldc,
                    sc,
                    batch,
                    compute,
                    CUBLAS_GEMM_DEFAULT,
                )
            })
        }
    }
}
