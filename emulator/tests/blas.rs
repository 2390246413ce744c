//! cuBLAS and rocBLAS gemm on the host, in column-major BLAS semantics, with checked operands.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Cuda, hok, ok, serial, take};
use half::{bf16, f16};
use std::ffi::c_void;
use xthunk_emulator::diag::Kind;
use xthunk_emulator::{cublas, rocblas};

/// Column-major reference: C = alpha op(A) op(B) + beta C, in f64.
#[allow(clippy::too_many_arguments)]
fn reference(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    beta: f64,
    c: &[f64],
    ldc: usize,
) -> Vec<f64> {
    let mut out = c.to_vec();
    for j in 0..n {
        for i in 0..m {
            let mut s = 0.0;
            for p in 0..k {
                let av = if ta { a[p + i * lda] } else { a[i + p * lda] };
                let bv = if tb { b[j + p * ldb] } else { b[p + j * ldb] };
                s += av * bv;
            }
            out[i + j * ldc] = alpha * s + beta * c[i + j * ldc];
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum T {
    F16,
    BF16,
    F32,
    F64,
}

impl T {
    fn size(self) -> usize {
        match self {
            T::F16 | T::BF16 => 2,
            T::F32 => 4,
            T::F64 => 8,
        }
    }
    fn cuda(self) -> i32 {
        match self {
            T::F16 => 2,
            T::BF16 => 14,
            T::F32 => 0,
            T::F64 => 1,
        }
    }
    fn encode(self, v: &[f64]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match self {
                T::F16 => f16::from_f64(x).to_bits().to_le_bytes().to_vec(),
                T::BF16 => bf16::from_f64(x).to_bits().to_le_bytes().to_vec(),
                T::F32 => (x as f32).to_le_bytes().to_vec(),
                T::F64 => x.to_le_bytes().to_vec(),
            })
            .collect()
    }
    fn decode(self, b: &[u8]) -> Vec<f64> {
        b.chunks_exact(self.size())
            .map(|c| match self {
                T::F16 => f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
                T::BF16 => bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
                T::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                T::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            })
            .collect()
    }
    /// The values as stored (rounded to the type).
    fn round(self, v: &[f64]) -> Vec<f64> {
        self.decode(&self.encode(v))
    }
    fn tol(self) -> f64 {
        match self {
            T::F16 => 2e-2,
            T::BF16 => 8e-2,
            T::F32 => 1e-5,
            T::F64 => 1e-12,
        }
    }
}

fn values(n: usize, seed: f64) -> Vec<f64> {
    (0..n).map(|i| ((i as f64 + seed) * 0.731).sin()).collect()
}

#[test]
fn cublas_gemm_ex_matches_the_reference() {
    let _g = serial();
    let c = Cuda::new();
    let mut h = 0usize;
    // SAFETY: valid out-pointer; a context is current.
    assert_eq!(unsafe { cublas::cublasCreate_v2(&mut h) }, 0);
    let s = c.stream(false);
    assert_eq!(cublas::cublasSetStream_v2(h, s), 0);
    let (m, n, k) = (5usize, 4usize, 3usize);
    for t in [T::F32, T::F16, T::BF16, T::F64] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (ar, ac) = if ta { (k, m) } else { (m, k) };
            let (br, bc) = if tb { (n, k) } else { (k, n) };
            let (lda, ldb, ldc) = (ar + 1, br + 2, m + 1);
            let a = t.round(&values(lda * ac, 1.0));
            let b = t.round(&values(ldb * bc, 2.0));
            let c0 = t.round(&values(ldc * n, 3.0));
            let (da, db, dc) = (
                c.alloc(a.len() * t.size()),
                c.alloc(b.len() * t.size()),
                c.alloc(c0.len() * t.size()),
            );
            ok(c.htod(da, &t.encode(&a)), "a");
            ok(c.htod(db, &t.encode(&b)), "b");
            ok(c.htod(dc, &t.encode(&c0)), "c");
            let (alpha, beta) = (1.5, -0.5);
            let (a32, b32) = (alpha as f32, beta as f32);
            let (ap, bp): (*const c_void, *const c_void) = match t {
                T::F64 => ((&alpha as *const f64).cast(), (&beta as *const f64).cast()),
                _ => ((&a32 as *const f32).cast(), (&b32 as *const f32).cast()),
            };
            let compute = if matches!(t, T::F64) { 70 } else { 68 };
            // SAFETY: live device operands of the sizes the shapes need; host scalars.
            let r = unsafe {
                cublas::cublasGemmEx(
                    h,
                    ta as i32,
                    tb as i32,
                    m as i32,
                    n as i32,
                    k as i32,
                    ap,
                    da as *const c_void,
                    t.cuda(),
                    lda as i32,
                    db as *const c_void,
                    t.cuda(),
                    ldb as i32,
                    bp,
                    dc as *mut c_void,
                    t.cuda(),
                    ldc as i32,
                    compute,
                    -1,
                )
            };
            assert_eq!(r, 0, "{t:?} {ta} {tb}: {:?}", xthunk_emulator::diag::take());
            ok(c.sync(s), "sync");
            let got = t.decode(&c.read(dc, c0.len() * t.size()));
            let want = reference(ta, tb, m, n, k, alpha, &a, lda, &b, ldb, beta, &c0, ldc);
            for j in 0..n {
                for i in 0..m {
                    let (x, y) = (got[i + j * ldc], want[i + j * ldc]);
                    assert!(
                        (x - y).abs() <= t.tol() * (1.0 + y.abs()),
                        "{t:?} ({i},{j}): {x} vs {y}"
                    );
                }
                // The padding rows of C are untouched.
                assert_eq!(got[m + j * ldc], c0[m + j * ldc]);
            }
            for p in [da, db, dc] {
                ok(c.free(p), "free");
            }
        }
    }
    assert_eq!(cublas::cublasDestroy_v2(h), 0);
    c.destroy_stream(s);
}

