//! Host gemm: through the CPU BLAS when [`super::blas`] chose one (OpenBLAS or BLIS,
//! `cblas_sgemm`/`cblas_dgemm` row-major), else through the built-in `gemm` crate (blocked,
//! SIMD: AVX-512 kernels where the CPU has them). Either way a large gemm is cut into panels
//! of C run on the CPU workers ([`panels`], [`split_parts`]), a small one runs on the calling
//! thread. f16 and bf16 are widened to f32, multiplied with f32 accumulation (by the same f32
//! path) and rounded once when stored, which is what cuBLAS/rocBLAS do with an f32 compute
//! type. A gemm with a size past the CBLAS's 32-bit integers takes the `gemm` crate; one with
//! k = 0 only scales C by beta, in a plain loop on the calling thread.

use super::blas::{
    Api, CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS, CblasApi, CblasGemm, CpuBlas, Scipy64Api,
    SetThreads,
};
use super::memory::Region;
use crate::backend::GemmLaunch;
use crate::error::{Error, Result};
use crate::ir::DType;
use gemm::Parallelism;
use std::ffi::c_int;

fn err(msg: impl Into<String>) -> Error {
    Error::backend("host", "gemm", msg)
}

/// Reads `len` bytes of a region as `T`s (copying when unaligned).
fn load<T: bytemuck::Pod>(r: &Region) -> Vec<T> {
    // SAFETY: the region lies inside a live allocation it keeps alive; we only read it.
    let bytes = unsafe { std::slice::from_raw_parts(r.ptr(), r.len()) };
    bytes
        .chunks_exact(std::mem::size_of::<T>())
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

/// Runs a gemm on its operands' regions (`g`'s ranges, looked up: host addresses are device
/// addresses, so checking `g` checks the regions).
pub(crate) fn run(g: &GemmLaunch, a: &Region, b: &Region, c: &Region) -> Result<()> {
    run_with(g, a, b, c, super::blas::choice().blas())
}

/// [`run`] through `blas` (`None`: the `gemm` crate).
pub(crate) fn run_with(
    g: &GemmLaunch,
    a: &Region,
    b: &Region,
    c: &Region,
    blas: Option<&CpuBlas>,
) -> Result<()> {
    g.check().map_err(|e| err(e.to_string()))?;
    if g.m == 0 || g.n == 0 {
        return Ok(());
    }
    match g.dtype {
        DType::F32 => {
            // SAFETY: regions are checked for size and alignment; C does not overlap A or B
            // (checked when the gemm was queued); the stream gives exclusive use of C.
            unsafe {
                dispatch::<f32>(
                    g,
                    a.ptr() as *const f32,
                    b.ptr() as *const f32,
                    c.ptr() as *mut f32,
                    g.alpha as f32,
                    g.beta as f32,
                    blas,
                )
            }
        }
        DType::F64 => {
            // SAFETY: as for f32.
            unsafe {
                dispatch::<f64>(
                    g,
                    a.ptr() as *const f64,
                    b.ptr() as *const f64,
                    c.ptr() as *mut f64,
                    g.alpha,
                    g.beta,
                    blas,
                )
            }
        }
        DType::F16 => widened(
            g,
            a,
            b,
            c,
            |x: half::f16| x.to_f32(),
            half::f16::from_f32,
            blas,
        ),
        DType::BF16 => widened(
            g,
            a,
            b,
            c,
            |x: half::bf16| x.to_f32(),
            half::bf16::from_f32,
            blas,
        ),
        other => Err(err(format!("unsupported dtype {other}"))),
    }
}

trait Zero: Copy + Send + Sync + 'static {
    const ZERO: Self;
    fn mul(self, o: Self) -> Self;
    /// The library's `cblas_?gemm` for this type.
    fn lp64(t: &CblasApi) -> CblasGemm<Self, c_int>;
    /// numpy's OpenBLAS's `scipy_cblas_?gemm64_` for this type.
    fn ilp64(t: &Scipy64Api) -> CblasGemm<Self, i64>;
}
impl Zero for f32 {
    const ZERO: f32 = 0.0;
    fn mul(self, o: f32) -> f32 {
        self * o
    }
    fn lp64(t: &CblasApi) -> CblasGemm<f32, c_int> {
        t.cblas_sgemm
    }
    fn ilp64(t: &Scipy64Api) -> CblasGemm<f32, i64> {
        t.scipy_cblas_sgemm64_
    }
}
impl Zero for f64 {
    const ZERO: f64 = 0.0;
    fn mul(self, o: f64) -> f64 {
        self * o
    }
    fn lp64(t: &CblasApi) -> CblasGemm<f64, c_int> {
        t.cblas_dgemm
    }
    fn ilp64(t: &Scipy64Api) -> CblasGemm<f64, i64> {
        t.scipy_cblas_dgemm64_
    }
}

