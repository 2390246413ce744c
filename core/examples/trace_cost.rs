//! What a trace costs per thunk, for instruction counters: executes the `executor_overhead`
//! chain (10,000 tiny `add_f32` kernels, thunk by thunk) `N` times untraced (`none`) or with
//! a fresh tracer each time (`trace`: host issue spans, device timing off; `timed`: device
//! timing on), after one warm-up execution of each. The difference of two counts with
//! different `N` over `10,000 x` their difference is the instructions per thunk, e.g.
//!
//! ```text
//! cargo build --release -p xthunk-core --example trace_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/trace_cost trace 1
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/trace_cost trace 11
//! ```
//!
//! (`docs/observability.md`, "Cost").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::backend::{Backend, DeviceMemory};
use xthunk_core::bench::{TINY, tiny_chain};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::host::HostBackend;
use xthunk_core::trace::{TraceConfig, Tracer};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "none".into());
    let n: usize = args.next().map_or(1, |s| s.parse().expect("N: a count"));
    let config = ExecutorConfig {
        auto_command_buffer: false,
        ..Default::default()
    };
    let device = HostBackend::new().device(0).expect("the host device");
    let exe = LoadedExecutable::load_with(
        device,
        tiny_chain("chain_10k", 10_000, false).unwrap(),
        &config,
    )
    .expect("the chain loads");
    let x: Vec<u8> = (0..TINY).flat_map(|_| 0.5f32.to_le_bytes()).collect();
    let params = exe.allocate_parameters().unwrap();
    exe.device().copy_from_host(&x, params[0].ptr()).unwrap();
    let outputs = exe.allocate_outputs().unwrap();
    let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    let options = |device_times: Option<bool>| ExecuteOptions {
        trace: device_times.map(|d| Arc::new(Tracer::new(TraceConfig { device_times: d }))),
        ..Default::default()
    };
    let which = match mode.as_str() {
        "none" => None,
        "trace" | "persist" => Some(false),
        "timed" => Some(true),
        m => panic!("mode `{m}`: none, trace, persist or timed"),
    };
    let clock = Tracer::new(TraceConfig::default()).clock().source();
    eprintln!("trace_cost: {mode} x {n}, marks from {clock:?}");
    // Warm-up: the pooled state, the trace's node names.
    exe.execute(&p, &o, &options(None)).unwrap();
    exe.execute(&p, &o, &options(Some(false))).unwrap();
    let one = options(which);
    let start = std::time::Instant::now();
    for _ in 0..n {
        if mode == "persist" {
            exe.execute(&p, &o, &one).unwrap();
        } else {
            exe.execute(&p, &o, &options(which)).unwrap();
        }
    }
    eprintln!(
        "trace_cost: {:.1} ns per thunk",
        start.elapsed().as_nanos() as f64 / (n as f64 * 10_000.0)
    );
}
