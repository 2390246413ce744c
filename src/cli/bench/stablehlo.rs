//! Benchmarks `stablehlo_mlp_step`, `stablehlo_transformer_step` (JAX training steps) and
//! `stablehlo_cnn_forward` (a JAX CNN's forward pass: convolutions, max pooling, a dense
//! layer); `stablehlo/jax/bench_programs.py` writes their StableHLO text into `jax/`,
//! embedded here,
//! imported, lowered and run by xthunk through a `Session`, against XLA:CPU compiling the same
//! text through jaxlib in a Python child process ([`super::xla`]), on the same random inputs;
//! with each side's kernels per step.

use super::program::Prepared;
use super::report::{Row, Status};
use super::setup::{Res, Setup};
use super::stats::{Spread, interleaved, ratios};
use super::xla::{SCRIPT, Started, XlaChild, python};
use crate::cli::npy;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::{DType, Executable, TensorSpec, Thunk};

/// One benchmarked program: its StableHLO text at bench size and at the test set's small size
/// (`--quick`), and what it is.
pub struct Step {
    pub name: &'static str,
    pub(super) text: &'static str,
    pub(super) small: &'static str,
    /// What kind of program it is, e.g. `a JAX training step (value_and_grad + SGD, f32`.
    kind: &'static str,
    what: &'static str,
    small_what: &'static str,
}

pub const MLP: Step = Step {
    name: "stablehlo_mlp_step",
    text: include_str!("jax/mlp_step.mlir"),
    small: include_str!("jax/mlp_step.small.mlir"),
    kind: TRAINING,
    what: "batch 128, 784-512-512-10 (tanh, relu), mean squared error",
    small_what: "--quick: batch 8, 16-32-32-4 (tanh, relu), mean squared error",
};

pub const TRANSFORMER: Step = Step {
    name: "stablehlo_transformer_step",
    text: include_str!("jax/transformer_step.mlir"),
    small: include_str!("jax/transformer_step.small.mlir"),
    kind: TRAINING,
    what: "batch 2, seq 128, d_model 256, 4 heads, MLP 1024 (pre-norm, causal softmax \
           attention, tanh GELU), mean squared error",
    small_what: "--quick: batch 2, seq 8, d_model 16, 2 heads, MLP 32",
};

pub const CNN: Step = Step {
    name: "stablehlo_cnn_forward",
    text: include_str!("jax/cnn_forward.mlir"),
    small: include_str!("jax/cnn_forward.small.mlir"),
    kind: "a JAX CNN forward pass (f32",
    what: "batch 32 of 32x32x3 NHWC images, conv 3x3 3->16 SAME + bias + relu, 2x2 max \
           pool, conv 3x3 16->32 + bias + relu, 2x2 max pool, dense 2048->10",
    small_what: "--quick: batch 2 of 8x8x3, conv channels 4 and 8, dense 32->10",
};

const TRAINING: &str = "a JAX training step (value_and_grad + SGD, f32";

/// The comparison of outputs (programs.py's `F32_TOL`, per output array):
/// `|got - want| <= RTOL * |want| + ATOL_OF_MAX * max|want|`.
const RTOL: f64 = 2e-4;
const ATOL_OF_MAX: f64 = 2e-5;
/// The inputs' seed.
const SEED: u64 = 26;

