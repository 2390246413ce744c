//! Tests of execution traces on the host backend: one record per node per execution, device
//! times inside the issue order, implicit and explicit command buffers, nothing recorded
//! without a tracer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use crate::backend::{Backend, Device, DeviceMemory};
use crate::bench::{TINY, tiny_chain};
use crate::host::HostBackend;
use crate::trace::{CommandBufferNote, TraceConfig, Tracer};
use std::sync::Arc;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

/// Executes `exe` `times` times on the same buffers (a command buffer is recorded once).
fn run(exe: &LoadedExecutable, tracer: Option<&Arc<Tracer>>, times: usize) {
    let x: Vec<u8> = (0..TINY).flat_map(|_| 0.5f32.to_le_bytes()).collect();
    let params = exe.allocate_parameters().unwrap();
    exe.device().copy_from_host(&x, params[0].ptr()).unwrap();
    let outputs = exe.allocate_outputs().unwrap();
    let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    let opts = ExecuteOptions {
        trace: tracer.cloned(),
        ..Default::default()
    };
    for _ in 0..times {
        exe.execute(&p, &o, &opts).unwrap();
    }
}

#[test]
fn one_record_per_node_per_execution_with_ordered_device_times() {
    let exe = LoadedExecutable::load_with(
        device(),
        tiny_chain("chain", 10, false).unwrap(),
        &ExecutorConfig::in_order(),
    )
    .unwrap();
    let tracer = Arc::new(Tracer::new(TraceConfig { device_times: true }));
    run(&exe, Some(&tracer), 3);
    let e = tracer.executions();
    assert_eq!(e.len(), 3);
    for (i, x) in e.iter().enumerate() {
        assert_eq!(x.index, i as u64);
        assert!(x.ok);
        assert_eq!(x.clock, "device, anchored exactly");
        let nodes: Vec<u32> = x.thunks.iter().map(|t| t.node).collect();
        assert_eq!(nodes, (0..10).collect::<Vec<_>>());
        let mut last = x.start_ns;
        for t in &x.thunks {
            let (s, f) = t.device.unwrap();
            assert!(s >= last && f >= s, "{t:?} after {last}");
            assert!(t.issue.0 <= t.issue.1);
            assert!(f <= x.end_ns);
            last = f;
        }
        assert!(
            x.nodes[0].name.starts_with("entry[0] kernel std.add_f32"),
            "{}",
            x.nodes[0].name
        );
        assert_eq!(x.nodes[0].bytes, 3 * TINY * 4);
    }
}

#[test]
fn an_implicit_command_buffer_is_one_record_unless_device_times() {
    let program = tiny_chain("chain", 64, false).unwrap();
    let exe = LoadedExecutable::load(device(), program).unwrap();
    assert!(exe.schedule_info().implicit_command_buffer);
    let plain = Arc::new(Tracer::new(TraceConfig::default()));
    run(&exe, Some(&plain), 2);
    for x in plain.executions() {
        assert_eq!(x.thunks.len(), 1);
        let node = &x.nodes[x.thunks[0].node as usize];
        assert!(
            node.name.contains("implicit command buffer of 64 thunks"),
            "{}",
            node.name
        );
        assert!(x.thunks[0].device.is_none());
    }
    let notes: Vec<_> = plain
        .executions()
        .iter()
        .map(|x| x.thunks[0].command_buffer)
        .collect();
    assert_eq!(
        notes,
        [CommandBufferNote::Recorded, CommandBufferNote::Replayed]
    );
    let timed = Arc::new(Tracer::new(TraceConfig { device_times: true }));
    run(&exe, Some(&timed), 1);
    let x = &timed.executions()[0];
    assert_eq!(x.thunks.len(), 64);
    assert!(x.thunks.iter().all(|t| t.device.is_some()));
}

#[test]
fn an_explicit_command_buffer_records_then_replays() {
    let exe = LoadedExecutable::load(device(), tiny_chain("cb", 8, true).unwrap()).unwrap();
    let tracer = Arc::new(Tracer::new(TraceConfig::default()));
    run(&exe, Some(&tracer), 3);
    let notes: Vec<_> = tracer
        .executions()
        .iter()
        .map(|x| {
            assert_eq!(x.thunks.len(), 1);
            x.thunks[0].command_buffer
        })
        .collect();
    assert_eq!(
        notes,
        [
            CommandBufferNote::Recorded,
            CommandBufferNote::Replayed,
            CommandBufferNote::Replayed
        ]
    );
    // The same executable without a tracer records nothing anywhere.
    run(&exe, None, 1);
    assert_eq!(tracer.executions().len(), 3);
    // New buffers: the recording is updated.
    let again = Arc::new(Tracer::new(TraceConfig::default()));
    run(&exe, Some(&again), 1);
    assert_eq!(
        again.executions()[0].thunks[0].command_buffer,
        CommandBufferNote::Updated
    );
}

#[test]
fn the_chrome_document_has_a_slice_per_record() {
    let exe = LoadedExecutable::load_with(
        device(),
        tiny_chain("chain", 5, false).unwrap(),
        &ExecutorConfig::in_order(),
    )
    .unwrap();
    let tracer = Arc::new(Tracer::new(TraceConfig::default()));
    run(&exe, Some(&tracer), 2);
    let doc = tracer.to_chrome();
    let events = doc["traceEvents"].as_array().unwrap();
    let thunks = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "kernel")
        .count();
    assert_eq!(thunks, 10);
    let executions = events.iter().filter(|e| e["cat"] == "execution").count();
    assert_eq!(executions, 2);
}

#[test]
fn issue_spans_tile_the_execution_on_either_clock() {
    use crate::trace::ClockSource;
    let exe = LoadedExecutable::load_with(
        device(),
        tiny_chain("chain", 50, false).unwrap(),
        &ExecutorConfig::in_order(),
    )
    .unwrap();
    for source in [ClockSource::Tsc, ClockSource::Instant] {
        let tracer = Arc::new(Tracer::with_clock(TraceConfig::default(), source));
        run(&exe, Some(&tracer), 2);
        let e = tracer.executions();
        assert_eq!(e.len(), 2);
        for x in &e {
            assert_eq!(x.thunks.len(), 50, "{source:?}");
            let first = x.thunks[0].issue.0;
            let last = x.thunks[49].issue.1;
            assert!(x.start_ns <= first && last <= x.end_ns, "{source:?}: {x:?}");
            for (i, w) in x.thunks.windows(2).enumerate() {
                assert_eq!(w[0].node as usize, i);
                assert!(w[0].issue.0 <= w[0].issue.1, "{source:?}: {:?}", w[0]);
                // A node's issue ends where the next one's starts.
                assert_eq!(w[0].issue.1, w[1].issue.0, "{source:?}");
            }
        }
        assert!(e[0].end_ns <= e[1].start_ns, "{source:?}");
    }
}
