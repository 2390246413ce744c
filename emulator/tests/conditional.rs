//! Conditional graph nodes through the CUDA driver API, as the CUDA backend records them: a
//! capture's graph and dependencies, condition handles, IF / WHILE / SWITCH nodes added with
//! `cuGraphAddNode`, bodies captured with `cuStreamBeginCaptureToGraph` (nested), the
//! set-condition kernels of the backend's own module (`backend-cuda/src/set_condition.cu`,
//! compiled by the real NVRTC: skipped when it is not installed), and the strict errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ADD_F32, Cuda, ok, serial, take};
use xthunk_core::kernels::portable;
use xthunk_emulator::cuda;
use xthunk_emulator::cuda::conditional::{ConditionalNodeParams, NodeParamsHead};
use xthunk_emulator::diag::Kind;
use xthunk_emulator::error::cu;
use xthunk_emulator::stream::conditional::{COND_IF, COND_SWITCH, COND_WHILE, NODE_TYPE};

const SET_CONDITION: &str = include_str!("../../backend-cuda/src/set_condition.cu");
const THREAD_LOCAL: u32 = 1;

/// The set-condition module compiled for sm_90, or `None` (skipped) without NVRTC.
fn set_module(c: &Cuda) -> Option<usize> {
    let Some(nvrtc) = common::nvrtc() else {
        eprintln!("SKIPPED: NVRTC not installed (the set-condition kernels are compiled by it)");
        return None;
    };
    let cubin = common::nvrtc_compile(&nvrtc, SET_CONDITION, "sm_90").unwrap();
    Some(c.load(&cubin).unwrap())
}

/// The capture's graph and its dependencies.
fn capture_info(s: usize) -> (usize, Vec<usize>) {
    let (mut status, mut id, mut graph) = (0u32, 0u64, 0usize);
    let (mut deps, mut n): (*const usize, usize) = (std::ptr::null(), 0);
    // SAFETY: a live stream and valid out-pointers.
    ok(
        unsafe {
            cuda::cuStreamGetCaptureInfo_v2(s, &mut status, &mut id, &mut graph, &mut deps, &mut n)
        },
        "capture info",
    );
    assert_eq!(status, 1, "capturing");
    let deps = if n == 0 {
        vec![]
    } else {
        // SAFETY: `n` handles at `deps` (the API contract).
        unsafe { std::slice::from_raw_parts(deps, n) }.to_vec()
    };
    (graph, deps)
}

fn condition(c: &Cuda, graph: usize, default: u32, flags: u32) -> u64 {
    let mut h = 0u64;
    // SAFETY: valid out-pointer.
    ok(
        unsafe { cuda::cuGraphConditionalHandleCreate(&mut h, graph, c.ctx, default, flags) },
        "handle create",
    );
    h
}

/// Adds a conditional node of `kind` with `size` bodies after the capture's dependencies,
/// makes the capture depend on it, and returns the body graphs.
fn add_node(c: &Cuda, s: usize, h: u64, kind: u32, size: u32) -> Result<Vec<usize>, u32> {
    let (graph, deps) = capture_info(s);
    let mut p = NodeParamsHead {
        ty: NODE_TYPE as i32,
        reserved0: [0; 3],
        conditional: ConditionalNodeParams {
            handle: h,
            ty: kind,
            size,
            ph_graph_out: std::ptr::null_mut(),
            ctx: c.ctx,
        },
    };
    let mut node = 0usize;
    // SAFETY: valid out-pointers and parameters.
    let r = unsafe { cuda::cuGraphAddNode(&mut node, graph, deps.as_ptr(), deps.len(), &mut p) };
    if r != 0 {
        return Err(r);
    }
    // SAFETY: a capturing stream and one live node.
    ok(
        unsafe { cuda::cuStreamUpdateCaptureDependencies(s, &mut node, 1, 1) },
        "update deps",
    );
    let out = p.conditional.ph_graph_out;
    // SAFETY: the emulator's array of `size` body graphs.
    Ok(unsafe { std::slice::from_raw_parts(out, size as usize) }.to_vec())
}

/// Captures `f(stream)` into `body` on a fresh stream.
fn capture_body(c: &Cuda, body: usize, f: impl FnOnce(usize)) {
    let s = c.stream(false);
    // SAFETY: a live idle stream and an empty graph.
    ok(
        unsafe {
            cuda::cuStreamBeginCaptureToGraph(
                s,
                body,
                std::ptr::null(),
                std::ptr::null(),
                0,
                THREAD_LOCAL,
            )
        },
        "begin capture to graph",
    );
    f(s);
    let mut g = 0usize;
    // SAFETY: a capturing stream, valid out-pointer.
    ok(
        unsafe { cuda::cuStreamEndCapture(s, &mut g) },
        "end body capture",
    );
    assert_eq!(g, body);
    c.destroy_stream(s);
}

