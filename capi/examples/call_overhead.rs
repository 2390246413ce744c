//! The Rust side of the calling-overhead comparison (`python/bench/call_overhead.py` runs it):
//! a program loaded on the host, called ITERATIONS times in two ways, printing ns per call:
//!
//! ```text
//! cargo run -p xthunk-capi --example call_overhead -- PROGRAM [ITERATIONS]
//! ```
//!
//! - `host_data`: `run_with_host_data` (upload every parameter, run, download every output),
//!   what `exe(**arrays)` does from Python;
//! - `execute`: `execute` on device buffers allocated once, what
//!   `exe.run(device_arrays, keep_on_device=True)` does (less the output allocation).

use std::time::Instant;
use xthunk::{BackendChoice, DeviceMemory, ExecuteOptions, LoadedExecutable, Runtime};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: call_overhead PROGRAM [ITERATIONS]");
        std::process::exit(2);
    };
    let iterations: u32 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let rt = Runtime::new();
    let (backend, _) = rt.select(&BackendChoice::Named("host".into()))?;
    let exe = LoadedExecutable::load(backend.device(0)?, xthunk::proto::load_file(&path)?)?;
    let inputs: Vec<Vec<u8>> = exe
        .executable()
        .signature
        .parameters
        .iter()
        .map(|p| vec![0u8; p.byte_size().unwrap_or(0) as usize])
        .collect();
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let opts = ExecuteOptions::default();
    for _ in 0..100 {
        exe.run_with_host_data(&refs, &opts)?;
    }
    let start = Instant::now();
    for _ in 0..iterations {
        exe.run_with_host_data(&refs, &opts)?;
    }
    let host_data = start.elapsed().as_nanos() as f64 / f64::from(iterations);

    let params = exe.allocate_parameters()?;
    let outputs = exe.allocate_outputs()?;
    let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    for _ in 0..100 {
        exe.execute(&p, &o, &opts)?;
    }
    let start = Instant::now();
    for _ in 0..iterations {
        exe.execute(&p, &o, &opts)?;
    }
    let execute = start.elapsed().as_nanos() as f64 / f64::from(iterations);
    println!("host_data_ns {host_data:.0}");
    println!("execute_ns {execute:.0}");
    Ok(())
}
