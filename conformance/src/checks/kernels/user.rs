//! `kernels/user/`: a set of non-trivial kernels written in the portable subset
//! (`conformance/kernels/user/checked_set.cu`: the training kernels, warp shuffles with segment
//! widths, ballots, block reductions, atomics with CAS and exchange, dynamic and static shared
//! memory, f16 and bf16, float max/min with signalling NaNs) compiled from source by the device under test, on fresh random
//! inputs and NaN-poisoned outputs. Every output is compared with an independent f64
//! reference, and with what the host backend's CPU execution of the same source computes with
//! warps of the device's width.
//!
//! The CPU execution needs a C++ compiler; without one these checks are reported skipped with
//! the reason (with `XTHUNK_REQUIRE_CXX=1` they run, and fail on it).
//!
//! Tolerances, `ε` the f32 epsilon: shuffles, ballots, integers, atomics, moves and the f16
//! kernel (each operation rounded once) exactly; sums and products of two terms at
//! [`Tol::of`]; GELU at [`Tol::transcendental`] + `4ε|x|`; softmax at `cols·ε·|expected|`
//! more; layer norm `4(cols+2)ε(|γ|·max|z| + |β|)`; row and warp sums `n·ε·Σ|x|`;
//! cross-entropy `cols·ε·(1 + |max|)` more; AdamW `1e-6` relative + `1e-7`.

use crate::check::Check;
use crate::checks::seed::seeded;
use crate::util::{
    CheckResult, CheckRng, compare_bytes, compare_floats, compare_ints, decode, download, fail,
    upload,
};
use std::sync::Arc;
use xthunk_core::backend::{Backend, Device, LaunchArg, LaunchDims};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{Dim3, MemorySpace, Module, ModuleImage};

/// The source of the set.
pub const SOURCE: &str = include_str!("../../../kernels/user/checked_set.cu");

/// The set as the module the checks load by default.
pub fn module() -> Module {
    Module {
        name: "user-kernels".into(),
        images: vec![ModuleImage::Source {
            code: SOURCE.into(),
        }],
        options: Default::default(),
    }
}

mod cases;
pub mod cuda;
mod nan;
mod types;

use types::{Arg, Case, Expect};

type CaseFn = fn(&mut CheckRng, u32) -> CheckResult<Vec<Case>>;

/// The cases, by check name.
use cases::*;
const CASES: &[(&str, CaseFn)] = &[
    ("gelu_erf", gelu_erf),
    ("gelu_tanh", gelu_tanh),
    ("residual", residual),
    ("encoder", encoder),
    ("adamw", adamw),
    ("layernorm", layernorm),
    ("softmax_warp", softmax_warp),
    ("cross_entropy", cross_entropy),
    ("ballots", ballots),
    ("shuffles", shuffles),
    ("axpb_f16", axpb_f16),
    ("rowsum_bf16", rowsum_bf16),
    ("atomics", atomics),
    ("cas_exch", cas_exch),
    ("reverse_blocks", reverse_blocks),
    ("nan_minmax", nan::nan_minmax),
];

/// The CUDA-style cases, by check name (`kernels/user/cuda_*`, on [`cuda::module`]).
const CUDA_CASES: &[(&str, CaseFn)] = &[
    ("cuda_gelu", cuda::gelu),
    ("cuda_residual", cuda::residual),
    ("cuda_residual_bf16", cuda::residual_bf16),
    ("cuda_encoder", cuda::encoder),
    ("cuda_layernorm", cuda::layernorm),
    ("cuda_softmax", cuda::softmax),
    ("cuda_embedding_backward", cuda::embedding_backward),
];

/// The `kernels/user/cuda_*` checks: the CUDA-style training kernels ([`cuda::module`]).
pub fn cuda_checks() -> Vec<Check> {
    checks_with(Arc::new(cuda::module()), CUDA_CASES)
}

/// The `kernels/user/` checks on the built-in set ([`module`]).
pub fn checks() -> Vec<Check> {
    checks_of(Arc::new(module()))
}

