//! Custom calls on the host backend with Rust handlers: results against f64 references,
//! load-time errors (missing handler, a call its handler does not take) with nothing run,
//! handler errors naming the thunk and the target, capture into command buffers and splits,
//! and side effects keeping program order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use xthunk_core::backend::{Backend, Device};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::custom_call::{
    AttrType, Call, Handler, HandlerError, HandlerSignature, Traits, registry,
};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{CommandBufferThunk, CopyThunk, CustomCallThunk, DType, Thunk};

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

/// `out = scale * x + y` (f32), computed on the host in the stream's order. Counts its calls
/// (issues) and its runs (the enqueued work, which replays run again).
struct ScaledAdd {
    calls: AtomicU64,
    runs: Arc<AtomicU64>,
    capture: bool,
    /// The run (counted from 0) whose work fails, if any.
    fail_at: Option<u64>,
}

impl ScaledAdd {
    fn new(capture: bool) -> Arc<Self> {
        Arc::new(ScaledAdd {
            calls: AtomicU64::new(0),
            runs: Arc::new(AtomicU64::new(0)),
            capture,
            fail_at: None,
        })
    }
}

impl Handler for ScaledAdd {
    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let scale: f32 = call.attr("scale")?;
        let x = call.operand(0, DType::F32)?.clone();
        let y = call.operand(1, DType::F32)?.clone();
        let out = call.result(0, DType::F32)?.clone();
        let n = x.element_count() as usize;
        let (xp, yp, op) = (x.ptr.0 as usize, y.ptr.0 as usize, out.ptr.0 as usize);
        let runs = self.runs.clone();
        let fail_at = self.fail_at;
        call.enqueue_host(move || {
            let run = runs.fetch_add(1, Ordering::SeqCst);
            if Some(run) == fail_at {
                return Err(HandlerError::failed(format!("run {run} failed on purpose")));
            }
            // SAFETY: host device pointers are host addresses of live allocations of the
            // execution; the slices hold `n` f32 each (checked at load) and do not overlap.
            let (x, y, o) = unsafe {
                (
                    std::slice::from_raw_parts(xp as *const f32, n),
                    std::slice::from_raw_parts(yp as *const f32, n),
                    std::slice::from_raw_parts_mut(op as *mut f32, n),
                )
            };
            for i in 0..n {
                o[i] = scale * x[i] + y[i];
            }
            Ok(())
        })
    }

    fn traits(&self) -> Traits {
        Traits {
            command_buffer_compatible: self.capture,
        }
    }

    fn signature(&self) -> HandlerSignature {
        HandlerSignature {
            operands: Some(2),
            results: Some(1),
            attributes: Some(vec![("scale".into(), AttrType::F32)]),
        }
    }
}

/// Fails at issue with a message.
struct Fails;

impl Handler for Fails {
    fn call(&self, _: &Call<'_>) -> Result<(), HandlerError> {
        Err(HandlerError::failed("the library said no"))
    }
}

