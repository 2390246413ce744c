//! `kernels/user/cuda_*`: training kernels written as CUDA code is written
//! (`conformance/kernels/cuda/`: a 128-bit load/store helper on `int4` with cache hints, GELU,
//! residual and encoder over it, layer norm by `cg::reduce` over `thread_block_tile<32>`,
//! softmax by `__shfl_xor_sync` over `warpSize`, embedding backward by `atomicAdd`, bf16 through
//! `cuda_bf16.h`), each file including the shared header `common.h` carried in the module.
//! Run like the rest of `kernels/user/`: fresh random inputs, NaN-poisoned outputs, an f64
//! reference with the tolerance each case states, and the CPU execution with the device's
//! warp width.
//!
//! Tolerances, `ε` the f32 epsilon (bf16's `2⁻⁸` for the bf16 sum): sums of two terms
//! `ε|expected|`; GELU [`Tol::transcendental`] + `4ε|x|`; softmax `cols·ε·expected` more;
//! layer norm `4(cols+2)ε(|γ|·max|z| + |β|)`, its mean `cols·ε·mean|x|`, its rstd
//! `4·cols·ε·rstd`; the embedding gradient `terms·ε·Σ|dout|`.

use super::cases::{F32, eps, f32_out, floats, i32s, ints, poison, reference_f32};
use super::types::{Case, Expect};
use crate::reference;
use crate::util::{CheckResult, CheckRng, Tol, uniform};
use rand::Rng;
use std::sync::Arc;
use xthunk_core::backend::{Device, LaunchArg, LaunchDims};
use xthunk_core::ir::{
    DType, Dim3, HeaderSource, MemorySpace, Module, ModuleImage, ModuleOptions, Scalar,
};

/// The shared header the kernels include (`#include "common.h"`).
pub const COMMON_H: &str = include_str!("../../../../kernels/cuda/common.h");

/// The kernel files, each including `common.h`.
pub const FILES: &[(&str, &str)] = &[
    ("gelu.cu", include_str!("../../../../kernels/cuda/gelu.cu")),
    (
        "residual.cu",
        include_str!("../../../../kernels/cuda/residual.cu"),
    ),
    (
        "encoder.cu",
        include_str!("../../../../kernels/cuda/encoder.cu"),
    ),
    (
        "layernorm.cu",
        include_str!("../../../../kernels/cuda/layernorm.cu"),
    ),
    (
        "softmax.cu",
        include_str!("../../../../kernels/cuda/softmax.cu"),
    ),
    (
        "embedding.cu",
        include_str!("../../../../kernels/cuda/embedding.cu"),
    ),
];

/// Every CUDA spelling the subset accepts, used once (compiled by the compile tests; run on
/// the CPU by this crate's tests).
pub const SPELLINGS: &str = include_str!("../../../../kernels/cuda/spellings.cu");

/// The options every module of the set carries: the shared header.
pub fn options() -> ModuleOptions {
    ModuleOptions {
        headers: vec![HeaderSource {
            name: "common.h".into(),
            code: COMMON_H.into(),
        }],
        ..Default::default()
    }
}

/// One module `name` of `code` (a kernel file, or several) with the shared header.
pub fn cuda_module(name: &str, code: &str) -> Module {
    Module {
        name: name.into(),
        images: vec![ModuleImage::Source { code: code.into() }],
        options: options(),
    }
}

/// The whole set as one module (the files one after the other, as written).
pub fn module() -> Module {
    let code: String = FILES.iter().map(|(_, c)| *c).collect::<Vec<_>>().join("\n");
    cuda_module("cuda-style-kernels", &code)
}

/// Elements per 128-bit pack of f32.
const PACK: usize = 4;

fn blocks(n: usize, block: usize) -> u32 {
    n.div_ceil(block) as u32
}

pub(super) fn gelu(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let n = PACK * 777;
    let x = uniform(rng, F32, n, -5.0, 5.0);
    let values: Vec<f64> = x.iter().map(|&v| reference::gelu(v)).collect();
    let base = Tol::transcendental(F32);
    let tol = values
        .iter()
        .zip(&x)
        .map(|(e, xi)| base.bound(*e) + 4.0 * eps() * xi.abs())
        .collect();
    Ok(vec![Case {
        what: format!("gelu_forward n={n}"),
        kernel: "gelu_forward",
        grid: blocks(n / PACK, 128),
        block: 128,
        shared: 0,
        args: vec![poison(F32, n), floats(F32, &x)?, i32s(n)],
        expect: vec![f32_out(0, values, tol, 0)],
    }])
}

