//! `While` and `Conditional` inside command buffers on the host backend (conditional nodes
//! of host graphs): nested loops and branches, replay and re-recording, implicit command
//! buffers over programs with loops — every result equal to the in-order, host-driven run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::builder::*;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::*;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

fn k(name: &str, args: Vec<KernelArg>) -> Thunk {
    Thunk::Kernel(KernelThunk {
        module: "std".into(),
        name: name.into(),
        grid: Dim3::x(1),
        block: Dim3::x(64),
        shared_mem: 0,
        args,
    })
}

/// `y = x`; an outer loop of `outer` trips (a trip count) whose body runs an inner
/// data-dependent loop (`c = count; while c > 0 { y *= 1.5; c -= 1 }`) and then a branch on
/// `sel` (0: y += x, else y *= 0.5); then `pad` plain scales by 1. Wrapped in one command
/// buffer when `wrap`.
fn program(outer: u64, pad: usize, wrap: bool) -> Executable {
    let mut b = ExecutableBuilder::new("nested_device_control");
    b.standard_module();
    let x = b.parameter("x", DType::F32, &[8]);
    let count = b.parameter("count", DType::I32, &[1]);
    let sel = b.parameter("sel", DType::I32, &[1]);
    let y = b.output("y", DType::F32, &[8]);
    let c = b.temp(DType::I32, &[1]);
    let t = b.temp(DType::I32, &[1]);
    let pred = b.temp(DType::Pred, &[1]);
    let zero = b.constant(DType::I32, &[1], 0i32.to_le_bytes().to_vec());
    let one = b.constant(DType::I32, &[1], 1i32.to_le_bytes().to_vec());
    let neg1 = b.constant(DType::I32, &[1], (-1i32).to_le_bytes().to_vec());
    let n8 = KernelArg::Scalar(Scalar::I64(8));
    let n1 = KernelArg::Scalar(Scalar::I64(1));
    let scale = |v: f32| {
        k(
            "scale_f32",
            vec![y.rw(), KernelArg::Scalar(Scalar::F32(v)), n8],
        )
    };
    let inner = Thunk::While(WhileThunk {
        cond: vec![
            k("max_i32", vec![c.r(), zero.r(), t.w(), n1]),
            k("min_i32", vec![t.r(), one.r(), t.w(), n1]),
            Thunk::Copy(CopyThunk {
                src: Slice::new(t.slice().allocation, 0, 1),
                dst: pred.slice(),
            }),
        ],
        pred: pred.slice(),
        body: vec![scale(1.5), k("add_i32", vec![c.r(), neg1.r(), c.w(), n1])],
        trip_count: None,
    });
    let branch = Thunk::Conditional(ConditionalThunk {
        index: sel.slice(),
        index_type: DType::I32,
        branches: vec![
            vec![k(
                "axpy_f32",
                vec![x.r(), y.rw(), KernelArg::Scalar(Scalar::F32(1.0)), n8],
            )],
            vec![scale(0.5)],
        ],
    });
    let mut all = vec![
        Thunk::Copy(CopyThunk {
            src: x.slice(),
            dst: y.slice(),
        }),
        Thunk::While(WhileThunk {
            cond: vec![],
            pred: pred.slice(),
            body: vec![
                Thunk::Copy(CopyThunk {
                    src: count.slice(),
                    dst: c.slice(),
                }),
                inner,
                branch,
            ],
            trip_count: Some(outer),
        }),
    ];
    all.extend((0..pad).map(|_| scale(1.0)));
    if wrap {
        b.push(Thunk::CommandBuffer(CommandBufferThunk { body: all }));
    } else {
        for t in all {
            b.push(t);
        }
    }
    b.build().unwrap()
}

fn inputs(count: i32, sel: i32) -> Vec<Vec<u8>> {
    let x: Vec<u8> = (0..8)
        .flat_map(|i| (0.5 + 0.25 * i as f32).to_le_bytes())
        .collect();
    vec![x, count.to_le_bytes().to_vec(), sel.to_le_bytes().to_vec()]
}

fn reference(outer: u64, count: i32, sel: i32) -> Vec<u8> {
    (0..8)
        .flat_map(|i| {
            let x = 0.5f32 + 0.25 * i as f32;
            let mut y = x;
            for _ in 0..outer {
                for _ in 0..count.max(0) {
                    y *= 1.5;
                }
                if sel == 0 { y += x } else { y *= 0.5 }
            }
            y.to_le_bytes()
        })
        .collect()
}

#[test]
fn nested_control_flow_in_a_command_buffer_matches_host_driven() {
    let dev = device();
    for (outer, count, sel) in [(0, 3, 0), (3, 2, 0), (2, 4, 1), (4, 0, 1), (1, -2, 0)] {
        let want = reference(outer, count, sel);
        let data = inputs(count, sel);
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let direct = LoadedExecutable::load_with(
            dev.clone(),
            program(outer, 0, false),
            &ExecutorConfig::in_order(),
        )
        .unwrap();
        let cmd = LoadedExecutable::load(dev.clone(), program(outer, 0, true)).unwrap();
        let a = direct
            .run_with_host_data(&refs, &ExecuteOptions::default())
            .unwrap();
        assert_eq!(a[0], want, "host-driven, {outer} outer trips");
        // Each call allocates new buffers: the command buffer is re-recorded each time.
        for rep in 0..3 {
            let c = cmd
                .run_with_host_data(&refs, &ExecuteOptions::default())
                .unwrap();
            assert_eq!(
                c[0], want,
                "command buffer, {outer} outer trips, execution {rep}"
            );
        }
        // With a deadline the command buffer still replays as recorded.
        let opts = ExecuteOptions {
            deadline: Some(std::time::Duration::from_secs(30)),
            ..Default::default()
        };
        let d = cmd.run_with_host_data(&refs, &opts).unwrap();
        assert_eq!(d[0], want);
    }
}

#[test]
fn implicit_command_buffers_cover_programs_with_loops() {
    let dev = device();
    let exe = program(3, 70, false);
    let auto = LoadedExecutable::load(dev.clone(), exe.clone()).unwrap();
    assert!(
        auto.schedule_info().implicit_command_buffer,
        "{:?}",
        auto.schedule_info()
    );
    let plain = LoadedExecutable::load_with(dev, exe, &ExecutorConfig::in_order()).unwrap();
    assert!(!plain.schedule_info().implicit_command_buffer);
    for (count, sel) in [(2, 0), (3, 1)] {
        let data = inputs(count, sel);
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let want = reference(3, count, sel);
        for _ in 0..2 {
            let a = auto
                .run_with_host_data(&refs, &ExecuteOptions::default())
                .unwrap();
            assert_eq!(a[0], want);
        }
        let b = plain
            .run_with_host_data(&refs, &ExecuteOptions::default())
            .unwrap();
        assert_eq!(b[0], want);
    }
}
