//! `executor/while_loop`, `executor/conditional`, `executor/async_scope` and
//! `executor/command_buffer`: control flow, async scopes and command buffers.

use super::common::{f32_bytes, load, run_all_schedules, std_kernel};
use crate::util::{
    CheckResult, CheckRng, compare_bytes, compare_floats, decode, execute_loaded, poison_byte,
    uniform, upload,
};
use std::sync::Arc;
use xthunk_core::Error;
use xthunk_core::backend::Device;
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::ir::{
    AsyncDoneThunk, AsyncKind, AsyncStartThunk, CommandBufferThunk, ConditionalThunk, CopyThunk,
    DType, Executable, MemorySpace, MemsetPattern, MemsetThunk, Slice, Thunk, WhileThunk,
};

/// `y = x * 2^iterations`: a `While` whose `cond` computes `pred = counter > 0` on the device
/// (from an i32 counter parameter copied into a temporary) and whose body doubles `y` and
/// decrements the counter; also with a `trip_count` (no `cond`).
pub(super) fn while_loop(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let n = 37usize;
    let x = uniform(rng, DType::F32, n, -4.0, 4.0);
    for (trip, iterations) in [
        (None, 0i32),
        (None, 3),
        (None, 9),
        (Some(0u64), 0),
        (Some(4), 4),
    ] {
        let mut b = ExecutableBuilder::new("conformance_while");
        b.standard_module();
        let xp = b.parameter("x", DType::F32, &[n as u64]);
        let cp = b.parameter("count", DType::I32, &[1]);
        let y = b.output("y", DType::F32, &[n as u64]);
        let counter = b.temp(DType::I32, &[1]);
        let tmp = b.temp(DType::I32, &[1]);
        let pred = b.temp(DType::Pred, &[1]);
        let zero = b.constant(DType::I32, &[1], 0i32.to_le_bytes().to_vec());
        let one = b.constant(DType::I32, &[1], 1i32.to_le_bytes().to_vec());
        let neg1 = b.constant(DType::I32, &[1], (-1i32).to_le_bytes().to_vec());
        b.copy(xp.slice(), y.slice());
        b.copy(cp.slice(), counter.slice());
        let cond = vec![
            std_kernel(
                "max_i32",
                1,
                vec![counter.r(), zero.r(), tmp.w(), 1i64.into()],
            ),
            std_kernel("min_i32", 1, vec![tmp.r(), one.r(), tmp.w(), 1i64.into()]),
            CopyThunk {
                src: Slice::new(tmp.slice().allocation, 0, 1),
                dst: pred.slice(),
            }
            .into(),
        ];
        let body = vec![
            std_kernel(
                "scale_f32",
                n as u64,
                vec![y.rw(), 2.0f32.into(), (n as i64).into()],
            ),
            std_kernel(
                "add_i32",
                1,
                vec![counter.r(), neg1.r(), counter.w(), 1i64.into()],
            ),
        ];
        b.push(
            WhileThunk {
                cond,
                pred: pred.slice(),
                body,
                trip_count: trip,
            }
            .into(),
        );
        let exe = b.build().map_err(Error::from)?;
        let out = run_all_schedules(
            device,
            &exe,
            &[f32_bytes(&x)?, iterations.to_le_bytes().to_vec()],
            &[vec![poison_byte(DType::F32); n * 4]],
        )?;
        let got = decode(DType::F32, &out[0]);
        let exp: Vec<f64> = x.iter().map(|v| v * 2f64.powi(iterations)).collect();
        compare_floats(
            &format!("while (trip count {trip:?}, {iterations} iterations): y"),
            got.floats("y")?,
            &exp,
            0,
            |_| 0.0,
        )?;
    }
    Ok(())
}

