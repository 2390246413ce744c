//! Element-wise reductions over raw host memory, blocked for the cache: the inner loop of the
//! host all-reduce and reduce-scatter.
//!
//! For each block of [`BLOCK_BYTES`], the first input is copied into an accumulator that stays
//! in L1, every other input is combined into it, and the result is stored to every output, so
//! that each input byte is read once and each output byte written once. f16 and bf16 are
//! accumulated in f32 (converted with `half`'s vectorized slice conversions) and rounded once,
//! to nearest even. Integers wrap on overflow (as NCCL's do). Float min/max follow IEEE
//! `minNum`/`maxNum` (Rust's `f32::min`/`max`: a NaN operand is ignored unless both are NaN).
//! The order of combination is fixed (rank 0, 1, …), so every rank gets identical bits.
//!
//! Large outputs are written with non-temporal stores on x86-64 (as `memcpy` does for copies
//! larger than the caches), which saves the read-for-ownership of every output line.

use crate::collectives::ReduceOp;
use crate::error::{Error, Result};
use crate::ir::DType;
use half::{bf16, f16, slice::HalfFloatSliceExt};
use std::ptr;
use std::sync::OnceLock;

/// Bytes of accumulator per block (f32 for the half types).
pub(crate) const BLOCK_BYTES: usize = 16 * 1024;

/// Whether an operation that writes `bytes` in all (every rank together) should bypass the
/// caches: when its outputs cannot stay in the last-level cache anyway — more than 3/4 of it,
/// the threshold glibc's `memcpy` uses — streaming stores save the read-for-ownership of every
/// output line; below, plain stores leave the result in cache for whoever reads it next.
pub(crate) fn nontemporal(bytes: usize) -> bool {
    static THRESHOLD: OnceLock<usize> = OnceLock::new();
    bytes >= *THRESHOLD.get_or_init(|| last_level_cache().unwrap_or(32 << 20) / 4 * 3)
}

/// The size of the largest CPU cache (Linux sysfs), if known.
fn last_level_cache() -> Option<usize> {
    (0..8)
        .filter_map(|i| {
            let s = std::fs::read_to_string(format!(
                "/sys/devices/system/cpu/cpu0/cache/index{i}/size"
            ))
            .ok()?;
            let s = s.trim();
            let (num, mul) = match s.strip_suffix('K') {
                Some(n) => (n, 1 << 10),
                None => match s.strip_suffix('M') {
                    Some(n) => (n, 1 << 20),
                    None => (s, 1),
                },
            };
            num.parse::<usize>().ok().map(|v| v * mul)
        })
        .max()
}

/// `outputs[j][i] = op over k of inputs[k][i]` for `i < n` elements of `dtype`, every `j`.
///
/// # Safety
/// Every input must be valid for reading and every output for writing `n * dtype.size()`
/// bytes (no alignment needed). During the call no other thread may write any input or touch
/// any output. An output may be identical to an input (in place) — each block is read in
/// full before it is written — but must not partially overlap one.
pub(crate) unsafe fn reduce(
    dtype: DType,
    op: ReduceOp,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    nontemporal: bool,
) -> Result<()> {
    if inputs.is_empty() {
        return Err(Error::InvalidArgument("a reduction needs an input".into()));
    }
    let st = Store { nontemporal };
    // SAFETY: (every arm) forwarded from this function's contract.
    unsafe {
        match dtype {
            DType::Pred => {
                // 0/1 bytes: sum and max are OR, product and min are AND.
                let op = match op {
                    ReduceOp::Sum | ReduceOp::Max => ReduceOp::Max,
                    ReduceOp::Prod | ReduceOp::Min => ReduceOp::Min,
                };
                native::<u8>(op, inputs, outputs, n, st)
            }
            DType::I8 => native::<i8>(op, inputs, outputs, n, st),
            DType::U8 => native::<u8>(op, inputs, outputs, n, st),
            DType::I32 => native::<i32>(op, inputs, outputs, n, st),
            DType::I64 => native::<i64>(op, inputs, outputs, n, st),
            DType::I16 => native::<i16>(op, inputs, outputs, n, st),
            DType::U16 => native::<u16>(op, inputs, outputs, n, st),
            DType::U32 => native::<u32>(op, inputs, outputs, n, st),
            DType::U64 => native::<u64>(op, inputs, outputs, n, st),
            DType::F32 => native::<f32>(op, inputs, outputs, n, st),
            DType::F64 => native::<f64>(op, inputs, outputs, n, st),
            DType::F16 => halfs::<f16>(op, inputs, outputs, n, st),
            DType::BF16 => halfs::<bf16>(op, inputs, outputs, n, st),
            // Not collective types (the verifier refuses them, `COLLECTIVE_DTYPES`).
            DType::C64 | DType::C128 | DType::F8E4M3FN | DType::F8E5M2 => {
                return Err(Error::Unsupported {
                    backend: "host".into(),
                    feature: format!("{dtype} reductions in collectives"),
                });
            }
        }
    }
    st.finish();
    Ok(())
}

