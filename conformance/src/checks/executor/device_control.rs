//! `executor/control_in_command_buffer`: `While` (with a `cond`, and with a trip count) and
//! `Conditional` (i32 and pred index), alone and nested, inside a `CommandBuffer`, give the
//! same bytes as the same thunks run outside one (host-driven control flow) and the
//! reference, over several executions with fresh buffers (new addresses: re-recording) and
//! with the same buffers (replay). Where the backend has conditional graph nodes (a probe
//! records one: a condition, its set and an IF node) the loops run on the device, and the
//! check asserts that every case's recordings held conditional nodes
//! (`recorded_conditional_nodes`); where it has none the executor says so once, runs them
//! host-driven, and no conditional node is counted. Runs alone (the count is per process).

use super::common::{f32_bytes, load, std_kernel};
use crate::util::{
    CheckResult, CheckRng, compare_bytes, compare_floats, decode, execute_loaded, fail,
    poison_byte, uniform,
};
use std::sync::Arc;
use xthunk_core::Error;
use xthunk_core::backend::Device;
use xthunk_core::backend::{ConditionalKind, SetCondition};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, recorded_conditional_nodes};
use xthunk_core::ir::{
    CommandBufferThunk, ConditionalThunk, CopyThunk, DType, Executable, Slice, Thunk, WhileThunk,
};

const N: usize = 23;

/// The program: `y = x`, then a `while` that runs `count` trips (data-dependent: `cond`
/// computes `pred = counter > 0`) or `trips` trips (a trip count), whose body scales `y`
/// by 2 and, when `nested`, runs a conditional on `sel` (i32: branch 0 adds 1, 1 scales by
/// 3, others add 5; pred: true adds 1, false scales by 3); then a top-level conditional on
/// `sel` that adds 0.5 (branch 0) or 0.25 (else). All inside one command buffer if `wrap`.
fn program(trips: Option<u64>, nested: bool, sel: DType, wrap: bool) -> CheckResult<Executable> {
    let mut b = ExecutableBuilder::new("conformance_control_in_command_buffer");
    b.standard_module();
    let x = b.parameter("x", DType::F32, &[N as u64]);
    let cp = b.parameter("count", DType::I32, &[1]);
    let sp = b.parameter("sel", sel, &[1]);
    let y = b.output("y", DType::F32, &[N as u64]);
    let counter = b.temp(DType::I32, &[1]);
    let tmp = b.temp(DType::I32, &[1]);
    let pred = b.temp(DType::Pred, &[1]);
    let zero = b.constant(DType::I32, &[1], 0i32.to_le_bytes().to_vec());
    let one = b.constant(DType::I32, &[1], 1i32.to_le_bytes().to_vec());
    let neg1 = b.constant(DType::I32, &[1], (-1i32).to_le_bytes().to_vec());
    let sum = b.temp(DType::F32, &[N as u64]);
    let n = (N as i64).into();
    let scale = |v: f32| std_kernel("scale_f32", N as u64, vec![y.rw(), v.into(), n]);
    // y += c[0], through a temp (a kernel's output may not overlap its inputs).
    let plus = |c: &xthunk_core::builder::Tensor| {
        Thunk::from(vec![
            std_kernel(
                "add_row_f32",
                N as u64,
                vec![y.r(), c.r(), sum.w(), (N as i64).into(), 1i64.into()],
            ),
            CopyThunk {
                src: sum.slice(),
                dst: y.slice(),
            }
            .into(),
        ])
    };
    let half = b.constant(DType::F32, &[1], 0.5f32.to_le_bytes().to_vec());
    let quarter = b.constant(DType::F32, &[1], 0.25f32.to_le_bytes().to_vec());
    let onef = b.constant(DType::F32, &[1], 1.0f32.to_le_bytes().to_vec());
    let five = b.constant(DType::F32, &[1], 5.0f32.to_le_bytes().to_vec());
    let mut cmd = vec![
        CopyThunk {
            src: x.slice(),
            dst: y.slice(),
        }
        .into(),
        CopyThunk {
            src: cp.slice(),
            dst: counter.slice(),
        }
        .into(),
    ];
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
    let mut body = vec![
        scale(2.0),
        std_kernel(
            "add_i32",
            1,
            vec![counter.r(), neg1.r(), counter.w(), 1i64.into()],
        ),
    ];
    let branches = |a: Vec<Thunk>, b2: Vec<Thunk>, c: Vec<Thunk>| {
        if sel == DType::Pred {
            vec![a, b2]
        } else {
            vec![a, b2, c]
        }
    };
    if nested {
        body.push(
            ConditionalThunk {
                index: sp.slice(),
                index_type: sel,
                branches: branches(
                    vec![plus(&onef)],
                    vec![Thunk::from(vec![scale(3.0)])],
                    vec![plus(&five)],
                ),
            }
            .into(),
        );
    }
    cmd.push(
        WhileThunk {
            cond: if trips.is_some() { vec![] } else { cond },
            pred: pred.slice(),
            body,
            trip_count: trips,
        }
        .into(),
    );
    cmd.push(
        ConditionalThunk {
            index: sp.slice(),
            index_type: sel,
            branches: branches(
                vec![plus(&half)],
                vec![plus(&quarter)],
                vec![plus(&quarter)],
            ),
        }
        .into(),
    );
    if wrap {
        b.push(CommandBufferThunk { body: cmd }.into());
    } else {
        for t in cmd {
            b.push(t);
        }
    }
    Ok(b.build().map_err(Error::from)?)
}

