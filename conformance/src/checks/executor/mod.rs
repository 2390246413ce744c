//! `executor/`: a multi-thunk program (copy → kernel → gemm → kernel → memset, with a nested
//! sequence, temporaries, a constant and an independent branch) against the reference, under
//! the default, in-order and 4-stream schedules; memory: per-execution state (temporaries) is
//! pooled, so repeated executions do not grow the live bytes, and releasing the pool (and
//! dropping the executable) returns them to their value before; one loaded executable run from
//! four threads at once; a failing thunk reported with its path (and its state freed); argument
//! errors; control flow (`While` with and without trip count, `Conditional` on i32 and pred),
//! async scopes and command buffers, and control flow inside command buffers.
//!
//! The program's tolerance per element: `1e-5 · (Σ|gelu(x)||w| + |bias|) + 1e-6` (f32: the
//! gemm's `2(k+2)ε` bound plus the gelu's error, with room).
//!
//! By concern: [`program`] (the multi-thunk program and its reference), [`state`] (pooling and
//! concurrent executions), [`errors`] (failing thunks, bad arguments), [`control`] (control
//! flow, async scopes, command buffers), [`device_control`] (while and conditional inside
//! command buffers); here the schedules they run under.

mod control;
mod device_control;
mod errors;
mod program;
mod state;

use super::seed::{seeded, seeded_exclusive};
use crate::Check;
use crate::util::{CheckResult, Values, compare_bytes, encode, execute_loaded, fail};
use control::{async_scope, command_buffer, conditional, while_loop};
use device_control::control_in_command_buffer;
use errors::{argument_errors, error_names_thunk};
use program::multi_thunk;
use state::{concurrent, temps_freed};
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::ir::{DType, Executable, Thunk};

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
        seeded_exclusive(
            "executor/control_in_command_buffer",
            control_in_command_buffer,
        ),
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
