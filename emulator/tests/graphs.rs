//! Stream capture, instantiation, replay and update; illegal calls during capture.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{ADD_F32_PTX, Cuda, ok, serial, take};
use xthunk_emulator::cuda;
use xthunk_emulator::diag::Kind;
use xthunk_emulator::error::cu;
use xthunk_emulator::memory::POISON;

const THREAD_LOCAL: u32 = 1;

fn begin(s: usize) {
    // SAFETY: a live stream.
    ok(
        unsafe { cuda::cuStreamBeginCapture_v2(s, THREAD_LOCAL) },
        "begin capture",
    );
}

fn end(s: usize) -> Result<usize, u32> {
    let mut g = 0usize;
    // SAFETY: a live stream and a valid out-pointer.
    match unsafe { cuda::cuStreamEndCapture(s, &mut g) } {
        0 => Ok(g),
        e => {
            assert_eq!(g, 0);
            Err(e)
        }
    }
}

fn instantiate(g: usize) -> usize {
    let mut e = 0usize;
    // SAFETY: a live graph and a valid out-pointer.
    ok(
        unsafe { cuda::cuGraphInstantiateWithFlags(&mut e, g, 0) },
        "instantiate",
    );
    e
}

fn nodes(g: usize) -> usize {
    let mut n = 0usize;
    // SAFETY: a live graph; a null node array asks for the count.
    ok(
        unsafe { cuda::cuGraphGetNodes(g, std::ptr::null_mut(), &mut n) },
        "nodes",
    );
    n
}

#[test]
fn capture_records_and_launch_replays() {
    let _g = serial();
    let c = Cuda::new();
    let s = c.stream(false);
    let m = c.load(ADD_F32_PTX.as_bytes()).unwrap();
    let f = c.function(m, "add_f32").unwrap();
    let n = 64usize;
    let (a, b, out) = (c.alloc(4 * n), c.alloc(4 * n), c.alloc(4 * n));
    begin(s);
    ok(c.memset32(a, 1.5f32.to_bits(), n, s), "memset a");
    ok(c.memset32(b, 2.0f32.to_bits(), n, s), "memset b");
    ok(c.launch(f, &[a, b, out, n as u64], s), "launch");
    let g = end(s).unwrap();
    // Nothing ran during capture.
    assert!(c.read(out, 4 * n).iter().all(|&x| x == POISON));
    assert_eq!(nodes(g), 3);
    let e = instantiate(g);
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s) }, "launch graph");
    ok(c.sync(s), "sync");
    assert_eq!(c.read_f32(out, n), vec![3.5; n]);
    // Replay after changing an input outside the graph: the graph's memsets rewrite it.
    c.write_f32(a, &vec![100.0; n]);
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s) }, "launch graph again");
    ok(c.sync(s), "sync");
    assert_eq!(c.read_f32(out, n), vec![3.5; n]);

    // Update with a graph of the same shape (another value), then with another shape.
    begin(s);
    ok(c.memset32(a, 10.0f32.to_bits(), n, s), "memset a");
    ok(c.memset32(b, 2.0f32.to_bits(), n, s), "memset b");
    ok(c.launch(f, &[a, b, out, n as u64], s), "launch");
    let g2 = end(s).unwrap();
    let mut info = cuda::UpdateResultInfo {
        result: 99,
        error_node: 0,
        error_from_node: 0,
    };
    // SAFETY: live handles and a valid out-pointer.
    ok(
        unsafe { cuda::cuGraphExecUpdate_v2(e, g2, &mut info) },
        "update",
    );
    assert_eq!(info.result, 0);
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s) }, "launch updated");
    ok(c.sync(s), "sync");
    assert_eq!(c.read_f32(out, n), vec![12.0; n]);
    begin(s);
    ok(c.memset32(a, 0, n, s), "memset a");
    let g3 = end(s).unwrap();
    // SAFETY: live handles and a valid out-pointer.
    let r = unsafe { cuda::cuGraphExecUpdate_v2(e, g3, &mut info) };
    assert_eq!(r, cu::GRAPH_EXEC_UPDATE_FAILURE);
    assert_eq!(info.result, 2, "topology changed");
    let _ = take(Kind::InvalidValue);
    // The unversioned (CUDA 11 form) export: same checks, separate out-pointers.
    let (mut node, mut result) = (1usize, 99u32);
    // SAFETY: live handles and valid out-pointers.
    let r = unsafe { cuda::cuGraphExecUpdate(e, g3, &mut node, &mut result) };
    assert_eq!(r, cu::GRAPH_EXEC_UPDATE_FAILURE);
    assert_eq!((result, node), (2, 0), "topology changed");
    let _ = take(Kind::InvalidValue);
    // SAFETY: live handles and valid out-pointers.
    ok(
        unsafe { cuda::cuGraphExecUpdate(e, g, &mut node, &mut result) },
        "update (unversioned)",
    );
    assert_eq!(result, 0);
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s) }, "launch updated again");
    ok(c.sync(s), "sync");
    assert_eq!(c.read_f32(out, n), vec![3.5; n]);

    for h in [g, g2, g3] {
        // SAFETY: live graphs, destroyed once.
        ok(unsafe { cuda::cuGraphDestroy(h) }, "destroy graph");
    }
    // SAFETY: a live executable graph, destroyed once.
    ok(unsafe { cuda::cuGraphExecDestroy(e) }, "destroy exec");
    for p in [a, b, out] {
        ok(c.free(p), "free");
    }
    c.unload(m);
    c.destroy_stream(s);
}