/// Runs the gemm through `blas` when there is one and it can take the gemm (k > 0, sizes
/// within the library's integers), else through [`native`].
///
/// # Safety
/// As [`native`].
unsafe fn dispatch<T: Zero>(
    g: &GemmLaunch,
    a: *const T,
    b: *const T,
    c: *mut T,
    alpha: T,
    beta: T,
    blas: Option<&CpuBlas>,
) -> Result<()> {
    let blas = blas.filter(|_| g.k > 0);
    let parts = blas.map_or(0, |b| split_parts(g, b.splits()));
    // A very large gemm runs on the library's own threads (which share their packed panels),
    // the thread count raised for this call only, one such call at a time.
    let library_threads = blas
        .filter(|_| parts > 0 && work(g) >= LIBRARY_THREADS_MIN_WORK)
        .and_then(|b| b.set_threads);
    let _serial = library_threads.map(|set| {
        let guard = LIBRARY_THREADS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // SAFETY: calls that change the count hold LIBRARY_THREADS; a concurrent call of
        // another stream reads either count, both of which the library supports (its
        // threaded level-3 calls serialize among themselves).
        unsafe { set.set(super::cpu::program::workers()) };
        RestoreThreads(set, guard)
    });
    let parts = if library_threads.is_some() { 0 } else { parts };
    let done = match blas.map(|b| &b.api) {
        // SAFETY: the caller's contract.
        Some(Api::Lp64(t)) => unsafe { cblas(g, T::lp64(t), a, b, c, alpha, beta, parts) },
        // SAFETY: the caller's contract.
        Some(Api::Scipy64(t)) => unsafe { cblas(g, T::ilp64(t), a, b, c, alpha, beta, parts) },
        None => false,
    };
    // SAFETY: the caller's contract.
    if done || unsafe { native(g, a, b, c, alpha, beta) } {
        Ok(())
    } else {
        Err(err(format!(
            "a {}x{}x{} gemm is too large for this platform's address space",
            g.m, g.n, g.k
        )))
    }
}

