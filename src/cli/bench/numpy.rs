//! Benchmark `gemm_f32_numpy` (host only): the host backend's f32 gemm at 1024³ (one `Gemm`
//! thunk per execution, through the CPU BLAS the backend found or its built-in gemm crate)
//! against numpy's `matmul` of the same shape in a Python child process (numpy's own BLAS,
//! the OpenBLAS its wheel bundles), the child speaking the XLA:CPU child's line protocol
//! ([`super::xla`]; script `numpy_child.py`), interleaved. Goal: ≥ 0.95× numpy's rate.

use super::gemm::{SALT_A, SALT_B, check_gemm, encode, gemm_program};
use super::program::Prepared;
use super::report::{Row, Status};
use super::setup::{Res, Setup};
use super::stablehlo::{TempDir, io};
use super::stats::{Goal, Spread, interleaved, inverse};
use super::xla::{Started, XlaChild, python};
use std::time::Duration;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::DType;

/// The child's script (written into the run's temp folder).
const SCRIPT: &str = include_str!("numpy_child.py");
/// The problem size.
const N: u64 = 1024;
/// Idle time before each timed run: OpenBLAS's worker threads spin for a while after a call
/// (up to about 2^28 cycles by default), and on a machine with few cores the spinning pool of
/// one side would otherwise run during the other side's gemm.
const PAUSE: Duration = Duration::from_millis(150);

pub fn gemm_f32_numpy(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "gemm_f32_numpy",
        "TFLOP/s",
        "xthunk TFLOP/s / numpy TFLOP/s",
        Goal::ge(0.95),
    );
    if !s.is_host() {
        row.status = Status::Skipped(
            "host only: numpy's BLAS is the baseline of the host backend's gemm".into(),
        );
        return Ok(row);
    }
    let host_gemm = xthunk::core::host::gemm_library();
    row.work = format!(
        "1 Gemm thunk of f32 {N}x{N}x{N} (row-major, f32 accumulation) per execution on the \
         host backend, whose f32 gemm runs on: {host_gemm}; TFLOP/s = 2 n^3 / time"
    );
    let p = Prepared::new(
        &s.dev,
        gemm_program(DType::F32, N, 1)?,
        &ExecutorConfig::default(),
    )?;
    p.set_param(0, &encode(N * N, SALT_A, DType::F32))?;
    p.set_param(1, &encode(N * N, SALT_B, DType::F32))?;
    p.run()?;
    check_gemm(&p, DType::F32, N)?;

    let dir = TempDir::new("numpy")?;
    let script = dir.0.join("numpy_child.py");
    std::fs::write(&script, SCRIPT).map_err(|e| io(&script, e))?;
    let (py, from) = python(s.python.as_deref());
    let n = N.to_string();
    let started = XlaChild::spawn(
        "the numpy child process",
        "making and checking its inputs",
        &py,
        &[script.as_os_str(), n.as_ref()],
        &dir.0.join("child.stderr"),
    )?;
    let mut child = match started {
        Started::Ready(c) => c,
        Started::Unavailable(why) => {
            row.status = Status::Skipped(format!(
                "no numpy baseline: {why} (python from {from}; --python or XTHUNK_PYTHON name \
                 one with numpy)"
            ));
            return Ok(row);
        }
    };
    row.baseline_label = format!("numpy {} matmul", child.ready.numpy);
    row.baseline_work = format!(
        "np.matmul(a, b, out=c) on C-contiguous f32 {N}x{N} arrays made once, in a Python \
         child process ({}, from {from}), through numpy's BLAS: {}; timed in the child around \
         the call (its product checked there against float64 once; the load note counts the \
         child under other processes)",
        py.display(),
        child.ready.blas
    );
    let flops = 2.0 * (N as f64).powi(3);
    let plan = s.rounds(20, 5, 30);
    let times = interleaved(
        plan,
        &mut [
            &mut || {
                std::thread::sleep(PAUSE);
                p.run()
            },
            &mut || {
                std::thread::sleep(PAUSE);
                child.run()
            },
        ],
    )?;
    let tflops = |t: f64| flops / t / 1e12;
    row.rounds = times[0].len();
    row.value = Some(inverse(Spread::of(&times[0]), tflops));
    row.baseline = Some(inverse(Spread::of(&times[1]), tflops));
    let rate_ratio: Vec<f64> = times[0]
        .iter()
        .zip(&times[1])
        .map(|(te, tn)| tn / te)
        .collect();
    row.ratio = Some(Spread::of(&rate_ratio));
    row.notes.push(format!(
        "each timed run follows a {} ms pause (a BLAS's worker threads spin for a while after \
         a call); XTHUNK_HOST_BLAS=off measures the built-in gemm crate, XTHUNK_HOST_BLAS=on \
         the CPU BLAS found",
        PAUSE.as_millis()
    ));
    Ok(row)
}