/// `Conditional` on an i32 index (out-of-range and negative indices run the last branch) and
/// on a pred (true runs branch 0).
pub(super) fn conditional(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let n = 29usize;
    let vals = uniform(rng, DType::F32, 3, -100.0, 100.0);
    for index_type in [DType::I32, DType::Pred] {
        let mut b = ExecutableBuilder::new("conformance_conditional");
        b.standard_module();
        let idx = b.parameter("index", index_type, &[1]);
        let y = b.output("y", DType::F32, &[n as u64]);
        let fill = |v: f64| {
            std_kernel(
                "fill_f32",
                n as u64,
                vec![y.w(), (v as f32).into(), (n as i64).into()],
            )
        };
        let branches = if index_type == DType::Pred {
            vec![vec![fill(vals[0])], vec![Thunk::from(vec![fill(vals[1])])]]
        } else {
            vec![
                vec![fill(vals[0])],
                vec![Thunk::from(vec![fill(vals[1])])],
                vec![fill(vals[2])],
            ]
        };
        b.push(
            ConditionalThunk {
                index: idx.slice(),
                index_type,
                branches,
            }
            .into(),
        );
        let exe = b.build().map_err(Error::from)?;
        let cases: Vec<(Vec<u8>, usize)> = if index_type == DType::Pred {
            vec![(vec![1], 0), (vec![0], 1)]
        } else {
            [
                (0i32, 0usize),
                (1, 1),
                (2, 2),
                (3, 2),
                (-1, 2),
                (i32::MAX, 2),
            ]
            .into_iter()
            .map(|(i, br)| (i.to_le_bytes().to_vec(), br))
            .collect()
        };
        for (index, branch) in cases {
            let out = run_all_schedules(
                device,
                &exe,
                std::slice::from_ref(&index),
                &[vec![poison_byte(DType::F32); n * 4]],
            )?;
            let got = decode(DType::F32, &out[0]);
            compare_floats(
                &format!("{index_type} conditional with index bytes {index:?} (branch {branch})"),
                got.floats("y")?,
                &vec![vals[branch]; n],
                0,
                |_| 0.0,
            )?;
        }
    }
    Ok(())
}

/// `y = exp(x) + (-x)`: `exp` runs in an async compute scope (and a copy in an async
/// communication scope) while `neg` runs on the main stream; the add after `AsyncDone` sees
/// both.
pub(super) fn async_scope(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let n = 1003usize;
    let x = uniform(rng, DType::F32, n, -3.0, 3.0);
    let mut b = ExecutableBuilder::new("conformance_async");
    b.standard_module();
    let xp = b.parameter("x", DType::F32, &[n as u64]);
    let y = b.output("y", DType::F32, &[n as u64]);
    let c = b.output("c", DType::F32, &[n as u64]);
    let e = b.temp(DType::F32, &[n as u64]);
    let g = b.temp(DType::F32, &[n as u64]);
    let nn = (n as i64).into();
    b.push(
        AsyncStartThunk {
            id: 0,
            kind: AsyncKind::Compute,
            body: vec![std_kernel("exp_f32", n as u64, vec![xp.r(), e.w(), nn])],
        }
        .into(),
    );
    b.push(
        AsyncStartThunk {
            id: 1,
            kind: AsyncKind::Communication,
            body: vec![
                CopyThunk {
                    src: xp.slice(),
                    dst: c.slice(),
                }
                .into(),
            ],
        }
        .into(),
    );
    b.push(std_kernel("neg_f32", n as u64, vec![xp.r(), g.w(), nn]));
    b.push(AsyncDoneThunk { id: 0 }.into());
    b.push(std_kernel(
        "add_f32",
        n as u64,
        vec![e.r(), g.r(), y.w(), nn],
    ));
    b.push(AsyncDoneThunk { id: 1 }.into());
    let exe = b.build().map_err(Error::from)?;
    let out = run_all_schedules(
        device,
        &exe,
        &[f32_bytes(&x)?],
        &[
            vec![poison_byte(DType::F32); n * 4],
            vec![poison_byte(DType::F32); n * 4],
        ],
    )?;
    let got = decode(DType::F32, &out[0]);
    let exp: Vec<f64> = x.iter().map(|v| v.exp() - v).collect();
    let tol = crate::util::Tol::transcendental(DType::F32);
    compare_floats("y", got.floats("y")?, &exp, 0, |j| {
        tol.bound(exp[j]) + 4.0 * crate::util::compute_eps(DType::F32) * (x[j].exp() + x[j].abs())
    })?;
    compare_bytes(
        "c (copied in the communication scope)",
        &out[1],
        &f32_bytes(&x)?,
    )
}

