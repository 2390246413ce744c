//! The transformer example: the checked-in `examples/transformer.txtpb` is exactly what
//! `build_transformer` writes; its temp plan takes far less than the sum of its temps; and on
//! the host backend its results are byte-identical with planning on and off and match an
//! independent f64 reference.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/build_transformer.rs"]
mod build_transformer;

use build_transformer::{EPS, FF, LAYERS, MODEL, SEQ, build_transformer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use xthunk::core::executor::ExecutorConfig;
use xthunk::{BackendChoice, ExecuteOptions, LoadedExecutable, Runtime};

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/transformer.txtpb")
}

#[test]
fn checked_in_program_equals_the_example_output() {
    let built = build_transformer().unwrap();
    let on_disk = std::fs::read_to_string(checked_in()).unwrap();
    assert_eq!(
        xthunk::proto::to_text(&built),
        on_disk,
        "examples/transformer.txtpb is stale: run \
         `cargo run --example build_transformer -- examples/transformer.txtpb`"
    );
}

fn uniform(rng: &mut ChaCha8Rng, n: u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0f32..1.0) * scale)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| *x as f64).collect()
}

/// `a [r,k] @ b [k,c]` in f64.
fn matmul(a: &[f64], b: &[f64], r: usize, k: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..k {
            let av = a[i * k + j];
            for l in 0..c {
                out[i * c + l] += av * b[j * c + l];
            }
        }
    }
    out
}

fn layer_norm(x: &[f64], gamma: &[f64], beta: &[f64], cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for (row, o) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let inv = 1.0 / (var + EPS as f64).sqrt();
        for c in 0..cols {
            o[c] = (row[c] - mean) * inv * gamma[c] + beta[c];
        }
    }
    out
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// The whole program in f64, from the same inputs.
fn reference(inputs: &[Vec<f32>]) -> Vec<f64> {
    let w: Vec<Vec<f64>> = inputs.iter().map(|v| f64s(v)).collect();
    let (s, m, ff) = (SEQ as usize, MODEL as usize, FF as usize);
    let (wq, wk, wv, wo, w1, b1, w2, gamma, beta) = (
        &w[1], &w[2], &w[3], &w[4], &w[5], &w[6], &w[7], &w[8], &w[9],
    );
    let mut h = w[0].clone();
    for _ in 0..LAYERS {
        let a = layer_norm(&h, gamma, beta, m);
        let (q, k, v) = (
            matmul(&a, wq, s, m, m),
            matmul(&a, wk, s, m, m),
            matmul(&a, wv, s, m, m),
        );
        let mut p = vec![0.0; s * s];
        for i in 0..s {
            for j in 0..s {
                p[i * s + j] =
                    (0..m).map(|c| q[i * m + c] * k[j * m + c]).sum::<f64>() / (m as f64).sqrt();
            }
            let row = &mut p[i * s..(i + 1) * s];
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|x| (x - max).exp()).sum();
            row.iter_mut().for_each(|x| *x = (*x - max).exp() / sum);
        }
        let proj = matmul(&matmul(&p, &v, s, s, m), wo, s, m, m);
        let h1: Vec<f64> = h.iter().zip(&proj).map(|(a, b)| a + b).collect();
        let a2 = layer_norm(&h1, gamma, beta, m);
        let mut up = matmul(&a2, w1, s, m, ff);
        for (i, u) in up.iter_mut().enumerate() {
            *u = gelu(*u + b1[i % ff]);
        }
        let down = matmul(&up, w2, s, ff, m);
        h = h1.iter().zip(&down).map(|(a, b)| a + b).collect();
    }
    h
}

#[test]
fn planned_temps_save_memory_and_change_no_result() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x7f0e);
    let (m, ff) = (MODEL as f32, FF as f32);
    let inputs = vec![
        uniform(&mut rng, SEQ * MODEL, 1.0),
        uniform(&mut rng, MODEL * MODEL, 2.0 / m.sqrt()),
        uniform(&mut rng, MODEL * MODEL, 2.0 / m.sqrt()),
        uniform(&mut rng, MODEL * MODEL, 1.0 / m.sqrt()),
        uniform(&mut rng, MODEL * MODEL, 1.0 / m.sqrt()),
        uniform(&mut rng, MODEL * FF, 1.0 / m.sqrt()),
        uniform(&mut rng, FF, 0.1),
        uniform(&mut rng, FF * MODEL, 1.0 / ff.sqrt()),
        (0..MODEL)
            .map(|_| 1.0 + rng.random_range(-0.1f32..0.1))
            .collect(),
        uniform(&mut rng, MODEL, 0.1),
    ];
    let data: Vec<Vec<u8>> = inputs.iter().map(|v| bytes(v)).collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();

    let rt = Runtime::new();
    let (backend, _) = rt.select(&BackendChoice::Named("host".into())).unwrap();
    let device = backend.device(0).unwrap();
    let program = xthunk::proto::load_file(checked_in()).unwrap();
    let run = |config: &ExecutorConfig| {
        let exe = LoadedExecutable::load_with(device.clone(), program.clone(), config).unwrap();
        let plan = exe.temp_plan().clone();
        let mut outs = exe
            .run_with_host_data(&refs, &ExecuteOptions::default())
            .unwrap();
        (plan, outs.remove(0))
    };
    let (off_plan, off) = run(&ExecutorConfig {
        plan_temps: false,
        ..ExecutorConfig::default()
    });
    let temps = (15 * LAYERS + LAYERS - 1) as usize;
    assert_eq!(off_plan.placements.len(), temps);
    assert_eq!(off_plan.planned_bytes, off_plan.sum_bytes);
    for config in [
        ExecutorConfig::default(),
        ExecutorConfig::in_order(),
        ExecutorConfig::with_streams(4),
    ] {
        let (plan, on) = run(&config);
        println!("{config:?}: {}", plan.summary());
        assert_eq!(plan.sum_bytes, off_plan.sum_bytes);
        // A block's temps are dead by the next block: well under a quarter of the sum.
        assert!(
            plan.planned_bytes * 4 < plan.sum_bytes,
            "{config:?}: {}",
            plan.summary()
        );
        assert_eq!(on, off, "{config:?}: results differ with planned temps");
    }

    let got: Vec<f32> = off
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let want = reference(&inputs);
    assert_eq!(got.len(), want.len());
    const TOL: f64 = 2e-3;
    let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert!(scale > 0.5, "outputs are not trivially small: {scale}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let err = (*g as f64 - w).abs();
        assert!(
            err <= TOL * (1.0 + w.abs()),
            "y[{}][{}] = {g}, reference {w} (|diff| {err:e})",
            i / MODEL as usize,
            i % MODEL as usize
        );
    }
}
