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
//! ([`to_column_major`]).

use crate::context::DeviceContext;
use crate::loader::{
    CUBLAS_LIBRARY_NAMES, CUBLAS_WHEEL_DIRS, CublasApi, NotFound, SearchConfig, check_symbols,
};
use crate::memory::MemoryRegistry;
use crate::result::{BACKEND, cublas, unsupported};
use crate::sys::{
    self, CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUBLAS_OP_T,
    CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUDA_R_64F, cublasHandle_t,
};
use parking_lot::Mutex;
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::Arc;
use xthunk_core::backend::GemmLaunch;
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// A loaded cuBLAS.
pub(crate) struct BlasLibrary {
    table: CublasApi,
    path: String,
    _lib: libloading::Library,
}

impl BlasLibrary {
    pub(crate) fn load(config: &SearchConfig) -> std::result::Result<Self, NotFound> {
        let search = config.library("cuBLAS", &CUBLAS_LIBRARY_NAMES, &CUBLAS_WHEEL_DIRS);
        let (opened, _) = search.open(|lib, _| check_symbols(lib, &CublasApi::REQUIRED))?;
        let lib = opened.lib;
        let table = CublasApi::bind(&lib)?;
        tracing::info!(path = %opened.path, "loaded cuBLAS");
        Ok(BlasLibrary {
            table,
            path: opened.path,
            _lib: lib,
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
    ctx: Arc<DeviceContext>,
    cc: (i32, i32),
    handle: Mutex<Option<BlasHandle>>,
}

// SAFETY: the handle is only used under the mutex, with the context made current first.
unsafe impl Send for BlasSlot {}
// SAFETY: as above.
unsafe impl Sync for BlasSlot {}

/// A gemm in cuBLAS's column-major terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ColumnMajor {
    pub transa: bool,
    pub transb: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: u64,
    pub lda: u64,
    pub stride_a: u64,
    pub b: u64,
    pub ldb: u64,
    pub stride_b: u64,
    pub c: u64,
    pub ldc: u64,
    pub stride_c: u64,
}

/// Row-major `C = op(A) op(B)` as column-major `Cᵀ = op(B)ᵀ op(A)ᵀ`.
pub(crate) fn to_column_major(g: &GemmLaunch) -> ColumnMajor {
    ColumnMajor {
        transa: g.trans_b,
        transb: g.trans_a,
        m: g.n,
        n: g.m,
        k: g.k,
        a: g.b.0,
        lda: g.ldb,
        stride_a: g.stride_b,
        b: g.a.0,
        ldb: g.lda,
        stride_b: g.stride_a,
        c: g.c.0,
        ldc: g.ldc,
        stride_c: g.stride_c,
    }
}

/// Elements one operand needs (as validated for the thunk).
fn needed(rows: u64, cols: u64, ld: u64, batch: u64, stride: u64) -> Option<u64> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    let one = (rows - 1).checked_mul(ld)?.checked_add(cols)?;
    batch.checked_sub(1)?.checked_mul(stride)?.checked_add(one)
}

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

