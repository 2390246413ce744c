//! Gemm through rocBLAS (`librocblas.so.*`, loaded at run time: its absence disables gemm,
//! not the backend).
//!
//! The IR's gemm is row-major; rocBLAS is column-major. A row-major `m×n` matrix with row
//! stride `ld` is, read column-major, its transpose (`n×m`, leading dimension `ld`). So
//! `C = op(A)·op(B)` is computed as `Cᵀ = op(B)ᵀ·op(A)ᵀ`: rocBLAS gets `m' = n`, `n' = m`,
//! `A' = B` (transposed iff `trans_b`), `B' = A` (transposed iff `trans_a`), and `C` as is
//! ([`xthunk_core::ir::Gemm::column_major`]).
//! f16 and bf16 use f32 compute (alpha and beta are f32), f32 uses f32, f64 uses f64.

use crate::context::DeviceContext;
use crate::loader::{LoadError, ROCBLAS_LIBRARY_NAMES, RocblasApi, SearchConfig};
use crate::result::{self, unsupported};
use crate::sys;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xthunk_core::backend::GemmLaunch;
use xthunk_core::backend::dylib::{Loader, Probe, Version};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// A loaded rocBLAS.
pub(crate) struct BlasLibrary {
    pub(crate) api: RocblasApi,
    pub(crate) path: PathBuf,
    pub(crate) version: String,
}

impl BlasLibrary {
    /// Loads rocBLAS (the HIP runtime's folder first). rocBLAS 2.x (ROCm 5) and later have
    /// the `gemm_ex` signatures declared in [`crate::sys`].
    pub(crate) fn load(
        config: &SearchConfig,
        sibling: Option<&Path>,
    ) -> Result<BlasLibrary, LoadError> {
        let candidates = config.candidates(ROCBLAS_LIBRARY_NAMES, sibling);
        let loaded = Loader::new("rocBLAS").load(&candidates, |api: &RocblasApi| {
            let version = version_string(api);
            let major = version
                .split('.')
                .next()
                .and_then(|m| m.trim().parse::<u32>().ok());
            match major {
                Some(m) if m < 2 => Err(format!(
                    "rocBLAS {version} is too old (its gemm_ex takes a workspace; 2.0 or later needed)"
                )),
                _ => Ok(Probe::with(Version::parse_leading(&version), version)),
            }
        })?;
        let (api, path, version) = (loaded.table, loaded.path, loaded.extra);
        tracing::info!(path = %path.display(), %version, "loaded rocBLAS");
        Ok(BlasLibrary { api, path, version })
    }
}

