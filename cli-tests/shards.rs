//! Per-rank input files for the tests of `--input NAME=FILE{rank}.npy`: the shards of
//! `examples/dp_step.txtpb` (x and y differ per rank, w0 is shared) and an independent f64
//! reference of what every rank must compute from them.

use npyz::WriterBuilder;
use rand::{Rng, SeedableRng};
use std::path::Path;

/// dp_step's sizes and learning rate (examples/build_collectives.rs).
pub const RANKS: usize = 4;
const BATCH: usize = 32;
const FEATURES: usize = 64;
const TARGETS: usize = 16;
const LR: f64 = 0.05;

/// The inputs of one job: `x[r]`, `y[r]` per rank, one `w0`.
pub struct Shards {
    pub x: Vec<Vec<f32>>,
    pub y: Vec<Vec<f32>>,
    pub w0: Vec<f32>,
}

fn random(n: usize, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

pub fn write_f32(path: &Path, dims: &[u64], data: &[f32]) {
    let mut bytes = Vec::new();
    {
        let mut w = npyz::WriteOptions::<f32>::new()
            .default_dtype()
            .shape(dims)
            .writer(&mut bytes)
            .begin_nd()
            .unwrap();
        w.extend(data.iter().copied()).unwrap();
        w.finish().unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<f32>()
        .unwrap()
}

impl Shards {
    pub fn new(seed: u64) -> Shards {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let x = (0..RANKS)
            .map(|_| random(BATCH * FEATURES, &mut rng))
            .collect();
        let y = (0..RANKS)
            .map(|_| random(BATCH * TARGETS, &mut rng))
            .collect();
        let w0 = random(FEATURES * TARGETS, &mut rng);
        Shards { x, y, w0 }
    }

    /// Writes `dir/x{r}.npy`, `dir/y{r}.npy` for the ranks in `ranks` and `dir/w0.npy`.
    pub fn write(&self, dir: &Path, ranks: &[usize]) {
        for &r in ranks {
            let (b, f, t) = (BATCH as u64, FEATURES as u64, TARGETS as u64);
            write_f32(&dir.join(format!("x{r}.npy")), &[b, f], &self.x[r]);
            write_f32(&dir.join(format!("y{r}.npy")), &[b, t], &self.y[r]);
        }
        let (f, t) = (FEATURES as u64, TARGETS as u64);
        write_f32(&dir.join("w0.npy"), &[f, t], &self.w0);
    }

    /// The `--input` arguments of a run on the files of `dir`.
    pub fn inputs(dir: &Path) -> Vec<String> {
        let d = dir.display();
        vec![
            "--input".into(),
            format!("x={d}/x{{rank}}.npy"),
            "--input".into(),
            format!("y={d}/y{{rank}}.npy"),
            "--input".into(),
            format!("w0={d}/w0.npy"),
        ]
    }

    /// The reference (f64): grad = Σ_r x_rᵀ (x_r w0 − y_r), w = w0 − LR / (BATCH·RANKS) grad.
    pub fn reference(&self) -> (Vec<f64>, Vec<f64>) {
        let (b, f, t) = (BATCH, FEATURES, TARGETS);
        let w0: Vec<f64> = self.w0.iter().map(|v| *v as f64).collect();
        let mut grad = vec![0f64; f * t];
        for r in 0..RANKS {
            let (x, y) = (&self.x[r], &self.y[r]);
            for i in 0..b {
                for j in 0..t {
                    let p: f64 = (0..f).map(|k| x[i * f + k] as f64 * w0[k * t + j]).sum();
                    let d = p - y[i * t + j] as f64;
                    for k in 0..f {
                        grad[k * t + j] += x[i * f + k] as f64 * d;
                    }
                }
            }
        }
        let scale = LR / (BATCH as f64 * RANKS as f64);
        let w = w0.iter().zip(&grad).map(|(w, g)| w - scale * g).collect();
        (w, grad)
    }

    /// Asserts that `out/rank<R>/{w,grad}.npy` hold the reference for every rank.
    pub fn check(&self, out: &Path) {
        let (w_ref, grad_ref) = self.reference();
        for r in 0..RANKS {
            let dir = out.join(format!("rank{r}"));
            let (w, grad) = (
                read_f32(&dir.join("w.npy")),
                read_f32(&dir.join("grad.npy")),
            );
            assert_eq!((w.len(), grad.len()), (w_ref.len(), grad_ref.len()));
            for i in 0..w.len() {
                // f32 sums of 4·32·64 products: 1e-3 relative bounds the rounding; a rank that
                // read another's shard (or the same one twice) is off by whole terms.
                let (g, gr) = (grad[i] as f64, grad_ref[i]);
                assert!(
                    (g - gr).abs() <= 1e-3 * (1.0 + gr.abs()),
                    "rank {r} grad[{i}] = {g}, reference {gr}"
                );
                let (v, vr) = (w[i] as f64, w_ref[i]);
                assert!(
                    (v - vr).abs() <= 1e-5 * (1.0 + vr.abs()),
                    "rank {r} w[{i}] = {v}, reference {vr}"
                );
            }
        }
    }
}
