//! Collective memory end to end on emulated CUDA (NCCL) and ROCm (RCCL) devices: a program
//! whose temps are in `MEMORY_SPACE_COLLECTIVE` (an all-reduce over the world and an
//! all-gather over pairs, so two cliques use the memory) gives the host backend's results,
//! and the emulator's counters (`xthunk_emu_nccl_counters`) show one `ncclMemAlloc` per rank,
//! one registration per rank and clique — none more over three executions — and everything
//! freed and deregistered at unload. The same program runs with the emulator playing an NCCL
//! older than `ncclMemAlloc` (`XTHUNK_EMU_NCCL_MODE=old`: plain device memory, nothing
//! registered) and an RCCL whose windows are empty (`rccl-no-windows`: user-buffer
//! registration instead). And scalable initialization: with 4 ranks per root, a 16-rank
//! clique initializes through 4 roots (`ncclCommInitRankScalable`, counted by the emulator)
//! and its all-reduce gives the host's result. Each test re-runs itself under `ci/with-emulator.sh` (see
//! `tests/provider.rs`), with the mode in the environment.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::collectives::{CliqueProvider, ReduceOp, RegistrationKind, Timeouts};
use xthunk_core::executor::spmd::{RankOutput, run_spmd};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::host::{HostBackend, HostCliqueProvider};
use xthunk_core::ir::{
    CollectiveOp, CollectiveThunk, CopyThunk, DType, Executable, MemorySpace, Thunk,
};
use xthunk_core::trace::{TraceConfig, Tracer};
use xthunk_nccl::{BindRank, Flavor, NcclCliqueProvider};

