//! The checked portable kernel set (`tests/kernels/user/checked_set.cu`) against independent
//! f64 references, on whatever device the including test binary's `device(lanes)` gives: fresh
//! random inputs (the seed is printed), outputs poisoned with NaN, explicit tolerances.
//! Included by `core/tests/cpu_kernels.rs` (the host backend's CPU execution) and
//! `cli-tests/user_kernels.rs` (emulated CUDA and ROCm).

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use xthunk_core::backend::{Device, LaunchArg, LaunchDims, LoadedModule};
use xthunk_core::ir::{Dim3, MemorySpace, Module, ModuleImage, Scalar};

pub const SOURCE: &str = include_str!("../../../tests/kernels/user/checked_set.cu");

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
        ^ ((std::process::id() as u64) << 32);
    eprintln!("seed {s:#x}");
    s
}

pub struct Gpu {
    pub dev: Arc<dyn Device>,
    pub module: Arc<dyn LoadedModule>,
}

/// The checked set loaded on the device with `lanes`-wide warps that the including test binary
/// gives (`device(lanes)`); `None` (reported SKIPPED there) where it has none.
pub fn gpu(lanes: u32) -> Option<Gpu> {
    let dev = super::device(lanes)?;
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
    for lanes in [32, 64] {
        if let Some(g) = gpu(lanes) {
            training_kernels(&g);
        }
    }
}

fn training_kernels(g: &Gpu) {
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
    for lanes in [32, 64] {
        if let Some(g) = gpu(lanes) {
            half_types_atomics_and_shared(&g);
        }
    }
}

fn half_types_atomics_and_shared(g: &Gpu) {
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