/// Runs `g` as row-major sub-gemms `run(m, n, a, b, c)` that share its `k`, leading
/// dimensions and transposes: one per batch entry on this thread (`parts` 0), or `parts` per
/// entry (panels of C's rows, or of its columns when it is wider than tall; 1: the whole
/// entry) spread over the CPU workers ([`split_parts`]). Sizes are passed as `S` (`conv`);
/// false (nothing done) when one does not convert.
///
/// # Safety
/// As [`native`]; `run` must compute the sub-gemm it is given and touch nothing else.
unsafe fn panels<T: 'static, S: Copy + Send + Sync + 'static>(
    g: &GemmLaunch,
    conv: impl Fn(u64) -> Option<S>,
    a: *const T,
    b: *const T,
    c: *mut T,
    parts: u64,
    run: impl Fn(S, S, *const T, *const T, *mut T) + Send + Sync + 'static,
) -> bool {
    // Whole multiples of 16 rows or columns but the last, so the kernels see full tiles.
    let rows = g.m >= g.n;
    let len = if rows { g.m } else { g.n };
    let panel = len.div_ceil(parts.max(1)).next_multiple_of(16).min(len);
    let per_entry = len.div_ceil(panel);
    let (Some(m), Some(n)) = (conv(g.m), conv(g.n)) else {
        return false;
    };
    let Some(sizes) = (0..per_entry)
        .map(|j| conv((len - j * panel).min(panel)))
        .collect::<Option<Vec<S>>>()
    else {
        return false;
    };
    let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
    let (ta, tb) = (g.trans_a, g.trans_b);
    let (sa, sb, sc) = (
        g.stride_a as usize,
        g.stride_b as usize,
        g.stride_c as usize,
    );
    // Addresses as integers: the pieces may run on other threads, which the caller waits for.
    let (a, b, c) = (a as usize, b as usize, c as usize);
    let pieces = (g.batch * per_entry) as usize;
    let per_entry = per_entry as usize;
    let panel = panel as usize;
    let piece = move |p: usize| {
        let (bi, j) = (p / per_entry, p % per_entry);
        let at = j * panel;
        let (pa, pb, pc) = (
            (a as *const T).wrapping_add(bi * sa),
            (b as *const T).wrapping_add(bi * sb),
            (c as *mut T).wrapping_add(bi * sc),
        );
        // Row panel: rows `at..` of op(A) (row `at` of A, or column `at` of a transposed A)
        // and of C. Column panel: columns `at..` of op(B) (column `at` of B, or row `at` of a
        // transposed B) and of C.
        if rows {
            let off_a = if ta { at } else { at * lda };
            run(
                sizes[j],
                n,
                pa.wrapping_add(off_a),
                pb,
                pc.wrapping_add(at * ldc),
            );
        } else {
            let off_b = if tb { at * ldb } else { at };
            run(m, sizes[j], pa, pb.wrapping_add(off_b), pc.wrapping_add(at));
        }
    };
    if parts == 0 {
        (0..pieces).for_each(piece);
    } else {
        super::cpu::program::parallel(pieces, piece);
    }
    true
}

/// From this many multiply-adds (a 512x512x1024 gemm) a gemm runs on the library's own
/// threads rather than split over xthunk's workers: measured on a 2-CPU virtual machine,
/// OpenBLAS's threads (which pack shared panels and stay on their CPUs) ran f32 1024^3 in
/// 8.6 ms where two independent half-size calls took 8 to 16 ms (the woken worker often
/// landed on the caller's CPU). Their spinning after the call is then amortized by its length.
const LIBRARY_THREADS_MIN_WORK: u64 = 1 << 28;
/// Serializes the calls that raise the library's thread count.
static LIBRARY_THREADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Sets the library back to one thread when dropped.
struct RestoreThreads(
    SetThreads,
    #[allow(dead_code)] std::sync::MutexGuard<'static, ()>,
);

impl Drop for RestoreThreads {
    fn drop(&mut self) {
        // SAFETY: LIBRARY_THREADS is still held (the guard drops after this).
        unsafe { self.0.set(1) };
    }
}

fn work(g: &GemmLaunch) -> u64 {
    g.m.saturating_mul(g.n).saturating_mul(g.k)
}

/// A gemm of fewer multiply-adds than this runs in one library call: splitting it would
/// cost more in waking workers than it saves.
const SPLIT_MIN_WORK: u64 = 1 << 23;
/// Pieces per worker of a split gemm: more pieces than workers, so that a worker busy with
/// another stream's launch, or slow to wake, joins late instead of leaving its one piece to
/// the caller's end.
const PIECES_PER_WORKER: u64 = 2;
/// Each piece of a split gemm does at least this many multiply-adds (each piece packs its
/// panels again: a 256^3 gemm in 8 pieces ran below one thread's rate).
const SPLIT_PIECE_WORK: u64 = 1 << 22;

