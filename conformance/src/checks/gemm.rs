//! `gemm/`: `Gemm` thunks in f32, f64, f16 and bf16 through the executor: all four transpose
//! combinations at odd sizes, k = 0, beta = 0 over a NaN-poisoned C, beta != 0, row strides
//! larger than the minimum, batches with strides, and a size large enough for parallel paths;
//! and a direct `Stream::gemm` whose output overlaps an input is refused.
//!
//! Every element of A, B and C that the gemm must not use (row padding, gaps between batch
//! entries) holds NaN: reading one shows up as a NaN in the result, writing one (in C) as a
//! changed byte. When beta is 0 all of C starts as NaN and no NaN may come out.
//!
//! Tolerance per element of C: `2u·|expected| + 2(k+2)·ε·s`, with `u` the unit roundoff of the
//! element type (one ulp of the result), `ε` the epsilon of the accumulation type (f32 for
//! f16/bf16/f32, f64 for f64) and `s = |α|·Σ|a||b| + |β|·|c|` (the standard dot-product error
//! bound, doubled).

use super::seed::seeded;
use crate::check::Check;
use crate::reference::{self, GemmShape};
use crate::util::{
    CheckResult, CheckRng, Values, compare_bytes, compare_floats, compute_eps, decode,
    download_all, encode, fail, random_bytes, run_program, uniform, unit_roundoff, upload,
};
use std::sync::Arc;
use xthunk_core::backend::{Device, DeviceRange, GemmLaunch};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::ir::{DType, GemmThunk, MemorySpace};

pub fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (label, ta, tb) in [
            ("nn", false, false),
            ("nt", false, true),
            ("tn", true, false),
            ("tt", true, true),
        ] {
            v.push(seeded(format!("gemm/{dt}_{label}_odd"), move |d, r| {
                case(d, r, dt, &shape(17, 33, 9, ta, tb, 1.0, 0.0))
            }));
        }
        v.push(seeded(format!("gemm/{dt}_k0"), move |d, r| {
            case(d, r, dt, &shape(5, 7, 0, false, false, 1.0, 0.5))?;
            case(d, r, dt, &shape(5, 7, 0, true, true, 2.0, 0.0))
        }));
        v.push(seeded(format!("gemm/{dt}_beta"), move |d, r| {
            case(d, r, dt, &shape(13, 11, 21, false, true, -0.75, 1.5))?;
            case(d, r, dt, &shape(6, 19, 3, true, false, 0.5, -1.0))
        }));
        v.push(seeded(format!("gemm/{dt}_ld_padded"), move |d, r| {
            let mut s = shape(15, 10, 12, true, false, 1.25, 0.5);
            let (_, ac) = s.stored_a();
            let (_, bc) = s.stored_b();
            s.lda = ac + 3;
            s.ldb = bc + 5;
            s.ldc = s.n + 2;
            case(d, r, dt, &s)?;
            let mut s = shape(8, 9, 31, false, true, 1.0, 0.0);
            s.lda = s.k + 1;
            s.ldb = s.k + 7;
            s.ldc = s.n + 11;
            case(d, r, dt, &s)
        }));
        v.push(seeded(format!("gemm/{dt}_batched"), move |d, r| {
            let mut s = shape(9, 7, 15, true, true, 1.0, 0.25);
            let (ar, ac) = s.stored_a();
            let (br, bc) = s.stored_b();
            s.lda = ac + 1;
            s.ldb = bc + 2;
            s.ldc = s.n + 3;
            s.batch = 3;
            s.stride_a = (ar - 1) * s.lda + ac + 5;
            s.stride_b = (br - 1) * s.ldb + bc + 6;
            s.stride_c = (s.m - 1) * s.ldc + s.n + 7;
            case(d, r, dt, &s)?;
            let mut s = shape(4, 6, 5, false, false, 1.0, 0.0);
            s.batch = 5;
            s.stride_a = s.m * s.k;
            s.stride_b = s.k * s.n;
            s.stride_c = s.m * s.n;
            case(d, r, dt, &s)
        }));
        v.push(seeded(format!("gemm/{dt}_large"), move |d, r| {
            case(d, r, dt, &shape(96, 80, 130, false, false, 1.0, 0.0))
        }));
    }
    v.push(seeded(
        "gemm/overlapping_output_refused",
        overlapping_output,
    ));
    v
}

/// A `Stream::gemm` issued directly (not through a validated program) whose C overlaps A, or
/// B, is refused with an error, when queued or at the latest when synchronized, and the buffer
/// is unchanged.
fn overlapping_output(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    // Three f32 4×4 matrices (64 bytes each) side by side; C starts inside A or B.
    let data = random_bytes(rng, 256);
    let buf = upload(device, &data, MemorySpace::Device)?;
    let at = |offset: u64| DeviceRange {
        ptr: buf.ptr().offset(offset),
        len: 64,
    };
    for (what, c) in [("A", at(32)), ("B", at(96))] {
        let g = GemmLaunch {
            a: at(0),
            b: at(64),
            c,
            m: 4,
            n: 4,
            k: 4,
            lda: 4,
            ldb: 4,
            ldc: 4,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            dtype: DType::F32,
            batch: 1,
            stride_a: 16,
            stride_b: 16,
            stride_c: 16,
        };
        let s = device.create_stream()?;
        let queued = s.gemm(&g);
        let synced = s.synchronize();
        if let (Ok(()), Ok(())) = (queued, synced) {
            return Err(fail(format!("gemm whose C overlaps {what}: no error")));
        }
    }
    compare_bytes(
        "buffer after the refused gemms",
        &download_all(device, buf.as_ref())?,
        &data,
    )
}