/// A temp folder removed when dropped.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new(name: &str) -> Res<TempDir> {
        let p = std::env::temp_dir().join(format!("xthunk-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| io(&p, e))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn io(path: &Path, e: impl std::fmt::Display) -> xthunk::Error {
    xthunk::Error::InvalidArgument(format!("{}: {e}", path.display()))
}

/// Thunks per execution of a program without control flow, by kind.
#[derive(Default)]
struct Thunks {
    launches: u64,
    distinct: BTreeSet<(String, String)>,
    gemms: u64,
    copies: u64,
    memsets: u64,
    other: u64,
    control_flow: bool,
}

impl Thunks {
    fn of(exe: &Executable) -> Thunks {
        let mut t = Thunks::default();
        t.walk(&exe.entry);
        t
    }

    fn walk(&mut self, list: &[Thunk]) {
        for t in list {
            match t {
                Thunk::Kernel(k) => {
                    self.launches += 1;
                    self.distinct.insert((k.module.clone(), k.name.clone()));
                }
                Thunk::Gemm(_) => self.gemms += 1,
                Thunk::Copy(_) => self.copies += 1,
                Thunk::Memset(_) => self.memsets += 1,
                Thunk::Sequence(_) | Thunk::CommandBuffer(_) => {}
                Thunk::While(_) | Thunk::Conditional(_) => self.control_flow = true,
                _ => self.other += 1,
            }
            for (_, nested) in t.nested() {
                self.walk(nested);
            }
        }
    }

    fn total(&self) -> u64 {
        self.launches + self.gemms + self.copies + self.memsets + self.other
    }

    fn text(&self) -> String {
        let mut s = format!(
            "xthunk {} thunks = {} kernel launches ({} distinct generated kernels) + {} Gemm \
             + {} Copy + {} Memset",
            self.total(),
            self.launches,
            self.distinct.len(),
            self.gemms,
            self.copies,
            self.memsets
        );
        if self.other > 0 {
            let _ = write!(s, " + {} other", self.other);
        }
        if self.control_flow {
            s.push_str(" (static count: the program has control flow)");
        }
        s
    }
}

/// XLA's counts as `N = f fusions (a kLoop, b kCustom) + o other (c dot, …)`.
fn xla_text(counts: &std::collections::BTreeMap<String, u64>) -> String {
    let total: u64 = counts.values().sum();
    let (mut fusions, mut other) = (vec![], vec![]);
    let (mut nf, mut no) = (0, 0);
    for (op, n) in counts {
        match op.strip_prefix("fusion(").and_then(|k| k.strip_suffix(')')) {
            Some(kind) => {
                nf += n;
                fusions.push(format!("{n} {kind}"));
            }
            None => {
                no += n;
                other.push(format!("{n} {op}"));
            }
        }
    }
    let mut s = format!("XLA:CPU {total} = {nf} fusions");
    if !fusions.is_empty() {
        let _ = write!(s, " ({})", fusions.join(", "));
    }
    let _ = write!(s, " + {no} other");
    if !other.is_empty() {
        let _ = write!(s, " ({})", other.join(", "));
    }
    s
}

/// Seeded inputs: uniform in [-1, 1) scaled by 1/sqrt(the second-to-last dimension) for
/// matrices and batches (weights of unit gain), by 0.1 for vectors (biases, layer-norm gains
/// and offsets), 0.01 for scalars (the learning rate).
fn input(spec: &TensorSpec, stream: u64) -> Res<Vec<u8>> {
    if spec.dtype != DType::F32 {
        return Err(xthunk::Error::InvalidArgument(format!(
            "parameter `{}` is {}, the benchmark feeds f32 only",
            spec.name, spec.dtype
        )));
    }
    let count = spec.element_count().unwrap_or(0);
    let scale = match spec.dims.len() {
        0 => return Ok(0.01f32.to_le_bytes().to_vec()),
        1 => 0.1,
        n => 1.0 / (spec.dims[n - 2].max(1) as f32).sqrt(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    rng.set_stream(stream);
    Ok((0..count)
        .flat_map(|_| (rng.random_range(-1.0f32..1.0) * scale).to_le_bytes())
        .collect())
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Checks xthunk's outputs against XLA's (`dir/out<i>.npy`); returns the largest error as a
/// fraction of its bound.
fn check(name: &str, specs: &[TensorSpec], got: &[Vec<u8>], dir: &Path) -> Res<f64> {
    let mut worst = 0.0f64;
    for (i, (spec, got)) in specs.iter().zip(got).enumerate() {
        let path = dir.join(format!("out{i}.npy"));
        let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
        let want: Vec<f32> = npyz::NpyFile::new(&bytes[..])
            .and_then(|f| f.into_vec::<f32>())
            .map_err(|e| io(&path, e))?;
        let got = f32s(got);
        if got.len() != want.len() {
            return Err(super::program::wrong(
                name,
                format!("out{i}: {} values, XLA gave {}", got.len(), want.len()),
            ));
        }
        let max = want.iter().fold(0.0f64, |m, w| m.max((*w as f64).abs()));
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            let (g, w) = (*g as f64, *w as f64);
            let bound = RTOL * w.abs() + ATOL_OF_MAX * max;
            let err = (g - w).abs();
            if err.is_nan() || err > bound {
                return Err(super::program::wrong(
                    name,
                    format!(
                        "out{i} ({}) [{j}]: xthunk {g:e}, XLA:CPU {w:e} (bound {bound:e})",
                        spec.name
                    ),
                ));
            }
            if bound > 0.0 {
                worst = worst.max(err / bound);
            }
        }
    }
    Ok(worst)
}

/// The row of `step`.
pub fn stablehlo_step(s: &Setup, step: &Step) -> Res<Row> {
    let mut row = Row::new(step.name, "ms", "xthunk time / XLA:CPU time", None);
    if !s.is_host() {
        row.status = Status::Skipped(format!(
            "host backend only (its baseline is XLA:CPU), not {}",
            s.backend
        ));
        return Ok(row);
    }
    let (text, what) = if s.quick {
        (step.small, step.small_what)
    } else {
        (step.text, step.what)
    };
    let exe = xthunk::program_file::program_from_mlir(text)
        .map_err(|e| xthunk::Error::InvalidArgument(format!("{}: {e}", step.name)))?;
    let thunks = Thunks::of(&exe);
    let params = exe.signature.parameters.clone();
    let outputs = exe.signature.outputs.clone();
    row.work = format!(
        "{}; {what}) as StableHLO text, imported and lowered by xthunk, one \
         Session::execute per step ({} parameters, {} outputs)",
        step.kind,
        params.len(),
        outputs.len()
    );
    let p = Prepared::new(&s.dev, exe, &ExecutorConfig::default())?;
    let dir = TempDir::new(step.name)?;
    for (i, spec) in params.iter().enumerate() {
        let bytes = input(spec, i as u64)?;
        p.set_param(i, &bytes)?;
        let path = dir.0.join(format!("arg{i}.npy"));
        let file = npy::encode(spec.dtype, &spec.dims, &bytes).map_err(|e| io(&path, e))?;
        std::fs::write(&path, file).map_err(|e| io(&path, e))?;
    }
    let module = dir.0.join("module.mlir");
    std::fs::write(&module, text).map_err(|e| io(&module, e))?;
    let script = dir.0.join("xla_child.py");
    std::fs::write(&script, SCRIPT).map_err(|e| io(&script, e))?;
    let (py, from) = python(s.python.as_deref());
    let started = XlaChild::start(
        &py,
        &script,
        &module,
        &dir.0,
        params.len(),
        &dir.0.join("child.stderr"),
    )?;
    let mut xla = match started {
        Started::Ready(x) => x,
        Started::Unavailable(why) => {
            row.status = Status::Skipped(format!(
                "no XLA:CPU baseline: {why} (python from {from}; --python or XTHUNK_PYTHON \
                 name one with jax and jaxlib)"
            ));
            return Ok(row);
        }
    };
    row.baseline_label = format!("XLA:CPU, jaxlib {}", xla.ready.jaxlib);
    row.baseline_work = format!(
        "the same StableHLO text compiled once by XLA:CPU (jaxlib {}, {} from {from}) in a \
         Python child process, inputs on its device; one execute per request, timed in the \
         child from the call until every output is ready (the load note counts the child \
         under other processes)",
        xla.ready.jaxlib,
        py.display()
    );
    // Results, checked once.
    p.run()?;
    let got = p.outputs()?;
    let saved = xla.save(&dir.0)?;
    if saved != outputs.len() {
        return Err(super::program::wrong(
            step.name,
            format!("xthunk has {} outputs, XLA:CPU {saved}", outputs.len()),
        ));
    }
    let worst = check(step.name, &outputs, &got, &dir.0)?;
    let plan = s.rounds(40, 5, 20);
    let times = interleaved(plan, &mut [&mut || p.run(), &mut || xla.run()])?;
    let ms = |v: f64| v * 1e3;
    row.rounds = times[0].len();
    row.value = Some(Spread::of(&times[0]).map(ms));
    row.baseline = Some(Spread::of(&times[1]).map(ms));
    row.ratio = Some(Spread::of(&ratios(&times[0], &times[1])));
    row.notes.push(format!(
        "kernels per step: {}; {} (XLA: the optimized HLO's instructions outside fusion \
         bodies and reducers, parameters, constants, tuples and bitcasts left out)",
        thunks.text(),
        xla_text(&xla.ready.kernels)
    ));
    row.notes.push(format!(
        "results checked once: {} outputs within {RTOL:e} x |want| + {ATOL_OF_MAX:e} x \
         max|want| of XLA:CPU's (largest error {:.2e} of its bound); inputs seeded uniform, \
         scaled 1/sqrt(rows) for matrices, 0.1 for vectors, learning rate 0.01",
        outputs.len(),
        worst
    ));
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_counts_read_as_fusions_and_others() {
        let counts = [("dot", 3), ("fusion(kLoop)", 2), ("fusion(kCustom)", 1)]
            .map(|(k, v)| (k.to_string(), v))
            .into_iter()
            .collect();
        assert_eq!(
            xla_text(&counts),
            "XLA:CPU 6 = 3 fusions (1 kCustom, 2 kLoop) + 3 other (3 dot)"
        );
    }

    #[test]
    fn outputs_are_checked_within_the_tolerance() -> Res<()> {
        let dir = TempDir::new("unit-check")?;
        let want = [1.0f32, -2.0];
        let bytes: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
        let path = dir.0.join("out0.npy");
        let file = npy::encode(DType::F32, &[2], &bytes).map_err(|e| io(&path, e))?;
        std::fs::write(&path, file).map_err(|e| io(&path, e))?;
        let spec = TensorSpec {
            name: "out0".into(),
            dtype: DType::F32,
            dims: vec![2],
            allocation: 0,
        };
        let as_bytes = |v: [f32; 2]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // The bound of -2.0: 2e-4 x 2 + 2e-5 x 2 = 4.4e-4.
        let specs = std::slice::from_ref(&spec);
        let near = check("t", specs, &[as_bytes([1.0, -2.0004])], &dir.0)?;
        assert!(near > 0.8 && near <= 1.0, "{near}");
        let far = check("t", specs, &[as_bytes([1.0, -2.001])], &dir.0);
        assert!(far.is_err_and(|e| e.to_string().contains("out0 (out0) [1]")));
        assert!(check("t", specs, &[as_bytes([1.0, f32::NAN])], &dir.0).is_err());
        Ok(())
    }
}