/// A program: `t = scale * x + y` by `target`, then `out = t` (both inside a command buffer
/// when `in_cb`).
fn program(target: &str, n: u64, scale: f32, in_cb: bool) -> xthunk_core::ir::Executable {
    let mut b = ExecutableBuilder::new("custom");
    let x = b.parameter("x", DType::F32, &[n]);
    let y = b.parameter("y", DType::F32, &[n]);
    let out = b.output("out", DType::F32, &[n]);
    let t = b.temp(DType::F32, &[n]);
    let call = Thunk::CustomCall(
        CustomCallThunk::new(target)
            .operand(x.buffer())
            .operand(y.buffer())
            .result(t.buffer())
            .attr("scale", scale),
    );
    let copy = Thunk::Copy(CopyThunk {
        src: t.slice(),
        dst: out.slice(),
    });
    if in_cb {
        b.push(Thunk::CommandBuffer(CommandBufferThunk {
            body: vec![call, copy],
        }));
    } else {
        b.push(call);
        b.push(copy);
    }
    b.build().unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The buffers of one program, kept across executions (same addresses: recordings replay).
struct Bound {
    params: Vec<xthunk_core::backend::Buffer>,
    outputs: Vec<xthunk_core::backend::Buffer>,
}

fn bind(exe: &LoadedExecutable) -> Bound {
    Bound {
        params: exe.allocate_parameters().unwrap(),
        outputs: exe.allocate_outputs().unwrap(),
    }
}

/// Runs `exe` with fresh random x and y (and a poisoned `out`), checks `out` against the f64
/// reference.
fn run_checked(exe: &LoadedExecutable, bound: &Bound, n: usize, scale: f32, seed: u64) {
    use xthunk_core::backend::DeviceMemory;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let d = exe.device();
    d.copy_from_host(&f32_bytes(&x), bound.params[0].ptr())
        .unwrap();
    d.copy_from_host(&f32_bytes(&y), bound.params[1].ptr())
        .unwrap();
    d.copy_from_host(&f32_bytes(&vec![f32::NAN; n]), bound.outputs[0].ptr())
        .unwrap();
    let p: Vec<&dyn DeviceMemory> = bound.params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = bound.outputs.iter().map(|b| b.as_ref() as _).collect();
    exe.execute(&p, &o, &ExecuteOptions::default()).unwrap();
    let mut out = vec![0u8; n * 4];
    d.copy_to_host(bound.outputs[0].ptr(), &mut out).unwrap();
    let got = from_bytes(&out);
    for i in 0..n {
        let want = f64::from(scale) * f64::from(x[i]) + f64::from(y[i]);
        assert!(
            (f64::from(got[i]) - want).abs() <= 1e-6 * (1.0 + want.abs()),
            "out[{i}] = {}, want {want}",
            got[i]
        );
    }
}

#[test]
fn a_rust_handler_computes_in_stream_order() {
    let h = ScaledAdd::new(false);
    registry()
        .register("host", "t.rust.scaled_add", h.clone(), "test")
        .unwrap();
    let exe =
        LoadedExecutable::load(device(), program("t.rust.scaled_add", 1000, 2.5, false)).unwrap();
    let bound = bind(&exe);
    run_checked(&exe, &bound, 1000, 2.5, 1);
    run_checked(&exe, &bound, 1000, 2.5, 2);
    assert_eq!(h.calls.load(Ordering::SeqCst), 2);
    assert_eq!(h.runs.load(Ordering::SeqCst), 2);
}

#[test]
fn a_compatible_handler_is_captured_and_replayed() {
    let h = ScaledAdd::new(true);
    registry()
        .register("host", "t.rust.captured", h.clone(), "test")
        .unwrap();
    let exe =
        LoadedExecutable::load(device(), program("t.rust.captured", 333, -0.5, true)).unwrap();
    let bound = bind(&exe);
    for seed in 0..3 {
        run_checked(&exe, &bound, 333, -0.5, 10 + seed);
    }
    // Issued once, while the command buffer recorded; replays ran its work.
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
    assert_eq!(h.runs.load(Ordering::SeqCst), 3);
}

#[test]
fn an_incompatible_handler_splits_the_command_buffer() {
    let h = ScaledAdd::new(false);
    registry()
        .register("host", "t.rust.split", h.clone(), "test")
        .unwrap();
    let exe = LoadedExecutable::load(device(), program("t.rust.split", 77, 3.0, true)).unwrap();
    // The command buffer became two steps: the call, and a command buffer of the copy.
    assert_eq!(exe.schedule_info().nodes, 2);
    let bound = bind(&exe);
    for seed in 0..3 {
        run_checked(&exe, &bound, 77, 3.0, 20 + seed);
    }
    assert_eq!(h.calls.load(Ordering::SeqCst), 3);
    assert_eq!(h.runs.load(Ordering::SeqCst), 3);
}

#[test]
fn a_missing_handler_fails_the_load_listing_the_registered_targets() {
    registry()
        .register("host", "t.listed", Arc::new(Fails), "test")
        .unwrap();
    let e = LoadedExecutable::load(device(), program("t.nobody", 4, 1.0, false))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("thunk entry[0]: custom call `t.nobody` has no handler on backend `host`"),
        "{e}"
    );
    assert!(e.contains("t.listed"), "{e}");
}