fn run(c: &Cuda, s: usize, f: impl FnOnce(usize)) -> (usize, usize) {
    // SAFETY: a live stream.
    ok(
        unsafe { cuda::cuStreamBeginCapture_v2(s, THREAD_LOCAL) },
        "begin",
    );
    f(s);
    let mut g = 0usize;
    // SAFETY: a capturing stream, valid out-pointer.
    ok(unsafe { cuda::cuStreamEndCapture(s, &mut g) }, "end");
    let mut e = 0usize;
    // SAFETY: a live graph, valid out-pointer.
    ok(
        unsafe { cuda::cuGraphInstantiateWithFlags(&mut e, g, 0) },
        "instantiate",
    );
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s) }, "launch");
    ok(c.sync(s), "sync");
    (g, e)
}

fn destroy(g: usize, e: usize) {
    // SAFETY: live handles, destroyed once.
    unsafe {
        ok(cuda::cuGraphExecDestroy(e), "exec destroy");
        ok(cuda::cuGraphDestroy(g), "graph destroy");
    }
}

#[test]
fn while_with_trip_counter_nested_if_and_switch() {
    let _g = serial();
    let c = Cuda::new();
    let Some(m) = set_module(&c) else { return };
    let trips = c.function(m, "xthunk_set_condition_trips").unwrap();
    let pred = c.function(m, "xthunk_set_condition_pred").unwrap();
    let branch = c.function(m, "xthunk_set_condition_branch").unwrap();
    let nvrtc = common::nvrtc().unwrap();
    let std_module = c
        .load(&common::nvrtc_compile(&nvrtc, &portable::with_prelude(ADD_F32), "sm_90").unwrap())
        .unwrap();
    let add = c.function(std_module, "add_f32").unwrap();
    let n = 8usize;
    let (acc, one, counter, p, idx) = (
        c.alloc(4 * n),
        c.alloc(4 * n),
        c.alloc(8),
        c.alloc(1),
        c.alloc(4),
    );
    c.write_f32(one, &vec![1.0; n]);
    // p = 1 (IF: then), idx = -1 (out of range: the last branch, 2, is selected).
    assert_eq!(c.htod(p, &[1]), 0);
    assert_eq!(c.htod(idx, &(-1i32).to_le_bytes()), 0);
    let s = c.stream(false);
    // acc = 0; counter = 0; while (counter++ < 5) { acc += 1; if (*p) acc += 1; switch (*idx) {..} }
    let (g, e) = run(&c, s, |s| {
        ok(c.memset32(acc, 0, n, s), "zero acc");
        ok(c.memset32(counter, 0, 2, s), "zero counter");
        let (graph, _) = capture_info(s);
        let hw = condition(&c, graph, 0, 1);
        ok(c.launch(trips, &[hw, counter, 5], s), "set trips");
        let bodies = add_node(&c, s, hw, COND_WHILE, 1).unwrap();
        capture_body(&c, bodies[0], |b| {
            ok(c.launch(add, &[acc, one, acc, n as u64], b), "acc += 1");
            let hi = condition(&c, bodies[0], 0, 1);
            ok(c.launch(pred, &[hi, p], b), "set if");
            let ifs = add_node(&c, b, hi, COND_IF, 2).unwrap();
            capture_body(&c, ifs[0], |t| {
                ok(c.launch(add, &[acc, one, acc, n as u64], t), "then")
            });
            capture_body(&c, ifs[1], |_| {});
            // SWITCH on the branch kernel's value (0 or 1): body 1 adds 10.
            let hs = condition(&c, bodies[0], 0, 1);
            ok(c.launch(branch, &[hs, idx, 2, 2], b), "set switch");
            let sw = add_node(&c, b, hs, COND_SWITCH, 2).unwrap();
            capture_body(&c, sw[0], |_| {});
            capture_body(&c, sw[1], |t| {
                for _ in 0..10 {
                    ok(c.launch(add, &[acc, one, acc, n as u64], t), "case 1");
                }
            });
            ok(c.launch(trips, &[hw, counter, 5], b), "set trips again");
        });
    });
    // Every trip: +1, +1 (then), +10 (SWITCH body 1).
    assert_eq!(c.read_f32(acc, n), vec![5.0 * 12.0; n]);
    // Again with p = 0 and idx = 0 (branch 2 not selected -> SWITCH body 0).
    assert_eq!(c.htod(p, &[0]), 0);
    assert_eq!(c.htod(idx, &0i32.to_le_bytes()), 0);
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s) }, "relaunch");
    ok(c.sync(s), "sync");
    assert_eq!(c.read_f32(acc, n), vec![5.0; n]);
    destroy(g, e);
    c.destroy_stream(s);
    for x in [acc, one, counter, p, idx] {
        ok(c.free(x), "free");
    }
    c.unload(std_module);
    c.unload(m);
    assert!(take(Kind::InvalidValue).is_empty());
    assert!(take(Kind::InvalidState).is_empty());
}

