//! `executor/`: a multi-thunk program (copy → kernel → gemm → kernel → memset, with a nested
//! sequence, temporaries, a constant and an independent branch) against the reference, under
//! the default, in-order and 4-stream schedules; memory: per-execution state (temporaries) is
//! pooled, so repeated executions do not grow the live bytes, and releasing the pool (and
//! dropping the executable) returns them to their value before; one loaded executable run from
//! four threads at once; a failing thunk reported with its path (and its state freed); argument
//! errors; control flow (`While` with and without trip count, `Conditional` on i32 and pred),
//! async scopes and command buffers.
//!
//! The program's tolerance per element: `1e-5 · (Σ|gelu(x)||w| + |bias|) + 1e-6` (f32: the
//! gemm's `2(k+2)ε` bound plus the gelu's error, with room).

use super::{seeded, seeded_exclusive};
use crate::Check;
use crate::reference;
use crate::util::{
    CheckResult, CheckRng, Values, compare_bytes, compare_floats, decode, encode, ensure,
    execute_loaded, expect_live_bytes, fail, poison_byte, uniform, upload,
};
use std::sync::Arc;
use xthunk_core::Error;
use xthunk_core::backend::{Device, DeviceMemory, DevicePtr};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::ir::{AsyncKind, DType, Executable, MemorySpace, MemsetPattern, Slice, Thunk};

pub fn checks() -> Vec<Check> {
    vec![
        seeded("executor/multi_thunk_program", multi_thunk),
        seeded_exclusive("executor/temps_freed", temps_freed),
        seeded("executor/concurrent_executions", concurrent),
        seeded_exclusive("executor/error_names_thunk", error_names_thunk),
        seeded("executor/argument_errors", argument_errors),
        seeded("executor/while_loop", while_loop),
        seeded("executor/conditional", conditional),
        seeded("executor/async_scope", async_scope),
        seeded("executor/command_buffer", command_buffer),
    ]
}

/// The schedules every program check runs under.
fn configs() -> Vec<(&'static str, ExecutorConfig)> {
    vec![
        ("default schedule", ExecutorConfig::default()),
        ("in-order schedule", ExecutorConfig::in_order()),
        (
            "4-stream schedule",
            ExecutorConfig {
                streams: 4,
                sequential_below: 0,
                ..ExecutorConfig::default()
            },
        ),
    ]
}

fn load(
    device: &Arc<dyn Device>,
    exe: Executable,
    cfg: &ExecutorConfig,
) -> CheckResult<LoadedExecutable> {
    Ok(LoadedExecutable::load_with(device.clone(), exe, cfg)?)
}

/// Runs `exe` under every schedule; returns the first schedule's outputs after checking the
/// others are byte-identical.
fn run_all_schedules(
    device: &Arc<dyn Device>,
    exe: &Executable,
    params: &[Vec<u8>],
    outputs_init: &[Vec<u8>],
) -> CheckResult<Vec<Vec<u8>>> {
    let mut first: Option<Vec<Vec<u8>>> = None;
    for (name, cfg) in configs() {
        let loaded = load(device, exe.clone(), &cfg)?;
        let out = execute_loaded(
            device,
            &loaded,
            params,
            outputs_init,
            &ExecuteOptions::default(),
        )
        .map_err(|e| fail(format!("{name}: {e}")))?;
        match &first {
            None => first = Some(out),
            Some(f) => {
                for (i, (a, b)) in out.iter().zip(f).enumerate() {
                    compare_bytes(&format!("output {i} under the {name} vs the default"), a, b)?;
                }
            }
        }
    }
    first.ok_or_else(|| fail("no schedules"))
}