/// `a + b` rounded once: within `ε|expected|` of the f64 sum.
fn sum_tol(values: &[f64], e: f64) -> Vec<f64> {
    values.iter().map(|v| e * v.abs()).collect()
}

pub(super) fn residual(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let n = PACK * 501;
    let a = uniform(rng, F32, n, -4.0, 4.0);
    let b = uniform(rng, F32, n, -4.0, 4.0);
    let values: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let tol = sum_tol(&values, eps());
    Ok(vec![Case {
        what: format!("residual_forward n={n}"),
        kernel: "residual_forward",
        grid: blocks(n / PACK, 64),
        block: 64,
        shared: 0,
        args: vec![poison(F32, n), floats(F32, &a)?, floats(F32, &b)?, i32s(n)],
        expect: vec![f32_out(0, values, tol, 0)],
    }])
}

pub(super) fn residual_bf16(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let bf = DType::BF16;
    let n = 8 * 300;
    let a = uniform(rng, bf, n, -4.0, 4.0);
    let b = uniform(rng, bf, n, -4.0, 4.0);
    let values: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let tol = sum_tol(&values, 2f64.powi(-8));
    Ok(vec![Case {
        what: format!("residual_forward_bf16 n={n}"),
        kernel: "residual_forward_bf16",
        grid: blocks(n / 8, 96),
        block: 96,
        shared: 0,
        args: vec![poison(bf, n), floats(bf, &a)?, floats(bf, &b)?, i32s(n)],
        expect: vec![Expect::Floats {
            arg: 0,
            dtype: bf,
            values,
            tol,
            cols: 0,
        }],
    }])
}

pub(super) fn encoder(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (b, t, c, vocab) = (3usize, 5usize, 64usize, 11usize);
    let tokens: Vec<i64> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as i64))
        .collect();
    let wte = uniform(rng, F32, vocab * c, -1.0, 1.0);
    let wpe = uniform(rng, F32, t * c, -1.0, 1.0);
    let values: Vec<f64> = (0..b * t * c)
        .map(|i| {
            let (bt, ch) = (i / c, i % c);
            wte[tokens[bt] as usize * c + ch] + wpe[(bt % t) * c + ch]
        })
        .collect();
    let tol = sum_tol(&values, eps());
    Ok(vec![Case {
        what: format!("encoder_forward {b}x{t}x{c}"),
        kernel: "encoder_forward",
        grid: blocks(b * t * c / PACK, 32),
        block: 32,
        shared: 0,
        args: vec![
            poison(F32, b * t * c),
            ints(DType::I32, &tokens)?,
            floats(F32, &wte)?,
            floats(F32, &wpe)?,
            i32s(b),
            i32s(t),
            i32s(c),
        ],
        expect: vec![f32_out(0, values, tol, c)],
    }])
}

pub(super) fn layernorm(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (rows, cols) = (37usize, 100usize);
    let x = uniform(rng, F32, rows * cols, -6.0, 6.0);
    let w = uniform(rng, F32, cols, 0.5, 1.5);
    let b = uniform(rng, F32, cols, -0.5, 0.5);
    let (values, zmax) = reference::layer_norm(&x, &w, &b, reference_f32(1e-5), rows, cols);
    let tol = (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            4.0 * (cols + 2) as f64 * eps() * (w[c].abs() * zmax[r] + b[c].abs())
        })
        .collect();
    let mut means = vec![];
    let mut rstds = vec![];
    let (mut mtol, mut rtol) = (vec![], vec![]);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / cols as f64;
        let s = 1.0 / (var + reference_f32(1e-5)).sqrt();
        mtol.push(cols as f64 * eps() * row.iter().map(|v| v.abs()).sum::<f64>() / cols as f64);
        rtol.push(4.0 * cols as f64 * eps() * s);
        means.push(m);
        rstds.push(s);
    }
    // Blocks of 128 threads: four 32-thread tiles, one row each, on 32- and 64-lane warps.
    Ok(vec![Case {
        what: format!("layernorm_forward {rows}x{cols}"),
        kernel: "layernorm_forward",
        grid: rows.div_ceil(4) as u32,
        block: 128,
        shared: 0,
        args: vec![
            poison(F32, rows * cols),
            poison(F32, rows),
            poison(F32, rows),
            floats(F32, &x)?,
            floats(F32, &w)?,
            floats(F32, &b)?,
            i32s(rows),
            i32s(cols),
        ],
        expect: vec![
            f32_out(0, values, tol, cols),
            f32_out(1, means, mtol, 0),
            f32_out(2, rstds, rtol, 0),
        ],
    }])
}

