//! Gemm through cuBLAS, bound at run time through the crate's table ([`CublasApi`], in
//! [`crate::loader`]; `libcublas.so.13`, `.12` in the places NVRTC is searched, with the wheel folders
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

use crate::context::DeviceContext;
use crate::loader::{CUBLAS_LIBRARY_NAMES, CUBLAS_WHEEL_DIRS, CublasApi, NotFound, SearchConfig};
use crate::result::{BACKEND, cublas, unsupported};
use crate::sys::{
    self, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUBLAS_OP_T,
    CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, cublasHandle_t,
};
use crate::vendor::MemoryRegistry;
use parking_lot::Mutex;
use std::ffi::{c_int, c_longlong, c_void};
use std::path::PathBuf;
use std::sync::Arc;
use xthunk_core::backend::GemmLaunch;
use xthunk_core::backend::dylib::{Loader, Probe};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// A loaded cuBLAS.
pub(crate) struct BlasLibrary {
    /// The table (which keeps the library open).
    pub(crate) table: CublasApi,
    /// The file loaded (resolved through `/proc/self/maps` when found by bare name).
    pub(crate) path: PathBuf,
}

impl BlasLibrary {
    /// Binds cuBLAS from the first of `config`'s candidates that has the whole table.
    pub(crate) fn load(config: &SearchConfig) -> std::result::Result<Self, NotFound> {
        let candidates = config.candidates(&CUBLAS_LIBRARY_NAMES, &CUBLAS_WHEEL_DIRS);
        let loaded = Loader::new("cuBLAS")
            .load(&candidates, |_: &CublasApi| Ok(Probe::version(None)))
            .map_err(|e| NotFound::from_load("cuBLAS", e))?;
        tracing::info!(path = %loaded.path.display(), "loaded cuBLAS");
        Ok(BlasLibrary {
            table: loaded.table,
            path: loaded.path,
        })
    }
}

/// A cuBLAS handle, destroyed on drop.
struct BlasHandle {
    raw: cublasHandle_t,
    lib: Arc<BlasLibrary>,
    ctx: Arc<DeviceContext>,
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created by cublasCreate_v2, destroyed once.
            let r = unsafe { (self.lib.table.cublasDestroy_v2)(self.raw) };
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
    ctx: Arc<DeviceContext>,
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
    pub(crate) fn new(
        lib: Option<Arc<BlasLibrary>>,
        ctx: Arc<DeviceContext>,
        cc: (i32, i32),
    ) -> Self {
        BlasSlot {
            lib,
            ctx,
            cc,
            handle: Mutex::new(None),
        }
    }

    /// The loaded cuBLAS, if one was found (for the raw baselines, `crate::bench`).
    #[cfg(feature = "bench")]
    pub(crate) fn library(&self) -> Option<&Arc<BlasLibrary>> {
        self.lib.as_ref()
    }

    /// Checks the operands against the device's live allocations and the shape (which
    /// includes C overlapping neither input).
    fn check(g: &GemmLaunch, memory: &MemoryRegistry) -> Result<()> {
        for op in [g.a, g.b, g.c] {
            memory.region(op.ptr, op.len)?;
        }
        g.check()
            .map_err(|e| Error::InvalidArgument(format!("gemm: {e}")))
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
            let mut raw: cublasHandle_t = std::ptr::null_mut();
            // SAFETY: writes one handle; the device's context is current.
            cublas("cublasCreate_v2", unsafe {
                (lib.table.cublasCreate_v2)(&mut raw)
            })?;
            if let Some(v) = lib.table.cublasGetVersion_v2 {
                let mut ver = 0;
                // SAFETY: writes one int for a live handle.
                if unsafe { v(raw, &mut ver) } == 0 {
                    tracing::info!(path = %lib.path.display(), "cuBLAS version {ver}");
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
            (lib.table.cublasSetStream_v2)(h.raw, stream)
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
                (lib.table.cublasGemmEx)(
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
                (lib.table.cublasGemmStridedBatchedEx)(
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