/// How xthunk runs `g` over its CPU workers when it splits the library's gemms (`split`):
/// 0 for one call per batch entry on the calling thread (a small gemm, one worker, or no
/// split), else the pieces each batch entry is cut into (1: whole entries), the batch's
/// pieces then spread over the workers: about [`PIECES_PER_WORKER`] per worker, each of at
/// least [`SPLIT_PIECE_WORK`] multiply-adds where the entry allows.
pub(crate) fn split_parts(g: &GemmLaunch, split: bool) -> u64 {
    let workers = super::cpu::program::workers() as u64;
    let work = work(g);
    if !split || workers < 2 || work.saturating_mul(g.batch) < SPLIT_MIN_WORK {
        return 0;
    }
    let want = workers * PIECES_PER_WORKER;
    if g.batch >= want {
        return 1;
    }
    want.div_ceil(g.batch.max(1))
        .min(work / SPLIT_PIECE_WORK)
        .clamp(1, g.m.max(g.n))
}

/// One `cblas_?gemm` call, row-major: C (m×n, ldc) = alpha·op(A)·op(B) + beta·C.
struct Call<T, I> {
    f: CblasGemm<T, I>,
    trans_a: bool,
    trans_b: bool,
    k: I,
    lda: I,
    ldb: I,
    ldc: I,
    alpha: T,
    beta: T,
}

impl<T: Copy, I: Copy> Call<T, I> {
    /// # Safety
    /// `a`, `b`, `c` and `m`, `n` must describe a sub-gemm inside operands the caller checked;
    /// nothing else may touch that part of C meanwhile.
    unsafe fn run(&self, m: I, n: I, a: *const T, b: *const T, c: *mut T) {
        let op = |t: bool| if t { CBLAS_TRANS } else { CBLAS_NO_TRANS };
        // SAFETY: the caller's contract; CBLAS reads op(A) and op(B) and writes C only within
        // the row-major shapes and leading dimensions given, and with beta = 0 it does not
        // read C (which may hold NaN poison): it stores beta·C as zeros, as BLAS specifies.
        unsafe {
            (self.f)(
                CBLAS_ROW_MAJOR,
                op(self.trans_a),
                op(self.trans_b),
                m,
                n,
                self.k,
                self.alpha,
                a,
                self.lda,
                b,
                self.ldb,
                self.beta,
                c,
                self.ldc,
            );
        }
    }
}

/// Runs the gemm through a row-major `cblas_?gemm` with sizes of type `I`, in the pieces
/// [`panels`] makes of it; false (nothing done) when a size does not fit in `I`.
///
/// # Safety
/// As [`native`]; `f` must be the library's gemm for `T` with integers `I`.
#[allow(clippy::too_many_arguments)]
unsafe fn cblas<T: Zero + Send + Sync, I: TryFrom<u64> + Copy + Send + Sync + 'static>(
    g: &GemmLaunch,
    f: CblasGemm<T, I>,
    a: *const T,
    b: *const T,
    c: *mut T,
    alpha: T,
    beta: T,
    parts: u64,
) -> bool {
    let i = |v: u64| I::try_from(v).ok();
    let (Some(k), Some(lda), Some(ldb), Some(ldc)) = (i(g.k), i(g.lda), i(g.ldb), i(g.ldc)) else {
        return false;
    };
    let call = Call {
        f,
        trans_a: g.trans_a,
        trans_b: g.trans_b,
        k,
        lda,
        ldb,
        ldc,
        alpha,
        beta,
    };
    // SAFETY: the caller's contract; each piece is a sub-gemm inside a batch entry of the
    // checked operands, pieces write disjoint parts of C, and `panels` waits for them all.
    unsafe {
        panels(g, i, a, b, c, parts, move |m, n, a, b, c| {
            call.run(m, n, a, b, c)
        })
    }
}

