//! User kernels in the portable subset run by the host backend's CPU execution, against
//! independent f64 references: a training-style set (GELU in both forms, residual add, token +
//! position encoder, layer norm with block reductions, softmax with warp shuffles,
//! cross-entropy, AdamW, an f16 and a bf16 kernel), atomics, ballots, dynamic and static
//! shared memory, with warps of 32 and of 64 lanes. Fresh random inputs (the seed is
//! printed), outputs poisoned with NaN, explicit tolerances. Without a C++ compiler every
//! test is reported SKIPPED with the reason (and fails when `XTHUNK_REQUIRE_CXX=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use xthunk_core::backend::{Backend, Device, LaunchArg, LaunchDims, LoadedModule};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{Dim3, MemorySpace, Module, ModuleImage, Scalar};

const SOURCE: &str = r#"
extern "C" __global__ void gelu_erf(const float* x, float* y, long long n) {
  XT_FOR(i, n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2)); }
}
extern "C" __global__ void gelu_tanh(const float* x, float* y, long long n) {
  const float k = sqrtf(2.0f / XT_PI_F);
  XT_FOR(i, n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v))); }
}
// C++ linkage on purpose: the CPU table takes `&residual`.
__global__ void residual(float* out, const float* a, const float* b, long long n) {
  XT_FOR(i, n) out[i] = a[i] + b[i];
}
__global__ void encoder(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
  XT_FOR(i, (long long)B * T * C) {
    int c = (int)(i % C);
    long long bt = i / C;
    int t = (int)(bt % T);
    out[i] = wte[(long long)tokens[bt] * C + c] + wpe[(long long)t * C + c];
  }
}
__global__ void __launch_bounds__(256) layernorm(float* out, const float* x, const float* w, const float* b, int rows, int C) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + (long long)r * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
    const float mean = xt_block_reduce_add(s) / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) { float d = xr[c] - mean; v += d * d; }
    const float rstd = 1.0f / sqrtf(xt_block_reduce_add(v) / C + 1e-5f);
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[(long long)r * C + c] = (xr[c] - mean) * rstd * w[c] + b[c];
  }
}
// One warp per row, reductions by shuffles (any warp size; blockDim a multiple of it).
__global__ void softmax_warp(float* out, const float* x, int rows, int C) {
  const int ws = xt_warp_size(), lane = xt_lane_id();
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / ws;
  const int nwarps = gridDim.x * blockDim.x / ws;
  for (int r = warp; r < rows; r += nwarps) {
    const float* xr = x + (long long)r * C;
    float m = -INFINITY;
    for (int c = lane; c < C; c += ws) m = fmaxf(m, xr[c]);
    for (int o = ws / 2; o > 0; o /= 2) m = fmaxf(m, xt_shfl_xor(m, o));
    float s = 0.0f;
    for (int c = lane; c < C; c += ws) s += expf(xr[c] - m);
    for (int o = ws / 2; o > 0; o /= 2) s += xt_shfl_down(s, (unsigned)o);
    s = xt_shfl(s, 0);
    for (int c = lane; c < C; c += ws) out[(long long)r * C + c] = expf(xr[c] - m) / s;
  }
}
// Cross-entropy from logits: one block per row, block max and sum.
__global__ void cross_entropy(float* loss, const float* logits, const int* targets, int rows, int V) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* l = logits + (long long)r * V;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, l[c]);
    m = xt_block_reduce_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < V; c += blockDim.x) s += expf(l[c] - m);
    s = xt_block_reduce_add(s);
    if (threadIdx.x == 0) loss[r] = logf(s) + m - l[targets[r]];
  }
}
__global__ void adamw(float* p, const float* g, float* m, float* v, long long n, float lr, float b1, float b2, float eps, float wd, int t) {
  const float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
  XT_FOR(i, n) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi; v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
  }
}
// f16 arithmetic: each operation computed in float and rounded once.
__global__ void axpb_f16(xt_f16* y, const xt_f16* x, xt_f16 a, long long n) {
  XT_FOR(i, n) y[i] = x[i] * a + xt_f16(1.0f);
}
// bf16 row sums in float, one rounding at the end; static shared memory.
__global__ void rowsum_bf16(xt_bf16* out, const xt_bf16* x, int rows, int C) {
  __shared__ float part[1024];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (float)x[(long long)r * C + c];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.0f;
      for (unsigned k = 0; k < blockDim.x; k++) t += part[k];
      out[r] = xt_bf16(t);
    }
    __syncthreads();
  }
}
// Atomics: a histogram, a float sum, an int maximum, an exchange counter.
__global__ void atomics(unsigned* hist, float* total, int* maxv, unsigned long long* count, const int* x, long long n, int bins) {
  XT_FOR(i, n) {
    int v = x[i];
    xt_atomic_add(&hist[((v % bins) + bins) % bins], 1u);
    xt_atomic_add(total, (float)v);
    xt_atomic_max(maxv, v);
    xt_atomic_add(count, 1ull);
  }
}
// Ballots: per warp, how many of its lanes hold a positive value (and any/all).
__global__ void ballots(int* out, const float* x) {
  const long long i = xt_global_id();
  unsigned long long b = xt_ballot(x[i] > 0.0f);
  int any = xt_any(x[i] > 0.0f), all = xt_all(x[i] > 0.0f);
  if (xt_lane_id() == 0) {
    const long long w = i / xt_warp_size();
    out[3 * w] = xt_popcll(b);
    out[3 * w + 1] = any;
    out[3 * w + 2] = all;
  }
}
// Divergent barriers: half the warp at __syncthreads, half at a shuffle.
__global__ void divergent(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  else out[threadIdx.x] = xt_shfl((int)threadIdx.x, 0);
}
// Dynamic shared memory: each block reverses its chunk.
__global__ void reverse_blocks(float* y, const float* x) {
  extern __shared__ float buf[];
  const unsigned t = threadIdx.x, nt = blockDim.x;
  const long long base = (long long)blockIdx.x * nt;
  buf[t] = x[base + t];
  __syncthreads();
  y[base + t] = buf[nt - 1 - t];
}
"#;

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
        ^ ((std::process::id() as u64) << 32);
    eprintln!("seed {s:#x}");
    s
}