fn version_string(api: &RocblasApi) -> String {
    let (Some(size_f), Some(get_f)) = (
        api.rocblas_get_version_string_size,
        api.rocblas_get_version_string,
    ) else {
        return "unknown".into();
    };
    let mut len = 0usize;
    // SAFETY: writes one size_t.
    if unsafe { size_f(&mut len) } != sys::rocblas_status_success || len == 0 || len > 4096 {
        return "unknown".into();
    }
    let mut buf = vec![0u8; len + 1];
    // SAFETY: `buf` holds `len` bytes (plus one), as rocBLAS asked for.
    if unsafe { get_f(buf.as_mut_ptr().cast(), len) } != sys::rocblas_status_success {
        return "unknown".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

/// A rocBLAS handle bound to one stream, destroyed on drop.
pub(crate) struct BlasHandle {
    lib: Arc<BlasLibrary>,
    raw: sys::rocblas_handle,
}

// SAFETY: a rocblas_handle may move between threads; the stream uses it under a mutex, so it
// is never used by two threads at once.
unsafe impl Send for BlasHandle {}

impl BlasHandle {
    /// A handle on the device of `ctx` whose work goes to `stream`, with alpha/beta read from the host.
    pub(crate) fn new(
        lib: Arc<BlasLibrary>,
        ctx: &DeviceContext,
        stream: sys::hipStream_t,
    ) -> Result<Self> {
        ctx.bind()?;
        let mut raw: sys::rocblas_handle = std::ptr::null_mut();
        // SAFETY: writes one handle; the device is current on this thread.
        let rc = unsafe { (lib.api.rocblas_create_handle)(&mut raw) };
        result::rocblas("rocblas_create_handle", rc)?;
        let h = BlasHandle { lib, raw };
        // SAFETY: `h.raw` is a live handle and `stream` a live stream of the same device.
        let rc = unsafe { (h.lib.api.rocblas_set_stream)(h.raw, stream) };
        result::rocblas("rocblas_set_stream", rc)?;
        // SAFETY: `h.raw` is a live handle.
        let rc =
            unsafe { (h.lib.api.rocblas_set_pointer_mode)(h.raw, sys::rocblas_pointer_mode_host) };
        result::rocblas("rocblas_set_pointer_mode", rc)?;
        Ok(h)
    }

    /// Runs a planned gemm.
    pub(crate) fn run(&self, p: &GemmPlan) -> Result<()> {
        let api = &self.lib.api;
        let (alpha, beta): (*const c_void, *const c_void) = match (&p.alpha, &p.beta) {
            (Scale::F32(a), Scale::F32(b)) => ((a as *const f32).cast(), (b as *const f32).cast()),
            (Scale::F64(a), Scale::F64(b)) => ((a as *const f64).cast(), (b as *const f64).cast()),
            _ => {
                return Err(Error::InvalidArgument(
                    "gemm alpha and beta differ in type".into(),
                ));
            }
        };
        let (a, b, c) = (
            p.a as usize as *const c_void,
            p.b as usize as *const c_void,
            p.c as usize as *mut c_void,
        );
        if p.batch == 1 {
            // SAFETY: the handle is live and bound to this device's stream; the matrices lie
            // inside live allocations (checked by the caller against `plan`'s extents);
            // `alpha`/`beta` point to host values of the compute type (pointer mode host),
            // read before the call returns. D is C (in place), with C's leading dimension.
            let rc = unsafe {
                (api.rocblas_gemm_ex)(
                    self.raw,
                    p.op_a,
                    p.op_b,
                    p.m,
                    p.n,
                    p.k,
                    alpha,
                    a,
                    p.ab_type,
                    p.lda,
                    b,
                    p.ab_type,
                    p.ldb,
                    beta,
                    c,
                    p.c_type,
                    p.ldc,
                    c,
                    p.c_type,
                    p.ldc,
                    p.compute_type,
                    sys::rocblas_gemm_algo_standard,
                    0,
                    0,
                )
            };
            result::rocblas("rocblas_gemm_ex", rc)
        } else {
            // SAFETY: as above, for `batch` matrices at the given strides (all checked).
            let rc = unsafe {
                (api.rocblas_gemm_strided_batched_ex)(
                    self.raw,
                    p.op_a,
                    p.op_b,
                    p.m,
                    p.n,
                    p.k,
                    alpha,
                    a,
                    p.ab_type,
                    p.lda,
                    p.stride_a,
                    b,
                    p.ab_type,
                    p.ldb,
                    p.stride_b,
                    beta,
                    c,
                    p.c_type,
                    p.ldc,
                    p.stride_c,
                    c,
                    p.c_type,
                    p.ldc,
                    p.stride_c,
                    p.batch,
                    p.compute_type,
                    sys::rocblas_gemm_algo_standard,
                    0,
                    0,
                )
            };
            result::rocblas("rocblas_gemm_strided_batched_ex", rc)
        }
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live handle, destroyed once here.
        let rc = unsafe { (self.lib.api.rocblas_destroy_handle)(self.raw) };
        if rc != sys::rocblas_status_success {
            tracing::warn!("rocblas_destroy_handle: {}", result::rocblas_describe(rc));
        }
    }
}

/// alpha or beta in the compute type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scale {
    F32(f32),
    F64(f64),
}

/// A column-major rocBLAS call computing a row-major IR gemm.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GemmPlan {
    pub(crate) op_a: sys::rocblas_operation,
    pub(crate) op_b: sys::rocblas_operation,
    pub(crate) m: i32,
    pub(crate) n: i32,
    pub(crate) k: i32,
    /// Address of rocBLAS' A (the IR's B).
    pub(crate) a: u64,
    pub(crate) lda: i32,
    pub(crate) stride_a: i64,
    /// Address of rocBLAS' B (the IR's A).
    pub(crate) b: u64,
    pub(crate) ldb: i32,
    pub(crate) stride_b: i64,
    pub(crate) c: u64,
    pub(crate) ldc: i32,
    pub(crate) stride_c: i64,
    pub(crate) batch: i32,
    pub(crate) ab_type: sys::rocblas_datatype,
    pub(crate) c_type: sys::rocblas_datatype,
    pub(crate) compute_type: sys::rocblas_datatype,
    pub(crate) alpha: Scale,
    pub(crate) beta: Scale,
}

