//! Benchmarks `gemm_f32`, `gemm_bf16`, `gemm_f16`: `Gemm` thunks, against a plain triple loop
//! (host, its rate scaled) or the vendor BLAS called directly (the backend's raw baseline);
//! with the deterministic inputs and the f64 reference check.

use super::program::{Prepared, wrong};
use super::report::{Row, Status};
use super::setup::{Res, Setup, one, selected};
use super::stats::{Goal, Spread, interleaved, inverse, secs};
use crate::cli::devices::human_bytes;
use std::hint::black_box;
use std::time::Instant;
use xthunk::builder::ExecutableBuilder;
use xthunk::core::backend::baseline::RawGemmCall;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::{DType, Executable};

/// Deterministic input values in [-0.5, 0.5), a function of the element index.
pub fn gemm_value(i: u64, salt: u64) -> f32 {
    let h = (i ^ salt)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    ((h >> 40) % 1000) as f32 / 1000.0 - 0.5
}

/// The value as stored in `dtype` (rounded), as f32.
fn rounded(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => half::f16::from_f32(v).to_f32(),
        DType::BF16 => half::bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

pub(super) fn encode(count: u64, salt: u64, dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(count as usize * dtype.size());
    for i in 0..count {
        let v = gemm_value(i, salt);
        match dtype {
            DType::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&(v as f64).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

fn decode(bytes: &[u8], dtype: DType) -> f64 {
    match (dtype, bytes) {
        (DType::F16, [a, b, ..]) => half::f16::from_le_bytes([*a, *b]).to_f64(),
        (DType::BF16, [a, b, ..]) => half::bf16::from_le_bytes([*a, *b]).to_f64(),
        (DType::F64, [a, b, c, d, e, f, g, h, ..]) => {
            f64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h])
        }
        (_, [a, b, c, d, ..]) => f32::from_le_bytes([*a, *b, *c, *d]) as f64,
        _ => f64::NAN,
    }
}

pub(super) const SALT_A: u64 = 0xA;
pub(super) const SALT_B: u64 = 0xB;

pub(super) fn gemm_program(dtype: DType, n: u64, reps: usize) -> Res<Executable> {
    let mut b = ExecutableBuilder::new(format!("gemm_{dtype}_{n}"));
    let a = b.parameter("a", dtype, &[n, n]);
    let bm = b.parameter("b", dtype, &[n, n]);
    let c = b.output("c", dtype, &[n, n]);
    for _ in 0..reps {
        b.matmul(&a, &bm, &c, 1.0, 0.0);
    }
    Ok(b.build()?)
}

/// Checks a few entries of the row-major `c = a @ b` against an f64 reference computed from
/// the same (rounded) inputs, within a bound proportional to `sum |a||b|`.
pub(super) fn check_gemm(p: &Prepared, dtype: DType, n: u64) -> Res<()> {
    let es = dtype.size() as u64;
    let tol = match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F64 => 1e-10,
        _ => 1e-4,
    };
    for (i, j) in [(0, 0), (n - 1, n - 1), (n / 2, n / 3), (n / 3, n - 1)] {
        let got = decode(&p.read(p.output(0)?, (i * n + j) * es, es)?, dtype);
        let (mut want, mut bound) = (0f64, 0f64);
        for k in 0..n {
            let a = rounded(gemm_value(i * n + k, SALT_A), dtype) as f64;
            let b = rounded(gemm_value(k * n + j, SALT_B), dtype) as f64;
            want += a * b;
            bound += (a * b).abs();
        }
        if (got - want).abs() > tol * bound + 1e-6 || !got.is_finite() {
            return Err(wrong(
                &format!("gemm {dtype} {n}^3"),
                format!(
                    "c[{i}][{j}] = {got}, expected {want} (within {})",
                    tol * bound
                ),
            ));
        }
    }
    Ok(())
}

/// A plain i-k-j triple loop, `c = a @ b` on `n x n` f32; returns the seconds it took.
fn triple_loop(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) -> f64 {
    let start = Instant::now();
    c.fill(0.0);
    for i in 0..n {
        let crow = &mut c[i * n..(i + 1) * n];
        for p in 0..n {
            let av = a[i * n + p];
            let brow = &b[p * n..(p + 1) * n];
            for (cv, bv) in crow.iter_mut().zip(brow) {
                *cv += av * bv;
            }
        }
    }
    black_box(&c);
    secs(start)
}

/// One gemm row: `dtype` at `n`^3, `reps` gemms per execution.
fn gemm(s: &Setup, dtype: DType, n: u64, reps: usize) -> Res<Row> {
    let goal = if s.is_host() { None } else { Goal::ge(0.95) };
    let mut row = Row::new(
        &format!("gemm_{dtype}"),
        "TFLOP/s",
        "xthunk TFLOP/s / baseline TFLOP/s",
        goal,
    );
    let acc = if dtype == DType::F64 { "f64" } else { "f32" };
    row.work = format!(
        "{reps} Gemm thunk(s) of {dtype} {n}x{n}x{n} (row-major, {acc} accumulation) per \
         execution; TFLOP/s = 2 n^3 per gemm / time"
    );
    if !s.dev.capabilities().gemm_dtypes.contains(&dtype) {
        row.status = Status::Skipped(format!(
            "the device has no {dtype} gemm (gemm dtypes: {:?})",
            s.dev.capabilities().gemm_dtypes
        ));
        return Ok(row);
    }
    let bytes = 3 * n * n * dtype.size() as u64;
    if !s.fits(bytes) {
        row.status = Status::Skipped(format!(
            "needs {} of device memory; the device has {}",
            human_bytes(bytes),
            human_bytes(s.dev.info().total_memory)
        ));
        return Ok(row);
    }
    let p = Prepared::new(
        &s.dev,
        gemm_program(dtype, n, reps)?,
        &ExecutorConfig::default(),
    )?;
    p.set_param(0, &encode(n * n, SALT_A, dtype))?;
    p.set_param(1, &encode(n * n, SALT_B, dtype))?;
    p.run()?;
    check_gemm(&p, dtype, n)?;
    let flops = 2.0 * (n as f64).powi(3) * reps as f64;
    let tflops = |f: f64| move |t: f64| f / t / 1e12;
    let plan = s.rounds(10, 3, 20);
    let (times, base_flops) = if s.is_host() {
        let m = 256usize;
        let a: Vec<f32> = (0..m * m).map(|i| gemm_value(i as u64, SALT_A)).collect();
        let b: Vec<f32> = (0..m * m).map(|i| gemm_value(i as u64, SALT_B)).collect();
        let mut c = vec![0f32; m * m];
        triple_loop(m, &a, &b, &mut c);
        let want: f64 = (0..m).map(|k| a[k] as f64 * b[k * m] as f64).sum();
        if (c[0] as f64 - want).abs() > 1e-3 {
            return Err(wrong("the triple loop", format!("{} vs {want}", c[0])));
        }
        row.baseline_label = "triple loop 256^3, scaled".into();
        row.baseline_work = "a plain i-k-j triple loop in Rust on f32 at 256x256x256, its \
                             FLOP rate taken as the baseline rate (a naive-code reference, not \
                             a tuned BLAS)"
            .into();
        let t = interleaved(
            plan,
            &mut [&mut || p.run(), &mut || Ok(triple_loop(m, &a, &b, &mut c))],
        )?;
        (t, 2.0 * (m as f64).powi(3))
    } else if let Some(raw) = &s.baseline {
        let stream = s.dev.create_stream()?;
        let blas = raw.blas(stream)?;
        let call = RawGemmCall {
            dtype,
            m: n,
            n,
            k: n,
            a: p.param(0)?,
            b: p.param(1)?,
            c: p.output(0)?,
        };
        blas.gemm_loop(&call, reps)?;
        let calls = raw.calls();
        row.baseline_label = format!("{} direct", calls.blas);
        row.baseline_work = format!(
            "{reps} {} call(s) of the same shapes and dtypes ({acc} compute, default \
             algorithm) on its own handle and stream, then {} ({})",
            calls.gemm,
            calls.synchronize,
            blas.library()
        );
        let t = interleaved(
            plan,
            &mut [&mut || p.run(), &mut || {
                blas.gemm_loop(&call, reps).map(|d| d.as_secs_f64())
            }],
        )?;
        (t, flops)
    } else {
        let t = interleaved(plan, &mut [&mut || p.run()])?;
        row.without_baseline(s.no_baseline(), &t[0], |v| inverse(v, tflops(flops)));
        return Ok(row);
    };
    row.rounds = times[0].len();
    row.value = Some(inverse(Spread::of(&times[0]), tflops(flops)));
    row.baseline = Some(inverse(Spread::of(&times[1]), tflops(base_flops)));
    let rate_ratio: Vec<f64> = times[0]
        .iter()
        .zip(&times[1])
        .map(|(te, tb)| (flops / te) / (base_flops / tb))
        .collect();
    row.ratio = Some(Spread::of(&rate_ratio));
    Ok(row)
}

/// The gemm rows `filter` selects, at this device's sizes.
pub fn gemms(s: &Setup, filter: Option<&str>) -> Vec<Row> {
    let configs: Vec<(DType, u64, usize)> = if s.emulated {
        vec![
            (DType::F32, 128, 1),
            (DType::BF16, 128, 1),
            (DType::F16, 128, 1),
        ]
    } else if s.gpu {
        vec![
            (DType::F32, 4096, 4),
            (DType::BF16, 8192, 4),
            (DType::F16, 8192, 4),
        ]
    } else {
        vec![(DType::F32, 1024, 1)]
    };
    configs
        .into_iter()
        .filter(|(dt, _, _)| selected(&format!("gemm_{dt}"), filter))
        .filter_map(|(dt, n, reps)| {
            let mut rows = vec![];
            one(
                &format!("gemm_{dt}"),
                None,
                || gemm(s, dt, n, reps),
                &mut rows,
            );
            rows.pop()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_inputs_round_as_stored() {
        let bytes = encode(4, SALT_A, DType::BF16);
        for i in 0..4 {
            let v = decode(&bytes[i * 2..], DType::BF16);
            assert_eq!(v, rounded(gemm_value(i as u64, SALT_A), DType::BF16) as f64);
            assert!((-0.5..0.5).contains(&v));
        }
    }
}