    /// Checks the operands against the device's live allocations and the shapes.
    fn check(g: &GemmLaunch, memory: &MemoryRegistry) -> Result<()> {
        let es = g.dtype.size() as u64;
        if g.batch == 0 {
            return Err(Error::InvalidArgument("gemm batch count is 0".into()));
        }
        let (ar, ac) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
        let (br, bc) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
        let mut regions = vec![];
        for (name, ptr, len, rows, cols, ld, stride) in [
            ("a", g.a, g.a_len, ar, ac, g.lda, g.stride_a),
            ("b", g.b, g.b_len, br, bc, g.ldb, g.stride_b),
            ("c", g.c, g.c_len, g.m, g.n, g.ldc, g.stride_c),
        ] {
            let r = memory.region(ptr, len)?;
            if ld < cols {
                return Err(Error::InvalidArgument(format!(
                    "gemm: ld{name} {ld} < {cols} columns"
                )));
            }
            match needed(rows, cols, ld, g.batch, stride).and_then(|n| n.checked_mul(es)) {
                Some(n) if n <= len => {}
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "gemm: operand {name} ({len} bytes) is smaller than its shape needs"
                    )));
                }
            }
            if r.addr() % es != 0 {
                return Err(Error::InvalidArgument(format!(
                    "gemm: operand {name} is not aligned to {}",
                    g.dtype
                )));
            }
            regions.push(r);
        }
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
        let cm = to_column_major(g);
        // With k = 0 nothing of A or B is read; cuBLAS still wants legal leading dimensions.
        let (min_lda, min_ldb) = (
            if cm.transa { cm.k } else { cm.m }.max(1),
            if cm.transb { cm.n } else { cm.k }.max(1),
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
            cm.a as usize as *const c_void,
            cm.b as usize as *const c_void,
            cm.c as usize as *mut c_void,
        );
        if g.batch == 1 {
            // SAFETY: the operands were checked to lie inside live allocations with the sizes
            // their shapes need, aligned, C not overlapping A or B; alpha and beta point at
            // host scalars of the compute type that outlive the call (cuBLAS reads them
            // before returning in host pointer mode).
            cublas("cublasGemmEx", unsafe {
                (lib.table.gemm_ex)(
                    h.raw,
                    op(cm.transa),
                    op(cm.transb),
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
                    op(cm.transa),
                    op(cm.transb),
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

#[cfg(test)]
mod tests {
    use super::*;
    use xthunk_core::backend::DevicePtr;

    /// Column-major gemm as cuBLAS defines it, on f64 slices indexed from 0.
    #[allow(clippy::too_many_arguments)]
    fn cublas_reference(
        transa: bool,
        transb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        c: &mut [f64],
        ldc: usize,
    ) {
        for j in 0..n {
            for i in 0..m {
                let mut s = 0.0;
                for p in 0..k {
                    let av = if transa {
                        a[p + i * lda]
                    } else {
                        a[i + p * lda]
                    };
                    let bv = if transb {
                        b[j + p * ldb]
                    } else {
                        b[p + j * ldb]
                    };
                    s += av * bv;
                }
                c[i + j * ldc] = s;
            }
        }
    }

    #[test]
    fn row_major_maps_to_column_major() {
        let (m, n, k) = (3usize, 4usize, 5usize);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            // Stored shapes (row-major) with padded leading dimensions.
            let (ar, ac) = if ta { (k, m) } else { (m, k) };
            let (br, bc) = if tb { (n, k) } else { (k, n) };
            let (lda, ldb, ldc) = (ac + 2, bc + 1, n + 3);
            let a: Vec<f64> = (0..ar * lda).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..br * ldb).map(|i| (i as f64 * 0.11).cos()).collect();
            // The row-major definition.
            let at = |i: usize, p: usize| if ta { a[p * lda + i] } else { a[i * lda + p] };
            let bt = |p: usize, j: usize| if tb { b[j * ldb + p] } else { b[p * ldb + j] };
            let mut want = vec![0.0; m * ldc];
            for i in 0..m {
                for j in 0..n {
                    want[i * ldc + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
                }
            }
            let g = GemmLaunch {
                a: DevicePtr(1),
                b: DevicePtr(2),
                c: DevicePtr(3),
                a_len: 0,
                b_len: 0,
                c_len: 0,
                m: m as u64,
                n: n as u64,
                k: k as u64,
                lda: lda as u64,
                ldb: ldb as u64,
                ldc: ldc as u64,
                trans_a: ta,
                trans_b: tb,
                alpha: 1.0,
                beta: 0.0,
                dtype: DType::F64,
                batch: 1,
                stride_a: 0,
                stride_b: 0,
                stride_c: 0,
            };
            let cm = to_column_major(&g);
            assert_eq!((cm.a, cm.b, cm.c), (2, 1, 3));
            let first = if cm.a == 2 { &b } else { &a };
            let second = if cm.b == 1 { &a } else { &b };
            let mut got = vec![0.0; m * ldc];
            cublas_reference(
                cm.transa,
                cm.transb,
                cm.m as usize,
                cm.n as usize,
                cm.k as usize,
                first,
                cm.lda as usize,
                second,
                cm.ldb as usize,
                &mut got,
                cm.ldc as usize,
            );
            for i in 0..m {
                for j in 0..n {
                    let (x, y) = (got[i * ldc + j], want[i * ldc + j]);
                    assert!(
                        (x - y).abs() < 1e-12,
                        "ta={ta} tb={tb} ({i},{j}): {x} vs {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn operand_extents() {
        assert_eq!(needed(2, 3, 4, 1, 0), Some(7));
        assert_eq!(needed(2, 3, 4, 3, 10), Some(27));
        assert_eq!(needed(0, 3, 4, 3, 10), Some(0));
        assert_eq!(needed(2, 3, 4, 0, 10), None);
    }
}