/// The `kernels/user/` checks with `module` loaded in place of the built-in set: a module
/// defining the same kernels (another build of them, or a deliberately broken copy to show
/// that the checks catch it).
pub fn checks_of(module: Arc<Module>) -> Vec<Check> {
    checks_with(module, CASES)
}

fn checks_with(module: Arc<Module>, cases: &'static [(&'static str, CaseFn)]) -> Vec<Check> {
    cases
        .iter()
        .map(|&(name, cases)| {
            let m = module.clone();
            seeded(format!("kernels/user/{name}"), move |d, rng| {
                run_cases(d, &m, rng, cases)
            })
            .requiring(cpu_execution_available)
        })
        .collect()
}

/// Why the CPU execution these checks compare with cannot run here, if it cannot (never
/// when `XTHUNK_REQUIRE_CXX=1`: then the checks run and fail on it).
fn cpu_execution_available() -> Result<(), String> {
    if std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    xthunk_core::host::cpu::build::compiler()
        .map(|_| ())
        .map_err(|e| format!("the CPU execution these checks compare with is unavailable: {e}"))
}

/// Loads `module` on `device`, runs each case, and compares it with the reference and with the
/// CPU execution of the same module with warps of the device's width.
fn run_cases(
    device: &Arc<dyn Device>,
    module: &Module,
    rng: &mut CheckRng,
    cases: CaseFn,
) -> CheckResult {
    let lanes = device.capabilities().warp_size;
    let cpu = HostBackend::new()
        .with_cpu_warp_size(lanes)
        .map_err(|e| {
            fail(format!(
                "the CPU execution cannot run warps like this device's: {e}"
            ))
        })?
        .device(0)?;
    let loaded = device.load_module(module)?;
    let on_cpu = cpu.load_module(module)?;
    for case in cases(rng, lanes)? {
        let got = launch(device, loaded.as_ref(), &case)?;
        let reference = launch(&cpu, on_cpu.as_ref(), &case)?;
        for e in &case.expect {
            compare(&case, e, &got, "")?;
            compare(&case, e, &reference, " (the CPU execution)")?;
            same(&case, e, &got, &reference)?;
        }
    }
    Ok(())
}

/// Runs `case` on `device` and returns every argument's bytes afterwards (empty for scalars).
fn launch(
    device: &Arc<dyn Device>,
    module: &dyn xthunk_core::backend::LoadedModule,
    case: &Case,
) -> CheckResult<Vec<Vec<u8>>> {
    let mut bufs = Vec::new();
    let mut args = Vec::new();
    for a in &case.args {
        match a {
            Arg::Buf(b) => {
                let buf = upload(device, b, MemorySpace::Device)?;
                args.push(LaunchArg::Buffer {
                    ptr: buf.ptr(),
                    len: b.len() as u64,
                });
                bufs.push(Some((buf, b.len())));
            }
            Arg::S(s) => {
                args.push(LaunchArg::Scalar(*s));
                bufs.push(None);
            }
        }
    }
    let kernel = module.kernel(case.kernel)?;
    let stream = device.create_stream()?;
    stream.launch(
        &kernel,
        LaunchDims {
            grid: Dim3::x(case.grid),
            block: Dim3::x(case.block),
            shared_mem: case.shared,
        },
        &args,
    )?;
    stream.synchronize()?;
    bufs.into_iter()
        .map(|b| match b {
            Some((buf, len)) => download(device, buf.ptr(), len),
            None => Ok(Vec::new()),
        })
        .collect()
}

fn arg_of(e: &Expect) -> usize {
    match e {
        Expect::Floats { arg, .. } | Expect::Ints { arg, .. } | Expect::Holds { arg, .. } => *arg,
    }
}