pub(super) fn softmax(rng: &mut CheckRng, lanes: u32) -> CheckResult<Vec<Case>> {
    let mut v = Vec::new();
    for (rows, cols) in [(13usize, 333usize), (5, 1), (6, 64)] {
        let x = uniform(rng, F32, rows * cols, -6.0, 6.0);
        let values = reference::softmax(&x, rows, cols);
        let base = Tol::transcendental(F32);
        let tol = values
            .iter()
            .map(|&e| base.bound(e) + cols as f64 * eps() * e)
            .collect();
        // Blocks of 128 threads: a multiple of every warp width; one row per warp.
        let warps = (128 / lanes) as usize;
        v.push(Case {
            what: format!("softmax_forward {rows}x{cols}"),
            kernel: "softmax_forward",
            grid: rows.div_ceil(warps) as u32,
            block: 128,
            shared: 0,
            args: vec![
                poison(F32, rows * cols),
                floats(F32, &x)?,
                i32s(rows),
                i32s(cols),
            ],
            expect: vec![f32_out(0, values, tol, cols)],
        });
    }
    Ok(v)
}

pub(super) fn embedding_backward(rng: &mut CheckRng, _: u32) -> CheckResult<Vec<Case>> {
    let (b, t, c, vocab) = (4usize, 8usize, 32usize, 5usize);
    let tokens: Vec<i64> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as i64))
        .collect();
    let dout = uniform(rng, F32, b * t * c, -1.0, 1.0);
    let mut values = vec![0.0f64; vocab * c];
    let mut mags = vec![0.0f64; vocab * c];
    let mut terms = vec![0usize; vocab];
    for (bt, &tok) in tokens.iter().enumerate() {
        terms[tok as usize] += 1;
        for ch in 0..c {
            values[tok as usize * c + ch] += dout[bt * c + ch];
            mags[tok as usize * c + ch] += dout[bt * c + ch].abs();
        }
    }
    let tol = (0..vocab * c)
        .map(|i| terms[i / c] as f64 * eps() * mags[i])
        .collect();
    Ok(vec![Case {
        what: format!("embedding_backward {b}x{t}x{c} into {vocab} rows"),
        kernel: "embedding_backward",
        grid: blocks(b * t * c, 64),
        block: 64,
        shared: 0,
        args: vec![
            // Accumulated into: zeros, not poison.
            floats(F32, &vec![0.0; vocab * c])?,
            floats(F32, &dout)?,
            ints(DType::I32, &tokens)?,
            i32s(b),
            i32s(t),
            i32s(c),
        ],
        expect: vec![f32_out(0, values, tol, c)],
    }])
}

/// Runs `softmax_forward_block32` (one row per block of 32 threads, butterfly offsets from
/// `warpSize / 2`) of [`module`] on `device` over `x` (`rows` x `cols`): the rows' softmax
/// where a warp has 32 lanes; on 64-lane warps the error the device reports (the emulator and
/// the CPU execution: the shuffle reading a lane the block does not have).
pub fn softmax_block32(
    device: &Arc<dyn Device>,
    x: &[f32],
    rows: usize,
    cols: usize,
) -> Result<Vec<f32>, String> {
    let run = || -> CheckResult<Vec<f32>> {
        let m = device.load_module(&module())?;
        let k = m.kernel("softmax_forward_block32")?;
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let inp = crate::util::upload(device, &bytes, MemorySpace::Device)?;
        let out = crate::util::upload(device, &vec![0xff; bytes.len()], MemorySpace::Device)?;
        let s = device.create_stream()?;
        let len = bytes.len() as u64;
        s.launch(
            &k,
            LaunchDims {
                grid: Dim3::x(rows as u32),
                block: Dim3::x(32),
                shared_mem: 0,
            },
            &[
                LaunchArg::Buffer {
                    ptr: out.ptr(),
                    len,
                },
                LaunchArg::Buffer {
                    ptr: inp.ptr(),
                    len,
                },
                LaunchArg::Scalar(Scalar::I32(rows as i32)),
                LaunchArg::Scalar(Scalar::I32(cols as i32)),
            ],
        )?;
        s.synchronize()?;
        let got = crate::util::download(device, out.ptr(), bytes.len())?;
        Ok(got
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    run().map_err(|e| e.to_string())
}