/// Plans a gemm: the dtype mapping, the shape check ([`xthunk_core::ir::Gemm::check`]), the
/// row-major → column-major swap and the 32-bit limits. `None` when there is nothing to do.
pub(crate) fn plan(g: &GemmLaunch) -> Result<Option<GemmPlan>> {
    let (ab_type, compute_type) = match g.dtype {
        DType::F32 => (sys::rocblas_datatype_f32_r, sys::rocblas_datatype_f32_r),
        DType::F64 => (sys::rocblas_datatype_f64_r, sys::rocblas_datatype_f64_r),
        DType::F16 => (sys::rocblas_datatype_f16_r, sys::rocblas_datatype_f32_r),
        DType::BF16 => (sys::rocblas_datatype_bf16_r, sys::rocblas_datatype_f32_r),
        other => return Err(unsupported(format!("{other} gemm"))),
    };
    let bad = |m: String| Error::InvalidArgument(format!("gemm: {m}"));
    g.check().map_err(|e| bad(e.to_string()))?;
    if g.m == 0 || g.n == 0 {
        return Ok(None);
    }
    let i32_of = |name: &str, v: u64| {
        i32::try_from(v).map_err(|_| {
            unsupported(format!(
                "gemm with {name} = {v} (rocBLAS takes 32-bit sizes)"
            ))
        })
    };
    let i64_of = |name: &str, v: u64| {
        i64::try_from(v).map_err(|_| bad(format!("{name} = {v} is too large")))
    };
    let op = |t: bool| {
        if t {
            sys::rocblas_operation_transpose
        } else {
            sys::rocblas_operation_none
        }
    };
    let (alpha, beta) = if compute_type == sys::rocblas_datatype_f64_r {
        (Scale::F64(g.alpha), Scale::F64(g.beta))
    } else {
        (Scale::F32(g.alpha as f32), Scale::F32(g.beta as f32))
    };
    let cm = g.column_major();
    Ok(Some(GemmPlan {
        op_a: op(cm.trans_a),
        op_b: op(cm.trans_b),
        m: i32_of("n", cm.m)?,
        n: i32_of("m", cm.n)?,
        k: i32_of("k", cm.k)?,
        a: cm.a.ptr.0,
        lda: i32_of("ldb", cm.lda)?,
        stride_a: i64_of("stride_b", cm.stride_a)?,
        b: cm.b.ptr.0,
        ldb: i32_of("lda", cm.ldb)?,
        stride_b: i64_of("stride_a", cm.stride_b)?,
        c: cm.c.ptr.0,
        ldc: i32_of("ldc", cm.ldc)?,
        stride_c: i64_of("stride_c", cm.stride_c)?,
        batch: i32_of("batch", g.batch)?,
        ab_type,
        c_type: ab_type,
        compute_type,
        alpha,
        beta,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xthunk_core::backend::{DevicePtr, DeviceRange};

    /// Runs a plan the way column-major BLAS defines it, on host arrays.
    fn colmajor(p: &GemmPlan, a: &[f64], b: &[f64], c: &mut [f64]) {
        let (Scale::F64(alpha), Scale::F64(beta)) = (p.alpha, p.beta) else {
            unreachable!()
        };
        for bi in 0..p.batch as usize {
            let (oa, ob, oc) = (
                bi * p.stride_a as usize,
                bi * p.stride_b as usize,
                bi * p.stride_c as usize,
            );
            for j in 0..p.n as usize {
                for i in 0..p.m as usize {
                    let mut s = 0.0;
                    for l in 0..p.k as usize {
                        let av = if p.op_a == sys::rocblas_operation_none {
                            a[oa + i + l * p.lda as usize]
                        } else {
                            a[oa + l + i * p.lda as usize]
                        };
                        let bv = if p.op_b == sys::rocblas_operation_none {
                            b[ob + l + j * p.ldb as usize]
                        } else {
                            b[ob + j + l * p.ldb as usize]
                        };
                        s += av * bv;
                    }
                    let ci = oc + i + j * p.ldc as usize;
                    c[ci] = alpha * s + beta * c[ci];
                }
            }
        }
    }

    /// The IR's row-major definition.
    fn rowmajor(g: &GemmLaunch, a: &[f64], b: &[f64], c: &mut [f64]) {
        for bi in 0..g.batch as usize {
            for i in 0..g.m as usize {
                for j in 0..g.n as usize {
                    let mut s = 0.0;
                    for l in 0..g.k as usize {
                        let av = if g.trans_a {
                            a[bi * g.stride_a as usize + l * g.lda as usize + i]
                        } else {
                            a[bi * g.stride_a as usize + i * g.lda as usize + l]
                        };
                        let bv = if g.trans_b {
                            b[bi * g.stride_b as usize + j * g.ldb as usize + l]
                        } else {
                            b[bi * g.stride_b as usize + l * g.ldb as usize + j]
                        };
                        s += av * bv;
                    }
                    let ci = bi * g.stride_c as usize + i * g.ldc as usize + j;
                    c[ci] = g.alpha * s + g.beta * c[ci];
                }
            }
        }
    }

    #[test]
    fn the_column_major_call_computes_the_row_major_gemm() {
        let (m, n, k, batch) = (3u64, 5u64, 4u64, 2u64);
        for trans_a in [false, true] {
            for trans_b in [false, true] {
                let (ra, ca) = if trans_a { (k, m) } else { (m, k) };
                let (rb, cb) = if trans_b { (n, k) } else { (k, n) };
                let (lda, ldb, ldc) = (ca + 1, cb + 2, n + 3);
                let (sa, sb, sc) = (ra * lda + 1, rb * ldb, m * ldc + 2);
                let len = |s: u64| (s * batch) as usize;
                let a: Vec<f64> = (0..len(sa)).map(|i| (i % 7) as f64 - 3.0).collect();
                let b: Vec<f64> = (0..len(sb)).map(|i| (i % 5) as f64 * 0.5 - 1.0).collect();
                let c0: Vec<f64> = (0..len(sc)).map(|i| (i % 3) as f64).collect();
                let g = GemmLaunch {
                    a: DeviceRange {
                        ptr: DevicePtr(0x1000),
                        len: len(sa) as u64 * 8,
                    },
                    b: DeviceRange {
                        ptr: DevicePtr(0x2000),
                        len: len(sb) as u64 * 8,
                    },
                    c: DeviceRange {
                        ptr: DevicePtr(0x3000),
                        len: len(sc) as u64 * 8,
                    },
                    m,
                    n,
                    k,
                    lda,
                    ldb,
                    ldc,
                    trans_a,
                    trans_b,
                    alpha: 1.5,
                    beta: -0.5,
                    dtype: DType::F64,
                    batch,
                    stride_a: sa,
                    stride_b: sb,
                    stride_c: sc,
                };
                let p = plan(&g).ok().flatten();
                let Some(p) = p else {
                    unreachable!("no plan for {g:?}")
                };
                // rocBLAS' A is the IR's B and vice versa.
                assert_eq!((p.a, p.b, p.c), (0x2000, 0x1000, 0x3000));
                let mut want = c0.clone();
                rowmajor(&g, &a, &b, &mut want);
                let mut got = c0.clone();
                colmajor(&p, &b, &a, &mut got);
                assert_eq!(got, want, "trans_a={trans_a} trans_b={trans_b}");
            }
        }
    }

    #[test]
    fn plans_check_types_and_extents() {
        let g = GemmLaunch {
            a: DeviceRange {
                ptr: DevicePtr(0x1000),
                len: 2 * 3 * 2,
            },
            b: DeviceRange {
                ptr: DevicePtr(0x2000),
                len: 3 * 4 * 2,
            },
            c: DeviceRange {
                ptr: DevicePtr(0x3000),
                len: 2 * 4 * 2,
            },
            m: 2,
            n: 4,
            k: 3,
            lda: 3,
            ldb: 4,
            ldc: 4,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            dtype: DType::BF16,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        let p = plan(&g).ok().flatten();
        assert!(
            p.as_ref()
                .is_some_and(|p| p.ab_type == sys::rocblas_datatype_bf16_r
                    && p.compute_type == sys::rocblas_datatype_f32_r
                    && p.alpha == Scale::F32(1.0)
                    && (p.m, p.n, p.k) == (4, 2, 3))
        );
        let short = GemmLaunch {
            c: DeviceRange { len: 15, ..g.c },
            ..g
        };
        let e = plan(&short)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("c needs 16 bytes"), "{e}");
        let bad_ld = GemmLaunch { lda: 2, ..g };
        assert!(plan(&bad_ld).is_err());
        let int = GemmLaunch {
            dtype: DType::I32,
            ..g
        };
        assert!(matches!(plan(&int), Err(Error::Unsupported { .. })));
        let empty = GemmLaunch { m: 0, ..g };
        assert!(matches!(plan(&empty), Ok(None)));
        let big = |r: DeviceRange| DeviceRange { len: 1000, ..r };
        let overlap = GemmLaunch {
            batch: 2,
            stride_a: 6,
            stride_b: 12,
            stride_c: 4,
            a: big(g.a),
            b: big(g.b),
            c: big(g.c),
            ..g
        };
        let e = plan(&overlap).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("stride_c")));
        assert!(
            plan(&GemmLaunch {
                stride_c: 8,
                ..overlap
            })
            .is_ok_and(|p| p.is_some())
        );
    }
}