/// The built-in `gemm` crate: C = alpha·op(A)·op(B) + beta·C, split over the CPU workers as
/// the library's gemms are ([`split_parts`]), each piece on one thread. False (nothing done)
/// when a size does not fit `usize`.
///
/// # Safety
/// `a`, `b`, `c` must be valid for the shapes, strides and batch of `g`; `c` must not overlap
/// `a` or `b` and must not be accessed by anyone else during the call.
unsafe fn native<T: Zero>(
    g: &GemmLaunch,
    a: *const T,
    b: *const T,
    c: *mut T,
    alpha: T,
    beta: T,
) -> bool {
    if g.k == 0 {
        for bi in 0..g.batch as usize {
            for i in 0..g.m as usize {
                for j in 0..g.n as usize {
                    // SAFETY: (i, j) of batch entry bi is inside C (checked against its size).
                    unsafe {
                        let p = c.add(bi * g.stride_c as usize + i * g.ldc as usize + j);
                        *p = if g.beta == 0.0 {
                            T::ZERO
                        } else {
                            (*p).mul(beta)
                        };
                    }
                }
            }
        }
        return true;
    }
    // Row and column strides of op(A), op(B) and C (row-major, with leading dimensions):
    // `gemm` takes any strides.
    let strides = |trans: bool, ld: u64| -> (isize, isize) {
        if trans {
            (1, ld as isize)
        } else {
            (ld as isize, 1)
        }
    };
    let (a_rs, a_cs) = strides(g.trans_a, g.lda);
    let (b_rs, b_cs) = strides(g.trans_b, g.ldb);
    let c_rs = g.ldc as isize;
    let k = g.k as usize;
    let read_c = g.beta != 0.0;
    let run = move |m: usize, n: usize, a: *const T, b: *const T, c: *mut T| {
        // SAFETY: a sub-gemm inside the checked operands (`panels`); `gemm` computes
        // dst := alpha·dst + beta·lhs·rhs, so our alpha/beta swap places, and dst is not read
        // when our beta is 0 (it may hold NaN poison).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c,
                1,
                c_rs,
                read_c,
                a,
                a_cs,
                a_rs,
                b,
                b_cs,
                b_rs,
                beta,
                alpha,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    };
    let parts = split_parts(g, true);
    // SAFETY: the caller's contract.
    unsafe { panels(g, |v| usize::try_from(v).ok(), a, b, c, parts, run) }
}

fn widened<H: bytemuck::Pod>(
    g: &GemmLaunch,
    a: &Region,
    b: &Region,
    c: &Region,
    to: impl Fn(H) -> f32,
    from: impl Fn(f32) -> H,
    blas: Option<&CpuBlas>,
) -> Result<()> {
    let af: Vec<f32> = load::<H>(a).into_iter().map(&to).collect();
    let bf: Vec<f32> = load::<H>(b).into_iter().map(&to).collect();
    let ch: Vec<H> = load::<H>(c);
    let mut cf: Vec<f32> = if g.beta != 0.0 {
        ch.iter().map(|x| to(*x)).collect()
    } else {
        vec![0.0; ch.len()]
    };
    // SAFETY: the f32 copies have the same element counts as the checked operands.
    unsafe {
        dispatch::<f32>(
            g,
            af.as_ptr(),
            bf.as_ptr(),
            cf.as_mut_ptr(),
            g.alpha as f32,
            g.beta as f32,
            blas,
        )?;
    }
    let es = std::mem::size_of::<H>();
    for bi in 0..g.batch as usize {
        for i in 0..g.m as usize {
            for j in 0..g.n as usize {
                let idx = bi * g.stride_c as usize + i * g.ldc as usize + j;
                let v = from(cf[idx]);
                // SAFETY: idx is inside C (checked); unaligned write of a Pod value.
                unsafe {
                    std::ptr::write_unaligned(c.ptr().add(idx * es) as *mut H, v);
                }
            }
        }
    }
    Ok(())
}