/// A machine type reduced in its own width.
trait Native: Copy + Default + 'static {
    fn sum(a: Self, b: Self) -> Self;
    fn prod(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
}

macro_rules! native_int {
    ($($t:ty),*) => {$(
        impl Native for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
        }
    )*};
}
native_int!(i8, u8, i16, u16, i32, u32, i64, u64);

macro_rules! native_float {
    ($($t:ty),*) => {$(
        impl Native for $t {
            #[inline(always)]
            fn sum(a: Self, b: Self) -> Self { a + b }
            #[inline(always)]
            fn prod(a: Self, b: Self) -> Self { a * b }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { <$t>::min(a, b) }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { <$t>::max(a, b) }
        }
    )*};
}
native_float!(f32, f64);

/// `acc[i] = f(acc[i], src[i])`.
///
/// # Safety
/// `src` is valid for reading `acc.len()` elements (any alignment).
#[inline(always)]
unsafe fn combine<T: Copy>(acc: &mut [T], src: *const T, f: impl Fn(T, T) -> T) {
    for (i, a) in acc.iter_mut().enumerate() {
        // SAFETY: `i < acc.len()`, for which `src` is readable (caller); unaligned reads are
        // allowed.
        let x = unsafe { src.add(i).read_unaligned() };
        *a = f(*a, x);
    }
}

unsafe fn native<T: Native>(
    op: ReduceOp,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    st: Store,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (just checked); the rest is forwarded from `reduce`.
        unsafe { native_avx2::<T>(op, inputs, outputs, n, st) };
        return;
    }
    // SAFETY: forwarded from `reduce`.
    unsafe { native_ops::<T>(op, inputs, outputs, n, st) }
}

/// [`native_ops`] compiled for AVX2 (the inlined loops vectorize 256 bits wide).
///
/// # Safety
/// As [`reduce`], on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn native_avx2<T: Native>(
    op: ReduceOp,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    st: Store,
) {
    // SAFETY: forwarded.
    unsafe { native_ops::<T>(op, inputs, outputs, n, st) }
}

#[inline(always)]
unsafe fn native_ops<T: Native>(
    op: ReduceOp,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    st: Store,
) {
    // SAFETY: (every arm) forwarded from `reduce`. One monomorphic loop per operator, so that
    // the compiler vectorizes it.
    unsafe {
        match op {
            ReduceOp::Sum => native_with::<T>(inputs, outputs, n, st, T::sum),
            ReduceOp::Prod => native_with::<T>(inputs, outputs, n, st, T::prod),
            ReduceOp::Min => native_with::<T>(inputs, outputs, n, st, T::min),
            ReduceOp::Max => native_with::<T>(inputs, outputs, n, st, T::max),
        }
    }
}

/// `acc[i] = f(a[i], b[i])`.
///
/// # Safety
/// `a` and `b` are valid for reading `acc.len()` elements (any alignment).
#[inline(always)]
unsafe fn pair<T: Copy>(acc: &mut [T], a: *const T, b: *const T, f: impl Fn(T, T) -> T) {
    for (i, x) in acc.iter_mut().enumerate() {
        // SAFETY: `i < acc.len()`, for which both are readable (caller).
        let (p, q) = unsafe { (a.add(i).read_unaligned(), b.add(i).read_unaligned()) };
        *x = f(p, q);
    }
}