/// A dense single gemm (minimal leading dimensions).
#[allow(clippy::too_many_arguments)]
fn shape(
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f64,
    beta: f64,
) -> GemmShape {
    let mut s = GemmShape {
        m,
        n,
        k,
        lda: 0,
        ldb: 0,
        ldc: n.max(1),
        trans_a,
        trans_b,
        alpha,
        beta,
        batch: 1,
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
    };
    s.lda = s.stored_a().1.max(1);
    s.ldb = s.stored_b().1.max(1);
    s.stride_a = s.stored_a().0 * s.lda;
    s.stride_b = s.stored_b().0 * s.ldb;
    s.stride_c = m * s.ldc;
    s
}

/// Elements an operand spans, and which of them a matrix element occupies.
fn span(rows: usize, cols: usize, ld: usize, batch: usize, stride: usize) -> (usize, Vec<bool>) {
    if rows == 0 || cols == 0 {
        return (0, vec![]);
    }
    let total = (batch - 1) * stride + (rows - 1) * ld + cols;
    let mut used = vec![false; total];
    for b in 0..batch {
        for r in 0..rows {
            for c in 0..cols {
                used[b * stride + r * ld + c] = true;
            }
        }
    }
    (total, used)
}

/// Random values in [-1, 1) where `used`, NaN elsewhere.
fn operand(rng: &mut CheckRng, dt: DType, used: &[bool]) -> Vec<f64> {
    let vals = uniform(rng, dt, used.len(), -1.0, 1.0);
    vals.into_iter()
        .zip(used)
        .map(|(v, &u)| if u { v } else { f64::NAN })
        .collect()
}

fn case(device: &Arc<dyn Device>, rng: &mut CheckRng, dt: DType, s: &GemmShape) -> CheckResult {
    let what = format!(
        "{dt} gemm m={} n={} k={} trans=({}, {}) ld=({}, {}, {}) batch={} strides=({}, {}, {}) alpha={} beta={}",
        s.m,
        s.n,
        s.k,
        s.trans_a,
        s.trans_b,
        s.lda,
        s.ldb,
        s.ldc,
        s.batch,
        s.stride_a,
        s.stride_b,
        s.stride_c,
        s.alpha,
        s.beta
    );
    let (ar, ac) = s.stored_a();
    let (br, bc) = s.stored_b();
    let (na, used_a) = span(ar, ac, s.lda, s.batch, s.stride_a);
    let (nb, used_b) = span(br, bc, s.ldb, s.batch, s.stride_b);
    let (nc, used_c) = span(s.m, s.n, s.ldc, s.batch, s.stride_c);
    let a = operand(rng, dt, &used_a);
    let b = operand(rng, dt, &used_b);
    // beta = 0: C is all NaN (it must not be read). Otherwise random where used, NaN padding.
    let c0 = if s.beta == 0.0 {
        vec![f64::NAN; nc]
    } else {
        operand(rng, dt, &used_c)
    };
    let c0_bytes = encode(dt, &Values::F(c0.clone()))?;

    let mut bld = ExecutableBuilder::new(format!("conformance_gemm_{dt}"));
    let ta = bld.parameter("a", dt, &[na as u64]);
    let tb = bld.parameter("b", dt, &[nb as u64]);
    let tc = bld.output("c", dt, &[nc as u64]);
    bld.push(
        GemmThunk {
            a: ta.slice(),
            b: tb.slice(),
            c: tc.slice(),
            m: s.m as u64,
            n: s.n as u64,
            k: s.k as u64,
            lda: s.lda as u64,
            ldb: s.ldb as u64,
            ldc: s.ldc as u64,
            trans_a: s.trans_a,
            trans_b: s.trans_b,
            alpha: s.alpha,
            beta: s.beta,
            dtype: dt,
            batch: s.batch as u64,
            stride_a: s.stride_a as u64,
            stride_b: s.stride_b as u64,
            stride_c: s.stride_c as u64,
        }
        .into(),
    );
    let exe = bld.build().map_err(xthunk_core::Error::from)?;
    let params = vec![
        encode(dt, &Values::F(a.clone()))?,
        encode(dt, &Values::F(b.clone()))?,
    ];
    let out = run_program(device, exe, &params, std::slice::from_ref(&c0_bytes))?;
    let got_c = out
        .first()
        .ok_or_else(|| fail(format!("{what}: no output")))?;

    // Padding of C: bytes unchanged.
    let es = dt.size();
    if let Some(i) = (0..nc)
        .find(|&i| !used_c[i] && got_c[i * es..(i + 1) * es] != c0_bytes[i * es..(i + 1) * es])
    {
        return Err(fail(format!(
            "{what}: element {i} of C lies outside the matrix (row padding or batch gap) and was written"
        )));
    }
    // The matrix elements.
    let refs = reference::gemm(s, &a, &b, &c0);
    let got = decode(dt, got_c);
    let got = got.floats("C")?;
    let u = unit_roundoff(dt);
    let eps = compute_eps(dt);
    let idx: Vec<usize> = refs.iter().map(|r| r.0).collect();
    let g: Vec<f64> = idx.iter().map(|&i| got[i]).collect();
    let e: Vec<f64> = refs.iter().map(|r| r.1).collect();
    let tol: Vec<f64> = refs
        .iter()
        .map(|r| 2.0 * u * r.1.abs() + 2.0 * (s.k as f64 + 2.0) * eps * r.2 + 1e-300)
        .collect();
    compare_floats(
        &format!("{what}: C (listed in batch, row, column order)"),
        &g,
        &e,
        s.n,
        |i| tol[i],
    )
}
