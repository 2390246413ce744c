//! `executor/error_names_thunk` and `executor/argument_errors`: a failing thunk is reported
//! with its path (and its state freed), and bad arguments are rejected.

use super::common::{configs, load};
use super::program::{K, M, N, inputs, params, program};
use crate::util::{
    CheckResult, CheckRng, Values, compare_floats, decode, encode, ensure, expect_live_bytes, fail,
    uniform, upload,
};
use std::sync::Arc;
use xthunk_core::Error;
use xthunk_core::backend::{Device, DeviceMemory, DevicePtr};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, LoadedExecutable};
use xthunk_core::ir::{DType, MemorySpace, MemsetPattern};

/// A parameter whose address is outside every allocation.
#[derive(Debug)]
struct Bogus {
    size: u64,
}

impl DeviceMemory for Bogus {
    fn ptr(&self) -> DevicePtr {
        crate::checks::memory::BOGUS
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
pub(super) fn error_names_thunk(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
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
pub(super) fn argument_errors(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
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
