//! Gemm on the host in BLAS (column-major) semantics, shared by cuBLAS and rocBLAS:
//! `D = alpha * op(A) * op(B) + beta * C` for each batch entry, with f16/bf16/f32 operands
//! computed in f32 (products summed in order of `k`, no fused multiply-add) and f64 in f64,
//! rounded to nearest even once when stored. When `beta` is 0, C is not read (BLAS rule: it
//! may hold NaN or garbage). Every operand range is checked against the live allocations
//! when queued and again when run; an output overlapping an input is refused.
//!
//! The BLAS handles and what the two libraries' gemm calls pass are in [`crate::blas`].

use crate::error::{Code, EmuResult};
use half::{bf16, f16};

/// Element types of gemm operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elt {
    F16,
    BF16,
    F32,
    F64,
}

impl Elt {
    pub fn size(self) -> usize {
        match self {
            Elt::F16 | Elt::BF16 => 2,
            Elt::F32 => 4,
            Elt::F64 => 8,
        }
    }

    /// Element `i` of the array at `base`, widened.
    ///
    /// # Safety
    /// `base + i * size` must be readable for `size` bytes.
    unsafe fn load(self, base: usize, i: usize) -> f64 {
        let p = (base + i * self.size()) as *const u8;
        // SAFETY: forwarded from the caller; unaligned reads.
        unsafe {
            match self {
                Elt::F16 => f16::from_bits(std::ptr::read_unaligned(p.cast::<u16>())).to_f64(),
                Elt::BF16 => bf16::from_bits(std::ptr::read_unaligned(p.cast::<u16>())).to_f64(),
                Elt::F32 => std::ptr::read_unaligned(p.cast::<f32>()) as f64,
                Elt::F64 => std::ptr::read_unaligned(p.cast::<f64>()),
            }
        }
    }

    /// Stores `v` (already rounded to the compute type) at element `i`, rounding to nearest
    /// even.
    ///
    /// # Safety
    /// `base + i * size` must be writable for `size` bytes.
    unsafe fn store(self, base: usize, i: usize, v: f64, compute64: bool) {
        let p = (base + i * self.size()) as *mut u8;
        // SAFETY: forwarded from the caller; unaligned writes.
        unsafe {
            match self {
                Elt::F16 => {
                    std::ptr::write_unaligned(p.cast::<u16>(), f16::from_f32(v as f32).to_bits())
                }
                Elt::BF16 => {
                    std::ptr::write_unaligned(p.cast::<u16>(), bf16::from_f32(v as f32).to_bits())
                }
                Elt::F32 => std::ptr::write_unaligned(p.cast::<f32>(), v as f32),
                Elt::F64 => std::ptr::write_unaligned(
                    p.cast::<f64>(),
                    if compute64 { v } else { v as f32 as f64 },
                ),
            }
        }
    }
}

/// A scalar operand: a host value read at the call, or a device address read when run.
#[derive(Clone, Copy, Debug)]
pub enum Scal {
    Host(f64),
    Device(usize),
}

/// One matrix operand.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub ptr: usize,
    pub ld: i64,
    pub stride: i64,
}

/// A gemm call, in column-major BLAS terms.
#[derive(Clone, Debug)]
pub struct GemmDesc {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub alpha: Scal,
    pub beta: Scal,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub d: Operand,
    pub batch: i64,
    pub ab_type: Elt,
    pub cd_type: Elt,
    /// f64 compute (else f32).
    pub compute64: bool,
}

