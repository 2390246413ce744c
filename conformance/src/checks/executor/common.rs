//! What the `executor/` checks share: the schedules every program check runs under
//! ([`configs`], [`run_all_schedules`]), loading, f32 inputs and standard-library kernel thunks.

use crate::util::{CheckResult, Values, compare_bytes, encode, execute_loaded, fail};
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::ir::{DType, Executable, Thunk};

/// The schedules every program check runs under.
pub(super) fn configs() -> Vec<(&'static str, ExecutorConfig)> {
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

pub(super) fn load(
    device: &Arc<dyn Device>,
    exe: Executable,
    cfg: &ExecutorConfig,
) -> CheckResult<LoadedExecutable> {
    Ok(LoadedExecutable::load_with(device.clone(), exe, cfg)?)
}

/// Runs `exe` under every schedule; returns the first schedule's outputs after checking the
/// others are byte-identical.
pub(super) fn run_all_schedules(
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

pub(super) fn f32_bytes(v: &[f64]) -> CheckResult<Vec<u8>> {
    encode(DType::F32, &Values::F(v.to_vec()))
}

pub(super) fn std_kernel(name: &str, threads: u64, args: Vec<xthunk_core::ir::KernelArg>) -> Thunk {
    let blocks = threads.div_ceil(256).clamp(1, 65535) as u32;
    xthunk_core::ir::KernelThunk {
        module: "std".into(),
        name: name.into(),
        grid: xthunk_core::ir::Dim3::x(blocks),
        block: xthunk_core::ir::Dim3::x(256),
        shared_mem: 0,
        args,
    }
    .into()
}