#[test]
fn misuse_is_refused() {
    let _g = serial();
    let c = Cuda::new();
    let Some(m) = set_module(&c) else { return };
    let pred = c.function(m, "xthunk_set_condition_pred").unwrap();
    let p = c.alloc(1);
    assert_eq!(c.htod(p, &[1]), 0);
    let s = c.stream(false);
    // SAFETY: a live stream.
    ok(
        unsafe { cuda::cuStreamBeginCapture_v2(s, THREAD_LOCAL) },
        "begin",
    );
    let (graph, _) = capture_info(s);
    // An unknown handle, an undefined flag.
    assert_eq!(add_node(&c, s, 12345, COND_IF, 1), Err(cu::INVALID_VALUE));
    let mut h = 0u64;
    // SAFETY: valid out-pointer.
    let r = unsafe { cuda::cuGraphConditionalHandleCreate(&mut h, graph, c.ctx, 0, 2) };
    assert_eq!(r, cu::INVALID_VALUE);
    let h = condition(&c, graph, 1, 1);
    // WHILE takes one body; a handle serves one node.
    assert_eq!(add_node(&c, s, h, COND_WHILE, 2), Err(cu::INVALID_VALUE));
    let bodies = add_node(&c, s, h, COND_IF, 1).unwrap();
    assert_eq!(add_node(&c, s, h, COND_IF, 1), Err(cu::INVALID_VALUE));
    // A body graph goes with its node.
    // SAFETY: a live graph handle.
    let r = unsafe { cuda::cuGraphDestroy(bodies[0]) };
    assert_eq!(r, cu::INVALID_VALUE);
    // Work captured after cuGraphAddNode without updating the dependencies invalidates the
    // capture.
    let h2 = condition(&c, graph, 0, 1);
    let (g2, deps) = capture_info(s);
    let mut params = NodeParamsHead {
        ty: NODE_TYPE as i32,
        reserved0: [0; 3],
        conditional: ConditionalNodeParams {
            handle: h2,
            ty: COND_IF,
            size: 1,
            ph_graph_out: std::ptr::null_mut(),
            ctx: c.ctx,
        },
    };
    let mut node = 0usize;
    // SAFETY: valid pointers.
    ok(
        unsafe { cuda::cuGraphAddNode(&mut node, g2, deps.as_ptr(), deps.len(), &mut params) },
        "add",
    );
    ok(c.memset8(p, 0, 1, s), "captured");
    let mut g = 0usize;
    // SAFETY: a capturing stream, valid out-pointer.
    let r = unsafe { cuda::cuStreamEndCapture(s, &mut g) };
    assert_eq!(r, cu::STREAM_CAPTURE_INVALIDATED);
    assert!(!take(Kind::InvalidState).is_empty());
    c.destroy_stream(s);
    // A same-named kernel in another module is not run as the set-condition kernel.
    let nvrtc = common::nvrtc().unwrap();
    let other = format!("{SET_CONDITION}\nextern \"C\" __global__ void other_kernel() {{}}\n");
    let cubin = common::nvrtc_compile(&nvrtc, &other, "sm_90").unwrap();
    let m2 = c.load(&cubin).unwrap();
    assert_eq!(
        c.function(m2, "xthunk_set_condition_pred"),
        Err(cu::NOT_FOUND)
    );
    c.unload(m2);
    // A set-condition kernel outside a graph launch fails (last: the error is sticky).
    let s = c.stream(false);
    ok(c.launch(pred, &[0xc0d0_0000_0000_0001, p], s), "queued");
    assert_ne!(c.sync(s), 0);
    c.destroy_stream(s);
    c.unload(m);
    ok(c.free(p), "free");
}
