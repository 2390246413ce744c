//! Stream-ordered scratch on emulated CUDA and ROCm (emulator/): the transformer
//! example (many temps) executed repeatedly takes its temp arenas from the device's memory
//! pool (the capability is on, the executable says so), on two streams, on one, and as an
//! implicit command buffer (recorded once with the pool's addresses, then replayed), makes no
//! driver allocator call after its first execution, leaves the memory in the pool for a
//! second executable (which holds none of it between executions), and gives the host
//! backend's results; on devices without memory pools (`XTHUNK_EMU_MEMORY_POOLS=0`)
//! the executor takes the fallback (arenas kept with the pooled state), with the same
//! results and no pool memory at all.
//!
//! Each case runs in a child process (this test binary, its ignored `child` test) under
//! ci/with-emulator.sh, which fails the child on any memory error the emulator records; the
//! child reads the emulator's counters through its control API. Without the emulator library
//! the tests are skipped with the reason, unless `XTHUNK_REQUIRE_EMULATOR=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

#[path = "common/emulator.rs"]
mod emulator;
use emulator::emulator_lib;
use xthunk::core::executor::{ExecutorConfig, ScratchPath};
use xthunk::core::trace::{CommandBufferNote, TraceConfig, Tracer};
use xthunk::{BackendChoice, ExecuteOptions, LoadedExecutable, Runtime};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The emulator library, or `None` after printing why the test `name` is skipped.
fn emulator_or_skip(name: &str) -> Option<PathBuf> {
    let lib = emulator_lib();
    if lib.is_none() {
        let why = "the emulator library is not built (run `cargo build -p xthunk-emulator`)";
        if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
            panic!("{why}");
        }
        eprintln!("SKIPPED {name}: {why}");
    }
    lib
}