#[inline(always)]
unsafe fn native_with<T: Native>(
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    st: Store,
    f: impl Fn(T, T) -> T + Copy,
) {
    let size = size_of::<T>();
    let block = (BLOCK_BYTES / size).max(1);
    let mut acc: Vec<T> = vec![T::default(); block.min(n)];
    let (first, rest) = match inputs.split_first() {
        Some(x) => x,
        None => return,
    };
    let mut off = 0;
    while off < n {
        let len = block.min(n - off);
        let a = &mut acc[..len];
        let bytes = off * size;
        // SAFETY: inputs and outputs hold `n * size` bytes (caller) and `off + len <= n`; the
        // accumulator is a distinct, properly sized local buffer.
        unsafe {
            match rest.split_first() {
                Some((second, others)) => {
                    pair(
                        a,
                        first.add(bytes).cast::<T>(),
                        second.add(bytes).cast::<T>(),
                        f,
                    );
                    for src in others {
                        combine(a, src.add(bytes).cast::<T>(), f);
                    }
                }
                None => ptr::copy_nonoverlapping(
                    first.add(bytes),
                    a.as_mut_ptr().cast::<u8>(),
                    len * size,
                ),
            }
            for dst in outputs {
                st.store(dst.add(bytes), a.as_ptr().cast::<u8>(), len * size);
            }
        }
        off += len;
    }
}

/// A 16-bit float accumulated in f32.
trait Half: Copy + Default + 'static {
    fn to_f32s(src: &[Self], dst: &mut [f32]);
    fn from_f32s(src: &[f32], dst: &mut [Self]);
}