const CHILD: &str = "XTHUNK_NCCL_COLLECTIVE_MEMORY_TEST";
const WORLD: usize = 4;
const N: u64 = 1000;
const ITERATIONS: u32 = 3;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn emulator_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("XTHUNK_EMULATOR_LIB").map(PathBuf::from)
        && p.is_file()
    {
        return Some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.parent()?.join("libxthunk_emulator.so"),
        deps.join("libxthunk_emulator.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// True in the child; in the parent, re-runs `test` under the emulator with `mode` and
/// checks it passed.
fn under_emulator(test: &str, mode: &str) -> bool {
    under_emulator_with(test, mode, WORLD)
}

fn under_emulator_with(test: &str, mode: &str, devices: usize) -> bool {
    if std::env::var(CHILD).is_ok_and(|t| t == test) {
        return true;
    }
    let Some(lib) = emulator_lib() else {
        let why = "the driver emulator is not built (cargo build -p xthunk-emulator)";
        if std::env::var("XTHUNK_REQUIRE_EMULATOR").is_ok_and(|v| v == "1") {
            panic!("{test}: XTHUNK_REQUIRE_EMULATOR=1 but {why}");
        }
        say(&format!("SKIPPED {test}: {why}"));
        return false;
    };
    let out = Command::new("bash")
        .arg(root().join("ci/with-emulator.sh"))
        .arg(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("XTHUNK_EMU_NO_BUILD", "1")
        .env("XTHUNK_EMU_LIB", &lib)
        .env("XTHUNK_EMU_DEVICES", devices.to_string())
        .env("XTHUNK_EMU_NCCL_MODE", mode)
        .env("RUST_LOG", "xthunk_nccl=info")
        .env(CHILD, test)
        .current_dir(root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} under the emulator ({mode}) failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    say(&format!(
        "{test}: passed under the driver emulator (XTHUNK_EMU_NCCL_MODE={mode}, EMULATED devices)"
    ));
    false
}

/// The emulator's counters (see `xthunk_emu_nccl_counters`).
fn counters() -> [u64; 9] {
    let path = std::env::var_os("XTHUNK_EMU_LIB").expect("XTHUNK_EMU_LIB in the child");
    // SAFETY: the emulator library, already loaded in this process (as libcuda and friends);
    // opening it again only takes a reference.
    let lib = unsafe { libloading::Library::new(&path) }.unwrap();
    // SAFETY: the emulator's documented signature.
    let f = unsafe {
        lib.get::<unsafe extern "C" fn(*mut u64, usize) -> usize>(b"xthunk_emu_nccl_counters")
    }
    .unwrap();
    let mut out = [0u64; 9];
    // SAFETY: `out` holds 9 values.
    let n = unsafe { f(out.as_mut_ptr(), out.len()) };
    assert_eq!(n, 9);
    out
}

/// `x` -> collective temp `a`; all-reduce `a` -> `b` over the world; all-gather `b` -> `c`
/// over pairs; `y = b`, `z = c`.
fn program() -> Executable {
    let mut b = ExecutableBuilder::new("collective_memory");
    let x = b.parameter("x", DType::F32, &[N]);
    let y = b.output("y", DType::F32, &[N]);
    let z = b.output("z", DType::F32, &[2 * N]);
    let t1 = b.temp_in(DType::F32, &[N], MemorySpace::Collective);
    let t2 = b.temp_in(DType::F32, &[N], MemorySpace::Collective);
    let t3 = b.temp_in(DType::F32, &[2 * N], MemorySpace::Collective);
    b.push(Thunk::Copy(CopyThunk {
        src: x.slice(),
        dst: t1.slice(),
    }));
    b.push(Thunk::Collective(CollectiveThunk {
        op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
        src: t1.slice(),
        dst: t2.slice(),
        dtype: DType::F32,
        groups: vec![],
    }));
    b.push(Thunk::Collective(CollectiveThunk {
        op: CollectiveOp::AllGather,
        src: t2.slice(),
        dst: t3.slice(),
        dtype: DType::F32,
        groups: vec![vec![0, 1], vec![2, 3]],
    }));
    b.push(Thunk::Copy(CopyThunk {
        src: t2.slice(),
        dst: y.slice(),
    }));
    b.push(Thunk::Copy(CopyThunk {
        src: t3.slice(),
        dst: z.slice(),
    }));
    b.build().unwrap()
}

fn inputs() -> Vec<Vec<Vec<u8>>> {
    (0..WORLD)
        .map(|r| {
            let v: Vec<u8> = (0..N)
                .flat_map(|i| ((i % 7) as f32 + r as f32 * 0.5).to_le_bytes())
                .collect();
            vec![v]
        })
        .collect()
}

fn run(devs: &[Arc<dyn Device>], cliques: Arc<dyn CliqueProvider>) -> Vec<RankOutput> {
    run_traced(devs, cliques, None)
}

fn run_traced(
    devs: &[Arc<dyn Device>],
    cliques: Arc<dyn CliqueProvider>,
    trace: Option<Arc<Tracer>>,
) -> Vec<RankOutput> {
    run_spmd(
        &program(),
        devs,
        cliques,
        &inputs(),
        ITERATIONS,
        &ExecutorConfig::default(),
        &ExecuteOptions {
            trace,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("on {}: {e}", devs[0].backend_name()))
}

fn host() -> Vec<RankOutput> {
    let b = HostBackend::with_devices(WORLD);
    let devs: Vec<Arc<dyn Device>> = (0..WORLD).map(|i| b.device(i).unwrap()).collect();
    let p = HostCliqueProvider::new(devs.clone(), Timeouts::default()).unwrap();
    run(&devs, Arc::new(p))
}

fn gpu(flavor: Flavor) -> Vec<RankOutput> {
    gpu_traced(flavor, None)
}

fn gpu_traced(flavor: Flavor, trace: Option<Arc<Tracer>>) -> Vec<RankOutput> {
    let b: Arc<dyn Backend> = match flavor {
        Flavor::Nccl => Arc::new(xthunk_cuda::CudaBackend::new()),
        Flavor::Rccl => Arc::new(xthunk_rocm::RocmBackend::new()),
    };
    let devs: Vec<Arc<dyn Device>> = (0..WORLD).map(|i| b.device(i).unwrap()).collect();
    assert!(devs[0].info().emulated);
    let bound = devs.clone();
    let bind: BindRank = Arc::new(move |r: usize| match flavor {
        Flavor::Nccl => xthunk_cuda::bind_current(bound[r].as_ref()),
        Flavor::Rccl => xthunk_rocm::bind_current(bound[r].as_ref()),
    });
    let p = NcclCliqueProvider::new(flavor, devs.clone(), bind, Timeouts::default()).unwrap();
    say(&format!("{flavor}: {}", p.library().describe()));
    run_traced(&devs, Arc::new(p), trace)
}

/// How the traced collectives' buffers were registered, over every rank and execution of a
/// traced run on `flavor`.
fn traced_registrations(flavor: Flavor) -> Vec<Option<RegistrationKind>> {
    let tracer = Arc::new(Tracer::new(TraceConfig::default()));
    gpu_traced(flavor, Some(tracer.clone()));
    tracer
        .executions()
        .iter()
        .flat_map(|e| {
            e.thunks
                .iter()
                .filter(|t| e.nodes[t.node as usize].communicates)
                .map(|t| t.registered)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Runs the program on both flavors; returns each flavor's counter deltas.
fn each_flavor() -> Vec<(Flavor, [u64; 9])> {
    let want = host();
    let mut out = vec![];
    for flavor in [Flavor::Nccl, Flavor::Rccl] {
        let before = counters();
        let got = gpu(flavor);
        let after = counters();
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.outputs, w.outputs,
                "{flavor}: rank {r} differs from the host"
            );
        }
        let delta: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        out.push((flavor, delta.try_into().unwrap()));
    }
    out
}

const W: u64 = WORLD as u64;

#[test]
fn collective_memory_windows() {
    if !under_emulator("collective_memory_windows", "current") {
        return;
    }
    for (flavor, d) in each_flavor() {
        // ncclMemAlloc, ncclMemFree, windows (world and pair cliques), none deregistered
        // early, no user buffers, no empty windows.
        assert_eq!(d, [W, W, 2 * W, 2 * W, 0, 0, 0, 0, 0], "{flavor}: counters");
        // The trace says so: both collectives of every rank and execution on windows.
        let r = traced_registrations(flavor);
        assert_eq!(r.len(), 2 * WORLD * ITERATIONS as usize, "{flavor}: {r:?}");
        assert!(
            r.iter().all(|k| *k == Some(RegistrationKind::Window)),
            "{flavor}: {r:?}"
        );
    }
}

#[test]
fn collective_memory_old_nccl() {
    if !under_emulator("collective_memory_old_nccl", "old") {
        return;
    }
    for (flavor, d) in each_flavor() {
        assert_eq!(d, [0; 9], "{flavor}: an NCCL 2.18 has none of the calls");
        let r = traced_registrations(flavor);
        assert!(r.iter().all(Option::is_none), "{flavor}: {r:?}");
    }
}

#[test]
fn collective_memory_rccl_without_windows() {
    if !under_emulator("collective_memory_rccl_without_windows", "rccl-no-windows") {
        return;
    }
    for (flavor, d) in each_flavor() {
        assert_eq!(
            (d[0], d[1], d[2], d[3], d[4], d[5]),
            (W, W, 0, 0, 2 * W, 2 * W),
            "{flavor}: counters {d:?}"
        );
        assert!(
            d[6] >= 1,
            "{flavor}: an empty window was handed back: {d:?}"
        );
    }
}

/// With 4 ranks per root, a 16-rank clique on emulated CUDA and ROCm initializes through 4
/// roots (every rank names 4 unique ids) and all-reduces as the host does.
#[test]
fn scalable_init_16_ranks_through_4_roots() {
    const RANKS: usize = 16;
    if !under_emulator_with("scalable_init_16_ranks_through_4_roots", "current", RANKS) {
        return;
    }
    let exe = {
        let mut b = ExecutableBuilder::new("all_reduce16");
        let x = b.parameter("x", DType::F32, &[N]);
        let y = b.output("y", DType::F32, &[N]);
        b.push(Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
            src: x.slice(),
            dst: y.slice(),
            dtype: DType::F32,
            groups: vec![],
        }));
        b.build().unwrap()
    };
    let inputs: Vec<Vec<Vec<u8>>> = (0..RANKS)
        .map(|r| {
            vec![
                (0..N)
                    .flat_map(|i| ((i % 5) as f32 + r as f32).to_le_bytes())
                    .collect(),
            ]
        })
        .collect();
    let go = |devs: &[Arc<dyn Device>], p: Arc<dyn CliqueProvider>| {
        run_spmd(
            &exe,
            devs,
            p,
            &inputs,
            1,
            &ExecutorConfig::default(),
            &ExecuteOptions::default(),
        )
        .unwrap()
    };
    let hb = HostBackend::with_devices(RANKS);
    let hosts: Vec<Arc<dyn Device>> = (0..RANKS).map(|i| hb.device(i).unwrap()).collect();
    let want = go(
        &hosts,
        Arc::new(HostCliqueProvider::new(hosts.clone(), Timeouts::default()).unwrap()),
    );
    for flavor in [Flavor::Nccl, Flavor::Rccl] {
        let b: Arc<dyn Backend> = match flavor {
            Flavor::Nccl => Arc::new(xthunk_cuda::CudaBackend::new()),
            Flavor::Rccl => Arc::new(xthunk_rocm::RocmBackend::new()),
        };
        let devs: Vec<Arc<dyn Device>> = (0..RANKS).map(|i| b.device(i).unwrap()).collect();
        let bound = devs.clone();
        let bind: BindRank = Arc::new(move |r: usize| match flavor {
            Flavor::Nccl => xthunk_cuda::bind_current(bound[r].as_ref()),
            Flavor::Rccl => xthunk_rocm::bind_current(bound[r].as_ref()),
        });
        let p = NcclCliqueProvider::new(flavor, devs.clone(), bind, Timeouts::default())
            .unwrap()
            .ranks_per_root(4);
        let before = counters();
        let got = go(&devs, Arc::new(p));
        let after = counters();
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.outputs, w.outputs,
                "{flavor}: rank {r} differs from the host"
            );
        }
        assert_eq!(
            (after[7] - before[7], after[8] - before[8]),
            (RANKS as u64, 4 * RANKS as u64),
            "{flavor}: 16 ranks through ncclCommInitRankScalable, 4 roots each"
        );
    }
    assert_eq!(xthunk_nccl::roots_for(16, 4, true), 4);
    assert_eq!(xthunk_nccl::roots_for(16, 128, true), 1);
    assert_eq!(xthunk_nccl::roots_for(16, 4, false), 1);
    let roots: Vec<usize> = (0..16)
        .filter(|r| xthunk_nccl::is_root(*r, 16, 4))
        .collect();
    assert_eq!(roots, [0, 4, 8, 12]);
}