/// Runs the `child` test of this binary under the emulator for `backend`, with the devices'
/// memory pools on or off; returns its stdout.
fn run_child(lib: &Path, backend: &str, pools: bool) -> String {
    let me = std::env::current_exe().unwrap();
    let o = Command::new("bash")
        .arg(root().join("ci/with-emulator.sh"))
        .arg(me)
        .args([
            "--ignored",
            "--exact",
            "child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("XTHUNK_EMU_NO_BUILD", "1")
        .env("XTHUNK_EMU_LIB", lib)
        .env("XTHUNK_EMU_MEMORY_POOLS", if pools { "1" } else { "0" })
        .env("XTHUNK_STREAM_ORDERED_BACKEND", backend)
        .current_dir(root())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success(),
        "{backend} (pools {pools}) failed ({}):\n{out}\n{err}",
        o.status
    );
    assert!(
        out.contains("1 passed"),
        "the child did not run:\n{out}\n{err}"
    );
    out
}

#[test]
fn repeated_executions_take_scratch_from_the_pool_on_emulated_cuda_and_rocm() {
    let Some(lib) = emulator_or_skip("repeated_executions_take_scratch_from_the_pool") else {
        return;
    };
    for backend in ["cuda", "rocm"] {
        let out = run_child(&lib, backend, true);
        assert!(out.contains("scratch: stream-ordered"), "{out}");
        eprint!("{out}");
    }
}

#[test]
fn devices_without_memory_pools_use_the_pooled_state() {
    let Some(lib) = emulator_or_skip("devices_without_memory_pools_use_the_pooled_state") else {
        return;
    };
    for backend in ["cuda", "rocm"] {
        let out = run_child(&lib, backend, false);
        assert!(out.contains("scratch: pooled state"), "{out}");
        eprint!("{out}");
    }
}

#[test]
fn run_reports_the_scratch_path_and_logs_it_once() {
    let Some(lib) = emulator_or_skip("run_reports_the_scratch_path_and_logs_it_once") else {
        return;
    };
    for (pools, want) in [("1", "stream-ordered"), ("0", "pooled state")] {
        let o = Command::new("bash")
            .arg(root().join("ci/with-emulator.sh"))
            .arg(env!("CARGO_BIN_EXE_xthunk"))
            .args([
                "-v",
                "run",
                "examples/transformer.txtpb",
                "--backend",
                "cuda",
            ])
            .args(["--iterations", "3"])
            .env("XTHUNK_EMU_NO_BUILD", "1")
            .env("XTHUNK_EMU_LIB", &lib)
            .env("XTHUNK_EMU_MEMORY_POOLS", pools)
            .env_remove("RUST_LOG")
            .current_dir(root())
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(out.contains(&format!("; scratch: {want}")), "{out}");
        let logged = err.matches("temp memory on cuda devices: ").count();
        assert_eq!(logged, 1, "the path is logged once:\n{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// The emulator's counters, through its control API (the library ci/with-emulator.sh names
/// in `XTHUNK_EMULATOR_LIB`, already loaded by the backend: the same instance).
struct Counters {
    allocator_calls: unsafe extern "C" fn() -> u64,
    pool_bytes: unsafe extern "C" fn(*mut u64) -> u64,
    live_allocations: unsafe extern "C" fn(*mut u64) -> u64,
    _lib: libloading::Library,
}

impl Counters {
    fn open() -> Counters {
        let path = std::env::var_os("XTHUNK_EMULATOR_LIB").expect("run under ci/with-emulator.sh");
        // SAFETY: the emulator runs no initializer with preconditions; the symbols have the
        // signatures of its control API (emulator/src/control.rs).
        unsafe {
            let lib = libloading::Library::new(path).unwrap();
            let allocator_calls = *lib
                .get::<unsafe extern "C" fn() -> u64>(b"xthunk_emu_allocator_calls")
                .unwrap();
            let pool_bytes = *lib
                .get::<unsafe extern "C" fn(*mut u64) -> u64>(b"xthunk_emu_pool_bytes")
                .unwrap();
            let live_allocations = *lib
                .get::<unsafe extern "C" fn(*mut u64) -> u64>(b"xthunk_emu_live_allocations")
                .unwrap();
            Counters {
                allocator_calls,
                pool_bytes,
                live_allocations,
                _lib: lib,
            }
        }
    }
    fn allocator_calls(&self) -> u64 {
        // SAFETY: takes nothing.
        unsafe { (self.allocator_calls)() }
    }
    /// Bytes of the live allocations (pool memory not in use is none).
    fn live_bytes(&self) -> u64 {
        let mut bytes = 0u64;
        // SAFETY: a valid out-pointer.
        unsafe { (self.live_allocations)(&mut bytes) };
        bytes
    }
    /// Bytes the pools hold, and of those in use.
    fn pool_bytes(&self) -> (u64, u64) {
        let mut used = 0u64;
        // SAFETY: a valid out-pointer.
        let held = unsafe { (self.pool_bytes)(&mut used) };
        (held, used)
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One case, in the child process (see the module documentation).
#[test]
#[ignore = "run by the other tests of this file, in a child process under the emulator"]
fn child() {
    let backend = std::env::var("XTHUNK_STREAM_ORDERED_BACKEND").expect("the backend to test");
    let pools = std::env::var("XTHUNK_EMU_MEMORY_POOLS").as_deref() == Ok("1");
    let counters = Counters::open();
    let program = xthunk::proto::load_file(root().join("examples/transformer.txtpb")).unwrap();
    // Deterministic, small inputs (every parameter of the example is f32).
    let inputs: Vec<Vec<u8>> = program
        .signature
        .parameters
        .iter()
        .enumerate()
        .map(|(p, spec)| {
            let n = program.allocations[spec.allocation as usize].size / 4;
            (0..n)
                .map(|i| ((i * 7 + p as u64 * 13) % 17) as f32 / 17.0 - 0.5)
                .flat_map(|v| (v * 0.25).to_le_bytes())
                .collect()
        })
        .collect();
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let rt = Runtime::new();
    let host = {
        let (b, _) = rt.select(&BackendChoice::Named("host".into())).unwrap();
        let exe = LoadedExecutable::load(b.device(0).unwrap(), program.clone()).unwrap();
        f32s(
            &exe.run_with_host_data(&refs, &ExecuteOptions::default())
                .unwrap()[0],
        )
    };
    let (b, _) = rt.select(&BackendChoice::Named(backend.clone())).unwrap();
    let device = b.device(0).unwrap();
    assert!(device.info().emulated);
    assert_eq!(device.capabilities().stream_ordered_alloc, pools);
    // Two streams (the transformer's schedule is not a chain), one stream, and one stream as
    // an implicit command buffer (recorded with the pool's addresses, then replayed).
    let recorded = ExecutorConfig {
        auto_command_buffer: true,
        ..ExecutorConfig::in_order()
    };
    for config in [
        ExecutorConfig::default(),
        ExecutorConfig::in_order(),
        recorded,
    ] {
        let exe = LoadedExecutable::load_with(device.clone(), program.clone(), &config).unwrap();
        let want = if pools {
            ScratchPath::StreamOrdered
        } else {
            ScratchPath::Pooled
        };
        assert_eq!(exe.scratch_path(), want);
        println!("{backend}: scratch: {}", exe.scratch_path());
        let planned = exe.temp_plan().planned_bytes;
        assert!(planned > 0);
        let params = exe.allocate_parameters().unwrap();
        for (buf, bytes) in params.iter().zip(&inputs) {
            device.copy_from_host(bytes, buf.ptr()).unwrap();
        }
        let outputs = exe.allocate_outputs().unwrap();
        let pr: Vec<&dyn xthunk::DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
        let or: Vec<&dyn xthunk::DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
        let info = exe.schedule_info();
        let tracer = Arc::new(Tracer::new(TraceConfig::default()));
        let opts = ExecuteOptions {
            trace: Some(tracer.clone()),
            ..Default::default()
        };
        let mut calls = vec![];
        for _ in 0..5 {
            exe.execute(&pr, &or, &opts).unwrap();
            calls.push(counters.allocator_calls());
            let mut got = vec![0u8; outputs[0].size() as usize];
            device.copy_to_host(outputs[0].ptr(), &mut got).unwrap();
            let got = f32s(&got);
            assert_eq!(got.len(), host.len());
            for (i, (g, h)) in got.iter().zip(&host).enumerate() {
                assert!(
                    (g - h).abs() <= 1e-4 * (1.0 + h.abs()),
                    "{backend} {config:?}: y[{i}] = {g}, host {h}"
                );
            }
        }
        assert!(
            calls.windows(2).all(|w| w[0] == w[1]),
            "{backend} {config:?}: allocator calls after each execution: {calls:?}"
        );
        if info.implicit_command_buffer {
            // Recorded once with the pool's addresses, then replayed: the pool hands the same
            // memory back, so no execution had to re-record (or fell back to direct).
            let notes: Vec<CommandBufferNote> = tracer
                .executions()
                .iter()
                .map(|e| e.thunks[0].command_buffer)
                .collect();
            println!("{backend}: implicit command buffer: {notes:?}");
            assert_eq!(notes.len(), 5);
            assert_eq!(notes[0], CommandBufferNote::Recorded, "{notes:?}");
            assert!(
                notes[1..].iter().all(|n| *n == CommandBufferNote::Replayed),
                "{notes:?}"
            );
        } else {
            assert!(!info.sequential || !config.auto_command_buffer, "{info:?}");
        }
        let (held, used) = counters.pool_bytes();
        println!(
            "{backend} {config:?}: allocator calls after each of 5 executions {calls:?}; \
             pools hold {held} bytes ({used} in use), the plan {planned}"
        );
        // A second executable of the same program, executed once: on the pool path it takes
        // the memory the first gave back (the pool does not grow) and holds none of it
        // between executions; on the fallback it keeps an arena of its own.
        let live = counters.live_bytes();
        let other = LoadedExecutable::load_with(device.clone(), program.clone(), &config).unwrap();
        other.execute(&pr, &or, &ExecuteOptions::default()).unwrap();
        let held_by_other = counters.live_bytes().saturating_sub(live);
        println!("{backend}: a second executable holds {held_by_other} bytes between executions");
        if pools {
            // The arenas went back to the pool when each execution completed.
            assert!(held >= planned, "{held} < {planned}");
            assert_eq!(used, 0);
            assert_eq!(counters.pool_bytes(), (held, 0));
            assert!(held_by_other < planned, "{held_by_other} >= {planned}");
        } else {
            assert_eq!((held, used), (0, 0));
            assert!(held_by_other >= planned, "{held_by_other} < {planned}");
        }
    }
}