/// The reference: what the program computes for one element.
fn reference(x: f64, trips: u64, nested: bool, branch: usize) -> f64 {
    let mut y = x;
    for _ in 0..trips {
        y *= 2.0;
        if nested {
            match branch {
                0 => y += 1.0,
                1 => y *= 3.0,
                _ => y += 5.0,
            }
        }
    }
    y + if branch == 0 { 0.5 } else { 0.25 }
}

/// Whether the device's streams record conditional graph nodes: a capture holding one
/// condition, its set from a predicate and an empty IF node. `Unsupported` means no.
fn records_conditional_nodes(device: &Arc<dyn Device>) -> CheckResult<bool> {
    let pred = device.allocate(1, 1, xthunk_core::ir::MemorySpace::Device)?;
    let stream = device.create_stream()?;
    if let Err(Error::Unsupported { .. }) = stream.begin_capture() {
        return Ok(false);
    }
    let recorded = stream.create_condition().and_then(|h| {
        stream.set_condition(h, SetCondition::Pred { pred: pred.ptr() })?;
        stream.capture_conditional(ConditionalKind::If, h, &mut |_| Ok(()))
    });
    let ended = stream.end_capture();
    match recorded {
        Ok(()) => ended.map(|_| true).map_err(Into::into),
        Err(Error::Unsupported { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Trip count, counter value, nested, index type, index bytes, the branch they select.
type Case = (Option<u64>, i32, bool, DType, Vec<u8>, usize);

pub(super) fn control_in_command_buffer(
    device: &Arc<dyn Device>,
    rng: &mut CheckRng,
) -> CheckResult {
    let cases: [Case; 6] = [
        (None, 5, false, DType::I32, 0i32.to_le_bytes().to_vec(), 0),
        (None, 0, true, DType::I32, 1i32.to_le_bytes().to_vec(), 1),
        (None, 4, true, DType::I32, 9i32.to_le_bytes().to_vec(), 2),
        (None, 3, true, DType::Pred, vec![1], 0),
        (Some(3), 0, true, DType::Pred, vec![0], 1),
        (
            Some(0),
            0,
            false,
            DType::I32,
            (-4i32).to_le_bytes().to_vec(),
            2,
        ),
    ];
    let on_device = records_conditional_nodes(device)?;
    for (trips, count, nested, sel, sel_bytes, branch) in cases {
        let nodes_before = recorded_conditional_nodes();
        let direct = load(
            device,
            program(trips, nested, sel, false)?,
            &ExecutorConfig::default(),
        )?;
        let cmd = load(
            device,
            program(trips, nested, sel, true)?,
            &ExecutorConfig::default(),
        )?;
        let what = format!(
            "trip count {trips:?}, count {count}, nested {nested}, {sel} index -> branch {branch}"
        );
        for round in 0..3 {
            let x = uniform(rng, DType::F32, N, -2.0, 2.0);
            let params = vec![
                f32_bytes(&x)?,
                count.to_le_bytes().to_vec(),
                sel_bytes.clone(),
            ];
            let init = vec![vec![poison_byte(DType::F32); N * 4]];
            let a = execute_loaded(device, &direct, &params, &init, &ExecuteOptions::default())?;
            for rep in 0..2 {
                let c = execute_loaded(device, &cmd, &params, &init, &ExecuteOptions::default())?;
                compare_bytes(
                    &format!("{what}, round {round}, execution {rep}: command buffer vs direct"),
                    &c[0],
                    &a[0],
                )?;
            }
            let t = trips.unwrap_or(count.max(0) as u64);
            let exp: Vec<f64> = x.iter().map(|v| reference(*v, t, nested, branch)).collect();
            let got = decode(DType::F32, &a[0]);
            compare_floats(&format!("{what}: y"), got.floats("y")?, &exp, 0, |i| {
                1e-5 * (1.0 + exp[i].abs())
            })?;
        }
        let nodes = recorded_conditional_nodes() - nodes_before;
        if on_device && nodes == 0 {
            return Err(fail(format!(
                "{what}: the device records conditional graph nodes, but the command buffers \
                 ran with host-driven control flow (no conditional node was recorded)"
            )));
        }
        if !on_device && nodes != 0 {
            return Err(fail(format!(
                "{what}: the device has no conditional graph nodes, yet {nodes} were recorded"
            )));
        }
    }
    Ok(())
}