/// A command buffer (copy, 6 kernels, gemm, memset) gives the same bytes as the same thunks
/// run directly, over several executions with fresh buffers (new addresses: re-recording) and
/// repeated executions of one loaded executable (replay).
pub(super) fn command_buffer(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let (m, k) = (12usize, 16usize);
    let make = |wrap: bool| -> CheckResult<Executable> {
        let mut b = ExecutableBuilder::new("conformance_command_buffer");
        b.standard_module();
        let x = b.parameter("x", DType::F32, &[m as u64, k as u64]);
        let w = b.parameter("w", DType::F32, &[k as u64, k as u64]);
        let y = b.output("y", DType::F32, &[m as u64, k as u64]);
        let t = b.temp(DType::F32, &[m as u64, k as u64]);
        let mk = ((m * k) as i64).into();
        let mut body = vec![
            CopyThunk {
                src: x.slice(),
                dst: t.slice(),
            }
            .into(),
        ];
        for i in 0..6 {
            body.push(std_kernel(
                "scale_f32",
                (m * k) as u64,
                vec![t.rw(), (1.0f32 + 0.125 * i as f32).into(), mk],
            ));
        }
        body.push(
            xthunk_core::ir::GemmThunk {
                a: t.slice(),
                b: w.slice(),
                c: y.slice(),
                m: m as u64,
                n: k as u64,
                k: k as u64,
                lda: k as u64,
                ldb: k as u64,
                ldc: k as u64,
                trans_a: false,
                trans_b: false,
                alpha: 1.0,
                beta: 0.0,
                dtype: DType::F32,
                batch: 1,
                stride_a: (m * k) as u64,
                stride_b: (k * k) as u64,
                stride_c: (m * k) as u64,
            }
            .into(),
        );
        body.push(
            MemsetThunk {
                dst: Slice::new(y.slice().allocation, 0, (k * 4) as u64),
                pattern: MemsetPattern::U32(0),
            }
            .into(),
        );
        if wrap {
            b.push(CommandBufferThunk { body }.into());
        } else {
            for t in body {
                b.push(t);
            }
        }
        Ok(b.build().map_err(Error::from)?)
    };
    let direct = load(device, make(false)?, &ExecutorConfig::default())?;
    let cmd = load(device, make(true)?, &ExecutorConfig::default())?;
    let init = vec![vec![poison_byte(DType::F32); m * k * 4]];
    for round in 0..3 {
        let x = uniform(rng, DType::F32, m * k, -1.0, 1.0);
        let w = uniform(rng, DType::F32, k * k, -1.0, 1.0);
        let p = vec![f32_bytes(&x)?, f32_bytes(&w)?];
        let a = execute_loaded(device, &direct, &p, &init, &ExecuteOptions::default())?;
        for rep in 0..2 {
            let c = execute_loaded(device, &cmd, &p, &init, &ExecuteOptions::default())?;
            compare_bytes(
                &format!("round {round}, execution {rep}: command buffer vs direct"),
                &c[0],
                &a[0],
            )?;
        }
        // Replay with the same buffers.
        let pb: Vec<_> = p
            .iter()
            .map(|d| upload(device, d, MemorySpace::Device))
            .collect::<CheckResult<_>>()?;
        let yb = upload(device, &init[0], MemorySpace::Device)?;
        for rep in 0..2 {
            cmd.execute(
                &[pb[0].as_ref(), pb[1].as_ref()],
                &[yb.as_ref()],
                &ExecuteOptions::default(),
            )?;
            let mut got = vec![0u8; m * k * 4];
            device.copy_to_host(yb.ptr(), &mut got)?;
            compare_bytes(
                &format!("round {round}, replay {rep} on the same buffers"),
                &got,
                &a[0],
            )?;
        }
        // Against the reference: y = (x * Π scales) @ w, first row zero.
        let scale: f64 = (0..6).map(|i| 1.0 + 0.125 * i as f64).product();
        let got = decode(DType::F32, &a[0]);
        let mut exp = vec![0.0; m * k];
        let mut tol = vec![0.0; m * k];
        for r in 1..m {
            for c in 0..k {
                let (mut acc, mut mag) = (0.0, 0.0);
                for l in 0..k {
                    let pr = x[r * k + l] * scale * w[l * k + c];
                    acc += pr;
                    mag += pr.abs();
                }
                exp[r * k + c] = acc;
                tol[r * k + c] = 1e-5 * mag + 1e-7;
            }
        }
        compare_floats(
            &format!("round {round}: y"),
            got.floats("y")?,
            &exp,
            k,
            |j| tol[j],
        )?;
    }
    Ok(())
}
