//! `executor/multi_thunk_program`: the multi-thunk program (copy → kernel → gemm → kernel →
//! memset, with a nested sequence, temporaries, a constant and an independent branch), its
//! inputs and its check against the f64 reference, under every schedule.

use super::common::{load, run_all_schedules};
use crate::reference;
use crate::util::{
    CheckResult, CheckRng, Values, compare_bytes, compare_floats, decode, encode, ensure,
    execute_loaded, fail, poison_byte, uniform,
};
use std::sync::Arc;
use xthunk_core::Error;
use xthunk_core::backend::Device;
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::ir::{DType, Executable, MemsetPattern};

pub(super) const M: usize = 19;
pub(super) const K: usize = 23;
pub(super) const N: usize = 13;

/// `y[0..M-1] = gelu(x) @ w + bias` and `y[M-1] = 1.0`:
///
/// ```text
/// entry[0] copy      x -> t                      (temp)
/// entry[1] sequence  { gelu_f32(t -> u)          (temp)
///                      gemm u @ w -> g }         (temp, beta 0)
/// entry[2] add_row_f32(g, bias -> y)             (bias a constant)
/// entry[3] memset    last row of y := 1.0f
/// entry[4] relu_f32(x -> z)                      (independent of entries 0..3)
/// ```
pub(super) fn program(bias: &[f64]) -> CheckResult<Executable> {
    let mut b = ExecutableBuilder::new("conformance_multi_thunk");
    let m = b.standard_module();
    let x = b.parameter("x", DType::F32, &[M as u64, K as u64]);
    let w = b.parameter("w", DType::F32, &[K as u64, N as u64]);
    let y = b.output("y", DType::F32, &[M as u64, N as u64]);
    let z = b.output("z", DType::F32, &[M as u64, K as u64]);
    let bias = b.constant(
        DType::F32,
        &[N as u64],
        encode(DType::F32, &Values::F(bias.to_vec()))?,
    );
    let t = b.temp(DType::F32, &[M as u64, K as u64]);
    let u = b.temp(DType::F32, &[M as u64, K as u64]);
    let g = b.temp(DType::F32, &[M as u64, N as u64]);
    b.copy(x.slice(), t.slice());
    b.begin_sequence();
    b.kernel(
        &m,
        "gelu_f32",
        (M * K) as u64,
        vec![t.r(), u.w(), ((M * K) as i64).into()],
    );
    b.matmul(&u, &w, &g, 1.0, 0.0);
    b.end_sequence();
    b.kernel(
        &m,
        "add_row_f32",
        (M * N) as u64,
        vec![g.r(), bias.r(), y.w(), (M as i64).into(), (N as i64).into()],
    );
    b.memset(
        y.elems(((M - 1) * N) as u64, N as u64).slice(),
        MemsetPattern::U32(1.0f32.to_bits()),
    );
    b.kernel(
        &m,
        "relu_f32",
        (M * K) as u64,
        vec![x.r(), z.w(), ((M * K) as i64).into()],
    );
    Ok(b.build().map_err(Error::from)?)
}

pub(super) struct Inputs {
    x: Vec<f64>,
    w: Vec<f64>,
    pub(super) bias: Vec<f64>,
}

pub(super) fn inputs(rng: &mut CheckRng) -> Inputs {
    Inputs {
        x: uniform(rng, DType::F32, M * K, -3.0, 3.0),
        w: uniform(rng, DType::F32, K * N, -1.0, 1.0),
        bias: uniform(rng, DType::F32, N, -1.0, 1.0),
    }
}

pub(super) fn params(i: &Inputs) -> CheckResult<Vec<Vec<u8>>> {
    Ok(vec![
        encode(DType::F32, &Values::F(i.x.clone()))?,
        encode(DType::F32, &Values::F(i.w.clone()))?,
    ])
}

pub(super) fn poisoned_y() -> Vec<Vec<u8>> {
    vec![
        vec![poison_byte(DType::F32); M * N * 4],
        vec![poison_byte(DType::F32); M * K * 4],
    ]
}

/// Compares the program's outputs with the f64 reference.
pub(super) fn verify(i: &Inputs, outs: &[Vec<u8>]) -> CheckResult {
    let (Some(y), Some(z)) = (outs.first(), outs.get(1)) else {
        return Err(fail("the program returned fewer than 2 outputs"));
    };
    let zexp: Vec<f64> = i.x.iter().map(|&v| v.max(0.0)).collect();
    let zgot = decode(DType::F32, z);
    compare_floats("z", zgot.floats("z")?, &zexp, K, |_| 0.0)?;
    let g: Vec<f64> = i.x.iter().map(|&v| reference::gelu(v)).collect();
    let mut exp = vec![1.0; M * N];
    let mut tol = vec![0.0; M * N];
    for r in 0..M - 1 {
        for c in 0..N {
            let (mut acc, mut mag) = (0.0, 0.0);
            for l in 0..K {
                let p = g[r * K + l] * i.w[l * N + c];
                acc += p;
                mag += p.abs();
            }
            exp[r * N + c] = acc + i.bias[c];
            tol[r * N + c] = 1e-5 * (mag + i.bias[c].abs()) + 1e-6;
        }
    }
    let got = decode(DType::F32, y);
    compare_floats("y", got.floats("y")?, &exp, N, |j| tol[j])
}

pub(super) fn multi_thunk(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let i = inputs(rng);
    let exe = program(&i.bias)?;
    let out = run_all_schedules(device, &exe, &params(&i)?, &poisoned_y())?;
    verify(&i, &out)?;
    // Again (pooled state reused) with a generous deadline, and through run_with_host_data.
    let loaded = load(device, exe, &ExecutorConfig::default())?;
    let opts = ExecuteOptions {
        deadline: Some(std::time::Duration::from_secs(60)),
        ..Default::default()
    };
    for run in 0..2 {
        let again = execute_loaded(device, &loaded, &params(&i)?, &poisoned_y(), &opts)?;
        for (k, (a, b)) in again.iter().zip(&out).enumerate() {
            compare_bytes(
                &format!("output {k} of execution {run} with a deadline"),
                a,
                b,
            )?;
        }
    }
    let p = params(&i)?;
    let refs: Vec<&[u8]> = p.iter().map(|v| v.as_slice()).collect();
    let out3 = loaded.run_with_host_data(&refs, &ExecuteOptions::default())?;
    ensure(out3.len() == out.len(), || {
        format!("run_with_host_data returned {} outputs", out3.len())
    })?;
    for (k, (a, b)) in out3.iter().zip(&out).enumerate() {
        compare_bytes(&format!("output {k} of run_with_host_data"), a, b)?;
    }
    Ok(())
}