impl Half for f16 {
    fn to_f32s(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn from_f32s(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
}

impl Half for bf16 {
    fn to_f32s(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn from_f32s(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
}

unsafe fn halfs<H: Half>(
    op: ReduceOp,
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    st: Store,
) {
    // SAFETY: (every arm) forwarded from `reduce`.
    unsafe {
        match op {
            ReduceOp::Sum => halfs_with::<H>(inputs, outputs, n, st, f32::sum),
            ReduceOp::Prod => halfs_with::<H>(inputs, outputs, n, st, f32::prod),
            ReduceOp::Min => halfs_with::<H>(inputs, outputs, n, st, <f32 as Native>::min),
            ReduceOp::Max => halfs_with::<H>(inputs, outputs, n, st, <f32 as Native>::max),
        }
    }
}

#[inline(always)]
unsafe fn halfs_with<H: Half>(
    inputs: &[*const u8],
    outputs: &[*mut u8],
    n: usize,
    st: Store,
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    let block = (BLOCK_BYTES / 4).min(n);
    let mut raw: Vec<H> = vec![H::default(); block];
    let mut acc: Vec<f32> = vec![0.0; block];
    let mut tmp: Vec<f32> = vec![0.0; block];
    let (first, rest) = match inputs.split_first() {
        Some(x) => x,
        None => return,
    };
    let mut off = 0;
    while off < n {
        let len = block.min(n - off);
        let bytes = off * 2;
        let (r, a, t) = (&mut raw[..len], &mut acc[..len], &mut tmp[..len]);
        // SAFETY: as in `native_with`; `H` is a 2-byte plain-old-data float for which every
        // bit pattern is valid, so filling it from raw bytes is sound.
        unsafe {
            ptr::copy_nonoverlapping(first.add(bytes), r.as_mut_ptr().cast::<u8>(), len * 2);
        }
        H::to_f32s(r, a);
        for src in rest {
            // SAFETY: as above.
            unsafe {
                ptr::copy_nonoverlapping(src.add(bytes), r.as_mut_ptr().cast::<u8>(), len * 2);
            }
            H::to_f32s(r, t);
            for (x, y) in a.iter_mut().zip(t.iter()) {
                *x = f(*x, *y);
            }
        }
        H::from_f32s(a, r);
        for dst in outputs {
            // SAFETY: as above.
            unsafe { st.store(dst.add(bytes), r.as_ptr().cast::<u8>(), len * 2) };
        }
        off += len;
    }
}

/// How results are written: plain copies, or non-temporal stores for large outputs.
#[derive(Clone, Copy)]
struct Store {
    nontemporal: bool,
}

impl Store {
    /// Copies `len` bytes from `src` (a local accumulator) to `dst`.
    ///
    /// # Safety
    /// `src` readable and `dst` writable for `len` bytes, not overlapping.
    #[inline(always)]
    unsafe fn store(self, dst: *mut u8, src: *const u8, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if self.nontemporal && len >= 256 {
            // SAFETY: forwarded.
            unsafe { store_nontemporal(dst, src, len) };
            return;
        }
        // SAFETY: forwarded.
        unsafe { ptr::copy_nonoverlapping(src, dst, len) };
    }

    /// Orders the non-temporal stores before whatever the thread does next (the barrier
    /// that publishes the results to the other ranks).
    fn finish(self) {
        #[cfg(target_arch = "x86_64")]
        if self.nontemporal {
            // SAFETY: `sfence` has no preconditions; SSE is part of the x86-64 baseline.
            #[allow(unused_unsafe)]
            unsafe {
                std::arch::x86_64::_mm_sfence()
            };
        }
    }
}

/// Copies with SSE2 streaming stores (x86-64 baseline): unaligned head and tail by plain
/// copies, 16-byte aligned body by `movntdq`.
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes, not overlapping. The caller issues an
/// `sfence` before publishing the data to another thread.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = dst.align_offset(16).min(len);
    // SAFETY: every access below stays within `[0, len)` of both buffers (caller); the
    // streamed addresses `dst + i` are 16-byte aligned because `i` starts at `head`, which
    // aligns `dst`, and advances in multiples of 16; loads use the unaligned form.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b, c, e) = (
                _mm_loadu_si128(s),
                _mm_loadu_si128(s.add(1)),
                _mm_loadu_si128(s.add(2)),
                _mm_loadu_si128(s.add(3)),
            );
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            i += 64;
        }
        while i + 16 <= len {
            _mm_stream_si128(
                dst.add(i).cast::<__m128i>(),
                _mm_loadu_si128(src.add(i).cast::<__m128i>()),
            );
            i += 16;
        }
        ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn run_f32(op: ReduceOp, ins: &[Vec<f32>], nt: bool, offset: usize) -> Vec<f32> {
        let n = ins[0].len();
        // Byte buffers with an offset, to exercise unaligned access.
        let bufs: Vec<Vec<u8>> = ins
            .iter()
            .map(|v| {
                let mut b = vec![0u8; offset];
                b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
                b
            })
            .collect();
        let mut outs: Vec<Vec<u8>> = (0..2).map(|_| vec![0xAAu8; offset + n * 4]).collect();
        let ip: Vec<*const u8> = bufs.iter().map(|b| b[offset..].as_ptr()).collect();
        let op_: Vec<*mut u8> = outs.iter_mut().map(|b| b[offset..].as_mut_ptr()).collect();
        // SAFETY: test buffers of the right sizes.
        unsafe { reduce(DType::F32, op, &ip, &op_, n, nt).unwrap() };
        let a: Vec<f32> = outs[0][offset..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(outs[0], outs[1]);
        a
    }

    #[test]
    fn f32_ops_blocks_unaligned_and_streaming() {
        let n = 3 * BLOCK_BYTES / 4 + 17;
        let ins: Vec<Vec<f32>> = (0..3)
            .map(|k| {
                (0..n)
                    .map(|i| ((i * 7 + k * 13) % 29) as f32 - 14.0)
                    .collect()
            })
            .collect();
        for nt in [false, true] {
            for offset in [0, 1, 3] {
                let s = run_f32(ReduceOp::Sum, &ins, nt, offset);
                let m = run_f32(ReduceOp::Max, &ins, nt, offset);
                for i in 0..n {
                    assert_eq!(s[i], ins[0][i] + ins[1][i] + ins[2][i]);
                    assert_eq!(m[i], ins[0][i].max(ins[1][i]).max(ins[2][i]));
                }
            }
        }
    }

    #[test]
    fn in_place_and_half() {
        let n = 5000;
        let mut a: Vec<u16> = (0..n)
            .map(|i| f16::from_f32(i as f32 * 0.25).to_bits())
            .collect();
        let b: Vec<u16> = (0..n).map(|_| f16::from_f32(1.0).to_bits()).collect();
        let pa = a.as_mut_ptr().cast::<u8>();
        let ip = [pa.cast_const(), b.as_ptr().cast::<u8>()];
        let op = [pa];
        // SAFETY: in place on the first input, sizes match.
        unsafe { reduce(DType::F16, ReduceOp::Sum, &ip, &op, n, false).unwrap() };
        for (i, x) in a.iter().enumerate() {
            let want = f16::from_f32(f16::from_f32(i as f32 * 0.25).to_f32() + 1.0);
            assert_eq!(f16::from_bits(*x), want, "{i}");
        }
    }
}
