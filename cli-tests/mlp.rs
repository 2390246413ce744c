//! The MLP example: the checked-in `examples/mlp.txtpb` is exactly what `build_mlp` writes, and
//! running it on the host backend matches an independent f64 reference.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/build_mlp.rs"]
mod build_mlp;

use build_mlp::{BATCH, CLASSES, HIDDEN, IN, build_mlp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use xthunk::{BackendChoice, ExecuteOptions, LoadedExecutable, Runtime};

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/mlp.txtpb")
}

#[test]
fn checked_in_program_equals_the_example_output() {
    let built = build_mlp().unwrap();
    let on_disk = std::fs::read_to_string(checked_in()).unwrap();
    assert_eq!(
        xthunk::proto::to_text(&built),
        on_disk,
        "examples/mlp.txtpb is stale: run `cargo run --example build_mlp -- examples/mlp.txtpb`"
    );
    assert_eq!(xthunk::proto::load_file(checked_in()).unwrap(), built);

    // save_file writes the same bytes.
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mlp-example-check.txtpb");
    xthunk::proto::save_file(&out, &built).unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), on_disk);
}

fn uniform(rng: &mut ChaCha8Rng, n: u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0f32..1.0) * scale)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// `out[r][c] = sum_k a[r][k] * b[k][c] + bias[c]`, in f64.
fn affine(a: &[f64], b: &[f32], bias: &[f32], rows: usize, inner: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; rows * cols];
    for r in 0..rows {
        for k in 0..inner {
            let av = a[r * inner + k];
            for c in 0..cols {
                out[r * cols + c] += av * b[k * cols + c] as f64;
            }
        }
        for c in 0..cols {
            out[r * cols + c] += bias[c] as f64;
        }
    }
    out
}

#[test]
fn host_run_matches_f64_reference() {
    let (n, d, h, c) = (
        BATCH as usize,
        IN as usize,
        HIDDEN as usize,
        CLASSES as usize,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    // Scaled so that hidden activations and logits are O(1): the softmax is far from one-hot,
    // so the comparison sees every probability.
    let x = uniform(&mut rng, BATCH * IN, 1.0);
    let w1 = uniform(&mut rng, IN * HIDDEN, 3.0 / (IN as f32).sqrt());
    let b1 = uniform(&mut rng, HIDDEN, 0.1);
    let w2 = uniform(
        &mut rng,
        HIDDEN * CLASSES,
        2.0 * (3.0 / HIDDEN as f32).sqrt(),
    );
    let b2 = uniform(&mut rng, CLASSES, 0.1);

    let rt = Runtime::new();
    let (backend, _) = rt.select(&BackendChoice::Named("host".into())).unwrap();
    let device = backend.device(0).unwrap();
    let program = xthunk::proto::load_file(checked_in()).unwrap();
    let exe = LoadedExecutable::load(device, program).unwrap();
    let inputs = [bytes(&x), bytes(&w1), bytes(&b1), bytes(&w2), bytes(&b2)];
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let outputs = exe
        .run_with_host_data(&refs, &ExecuteOptions::default())
        .unwrap();
    assert_eq!(outputs.len(), 1);
    let probs: Vec<f32> = outputs[0]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(probs.len(), n * c);

    // Independent f64 reference.
    let xf: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let hidden: Vec<f64> = affine(&xf, &w1, &b1, n, d, h)
        .into_iter()
        .map(gelu)
        .collect();
    let logits = affine(&hidden, &w2, &b2, n, h, c);
    let mut reference = vec![0.0f64; n * c];
    for r in 0..n {
        let row = &logits[r * c..(r + 1) * c];
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for k in 0..c {
            reference[r * c + k] = (row[k] - max).exp() / sum;
        }
    }

    const TOL: f64 = 1e-4;
    let mut worst = 0.0f64;
    for (i, (got, want)) in probs.iter().zip(&reference).enumerate() {
        let err = (*got as f64 - want).abs();
        worst = worst.max(err);
        assert!(
            err <= TOL,
            "probs[{}][{}] = {got}, reference {want} (|diff| {err:e} > {TOL:e})",
            i / c,
            i % c
        );
    }
    for r in 0..n {
        let s: f64 = probs[r * c..(r + 1) * c].iter().map(|v| *v as f64).sum();
        assert!((s - 1.0).abs() <= 1e-5, "row {r} sums to {s}");
    }
    // The inputs are scaled so the comparison is meaningful (not every row one-hot).
    let spread = (0..n)
        .filter(|r| probs[r * c..(r + 1) * c].iter().all(|p| (*p as f64) < 0.99))
        .count();
    assert!(spread > n / 2, "only {spread} of {n} rows are not ~one-hot");
    eprintln!("mlp: worst |diff| vs f64 reference {worst:e}");
}