#[test]
fn cublas_strided_batched_and_checked_operands() {
    let _g = serial();
    let c = Cuda::new();
    let mut h = 0usize;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cublas::cublasCreate_v2(&mut h) }, 0);
    let (m, n, k, batch) = (2usize, 3usize, 4usize, 3usize);
    let (sa, sb, sc) = (m * k + 1, k * n, m * n + 2);
    let a = values(sa * batch, 0.5);
    let b = values(sb * batch, 1.5);
    let (da, db, dc) = (
        c.alloc(4 * a.len()),
        c.alloc(4 * b.len()),
        c.alloc(4 * sc * batch),
    );
    ok(c.htod(da, &T::F32.encode(&a)), "a");
    ok(c.htod(db, &T::F32.encode(&b)), "b");
    let (alpha, beta) = (1.0f32, 0.0f32);
    let gemm = |dc: u64, batch: i32| {
        // SAFETY: operands as allocated above; host scalars (beta 0: C is not read).
        unsafe {
            cublas::cublasGemmStridedBatchedEx(
                h,
                0,
                0,
                m as i32,
                n as i32,
                k as i32,
                (&alpha as *const f32).cast(),
                da as *const c_void,
                0,
                m as i32,
                sa as i64,
                db as *const c_void,
                0,
                k as i32,
                sb as i64,
                (&beta as *const f32).cast(),
                dc as *mut c_void,
                0,
                m as i32,
                sc as i64,
                batch,
                68,
                -1,
            )
        }
    };
    assert_eq!(gemm(dc, batch as i32), 0);
    let got = T::F32.decode(&c.read(dc, 4 * sc * batch));
    for bi in 0..batch {
        let a = T::F32.round(&a[bi * sa..bi * sa + m * k]);
        let b = T::F32.round(&b[bi * sb..bi * sb + k * n]);
        let want = reference(
            false,
            false,
            m,
            n,
            k,
            1.0,
            &a,
            m,
            &b,
            k,
            0.0,
            &vec![0.0; m * n],
            m,
        );
        for i in 0..m * n {
            assert!(
                (got[bi * sc + i] - want[i]).abs() < 1e-5,
                "batch {bi} element {i}"
            );
        }
    }
    // One batch too many overruns every operand: refused, reported with the call.
    assert_eq!(gemm(dc, batch as i32 + 1), cublas::EXECUTION_FAILED);
    let d = take(Kind::OutOfBounds);
    assert_eq!(d[0].call, "cublasGemmStridedBatchedEx");
    assert!(d[0].message.contains("operand A"), "{}", d[0].message);
    // Bad arguments.
    assert_eq!(gemm(dc, -1), cublas::INVALID_VALUE);
    let _ = take(Kind::InvalidValue);
    for p in [da, db, dc] {
        ok(c.free(p), "free");
    }
    assert_eq!(cublas::cublasDestroy_v2(h), 0);
    assert_eq!(cublas::cublasDestroy_v2(h), cublas::NOT_INITIALIZED);
    let _ = take(Kind::InvalidHandle);
}