#[test]
fn illegal_calls_invalidate_the_capture() {
    let _g = serial();
    let c = Cuda::new();
    let s = c.stream(false);
    let d = c.alloc(16);
    // Synchronizing the capturing stream.
    begin(s);
    ok(c.memset8(d, 1, 16, s), "memset");
    assert_eq!(c.sync(s), cu::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(end(s), Err(cu::STREAM_CAPTURE_INVALIDATED));
    // A synchronous copy during a thread-local capture on this thread.
    begin(s);
    let mut out = [0u8; 16];
    assert_eq!(c.dtoh(&mut out, d), cu::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(end(s), Err(cu::STREAM_CAPTURE_INVALIDATED));
    // Allocation during capture.
    begin(s);
    assert_eq!(c.try_alloc(16), Err(cu::STREAM_CAPTURE_UNSUPPORTED));
    assert_eq!(end(s), Err(cu::STREAM_CAPTURE_INVALIDATED));
    // The legacy stream cannot be captured; ending a capture never begun fails.
    // SAFETY: NULL is the legacy stream.
    let r = unsafe { cuda::cuStreamBeginCapture_v2(0, THREAD_LOCAL) };
    assert_eq!(r, cu::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(end(s), Err(cu::ILLEGAL_STATE));
    // After all that, the stream works normally.
    ok(c.memset8(d, 5, 16, s), "memset");
    ok(c.sync(s), "sync");
    assert_eq!(c.read(d, 16), vec![5; 16]);
    ok(c.free(d), "free");
    c.destroy_stream(s);
    let _ = take(Kind::InvalidState);
}

#[test]
fn another_stream_joins_through_an_event() {
    let _g = serial();
    let c = Cuda::new();
    let (s1, s2) = (c.stream(false), c.stream(false));
    let (a, b) = (c.alloc(32), c.alloc(32));
    let (fork, join) = (c.event(), c.event());
    begin(s1);
    ok(c.memset8(a, 7, 32, s1), "memset");
    // SAFETY: live handles.
    unsafe {
        ok(cuda::cuEventRecord(fork, s1), "record fork");
        ok(cuda::cuStreamWaitEvent(s2, fork, 0), "s2 joins");
    }
    ok(c.copy(b, a, 32, s2), "copy on s2");
    // SAFETY: live handles.
    unsafe {
        ok(cuda::cuEventRecord(join, s2), "record join");
        ok(cuda::cuStreamWaitEvent(s1, join, 0), "s1 waits");
    }
    let g = end(s1).unwrap();
    assert_eq!(nodes(g), 2);
    let e = instantiate(g);
    // SAFETY: live handles.
    ok(unsafe { cuda::cuGraphLaunch(e, s1) }, "launch");
    ok(c.sync(s1), "sync");
    assert_eq!(c.read(b, 32), vec![7; 32]);
    // SAFETY: live handles, destroyed once.
    unsafe {
        ok(cuda::cuGraphExecDestroy(e), "exec destroy");
        ok(cuda::cuGraphDestroy(g), "graph destroy");
    }
    for p in [a, b] {
        ok(c.free(p), "free");
    }
    c.destroy_event(fork);
    c.destroy_event(join);
    c.destroy_stream(s1);
    c.destroy_stream(s2);
}