/// Checks one output of `case` against the reference.
fn compare(case: &Case, e: &Expect, out: &[Vec<u8>], who: &str) -> CheckResult {
    let Some(bytes) = out.get(arg_of(e)) else {
        return Err(fail(format!("{}: no argument {}", case.what, arg_of(e))));
    };
    let label = format!("{}{who}: argument {}", case.what, arg_of(e));
    match e {
        Expect::Floats {
            dtype,
            values,
            tol,
            cols,
            ..
        } => compare_floats(
            &label,
            decode(*dtype, bytes).floats(&label)?,
            values,
            *cols,
            |i| tol[i],
        ),
        Expect::Ints { dtype, values, .. } => {
            compare_ints(&label, decode(*dtype, bytes).ints(&label)?, values, 0)
        }
        Expect::Holds { check, .. } => check(bytes, out).map_err(|m| fail(format!("{label}: {m}"))),
    }
}

/// The device and the CPU execution agree: exactly where the reference is exact, within the
/// reference's tolerance elsewhere.
fn same(case: &Case, e: &Expect, got: &[Vec<u8>], cpu: &[Vec<u8>]) -> CheckResult {
    let i = arg_of(e);
    let label = format!("{}: argument {} vs the CPU execution", case.what, i);
    let (Some(g), Some(c)) = (got.get(i), cpu.get(i)) else {
        return Err(fail(format!("{label}: missing")));
    };
    match e {
        Expect::Floats {
            dtype, tol, cols, ..
        } => compare_floats(
            &label,
            decode(*dtype, g).floats(&label)?,
            decode(*dtype, c).floats(&label)?,
            *cols,
            |j| tol[j],
        ),
        Expect::Ints { .. } => compare_bytes(&label, g, c),
        // Properties such as "a permutation" hold for many orders of the threads.
        Expect::Holds { .. } => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::{Outcome, Subject, run_checks};

    fn host(lanes: u32) -> Subject {
        Subject::new(Arc::new(
            HostBackend::new().with_cpu_warp_size(lanes).unwrap(),
        ))
    }

    fn required() -> bool {
        std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1")
    }

    #[test]
    fn the_set_passes_on_the_host_with_32_and_64_lane_warps() {
        for lanes in [32, 64] {
            let report = run_checks(&host(lanes), 0, &checks());
            let table = report.table(true);
            if report.skipped() && !required() {
                eprintln!("SKIPPED ({lanes} lanes): {table}");
                return;
            }
            assert_eq!(report.counts()[0], CASES.len(), "{lanes} lanes: {table}");
        }
    }

    #[test]
    fn the_cuda_style_set_passes_on_the_host_with_32_and_64_lane_warps() {
        for lanes in [32, 64] {
            let report = run_checks(&host(lanes), 0, &cuda_checks());
            let table = report.table(true);
            if report.skipped() && !required() {
                eprintln!("SKIPPED ({lanes} lanes): {table}");
                return;
            }
            assert_eq!(
                report.counts()[0],
                CUDA_CASES.len(),
                "{lanes} lanes: {table}"
            );
        }
    }

    /// The softmax written for 32-thread blocks: right with 32-lane warps, and on a 64-lane
    /// warp the CPU execution stops at the shuffle that reads a lane the block does not have.
    #[test]
    fn a_32_lane_softmax_on_64_lanes_fails_at_the_shuffle() {
        if xthunk_core::host::cpu::build::compiler().is_err() && !required() {
            eprintln!("SKIPPED: no C++ compiler");
            return;
        }
        let (rows, cols) = (3usize, 50usize);
        let x: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 * 0.25).collect();
        let dev = |lanes: u32| {
            HostBackend::new()
                .with_cpu_warp_size(lanes)
                .unwrap()
                .device(0)
                .unwrap()
        };
        let y = cuda::softmax_block32(&dev(32), &x, rows, cols).unwrap();
        for r in 0..rows {
            let sum: f32 = y[r * cols..(r + 1) * cols].iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "row {r}: {sum}");
        }
        let e = cuda::softmax_block32(&dev(64), &x, rows, cols).unwrap_err();
        assert!(
            e.contains("__shfl_xor_sync") && e.contains("outside the block"),
            "{e}"
        );
    }

    /// `spellings.cu` (every accepted CUDA spelling) compiles for the CPU and its kernels run
    /// without a fault with 32- and 64-lane warps (full warps: blocks of 128 threads).
    #[test]
    fn every_accepted_cuda_spelling_runs_on_the_cpu() {
        if xthunk_core::host::cpu::build::compiler().is_err() && !required() {
            eprintln!("SKIPPED: no C++ compiler");
            return;
        }
        for lanes in [32u32, 64] {
            let dev = HostBackend::new()
                .with_cpu_warp_size(lanes)
                .unwrap()
                .device(0)
                .unwrap();
            let m = dev
                .load_module(&cuda::cuda_module("spellings", cuda::SPELLINGS))
                .unwrap();
            let bufs: Vec<_> = (0..8)
                .map(|_| crate::util::upload(&dev, &[0u8; 4096], MemorySpace::Device).unwrap())
                .collect();
            let args = |n: usize| -> Vec<LaunchArg> {
                bufs[..n]
                    .iter()
                    .map(|b| LaunchArg::Buffer {
                        ptr: b.ptr(),
                        len: 4096,
                    })
                    .collect()
            };
            let s = dev.create_stream().unwrap();
            for (k, n) in [
                ("warp_spellings", 3),
                ("memory_spellings", 6),
                ("half_spellings", 3),
                ("group_spellings", 2),
                ("atomic_spellings", 8),
            ] {
                let kernel = m.kernel(k).unwrap();
                s.launch(
                    &kernel,
                    LaunchDims {
                        grid: Dim3::x(1),
                        block: Dim3::x(128),
                        shared_mem: 0,
                    },
                    &args(n),
                )
                .and_then(|()| s.synchronize())
                .unwrap_or_else(|e| panic!("{k} with {lanes} lanes: {e}"));
                if k == "group_spellings" {
                    dev.copy_from_host(&[0u8; 4096], bufs[1].ptr()).unwrap();
                }
            }
            // (Last, on a zeroed buffer.)
            // 128 threads bumped the counters: atomicAdd then atomicSub leaves 0; atomicInc
            // wraps at 10.
            let u = crate::util::download(&dev, bufs[1].ptr(), 64).unwrap();
            let word =
                |i: usize| u32::from_le_bytes([u[4 * i], u[4 * i + 1], u[4 * i + 2], u[4 * i + 3]]);
            assert_eq!(word(0), 0, "{lanes} lanes");
            assert_eq!(word(8), 128 % 11, "{lanes} lanes: atomicInc");
        }
    }

    #[test]
    fn a_broken_kernel_fails_its_check_and_only_it() {
        // The softmax's row maximum by `shfl_down` instead of `shfl_xor`: only lane 0 ends with
        // the maximum, the other lanes exponentiate with their own partial ones.
        let broken = SOURCE.replacen(
            "m = fmaxf(m, xt_shfl_xor(m, o))",
            "m = fmaxf(m, xt_shfl_down(m, (unsigned)o))",
            1,
        );
        assert_ne!(broken, SOURCE, "the shuffle to break was not found");
        let m = Module {
            name: "broken".into(),
            images: vec![ModuleImage::Source { code: broken }],
            options: Default::default(),
        };
        let report = run_checks(&host(32), 0, &checks_of(Arc::new(m)));
        let table = report.table(true);
        if report.skipped() && !required() {
            eprintln!("SKIPPED: {table}");
            return;
        }
        for r in &report.results {
            let broken = r.name == "kernels/user/softmax_warp";
            match &r.outcome {
                Outcome::Failed(m) if broken => {
                    assert!(m.contains("softmax_warp 13x333: argument 0"), "{m}")
                }
                Outcome::Passed if !broken => {}
                other => panic!("{}: {other:?}\n{table}", r.name),
            }
        }
    }
}