#[test]
fn rocblas_gemm_ex_writes_d_from_c() {
    let _g = serial();
    let mut h = 0usize;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { rocblas::rocblas_create_handle(&mut h) }, 0);
    let (m, n, k) = (3usize, 2usize, 4usize);
    let a = T::F16.round(&values(m * k, 0.0));
    let b = T::F16.round(&values(k * n, 7.0));
    let c0 = values(m * n, 9.0);
    let (da, db, dc, dd) = (
        common::hip_alloc(2 * a.len()),
        common::hip_alloc(2 * b.len()),
        common::hip_alloc(4 * c0.len()),
        common::hip_alloc(4 * c0.len()),
    );
    let up = |d: usize, v: Vec<u8>| {
        hok(
            common::hip_copy(d, v.as_ptr() as usize, v.len(), 1),
            "upload",
        )
    };
    up(da, T::F16.encode(&a));
    up(db, T::F16.encode(&b));
    up(dc, T::F32.encode(&c0));
    let (alpha, beta) = (2.0f32, 1.0f32);
    // SAFETY: operands as allocated; host scalars; f16 inputs, f32 C/D and compute.
    let r = unsafe {
        rocblas::rocblas_gemm_ex(
            h,
            111,
            111,
            m as i32,
            n as i32,
            k as i32,
            (&alpha as *const f32).cast(),
            da as *const c_void,
            150,
            m as i32,
            db as *const c_void,
            150,
            k as i32,
            (&beta as *const f32).cast(),
            dc as *const c_void,
            151,
            m as i32,
            dd as *mut c_void,
            151,
            m as i32,
            151,
            0,
            0,
            0,
        )
    };
    assert_eq!(r, 0, "{:?}", xthunk_emulator::diag::take());
    let mut out = vec![0u8; 4 * c0.len()];
    hok(
        common::hip_copy(out.as_mut_ptr() as usize, dd, out.len(), 2),
        "download",
    );
    let got = T::F32.decode(&out);
    let want = reference(
        false,
        false,
        m,
        n,
        k,
        2.0,
        &a,
        m,
        &b,
        k,
        1.0,
        &T::F32.round(&c0),
        m,
    );
    for i in 0..m * n {
        assert!(
            (got[i] - want[i]).abs() < 1e-5,
            "{i}: {} vs {}",
            got[i],
            want[i]
        );
    }
    // C is unchanged.
    let mut cc = vec![0u8; 4 * c0.len()];
    hok(
        common::hip_copy(cc.as_mut_ptr() as usize, dc, cc.len(), 2),
        "download c",
    );
    assert_eq!(T::F32.decode(&cc), T::F32.round(&c0));
    // An unsupported type is "not implemented".
    // SAFETY: as above.
    let r = unsafe {
        rocblas::rocblas_gemm_ex(
            h,
            111,
            111,
            1,
            1,
            1,
            (&alpha as *const f32).cast(),
            da as *const c_void,
            160,
            1,
            db as *const c_void,
            160,
            1,
            (&beta as *const f32).cast(),
            dc as *const c_void,
            151,
            1,
            dd as *mut c_void,
            151,
            1,
            151,
            0,
            0,
            0,
        )
    };
    assert_eq!(r, rocblas::NOT_IMPLEMENTED);
    let _ = take(Kind::Unsupported);
    for p in [da, db, dc, dd] {
        hok(common::hip_free(p), "hipFree");
    }
    assert_eq!(rocblas::rocblas_destroy_handle(h), 0);
}