struct Gpu {
    dev: Arc<dyn Device>,
    module: Arc<dyn LoadedModule>,
}

/// The module on a host device with `lanes`-wide warps; `None` (reported) without a compiler.
fn gpu(lanes: u32) -> Option<Gpu> {
    let dev = HostBackend::new()
        .with_cpu_warp_size(lanes)
        .unwrap()
        .device(0)
        .unwrap();
    let m = Module {
        name: "user-kernels".into(),
        images: vec![ModuleImage::Source {
            code: SOURCE.into(),
        }],
        options: Default::default(),
    };
    match dev.load_module(&m) {
        Ok(module) => Some(Gpu { dev, module }),
        Err(e @ xthunk_core::Error::Unavailable { .. }) => {
            assert!(
                !std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1"),
                "{e}"
            );
            eprintln!("SKIPPED: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

enum A {
    Buf(Vec<u8>),
    S(Scalar),
}

fn f32s(v: &[f32]) -> A {
    A::Buf(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}
fn i32s(v: &[i32]) -> A {
    A::Buf(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}
fn poison_f32(n: usize) -> A {
    f32s(&vec![f32::NAN; n])
}
fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

impl Gpu {
    /// Runs `name` and returns every buffer's contents afterwards.
    fn run(&self, name: &str, grid: u32, block: u32, shared: u32, args: Vec<A>) -> Vec<Vec<u8>> {
        let mut bufs = vec![];
        let mut launch = vec![];
        for a in &args {
            match a {
                A::Buf(b) => {
                    let d = self
                        .dev
                        .allocate(b.len().max(1) as u64, 64, MemorySpace::Device)
                        .unwrap();
                    self.dev.copy_from_host(b, d.ptr()).unwrap();
                    launch.push(LaunchArg::Buffer {
                        ptr: d.ptr(),
                        len: b.len() as u64,
                    });
                    bufs.push(Some((d, b.len())));
                }
                A::S(s) => {
                    launch.push(LaunchArg::Scalar(*s));
                    bufs.push(None);
                }
            }
        }
        let k = self.module.kernel(name).unwrap();
        let s = self.dev.create_stream().unwrap();
        s.launch(
            &k,
            LaunchDims {
                grid: Dim3::new(grid, 1, 1),
                block: Dim3::new(block, 1, 1),
                shared_mem: shared,
            },
            &launch,
        )
        .unwrap();
        s.synchronize().unwrap();
        bufs.into_iter()
            .map(|b| match b {
                Some((d, len)) => {
                    let mut out = vec![0u8; len];
                    self.dev.copy_to_host(d.ptr(), &mut out).unwrap();
                    out
                }
                None => vec![],
            })
            .collect()
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64], rel: f64, abs: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(
            err <= abs + rel * w.abs(),
            "{what}[{i}] = {g:e}, reference {w:e} (error {err:e})"
        );
    }
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

fn erf(x: f64) -> f64 {
    // Abramowitz-Stegun 7.1.26 is too coarse for a reference: integrate the series instead.
    let mut sum = x;
    let mut term = x;
    let mut k = 0.0;
    while term.abs() > 1e-17 * sum.abs().max(1e-300) && k < 200.0 {
        k += 1.0;
        term *= -x * x / k;
        sum += term / (2.0 * k + 1.0);
    }
    if x.abs() > 5.0 {
        return x.signum();
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

#[test]
fn training_kernels_match_f64_references() {
    let Some(g) = gpu(32) else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(seed());
    let n = 3001usize;
    let x = uniform(&mut rng, n, -5.0, 5.0);
    let ns = A::S(Scalar::I64(n as i64));

    // GELU, both forms.
    let out = g.run("gelu_erf", 7, 96, 0, vec![f32s(&x), poison_f32(n), ns]);
    let want: Vec<f64> = x
        .iter()
        .map(|&v| 0.5 * v as f64 * (1.0 + erf(v as f64 / 2f64.sqrt())))
        .collect();
    assert_close("gelu_erf", &to_f32(&out[1]), &want, 1e-5, 1e-6);
    let out = g.run(
        "gelu_tanh",
        5,
        128,
        0,
        vec![f32s(&x), poison_f32(n), A::S(Scalar::I64(n as i64))],
    );
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let want: Vec<f64> = x
        .iter()
        .map(|&v| {
            let v = v as f64;
            0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
        })
        .collect();
    assert_close("gelu_tanh", &to_f32(&out[1]), &want, 1e-5, 1e-6);

    // Residual.
    let y = uniform(&mut rng, n, -3.0, 3.0);
    let out = g.run(
        "residual",
        3,
        64,
        0,
        vec![
            poison_f32(n),
            f32s(&x),
            f32s(&y),
            A::S(Scalar::I64(n as i64)),
        ],
    );
    let want: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| a as f64 + b as f64)
        .collect();
    assert_close("residual", &to_f32(&out[0]), &want, 1e-7, 0.0);

    // Encoder.
    let (b, t, c, vocab) = (3usize, 5usize, 24usize, 11usize);
    let tokens: Vec<i32> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as i32))
        .collect();
    let wte = uniform(&mut rng, vocab * c, -1.0, 1.0);
    let wpe = uniform(&mut rng, t * c, -1.0, 1.0);
    let out = g.run(
        "encoder",
        4,
        32,
        0,
        vec![
            poison_f32(b * t * c),
            i32s(&tokens),
            f32s(&wte),
            f32s(&wpe),
            A::S(Scalar::I32(b as i32)),
            A::S(Scalar::I32(t as i32)),
            A::S(Scalar::I32(c as i32)),
        ],
    );
    let mut want = vec![];
    for bt in 0..b * t {
        for ci in 0..c {
            want.push(wte[tokens[bt] as usize * c + ci] as f64 + wpe[(bt % t) * c + ci] as f64);
        }
    }
    assert_close("encoder", &to_f32(&out[0]), &want, 1e-7, 0.0);

    // AdamW, one step.
    let p = uniform(&mut rng, n, -1.0, 1.0);
    let gr = uniform(&mut rng, n, -1.0, 1.0);
    let m0 = uniform(&mut rng, n, -0.1, 0.1);
    let v0 = uniform(&mut rng, n, 0.0, 0.1);
    let (lr, b1, b2, eps, wd, step) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, 0.01f32, 3);
    let out = g.run(
        "adamw",
        4,
        64,
        0,
        vec![
            f32s(&p),
            f32s(&gr),
            f32s(&m0),
            f32s(&v0),
            A::S(Scalar::I64(n as i64)),
            A::S(Scalar::F32(lr)),
            A::S(Scalar::F32(b1)),
            A::S(Scalar::F32(b2)),
            A::S(Scalar::F32(eps)),
            A::S(Scalar::F32(wd)),
            A::S(Scalar::I32(step)),
        ],
    );
    let (c1, c2) = (1.0 - (b1 as f64).powi(step), 1.0 - (b2 as f64).powi(step));
    let mut wp = vec![];
    for i in 0..n {
        let (gi, b1, b2) = (gr[i] as f64, b1 as f64, b2 as f64);
        let mi = b1 * m0[i] as f64 + (1.0 - b1) * gi;
        let vi = b2 * v0[i] as f64 + (1.0 - b2) * gi * gi;
        let pi = p[i] as f64;
        wp.push(pi - lr as f64 * ((mi / c1) / ((vi / c2).sqrt() + eps as f64) + wd as f64 * pi));
    }
    assert_close("adamw p", &to_f32(&out[0]), &wp, 1e-6, 1e-7);
}

#[test]
fn row_kernels_with_block_reductions_and_warp_shuffles() {
    for lanes in [32, 64] {
        let Some(g) = gpu(lanes) else { return };
        let mut rng = ChaCha8Rng::seed_from_u64(seed());
        let (rows, cols) = (13usize, 333usize);
        let x = uniform(&mut rng, rows * cols, -6.0, 6.0);
        let w = uniform(&mut rng, cols, 0.5, 1.5);
        let b = uniform(&mut rng, cols, -0.5, 0.5);
        // Layer norm, a block of 100 threads (a partial last warp).
        let out = g.run(
            "layernorm",
            4,
            100,
            0,
            vec![
                poison_f32(rows * cols),
                f32s(&x),
                f32s(&w),
                f32s(&b),
                A::S(Scalar::I32(rows as i32)),
                A::S(Scalar::I32(cols as i32)),
            ],
        );
        let mut want = vec![];
        for r in 0..rows {
            let xr: Vec<f64> = x[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| v as f64)
                .collect();
            let mean = xr.iter().sum::<f64>() / cols as f64;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            for c in 0..cols {
                want.push((xr[c] - mean) * rstd * w[c] as f64 + b[c] as f64);
            }
        }
        assert_close(
            &format!("layernorm ({lanes} lanes)"),
            &to_f32(&out[0]),
            &want,
            1e-4,
            1e-4,
        );

        // Softmax, one warp per row.
        let out = g.run(
            "softmax_warp",
            2,
            128,
            0,
            vec![
                poison_f32(rows * cols),
                f32s(&x),
                A::S(Scalar::I32(rows as i32)),
                A::S(Scalar::I32(cols as i32)),
            ],
        );
        let mut want = vec![];
        for r in 0..rows {
            let xr = &x[r * cols..(r + 1) * cols];
            let m = xr.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
            let s: f64 = xr.iter().map(|&v| (v as f64 - m).exp()).sum();
            want.extend(xr.iter().map(|&v| (v as f64 - m).exp() / s));
        }
        assert_close(
            &format!("softmax ({lanes} lanes)"),
            &to_f32(&out[0]),
            &want,
            1e-5,
            1e-8,
        );

        // Cross-entropy.
        let targets: Vec<i32> = (0..rows)
            .map(|_| rng.random_range(0..cols as i32))
            .collect();
        let out = g.run(
            "cross_entropy",
            3,
            96,
            0,
            vec![
                poison_f32(rows),
                f32s(&x),
                i32s(&targets),
                A::S(Scalar::I32(rows as i32)),
                A::S(Scalar::I32(cols as i32)),
            ],
        );
        let want: Vec<f64> = (0..rows)
            .map(|r| {
                let xr = &x[r * cols..(r + 1) * cols];
                let m = xr.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
                let s: f64 = xr.iter().map(|&v| (v as f64 - m).exp()).sum();
                s.ln() + m - xr[targets[r] as usize] as f64
            })
            .collect();
        assert_close(
            &format!("cross_entropy ({lanes} lanes)"),
            &to_f32(&out[0]),
            &want,
            1e-5,
            1e-5,
        );

        // Ballots over 4 blocks of 128 threads.
        let v = uniform(&mut rng, 512, -1.0, 1.0);
        let mut v = v;
        for x in v.iter_mut().skip(lanes as usize).take(lanes as usize) {
            *x = x.abs() + 0.5; // one warp all positive
        }
        let warps = 512 / lanes as usize;
        let out = g.run(
            "ballots",
            4,
            128,
            0,
            vec![i32s(&vec![-7; 3 * warps]), f32s(&v)],
        );
        let got: Vec<i32> = out[0]
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        for wi in 0..warps {
            let lanes_v = &v[wi * lanes as usize..(wi + 1) * lanes as usize];
            let pos = lanes_v.iter().filter(|&&x| x > 0.0).count() as i32;
            assert_eq!(
                &got[3 * wi..3 * wi + 3],
                &[pos, (pos > 0) as i32, (pos == lanes as i32) as i32],
                "warp {wi} ({lanes} lanes)"
            );
        }
    }
}

#[test]
fn half_types_atomics_and_shared_memory() {
    let Some(g) = gpu(32) else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(seed());

    // f16: y = x * a + 1, each operation rounded once (to nearest even).
    let n = 1000usize;
    let x: Vec<f16> = (0..n)
        .map(|_| f16::from_f32(rng.random_range(-8.0..8.0)))
        .collect();
    let a = f16::from_f32(rng.random_range(-2.0..2.0));
    let out = g.run(
        "axpb_f16",
        3,
        64,
        0,
        vec![
            A::Buf(vec![0xff; 2 * n]),
            A::Buf(x.iter().flat_map(|h| h.to_le_bytes()).collect()),
            A::S(Scalar::F16(a.to_bits())),
            A::S(Scalar::I64(n as i64)),
        ],
    );
    for (i, c) in out[0].chunks(2).enumerate() {
        let got = f16::from_le_bytes([c[0], c[1]]);
        let prod = f16::from_f64(x[i].to_f64() * a.to_f64());
        let want = f16::from_f64(prod.to_f64() + 1.0);
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "axpb_f16[{i}]: {got} vs {want}"
        );
    }

    // bf16 row sums.
    let (rows, cols) = (9usize, 77usize);
    let xb: Vec<bf16> = (0..rows * cols)
        .map(|_| bf16::from_f32(rng.random_range(-4.0..4.0)))
        .collect();
    let out = g.run(
        "rowsum_bf16",
        4,
        50,
        0,
        vec![
            A::Buf(vec![0xff; 2 * rows]),
            A::Buf(xb.iter().flat_map(|h| h.to_le_bytes()).collect()),
            A::S(Scalar::I32(rows as i32)),
            A::S(Scalar::I32(cols as i32)),
        ],
    );
    for r in 0..rows {
        let got = bf16::from_le_bytes([out[0][2 * r], out[0][2 * r + 1]]).to_f64();
        let want: f64 = xb[r * cols..(r + 1) * cols]
            .iter()
            .map(|v| v.to_f64())
            .sum();
        assert!(
            (got - want).abs() <= 2f64.powi(-7) * want.abs() + 1e-3,
            "rowsum_bf16[{r}] = {got}, reference {want}"
        );
    }

    // Atomics from many blocks at once.
    let n = 20_000usize;
    let bins = 7;
    let xs: Vec<i32> = (0..n).map(|_| rng.random_range(-1000..1000)).collect();
    let out = g.run(
        "atomics",
        16,
        128,
        0,
        vec![
            A::Buf(vec![0; 4 * bins]),
            f32s(&[0.0]),
            i32s(&[i32::MIN]),
            A::Buf(vec![0; 8]),
            i32s(&xs),
            A::S(Scalar::I64(n as i64)),
            A::S(Scalar::I32(bins as i32)),
        ],
    );
    let mut hist = vec![0u32; bins];
    for &v in &xs {
        hist[(((v % bins as i32) + bins as i32) % bins as i32) as usize] += 1;
    }
    let got_hist: Vec<u32> = out[0]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got_hist, hist);
    let total: f64 = xs.iter().map(|&v| v as f64).sum();
    let got_total = to_f32(&out[1])[0] as f64;
    // Every partial sum is an integer below 2^24 in magnitude: exact in any order.
    assert_eq!(got_total, total);
    assert_eq!(
        i32::from_le_bytes(out[2][..4].try_into().unwrap()),
        *xs.iter().max().unwrap()
    );
    assert_eq!(
        u64::from_le_bytes(out[3][..8].try_into().unwrap()),
        n as u64
    );

    // Dynamic shared memory.
    let blocks = 5usize;
    let nt = 96usize;
    let v = uniform(&mut rng, blocks * nt, -1.0, 1.0);
    let out = g.run(
        "reverse_blocks",
        blocks as u32,
        nt as u32,
        (nt * 4) as u32,
        vec![poison_f32(blocks * nt), f32s(&v)],
    );
    let got = to_f32(&out[0]);
    for bi in 0..blocks {
        for t in 0..nt {
            assert_eq!(
                got[bi * nt + t],
                v[bi * nt + nt - 1 - t],
                "block {bi} thread {t}"
            );
        }
    }
}

#[test]
fn launch_errors_are_clear() {
    let Some(g) = gpu(32) else { return };
    // A name the source does not define.
    let e = g.module.kernel("nope").err().unwrap().to_string();
    assert!(
        e.contains("no kernel `nope`") && e.contains("residual"),
        "{e}"
    );
    // An immediate of the wrong size for the parameter.
    let k = g.module.kernel("residual").unwrap();
    let s = g.dev.create_stream().unwrap();
    let buf = g.dev.allocate(256, 64, MemorySpace::Device).unwrap();
    let b = LaunchArg::Buffer {
        ptr: buf.ptr(),
        len: 256,
    };
    let r = s.launch(
        &k,
        LaunchDims {
            grid: Dim3::new(1, 1, 1),
            block: Dim3::new(1, 1, 1),
            shared_mem: 0,
        },
        &[b, b, b, LaunchArg::Scalar(Scalar::I32(4))],
    );
    let e = r.err().unwrap().to_string();
    assert!(e.contains("argument 3") && e.contains("4 bytes"), "{e}");
    // A deadlock is a failed launch naming the block, not a hang.
    let k = g.module.kernel("divergent").unwrap();
    s.launch(
        &k,
        LaunchDims {
            grid: Dim3::new(2, 1, 1),
            block: Dim3::new(32, 1, 1),
            shared_mem: 0,
        },
        &[b],
    )
    .unwrap();
    let e = s.synchronize().err().unwrap().to_string();
    assert!(e.contains("deadlock in block"), "{e}");
}

#[test]
fn kernels_the_preprocessor_removes_are_not_in_the_table() {
    let dev = HostBackend::new().device(0).unwrap();
    let code = "#if defined(XT_CUDA) || defined(XT_HIP)\n__global__ void gpu_only(float* y) { y[0] = 1.0f; }\n#else\n__global__ void cpu_side(float* y) { y[0] = 2.0f; }\n#endif\n#define K(name) __global__ void name(float* y) { y[0] = 3.0f; }\nK(from_macro)\n";
    let m = match dev.load_module(&Module {
        name: "conditional".into(),
        images: vec![ModuleImage::Source { code: code.into() }],
        options: Default::default(),
    }) {
        Ok(m) => m,
        Err(e @ xthunk_core::Error::Unavailable { .. }) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(m.kernel("gpu_only").is_err());
    for (name, want) in [("cpu_side", 2.0f32), ("from_macro", 3.0)] {
        let k = m.kernel(name).unwrap();
        let b = dev.allocate(4, 64, MemorySpace::Device).unwrap();
        dev.copy_from_host(&f32::NAN.to_le_bytes(), b.ptr())
            .unwrap();
        let s = dev.create_stream().unwrap();
        s.launch(
            &k,
            LaunchDims {
                grid: Dim3::new(1, 1, 1),
                block: Dim3::new(1, 1, 1),
                shared_mem: 0,
            },
            &[LaunchArg::Buffer {
                ptr: b.ptr(),
                len: 4,
            }],
        )
        .unwrap();
        s.synchronize().unwrap();
        let mut out = [0u8; 4];
        dev.copy_to_host(b.ptr(), &mut out).unwrap();
        assert_eq!(f32::from_le_bytes(out), want, "{name}");
    }
}