/// A checked gemm, ready to run.
pub struct GemmOp {
    desc: GemmDesc,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    /// `(name, ptr, bytes)` of every range read or written.
    ranges: Vec<(&'static str, usize, usize)>,
}

/// Bytes an operand of `rows` x `cols` (column-major, leading dimension `ld`) over `batch`
/// entries `stride` elements apart occupies.
fn extent(
    rows: usize,
    cols: usize,
    ld: usize,
    batch: usize,
    stride: usize,
    es: usize,
) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    let one = (cols - 1).checked_mul(ld)?.checked_add(rows)?;
    (batch - 1)
        .checked_mul(stride)?
        .checked_add(one)?
        .checked_mul(es)
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

impl GemmOp {
    /// Validates `d` (sizes, leading dimensions, operand ranges); the error code is the
    /// core's (`InvalidValue` for bad arguments, `IllegalAddress` for bad memory).
    pub fn prepare(d: GemmDesc, call: &str) -> EmuResult<GemmOp> {
        let inv = |msg: String| crate::error::invalid(call, msg);
        if d.m < 0 || d.n < 0 || d.k < 0 || d.batch < 0 {
            return Err(inv(format!(
                "negative size: m {} n {} k {} batch {}",
                d.m, d.n, d.k, d.batch
            )));
        }
        let (m, n, k, batch) = (d.m as usize, d.n as usize, d.k as usize, d.batch as usize);
        let (ar, ac) = if d.trans_a { (k, m) } else { (m, k) };
        let (br, bc) = if d.trans_b { (n, k) } else { (k, n) };
        for (name, ld, rows) in [
            ("lda", d.a.ld, ar),
            ("ldb", d.b.ld, br),
            ("ldc", d.c.ld, m),
            ("ldd", d.d.ld, m),
        ] {
            if ld < rows.max(1) as i64 {
                return Err(inv(format!("{name} {ld} is less than max(1, {rows})")));
            }
        }
        for (name, s) in [
            ("stride_a", d.a.stride),
            ("stride_b", d.b.stride),
            ("stride_c", d.c.stride),
            ("stride_d", d.d.stride),
        ] {
            if s < 0 {
                return Err(inv(format!("{name} {s} is negative")));
            }
        }
        let mut op = GemmOp {
            m,
            n,
            k,
            batch,
            ranges: vec![],
            desc: d.clone(),
        };
        if m == 0 || n == 0 || batch == 0 {
            return Ok(op);
        }
        let beta_zero = matches!(d.beta, Scal::Host(b) if b == 0.0);
        let (abs, cds) = (d.ab_type.size(), d.cd_type.size());
        let big = || inv("operand extent overflows".to_string());
        let mut ranges = vec![];
        if k > 0 {
            let ea =
                extent(ar, ac, d.a.ld as usize, batch, d.a.stride as usize, abs).ok_or_else(big)?;
            let eb =
                extent(br, bc, d.b.ld as usize, batch, d.b.stride as usize, abs).ok_or_else(big)?;
            ranges.push(("A", d.a.ptr, ea));
            ranges.push(("B", d.b.ptr, eb));
        }
        if !beta_zero {
            let ec =
                extent(m, n, d.c.ld as usize, batch, d.c.stride as usize, cds).ok_or_else(big)?;
            ranges.push(("C", d.c.ptr, ec));
        }
        let ed = extent(m, n, d.d.ld as usize, batch, d.d.stride as usize, cds).ok_or_else(big)?;
        for (name, ptr, len) in &ranges {
            if (*name == "A" || *name == "B") && overlaps((d.d.ptr, ed), (*ptr, *len)) {
                return Err(inv(format!("the output overlaps operand {name}")));
            }
        }
        ranges.push(("D (output)", d.d.ptr, ed));
        for (name, s) in [("alpha", d.alpha), ("beta", d.beta)] {
            if let Scal::Device(p) = s {
                let es = if d.compute64 { 8 } else { 4 };
                crate::memory::check(p, es, name, call, Code::IllegalAddress)?;
            }
        }
        for (name, ptr, len) in &ranges {
            crate::memory::check(
                *ptr,
                *len,
                &format!("operand {name}"),
                call,
                Code::IllegalAddress,
            )?;
            if ptr % d.ab_type.size().min(d.cd_type.size()) != 0 {
                return Err(inv(format!("operand {name} at {ptr:#x} is misaligned")));
            }
        }
        op.ranges = ranges;
        Ok(op)
    }

    fn scalar(&self, s: Scal, call: &str) -> EmuResult<f64> {
        match s {
            Scal::Host(v) => Ok(v),
            Scal::Device(p) => {
                let es = if self.desc.compute64 { 8 } else { 4 };
                crate::memory::check(p, es, "device scalar", call, Code::IllegalAddress)?;
                // SAFETY: `p` holds `es` bytes of a live allocation (just checked, under the
                // execution lock held by the caller).
                Ok(unsafe {
                    if self.desc.compute64 {
                        std::ptr::read_unaligned(p as *const f64)
                    } else {
                        std::ptr::read_unaligned(p as *const f32) as f64
                    }
                })
            }
        }
    }