const M: usize = 19;
const K: usize = 23;
const N: usize = 13;

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
fn program(bias: &[f64]) -> CheckResult<Executable> {
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

struct Inputs {
    x: Vec<f64>,
    w: Vec<f64>,
    bias: Vec<f64>,
}

fn inputs(rng: &mut CheckRng) -> Inputs {
    Inputs {
        x: uniform(rng, DType::F32, M * K, -3.0, 3.0),
        w: uniform(rng, DType::F32, K * N, -1.0, 1.0),
        bias: uniform(rng, DType::F32, N, -1.0, 1.0),
    }
}

fn params(i: &Inputs) -> CheckResult<Vec<Vec<u8>>> {
    Ok(vec![
        encode(DType::F32, &Values::F(i.x.clone()))?,
        encode(DType::F32, &Values::F(i.w.clone()))?,
    ])
}

fn poisoned_y() -> Vec<Vec<u8>> {
    vec![
        vec![poison_byte(DType::F32); M * N * 4],
        vec![poison_byte(DType::F32); M * K * 4],
    ]
}

/// Compares the program's outputs with the f64 reference.
fn verify(i: &Inputs, outs: &[Vec<u8>]) -> CheckResult {
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

fn multi_thunk(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
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

/// Per-execution state is pooled: the first execution may keep its temporaries for reuse,
/// later ones must not grow the live bytes; `release_cached_state` frees the pool (live bytes
/// back to their value before the first execution) and dropping the executable frees its
/// constants (back to the value before loading).
fn temps_freed(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let i = inputs(rng);
    for (name, cfg) in configs() {
        device.synchronize()?;
        let before_load = device.memory_stats().live_bytes;
        let loaded = load(device, program(&i.bias)?, &cfg)?;
        let p = params(&i)?;
        let x = upload(device, &p[0], MemorySpace::Device)?;
        let w = upload(device, &p[1], MemorySpace::Device)?;
        let init = poisoned_y();
        let y = upload(device, &init[0], MemorySpace::Device)?;
        let z = upload(device, &init[1], MemorySpace::Device)?;
        device.synchronize()?;
        let baseline = device.memory_stats().live_bytes;
        let mut after_first = baseline;
        for run in 0..3 {
            loaded.execute(
                &[x.as_ref(), w.as_ref()],
                &[y.as_ref(), z.as_ref()],
                &ExecuteOptions::default(),
            )?;
            if run == 0 {
                device.synchronize()?;
                after_first = device.memory_stats().live_bytes;
                ensure(after_first >= baseline, || {
                    format!("{name}: live bytes fell below the baseline during execution")
                })?;
            } else {
                expect_live_bytes(
                    device,
                    after_first,
                    &format!("{name}: after execution {run} (pooled state reused)"),
                )?;
            }
        }
        let mut out = vec![vec![0u8; M * N * 4], vec![0u8; M * K * 4]];
        device.copy_to_host(y.ptr(), &mut out[0])?;
        device.copy_to_host(z.ptr(), &mut out[1])?;
        verify(&i, &out)?;
        loaded.release_cached_state();
        expect_live_bytes(
            device,
            baseline,
            &format!("{name}: after release_cached_state"),
        )?;
        drop((x, w, y, z, loaded));
        expect_live_bytes(
            device,
            before_load,
            &format!("{name}: after dropping the loaded executable"),
        )?;
    }
    Ok(())
}

/// One loaded executable, four threads, three executions each, own buffers: all results
/// identical and correct.
fn concurrent(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let i = inputs(rng);
    for (name, cfg) in configs() {
        concurrent_one(device, &i, &cfg).map_err(|e| fail(format!("{name}: {e}")))?;
    }
    Ok(())
}

fn concurrent_one(device: &Arc<dyn Device>, i: &Inputs, cfg: &ExecutorConfig) -> CheckResult {
    let loaded = load(device, program(&i.bias)?, cfg)?;
    let p = params(i)?;
    let results: Vec<CheckResult<Vec<Vec<u8>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (loaded, p) = (&loaded, &p);
                scope.spawn(move || {
                    let mut outs = Vec::new();
                    for _ in 0..3 {
                        let o = execute_loaded(
                            device,
                            loaded,
                            p,
                            &poisoned_y(),
                            &ExecuteOptions::default(),
                        )?;
                        outs.extend(o);
                    }
                    Ok(outs)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(fail("an executing thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::new();
    for (t, r) in results.into_iter().enumerate() {
        let outs = r.map_err(|e| fail(format!("thread {t}: {e}")))?;
        all.extend(outs.into_iter().map(|o| (t, o)));
    }
    let n_out = poisoned_y().len();
    ensure(!all.is_empty() && all.len() % n_out == 0, || {
        format!("{} outputs came back", all.len())
    })?;
    let reference: Vec<Vec<u8>> = all.iter().take(n_out).map(|(_, o)| o.clone()).collect();
    verify(i, &reference)?;
    for (k, (t, o)) in all.iter().enumerate() {
        compare_bytes(
            &format!("thread {t}'s output {} against thread 0's", k % n_out),
            o,
            &reference[k % n_out],
        )?;
    }
    Ok(())
}

/// A parameter whose address is outside every allocation.
#[derive(Debug)]
struct Bogus {
    size: u64,
}

impl DeviceMemory for Bogus {
    fn ptr(&self) -> DevicePtr {
        super::memory::BOGUS
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn space(&self) -> MemorySpace {
        MemorySpace::Device
    }
}

/// A kernel in a nested sequence reads a bad address: the execution fails with
/// `Error::Thunk` naming `entry[1].thunks[1]`; temporaries are freed; the same loaded
/// executable then runs correctly.
fn error_names_thunk(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let n = 1001usize;
    let mut b = ExecutableBuilder::new("conformance_failing");
    let m = b.standard_module();
    let p = b.parameter("p", DType::F32, &[n as u64]);
    let q = b.parameter("q", DType::F32, &[n as u64]);
    let y = b.output("y", DType::F32, &[n as u64]);
    let t = b.temp(DType::F32, &[n as u64]);
    b.memset(y.slice(), MemsetPattern::U32(0));
    b.begin_sequence();
    b.copy(q.slice(), t.slice());
    b.kernel(
        &m,
        "neg_f32",
        n as u64,
        vec![p.r(), t.w(), (n as i64).into()],
    );
    b.end_sequence();
    b.copy(t.slice(), y.slice());
    let exe = b.build().map_err(Error::from)?;
    let pv = uniform(rng, DType::F32, n, -10.0, 10.0);
    for (name, cfg) in configs() {
        let loaded = load(device, exe.clone(), &cfg)?;
        failing_run(device, &loaded, &pv).map_err(|e| fail(format!("{name}: {e}")))?;
    }
    Ok(())
}

fn failing_run(device: &Arc<dyn Device>, loaded: &LoadedExecutable, pv: &[f64]) -> CheckResult {
    let n = pv.len();
    let pb = upload(
        device,
        &encode(DType::F32, &Values::F(pv.to_vec()))?,
        MemorySpace::Device,
    )?;
    let qb = upload(device, &vec![0u8; n * 4], MemorySpace::Device)?;
    let yb = upload(device, &vec![0xFFu8; n * 4], MemorySpace::Device)?;
    device.synchronize()?;
    let baseline = device.memory_stats().live_bytes;
    let bogus = Bogus {
        size: (n * 4) as u64,
    };
    let r = loaded.execute(
        &[&bogus, qb.as_ref()],
        &[yb.as_ref()],
        &ExecuteOptions::default(),
    );
    match r {
        Err(Error::Thunk { path, kind, .. }) => {
            ensure(
                path.to_string() == "entry[1].thunks[1]" && kind == "kernel",
                || {
                    format!(
                        "the error names {kind} thunk {path}, expected kernel thunk entry[1].thunks[1]"
                    )
                },
            )?;
        }
        Err(other) => {
            return Err(fail(format!(
                "the error does not name the thunk (Error::Thunk): {other}"
            )));
        }
        Ok(()) => return Err(fail("executing with a bogus parameter address succeeded")),
    }
    expect_live_bytes(device, baseline, "after the failed execution")?;
    // The loaded executable still works.
    loaded.execute(
        &[pb.as_ref(), qb.as_ref()],
        &[yb.as_ref()],
        &ExecuteOptions::default(),
    )?;
    let mut out = vec![0u8; n * 4];
    device.copy_to_host(yb.ptr(), &mut out)?;
    let got = decode(DType::F32, &out);
    let exp: Vec<f64> = pv.iter().map(|v| -v).collect();
    compare_floats(
        "y after a good execution following the failure",
        got.floats("y")?,
        &exp,
        0,
        |_| 0.0,
    )
}

/// Wrong buffer counts and undersized buffers are rejected.
fn argument_errors(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let i = inputs(rng);
    let loaded = LoadedExecutable::load(device.clone(), program(&i.bias)?)?;
    let p = params(&i)?;
    let x = upload(device, &p[0], MemorySpace::Device)?;
    let w = upload(device, &p[1], MemorySpace::Device)?;
    let y = device.allocate((M * N * 4) as u64, 64, MemorySpace::Device)?;
    let z = device.allocate((M * K * 4) as u64, 64, MemorySpace::Device)?;
    let small = device.allocate((M * N * 4 - 4) as u64, 64, MemorySpace::Device)?;
    let opts = ExecuteOptions::default();
    let cases: Vec<(&str, xthunk_core::Result<()>)> = vec![
        (
            "one parameter missing",
            loaded.execute(&[x.as_ref()], &[y.as_ref(), z.as_ref()], &opts),
        ),
        (
            "no outputs",
            loaded.execute(&[x.as_ref(), w.as_ref()], &[], &opts),
        ),
        (
            "an undersized output",
            loaded.execute(
                &[x.as_ref(), w.as_ref()],
                &[small.as_ref(), z.as_ref()],
                &opts,
            ),
        ),
        (
            "an undersized parameter",
            loaded.execute(
                &[x.as_ref(), small.as_ref()],
                &[y.as_ref(), z.as_ref()],
                &opts,
            ),
        ),
    ];
    for (what, r) in cases {
        ensure(r.is_err(), || format!("executing with {what} succeeded"))?;
    }
    let wrong = loaded.run_with_host_data(&[&p[0]], &opts);
    ensure(wrong.is_err(), || {
        "run_with_host_data with one input missing succeeded".into()
    })
}

fn f32_bytes(v: &[f64]) -> CheckResult<Vec<u8>> {
    encode(DType::F32, &Values::F(v.to_vec()))
}

fn std_kernel(name: &str, threads: u64, args: Vec<xthunk_core::ir::KernelArg>) -> Thunk {
    let blocks = threads.div_ceil(256).clamp(1, 65535) as u32;
    Thunk::Kernel(xthunk_core::ir::KernelThunk {
        module: "std".into(),
        name: name.into(),
        grid: xthunk_core::ir::Dim3::x(blocks),
        block: xthunk_core::ir::Dim3::x(256),
        shared_mem: 0,
        args,
    })
}

/// `y = x * 2^iterations`: a `While` whose `cond` computes `pred = counter > 0` on the device
/// (from an i32 counter parameter copied into a temporary) and whose body doubles `y` and
/// decrements the counter; also with a `trip_count` (no `cond`).
fn while_loop(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
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
            Thunk::Copy {
                src: Slice::new(tmp.slice().allocation, 0, 1),
                dst: pred.slice(),
            },
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
        b.push(Thunk::While {
            cond,
            pred: pred.slice(),
            body,
            trip_count: trip,
        });
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
fn conditional(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
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
            vec![
                vec![fill(vals[0])],
                vec![Thunk::Sequence(vec![fill(vals[1])])],
            ]
        } else {
            vec![
                vec![fill(vals[0])],
                vec![Thunk::Sequence(vec![fill(vals[1])])],
                vec![fill(vals[2])],
            ]
        };
        b.push(Thunk::Conditional {
            index: idx.slice(),
            index_type,
            branches,
        });
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
fn async_scope(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
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
    b.push(Thunk::AsyncStart {
        id: 0,
        kind: AsyncKind::Compute,
        body: vec![std_kernel("exp_f32", n as u64, vec![xp.r(), e.w(), nn])],
    });
    b.push(Thunk::AsyncStart {
        id: 1,
        kind: AsyncKind::Communication,
        body: vec![Thunk::Copy {
            src: xp.slice(),
            dst: c.slice(),
        }],
    });
    b.push(std_kernel("neg_f32", n as u64, vec![xp.r(), g.w(), nn]));
    b.push(Thunk::AsyncDone { id: 0 });
    b.push(std_kernel(
        "add_f32",
        n as u64,
        vec![e.r(), g.r(), y.w(), nn],
    ));
    b.push(Thunk::AsyncDone { id: 1 });
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
fn command_buffer(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let (m, k) = (12usize, 16usize);
    let make = |wrap: bool| -> CheckResult<Executable> {
        let mut b = ExecutableBuilder::new("conformance_command_buffer");
        b.standard_module();
        let x = b.parameter("x", DType::F32, &[m as u64, k as u64]);
        let w = b.parameter("w", DType::F32, &[k as u64, k as u64]);
        let y = b.output("y", DType::F32, &[m as u64, k as u64]);
        let t = b.temp(DType::F32, &[m as u64, k as u64]);
        let mk = ((m * k) as i64).into();
        let mut body = vec![Thunk::Copy {
            src: x.slice(),
            dst: t.slice(),
        }];
        for i in 0..6 {
            body.push(std_kernel(
                "scale_f32",
                (m * k) as u64,
                vec![t.rw(), (1.0f32 + 0.125 * i as f32).into(), mk],
            ));
        }
        body.push(Thunk::Gemm(xthunk_core::ir::GemmThunk {
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
        }));
        body.push(Thunk::Memset {
            dst: Slice::new(y.slice().allocation, 0, (k * 4) as u64),
            pattern: MemsetPattern::U32(0),
        });
        if wrap {
            b.push(Thunk::CommandBuffer { body });
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