#[test]
fn a_call_its_handler_does_not_take_fails_the_load_and_nothing_runs() {
    let h = ScaledAdd::new(false);
    registry()
        .register("host", "t.rust.typed", h.clone(), "test")
        .unwrap();
    let mut exe = program("t.rust.typed", 4, 1.0, false);
    let Thunk::CustomCall(c) = &mut exe.entry[0] else {
        panic!()
    };
    c.attributes.0[0].1 = 1.0f64.into();
    let e = LoadedExecutable::load(device(), exe.clone())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("custom call `t.rust.typed`: attribute `scale` is f64, the handler reads f32"),
        "{e}"
    );
    let Thunk::CustomCall(c) = &mut exe.entry[0] else {
        panic!()
    };
    c.attributes.0[0].0 = "scael".into();
    let e = LoadedExecutable::load(device(), exe)
        .unwrap_err()
        .to_string();
    assert!(e.contains("attribute `scale` (f32) is missing"), "{e}");
    assert_eq!(h.calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_handler_error_names_the_thunk_and_the_target() {
    registry()
        .register("host", "t.fails", Arc::new(Fails), "test")
        .unwrap();
    let mut b = ExecutableBuilder::new("failing");
    let y = b.output("y", DType::F32, &[4]);
    b.begin_sequence();
    b.memset(y.slice(), xthunk_core::ir::MemsetPattern::U32(0));
    b.push(Thunk::CustomCall(
        CustomCallThunk::new("t.fails").result(y.buffer()),
    ));
    b.end_sequence();
    let exe = LoadedExecutable::load(device(), b.build().unwrap()).unwrap();
    let e = exe
        .run_with_host_data(&[], &ExecuteOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "thunk entry[0].thunks[1] (custom_call): custom call `t.fails` failed: the library said no"
    );
}

#[test]
fn side_effecting_calls_keep_program_order() {
    registry()
        .register("host", "t.effect", Arc::new(Fails), "test")
        .unwrap();
    let build = |effect: bool| {
        let mut b = ExecutableBuilder::new("effects");
        let outs: Vec<_> = (0..2)
            .map(|i| b.output(&format!("y{i}"), DType::F32, &[4]))
            .collect();
        for o in &outs {
            let mut c = CustomCallThunk::new("t.effect").result(o.buffer());
            c.side_effect = effect;
            b.push(Thunk::CustomCall(c));
        }
        b.build().unwrap()
    };
    let config = ExecutorConfig {
        streams: 2,
        sequential_below: 0,
        ..ExecutorConfig::default()
    };
    let free = LoadedExecutable::load_with(device(), build(false), &config).unwrap();
    let ordered = LoadedExecutable::load_with(device(), build(true), &config).unwrap();
    assert_eq!(free.schedule_info().edges, 0);
    assert_eq!(ordered.schedule_info().edges, 1);
}

#[test]
fn an_error_of_enqueued_host_work_names_the_thunk_and_the_target() {
    let h = Arc::new(ScaledAdd {
        calls: AtomicU64::new(0),
        runs: Arc::new(AtomicU64::new(0)),
        capture: false,
        fail_at: Some(1),
    });
    registry()
        .register("host", "t.rust.late_failure", h.clone(), "test")
        .unwrap();
    let exe =
        LoadedExecutable::load(device(), program("t.rust.late_failure", 8, 1.0, false)).unwrap();
    let bound = bind(&exe);
    run_checked(&exe, &bound, 8, 1.0, 5);
    use xthunk_core::backend::DeviceMemory;
    let p: Vec<&dyn DeviceMemory> = bound.params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = bound.outputs.iter().map(|b| b.as_ref() as _).collect();
    let e = exe
        .execute(&p, &o, &ExecuteOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "thunk entry[0] (custom_call): custom call `t.rust.late_failure` failed: run 1 failed on purpose"
    );
    // The state is usable again.
    run_checked(&exe, &bound, 8, 1.0, 6);
}

#[test]
fn a_compatible_handler_joins_the_implicit_command_buffer() {
    use xthunk_core::executor::AUTO_COMMAND_BUFFER_MIN;
    let build = |target: &str| {
        let mut exe = program(target, 64, 0.5, false);
        // Enough plain work after the call for an implicit command buffer.
        let Thunk::Copy(CopyThunk { src, dst }) = exe.entry[1].clone() else {
            panic!()
        };
        for _ in 0..AUTO_COMMAND_BUFFER_MIN {
            exe.entry.push(Thunk::Copy(CopyThunk { src, dst }));
        }
        exe
    };
    for (target, capture) in [("t.rust.implicit", true), ("t.rust.explicit_only", false)] {
        let h = ScaledAdd::new(capture);
        registry()
            .register("host", target, h.clone(), "test")
            .unwrap();
        let config = ExecutorConfig {
            streams: 1,
            ..ExecutorConfig::default()
        };
        let exe = LoadedExecutable::load_with(device(), build(target), &config).unwrap();
        assert_eq!(
            exe.schedule_info().implicit_command_buffer,
            capture,
            "{target}"
        );
        let bound = bind(&exe);
        for seed in 0..3 {
            run_checked(&exe, &bound, 64, 0.5, 30 + seed);
        }
        let want = if capture { 1 } else { 3 };
        assert_eq!(h.calls.load(Ordering::SeqCst), want, "{target}");
        assert_eq!(h.runs.load(Ordering::SeqCst), 3, "{target}");
    }
}