    /// Runs the gemm (re-checking the operands).
    pub fn execute(&self, call: &str) -> EmuResult<()> {
        let _x = crate::stream::EXEC.lock();
        let d = &self.desc;
        let (m, n, k) = (self.m, self.n, self.k);
        if m == 0 || n == 0 || self.batch == 0 {
            return Ok(());
        }
        for (name, ptr, len) in &self.ranges {
            crate::memory::check(
                *ptr,
                *len,
                &format!("operand {name}"),
                call,
                Code::IllegalAddress,
            )?;
        }
        let alpha = self.scalar(d.alpha, call)?;
        let beta = self.scalar(d.beta, call)?;
        let (lda, ldb, ldc, ldd) = (
            d.a.ld as usize,
            d.b.ld as usize,
            d.c.ld as usize,
            d.d.ld as usize,
        );
        let mut out = vec![0f64; m * n];
        for bi in 0..self.batch {
            let a = d.a.ptr + bi * d.a.stride as usize * d.ab_type.size();
            let b = d.b.ptr + bi * d.b.stride as usize * d.ab_type.size();
            let c = d.c.ptr + bi * d.c.stride as usize * d.cd_type.size();
            let dd = d.d.ptr + bi * d.d.stride as usize * d.cd_type.size();
            // Dense copies of op(A) (m x k, row i contiguous) and op(B) (k x n, column j
            // contiguous).
            let mut av = vec![0f64; m * k];
            let mut bv = vec![0f64; k * n];
            // SAFETY: every element index below lies inside the operand ranges checked
            // above (the extents were computed from the same shapes and strides).
            unsafe {
                for i in 0..m {
                    for p in 0..k {
                        let idx = if d.trans_a { p + i * lda } else { i + p * lda };
                        av[i * k + p] = d.ab_type.load(a, idx);
                    }
                }
                for j in 0..n {
                    for p in 0..k {
                        let idx = if d.trans_b { j + p * ldb } else { p + j * ldb };
                        bv[j * k + p] = d.ab_type.load(b, idx);
                    }
                }
            }
            // Products summed in order of `k` in the compute type (no fused multiply-add).
            let dot: Box<dyn Fn(usize, usize) -> f64> = if d.compute64 {
                Box::new(|i, j| {
                    av[i * k..(i + 1) * k]
                        .iter()
                        .zip(&bv[j * k..(j + 1) * k])
                        .fold(0f64, |s, (x, y)| s + x * y)
                })
            } else {
                let (a32, b32): (Vec<f32>, Vec<f32>) = (
                    av.iter().map(|&x| x as f32).collect(),
                    bv.iter().map(|&x| x as f32).collect(),
                );
                Box::new(move |i, j| {
                    a32[i * k..(i + 1) * k]
                        .iter()
                        .zip(&b32[j * k..(j + 1) * k])
                        .fold(0f32, |s, (x, y)| s + x * y) as f64
                })
            };
            for j in 0..n {
                for i in 0..m {
                    let s = dot(i, j);
                    out[i + j * m] = if d.compute64 {
                        let mut r = alpha * s;
                        if beta != 0.0 {
                            // SAFETY: C was checked (beta is not zero).
                            r += beta * unsafe { d.cd_type.load(c, i + j * ldc) };
                        }
                        r
                    } else {
                        let mut r = alpha as f32 * s as f32;
                        if beta != 0.0 {
                            // SAFETY: as above.
                            r += beta as f32 * unsafe { d.cd_type.load(c, i + j * ldc) } as f32;
                        }
                        r as f64
                    };
                }
            }
            for j in 0..n {
                for i in 0..m {
                    // SAFETY: D's range was checked; C (if read) was read above.
                    unsafe {
                        d.cd_type
                            .store(dd, i + j * ldd, out[i + j * m], d.compute64)
                    };
                }
            }
        }
        Ok(())
    }
}
