//! [`NcclCliqueProvider`] end to end: NCCL on CUDA devices and RCCL on ROCm devices, through
//! the driver emulator (emulator/: the CUDA driver, cuBLAS, NCCL, HIP, rocBLAS and RCCL
//! on host memory, among the emulated devices of one process). The checked-in SPMD examples
//! (`examples/dp_step.txtpb`, `examples/permute_ring.txtpb`, built for 4 ranks) and an
//! all-reduce on 2 and 4 ranks, run by the executor with NCCL/RCCL cliques, match the host
//! backend's in-process collectives; a 1-rank clique works (also on a real GPU when there is
//! one); splits; a rank that never comes is named at the terminate timeout; a rank that
//! cannot take part fails its peers at once.
//!
//! The emulator must be loaded before the process starts (`LD_LIBRARY_PATH`: cudarc opens
//! `libcuda.so.1` by name), so each test re-runs itself (this test binary, that one test)
//! under `ci/with-emulator.sh`, which also fails the run when the emulator recorded memory
//! errors. The emulator library comes from `cargo build -p xthunk-emulator` (or `cargo test
//! --workspace`): `target/debug/libxthunk_emulator.so` or `target/debug/deps/…`, or
//! `$XTHUNK_EMULATOR_LIB`. Without it the tests print SKIPPED and why, a failure when
//! `XTHUNK_REQUIRE_EMULATOR=1`. Compilers are real: the examples' kernels need NVRTC (pip's
//! `nvidia-cuda-nvrtc-cu12`) and hipRTC, as everywhere the emulator runs kernels.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::Error;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::collectives::{
    CliqueKey, CliqueProvider, ReduceOp, StreamKind, Timeouts, split_color,
};
use xthunk_core::executor::spmd::{RankOutput, run_spmd};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::host::{HostBackend, HostCliqueProvider};
use xthunk_core::ir::{CollectiveOp, CollectiveThunk, DType, Executable, MemorySpace, Thunk};
use xthunk_nccl::{BindRank, Flavor, NcclCliqueProvider};

/// Set in the child process: the name of the test it runs under the emulator.
const CHILD: &str = "XTHUNK_NCCL_PROVIDER_TEST";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The emulator library: `$XTHUNK_EMULATOR_LIB`, else beside this test binary's folder
/// (`target/debug/deps/..`) or in it.
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
    // The harness captures the output of passing tests: a skip must be visible.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// True in the child (run the test's body). In the parent: re-runs this test under the
/// emulator with `devices` emulated devices per API and checks that it passed, then returns
/// false.
fn under_emulator(test: &str, devices: usize) -> bool {
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
    let exe = std::env::current_exe().unwrap();
    let t = Instant::now();
    let out = Command::new("bash")
        .arg(root().join("ci/with-emulator.sh"))
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("XTHUNK_EMU_NO_BUILD", "1")
        .env("XTHUNK_EMU_LIB", &lib)
        .env("XTHUNK_EMU_DEVICES", devices.to_string())
        .env(CHILD, test)
        .current_dir(root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{test} under the emulator failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run under the emulator:\n{stdout}\n{stderr}"
    );
    say(&format!(
        "{test}: passed under the driver emulator ({devices} EMULATED devices, not a GPU) in {:.1?}",
        t.elapsed()
    ));
    // `--nocapture` prints a test's first line right after `test NAME ... `.
    for l in stdout.lines().chain(stderr.lines()) {
        if let Some(i) = l.find("EMULATED ").or_else(|| l.find("SKIPPED ")) {
            say(&format!("  {}", &l[i..]));
        }
    }
    false
}

/// The backend and library of a flavor.
fn backend(flavor: Flavor) -> Arc<dyn Backend> {
    match flavor {
        Flavor::Nccl => Arc::new(xthunk_cuda::CudaBackend::new()),
        Flavor::Rccl => Arc::new(xthunk_rocm::RocmBackend::new()),
    }
}

/// The first `n` devices of the flavor's backend (emulated ones when `emulated`).
fn devices(flavor: Flavor, n: usize, emulated: bool) -> Vec<Arc<dyn Device>> {
    let b = backend(flavor);
    let devs: Vec<Arc<dyn Device>> = (0..n)
        .map(|i| {
            b.device(i)
                .unwrap_or_else(|e| panic!("{} device {i}: {e}", b.name()))
        })
        .collect();
    for d in &devs {
        assert_eq!(
            d.info().emulated,
            emulated,
            "{}: expected an {} device",
            d.info().name,
            if emulated { "emulated" } else { "real" }
        );
    }
    devs
}

/// The hook that makes device `r` current: the backend's own.
fn bind_hook(flavor: Flavor, devs: &[Arc<dyn Device>]) -> BindRank {
    let devs = devs.to_vec();
    Arc::new(move |r: usize| {
        let d = devs
            .get(r)
            .ok_or_else(|| Error::InvalidArgument(format!("no device for rank {r}")))?;
        match flavor {
            Flavor::Nccl => xthunk_cuda::bind_current(d.as_ref()),
            Flavor::Rccl => xthunk_rocm::bind_current(d.as_ref()),
        }
    })
}

fn provider(flavor: Flavor, devs: &[Arc<dyn Device>], timeouts: Timeouts) -> NcclCliqueProvider {
    let p = NcclCliqueProvider::new(flavor, devs.to_vec(), bind_hook(flavor, devs), timeouts)
        .unwrap_or_else(|e| panic!("{flavor} provider: {e}"));
    say(&format!(
        "{flavor} provider: {} on {} {} device(s) ({})",
        p.library().describe(),
        devs.len(),
        devs[0].backend_name(),
        devs[0].info().name
    ));
    p
}

fn host_devices(n: usize) -> Vec<Arc<dyn Device>> {
    let b = HostBackend::with_devices(n);
    (0..n).map(|i| b.device(i).unwrap()).collect()
}

fn run(
    exe: &Executable,
    devs: &[Arc<dyn Device>],
    cliques: Arc<dyn CliqueProvider>,
    inputs: &[Vec<Vec<u8>>],
) -> Vec<RankOutput> {
    run_spmd(
        exe,
        devs,
        cliques,
        inputs,
        2,
        &ExecutorConfig::default(),
        &ExecuteOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{} on {}: {e}", exe.name, devs[0].backend_name()))
}

/// Deterministic values in [-1, 1).
fn values(n: u64, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Random f32 inputs for every parameter of `exe` on `ranks` ranks.
fn inputs_for(exe: &Executable, ranks: usize, seed: u64) -> Vec<Vec<Vec<u8>>> {
    (0..ranks)
        .map(|r| {
            exe.signature
                .parameters
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    assert_eq!(p.dtype, DType::F32, "{}", p.name);
                    let n = p.element_count().unwrap();
                    bytes(&values(n, seed * 1000 + r as u64 * 10 + i as u64))
                })
                .collect()
        })
        .collect()
}

/// Every output of every rank equal within `tol` relative (0: bit for bit).
fn assert_close(what: &str, got: &[RankOutput], want: &[RankOutput], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: ranks");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.outputs.len(), w.outputs.len(), "{what}: outputs");
        for (o, (gb, wb)) in g.outputs.iter().zip(&w.outputs).enumerate() {
            if tol == 0.0 {
                assert_eq!(gb, wb, "{what}: rank {r} output {o}");
                continue;
            }
            let (gf, wf) = (floats(gb), floats(wb));
            assert_eq!(gf.len(), wf.len());
            for (i, (a, b)) in gf.iter().zip(&wf).enumerate() {
                assert!(
                    (a - b).abs() <= tol * (1.0 + b.abs()),
                    "{what}: rank {r} output {o}[{i}] = {a}, host {b}"
                );
            }
        }
    }
}

/// `y = op over ranks of x`, f32.
fn all_reduce_program(n: u64, op: ReduceOp) -> Executable {
    let mut b = ExecutableBuilder::new("all_reduce");
    let x = b.parameter("x", DType::F32, &[n]);
    let y = b.output("y", DType::F32, &[n]);
    b.push(Thunk::Collective(CollectiveThunk {
        op: CollectiveOp::AllReduce { op },
        src: x.slice(),
        dst: y.slice(),
        dtype: DType::F32,
        groups: vec![],
    }));
    b.build().unwrap()
}

const FLAVORS: [Flavor; 2] = [Flavor::Nccl, Flavor::Rccl];

/// All-reduce (sum and max, f32) on 2 and 4 emulated devices through the executor: NCCL on
/// CUDA and RCCL on ROCm give the host backend's result and an independent f64 reference.
#[test]
fn all_reduce_on_2_and_4_devices_matches_host() {
    if !under_emulator("all_reduce_on_2_and_4_devices_matches_host", 4) {
        return;
    }
    const N: u64 = 1000;
    for flavor in FLAVORS {
        for world in [2usize, 4] {
            let devs = devices(flavor, world, true);
            let cliques = Arc::new(provider(flavor, &devs, Timeouts::default()));
            for (op, nonblocking) in [
                (ReduceOp::Sum, false),
                (ReduceOp::Max, false),
                (ReduceOp::Sum, true),
            ] {
                // Non-blocking communicators (ncclCommInitRankConfig, blocking = 0) from a
                // provider of their own.
                let cliques: Arc<NcclCliqueProvider> = if nonblocking {
                    Arc::new(
                        provider(flavor, &devs, Timeouts::default())
                            .nonblocking(true)
                            .unwrap(),
                    )
                } else {
                    cliques.clone()
                };
                let exe = all_reduce_program(N, op);
                let inputs = inputs_for(&exe, world, 1 + world as u64);
                let got = run(&exe, &devs, cliques.clone(), &inputs);
                let hosts = host_devices(world);
                let host =
                    Arc::new(HostCliqueProvider::new(hosts.clone(), Timeouts::default()).unwrap());
                let want = run(&exe, &hosts, host, &inputs);
                let what = format!(
                    "{flavor} all-reduce {op} on {world} ranks{}",
                    if nonblocking { " (non-blocking)" } else { "" }
                );
                assert_close(&what, &got, &want, 1e-6);
                // An independent reference.
                let xs: Vec<Vec<f32>> = inputs.iter().map(|i| floats(&i[0])).collect();
                let out = floats(&got[0].outputs[0]);
                for i in 0..N as usize {
                    let r = match op {
                        ReduceOp::Sum => xs.iter().map(|x| x[i] as f64).sum::<f64>(),
                        _ => xs.iter().map(|x| x[i] as f64).fold(f64::MIN, f64::max),
                    };
                    assert!(
                        (out[i] as f64 - r).abs() <= 1e-6 * (1.0 + r.abs()),
                        "{what}: [{i}] = {}, reference {r}",
                        out[i]
                    );
                }
                println!("EMULATED {what}: matches the host backend and an f64 reference");
            }
            // One clique (all ranks, communication stream... or compute: whichever the
            // executor used), reused by the second iteration and the second program.
            let keys = cliques.cliques();
            assert_eq!(keys.len(), 1, "{keys:?}");
            assert_eq!(keys[0].ranks(), (0..world).collect::<Vec<_>>().as_slice());
            assert!(cliques.evict_aborted().is_empty());
        }
    }
}

/// The checked-in SPMD examples (built for 4 ranks) on 4 emulated devices: NCCL/RCCL cliques
/// give the host backend's results.
#[test]
fn examples_on_4_devices_match_host() {
    if !under_emulator("examples_on_4_devices_match_host", 4) {
        return;
    }
    for flavor in FLAVORS {
        let devs = devices(flavor, 4, true);
        let cliques = Arc::new(provider(flavor, &devs, Timeouts::default()));
        for (file, tol) in [("dp_step.txtpb", 1e-4f32), ("permute_ring.txtpb", 0.0)] {
            let exe = xthunk_proto::load_file(root().join("examples").join(file)).unwrap();
            let inputs = inputs_for(&exe, 4, 7);
            let got = run(&exe, &devs, cliques.clone(), &inputs);
            let hosts = host_devices(4);
            let host =
                Arc::new(HostCliqueProvider::new(hosts.clone(), Timeouts::default()).unwrap());
            let want = run(&exe, &hosts, host, &inputs);
            assert_close(&format!("{flavor} {file}"), &got, &want, tol);
            if file == "permute_ring.txtpb" {
                // Rank r received rank r-1's data and id.
                for (r, o) in got.iter().enumerate() {
                    let from = (r + 3) % 4;
                    assert_eq!(o.outputs[0], inputs[from][0], "rank {r}");
                    assert_eq!(floats(&o.outputs[1]), vec![from as f32], "rank {r}");
                }
            } else {
                // Every rank ends with the same weights.
                for o in &got {
                    assert_eq!(o.outputs[0], got[0].outputs[0]);
                }
            }
            println!("EMULATED {flavor} {file} on 4 ranks: matches the host backend");
        }
        println!("EMULATED {flavor} cliques made: {:?}", cliques.cliques());
    }
}

/// A 1-rank clique: made by the provider, all-reduce / broadcast through it are copies.
fn one_rank_clique(flavor: Flavor, dev: Arc<dyn Device>) {
    const N: u64 = 4096;
    let devs = vec![dev.clone()];
    let p = provider(flavor, &devs, Timeouts::default());
    let key = CliqueKey::new([0], StreamKind::Communication).unwrap();
    let comm = p.acquire(&key, 0).unwrap();
    assert_eq!((comm.rank(), comm.size()), (0, 1));
    assert!(
        comm.describe().contains("clique [0]"),
        "{}",
        comm.describe()
    );
    // Cached.
    assert!(Arc::ptr_eq(&comm, &p.acquire(&key, 0).unwrap()));
    let x = values(N, 3);
    let src = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
    let dst = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
    dev.copy_from_host(&bytes(&x), src.ptr()).unwrap();
    let stream = dev.create_stream().unwrap();
    comm.all_reduce(
        stream.as_ref(),
        src.ptr(),
        dst.ptr(),
        N,
        DType::F32,
        ReduceOp::Sum,
    )
    .unwrap();
    stream.synchronize().unwrap();
    let mut out = vec![0u8; (N * 4) as usize];
    dev.copy_to_host(dst.ptr(), &mut out).unwrap();
    assert_eq!(floats(&out), x, "{flavor} 1-rank all-reduce");
    // In place, then a broadcast from the only rank.
    comm.all_reduce(
        stream.as_ref(),
        src.ptr(),
        src.ptr(),
        N,
        DType::F32,
        ReduceOp::Max,
    )
    .unwrap();
    comm.broadcast(stream.as_ref(), src.ptr(), dst.ptr(), N, DType::F32, 0)
        .unwrap();
    stream.synchronize().unwrap();
    dev.copy_to_host(dst.ptr(), &mut out).unwrap();
    assert_eq!(floats(&out), x, "{flavor} 1-rank broadcast");
    comm.async_error().unwrap();
    assert!(p.evict_aborted().is_empty());
    // An aborted clique is evicted and made afresh.
    comm.abort("test abort");
    assert!(
        comm.all_reduce(
            stream.as_ref(),
            src.ptr(),
            dst.ptr(),
            N,
            DType::F32,
            ReduceOp::Sum
        )
        .is_err()
    );
    assert_eq!(p.evict_aborted(), vec![key.clone()]);
    let fresh = p.acquire(&key, 0).unwrap();
    assert!(!Arc::ptr_eq(&comm, &fresh));
    fresh
        .all_reduce(
            stream.as_ref(),
            src.ptr(),
            dst.ptr(),
            N,
            DType::F32,
            ReduceOp::Sum,
        )
        .unwrap();
    stream.synchronize().unwrap();
    dev.copy_to_host(dst.ptr(), &mut out).unwrap();
    assert_eq!(floats(&out), x, "{flavor} 1-rank all-reduce after eviction");
}

/// A 1-rank NCCL (RCCL) communicator through the provider: on a real GPU when this machine
/// has one (and NCCL/RCCL), and always on an emulated device.
#[test]
fn one_rank_clique_all_reduce() {
    const TEST: &str = "one_rank_clique_all_reduce";
    if std::env::var(CHILD).is_err() {
        for flavor in FLAVORS {
            let b = backend(flavor);
            let real = b
                .probe()
                .map(|i| i.devices.iter().any(|d| !d.emulated))
                .unwrap_or(false);
            if !real {
                say(&format!(
                    "SKIPPED {TEST} on a real {} GPU: there is none here",
                    b.name()
                ));
                continue;
            }
            if let Err(e) = xthunk_nccl::Nccl::load(flavor) {
                say(&format!("SKIPPED {TEST} on a real {} GPU: {e}", b.name()));
                continue;
            }
            one_rank_clique(flavor, devices(flavor, 1, false).remove(0));
            say(&format!("{TEST}: passed on a real {} GPU", b.name()));
        }
    }
    if !under_emulator(TEST, 1) {
        return;
    }
    for flavor in FLAVORS {
        one_rank_clique(flavor, devices(flavor, 1, true).remove(0));
        println!("EMULATED {flavor} 1-rank clique: all-reduce, broadcast, abort and eviction");
    }
}

/// Splits: 4 ranks split into {0, 1} and {2, 3} by `split_color`, (rank 3 once passing no
/// color), and all-reduce inside the new cliques; a repeated split finds the cliques cached.
#[test]
fn split_makes_working_cliques() {
    if !under_emulator("split_makes_working_cliques", 4) {
        return;
    }
    const N: u64 = 64;
    for flavor in FLAVORS {
        let devs = devices(flavor, 4, true);
        let p = Arc::new(provider(flavor, &devs, Timeouts::default()));
        let parent = CliqueKey::new(0..4, StreamKind::Compute).unwrap();
        let results: Vec<(Vec<f32>, Vec<f32>, bool)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4usize)
                .map(|g| {
                    let (p, dev, parent) = (p.clone(), devs[g].clone(), parent.clone());
                    s.spawn(move || {
                        let group: Vec<usize> = if g < 2 { vec![0, 1] } else { vec![2, 3] };
                        let color = split_color(&group);
                        let child = p.split(&parent, g, Some(color)).unwrap().unwrap();
                        assert_eq!(child.size(), 2);
                        assert_eq!(child.rank(), g % 2);
                        let again = p.split(&parent, g, Some(color)).unwrap().unwrap();
                        let cached = Arc::ptr_eq(&child, &again);
                        // Rank 3 joins no clique in a third split; the others re-form theirs.
                        let third = p
                            .split(&parent, g, if g == 3 { None } else { Some(color) })
                            .unwrap();
                        assert_eq!(third.is_none(), g == 3);
                        let x = values(N, 40 + g as u64);
                        let buf = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
                        dev.copy_from_host(&bytes(&x), buf.ptr()).unwrap();
                        let stream = dev.create_stream().unwrap();
                        child
                            .all_reduce(
                                stream.as_ref(),
                                buf.ptr(),
                                buf.ptr(),
                                N,
                                DType::F32,
                                ReduceOp::Sum,
                            )
                            .unwrap();
                        stream.synchronize().unwrap();
                        let mut out = vec![0u8; (N * 4) as usize];
                        dev.copy_to_host(buf.ptr(), &mut out).unwrap();
                        (x, floats(&out), cached)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in 0..4 {
            let peer = g ^ 1;
            let want: Vec<f32> = results[g]
                .0
                .iter()
                .zip(&results[peer].0)
                .map(|(a, b)| a + b)
                .collect();
            assert_eq!(results[g].1, want, "{flavor} rank {g}");
            assert!(
                results[g].2,
                "{flavor} rank {g}: a repeated split made a new clique"
            );
        }
        let keys = p.cliques();
        println!("EMULATED {flavor} split: cliques {keys:?}");
        assert!(
            keys.iter()
                .any(|k| k.ranks() == [0, 1] && k.color().is_some())
        );
        assert!(
            keys.iter()
                .any(|k| k.ranks() == [2, 3] && k.color().is_some())
        );
        // The third split (rank 3 without a color) made a 1-rank clique [2].
        assert!(keys.iter().any(|k| k.ranks() == [2] && k.color().is_some()));
    }
}

/// Ranks 0 and 1 of a 3-rank clique wait for rank 2, which never comes: both fail at the
/// terminate timeout naming rank 2; the clique is then evicted and made afresh by all three.
/// A rank that cannot take part (its device does not bind) fails its peers at once.
#[test]
fn missing_and_failing_ranks_are_named() {
    if !under_emulator("missing_and_failing_ranks_are_named", 3) {
        return;
    }
    let short = Timeouts::new(Duration::from_millis(100), Duration::from_millis(600));
    for flavor in FLAVORS {
        let devs = devices(flavor, 3, true);
        let p = Arc::new(provider(flavor, &devs, short));
        let key = CliqueKey::new(0..3, StreamKind::Communication).unwrap();
        let start = Instant::now();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2usize)
                .map(|g| {
                    let (p, key) = (p.clone(), key.clone());
                    s.spawn(move || p.acquire(&key, g).err().map(|e| e.to_string()))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap().expect("acquire without rank 2 succeeded"))
                .collect()
        });
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(600) && took < Duration::from_secs(10),
            "{took:?}"
        );
        for e in &errs {
            assert!(e.contains("rank(s) 2 did not arrive"), "{e}");
            assert!(e.contains("communicator init"), "{e}");
        }
        println!("EMULATED {flavor} missing rank: {}", errs[0]);
        assert_eq!(p.evict_aborted(), vec![key.clone()]);
        let comms: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3usize)
                .map(|g| {
                    let (p, key) = (p.clone(), key.clone());
                    s.spawn(move || p.acquire(&key, g).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            comms.iter().map(|c| c.rank()).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );

        // Rank 1's device does not bind: ranks 0 and 1 fail well before the timeout.
        let hook = bind_hook(flavor, &devs);
        let failing: BindRank = Arc::new(move |r| {
            if r == 1 {
                Err(Error::InvalidArgument("test: rank 1 cannot bind".into()))
            } else {
                hook(r)
            }
        });
        let p = Arc::new(
            NcclCliqueProvider::new(
                flavor,
                devs[..2].to_vec(),
                failing,
                Timeouts::new(Duration::from_secs(5), Duration::from_secs(30)),
            )
            .unwrap(),
        );
        let key = CliqueKey::new(0..2, StreamKind::Compute).unwrap();
        let start = Instant::now();
        let errs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2usize)
                .map(|g| {
                    let (p, key) = (p.clone(), key.clone());
                    s.spawn(move || p.acquire(&key, g).err().map(|e| e.to_string()))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap().expect("acquire succeeded"))
                .collect()
        });
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        for e in &errs {
            assert!(e.contains("rank 1 could not take part"), "{e}");
            assert!(e.contains("test: rank 1 cannot bind"), "{e}");
        }
        assert_eq!(p.evict_aborted(), vec![key]);
        println!("EMULATED {flavor} failing rank: {}", errs[0]);
    }
}

/// Rank 1 runs one all-reduce, rank 0 two: rank 0's second waits in the library, which has
/// no timeout of its own. The executor fails it at the provider's completion timeout (the
/// terminate timeout), aborting the communicator, with an error that says where it waited;
/// rank 1 completes. No progress record is passed (the executor keeps its own).
#[test]
fn a_collective_that_waits_too_long_fails_at_the_completion_timeout() {
    if !under_emulator(
        "a_collective_that_waits_too_long_fails_at_the_completion_timeout",
        2,
    ) {
        return;
    }
    const N: u64 = 64;
    let limit = Duration::from_millis(800);
    let program = |reductions: usize| {
        let mut b = ExecutableBuilder::new(format!("reduce{reductions}"));
        let x = b.parameter("x", DType::F32, &[N]);
        let y = b.output("y", DType::F32, &[N]);
        for i in 0..reductions {
            let src = if i == 0 { x.slice() } else { y.slice() };
            b.push(Thunk::Collective(CollectiveThunk {
                op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                src,
                dst: y.slice(),
                dtype: DType::F32,
                groups: vec![],
            }));
        }
        b.build().unwrap()
    };
    for flavor in FLAVORS {
        let devs = devices(flavor, 2, true);
        let p: Arc<dyn CliqueProvider> = Arc::new(provider(
            flavor,
            &devs,
            Timeouts::new(Duration::from_millis(200), limit),
        ));
        assert_eq!(p.completion_timeout(), Some(limit));
        let start = Instant::now();
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2usize)
                .map(|r| {
                    let (p, dev) = (p.clone(), devs[r].clone());
                    let exe = program(2 - r);
                    s.spawn(move || {
                        let loaded =
                            xthunk_core::executor::LoadedExecutable::load(dev.clone(), exe)
                                .unwrap();
                        let x = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
                        dev.copy_from_host(&bytes(&values(N, r as u64)), x.ptr())
                            .unwrap();
                        let y = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
                        let opts = ExecuteOptions {
                            collectives: Some(xthunk_core::executor::CollectiveContext {
                                rank: r as u32,
                                world: 2,
                                cliques: p,
                            }),
                            ..Default::default()
                        };
                        loaded
                            .execute(&[x.as_ref()], &[y.as_ref()], &opts)
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let took = start.elapsed();
        assert!(results[1].is_ok(), "rank 1: {:?}", results[1]);
        let e = results[0]
            .as_ref()
            .expect_err("rank 0's second all-reduce completed");
        assert!(e.contains("collective timeout"), "{e}");
        assert!(e.contains("#1 entry[1]"), "{e}");
        assert!(
            took >= limit && took < limit + Duration::from_secs(5),
            "{took:?}"
        );
        assert_eq!(p.evict_aborted().len(), 1, "the aborted clique is evicted");
        println!("EMULATED {flavor} rank 0 after {took:.1?}: {e}");
    }
}

/// The provider of jobs across processes, with two coordinator ranks of one job standing in
/// for two processes (one device each): the unique id goes through the coordinator, the
/// all-reduce gives the sum of both ranks, a split through the coordinator makes the clique
/// of each color, and a clique evicted after an abort is made again under a new generation.
#[test]
fn the_job_provider_meets_through_the_coordinator() {
    if !under_emulator("the_job_provider_meets_through_the_coordinator", 2) {
        return;
    }
    use xthunk_core::collectives::JobPlacement;
    use xthunk_core::distributed::{Coordinator, LocalCoordinator};
    use xthunk_nccl::NcclJobCliqueProvider;
    const N: u64 = 256;
    for flavor in FLAVORS {
        let devs = devices(flavor, 2, true);
        let coordinators = LocalCoordinator::job(&format!("job-{flavor}"), 2).unwrap();
        let providers: Vec<Arc<dyn CliqueProvider>> = coordinators
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                let c: Arc<dyn Coordinator> = Arc::new(c);
                let one = devs[r].clone();
                let bind: BindRank = Arc::new(move |local| {
                    assert_eq!(local, 0);
                    match flavor {
                        Flavor::Nccl => xthunk_cuda::bind_current(one.as_ref()),
                        Flavor::Rccl => xthunk_rocm::bind_current(one.as_ref()),
                    }
                });
                let placement = JobPlacement {
                    devices: vec![devs[r].clone()],
                    first_rank: r,
                    world: 2,
                };
                let p = NcclJobCliqueProvider::new(
                    flavor,
                    c,
                    placement,
                    bind,
                    Timeouts::new(Duration::from_millis(500), Duration::from_secs(10)),
                )
                .unwrap();
                Arc::new(p) as Arc<dyn CliqueProvider>
            })
            .collect();
        let exe = all_reduce_program(N, ReduceOp::Sum);
        let inputs: Vec<Vec<f32>> = (0..2).map(|r| values(N, 40 + r as u64)).collect();
        let run = |round: usize| -> Vec<Vec<f32>> {
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..2usize)
                    .map(|r| {
                        let (p, dev, exe) = (providers[r].clone(), devs[r].clone(), exe.clone());
                        let x = bytes(&inputs[r]);
                        s.spawn(move || {
                            let loaded =
                                xthunk_core::executor::LoadedExecutable::load(dev.clone(), exe)
                                    .unwrap();
                            let xb = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
                            dev.copy_from_host(&x, xb.ptr()).unwrap();
                            let yb = dev.allocate(N * 4, 256, MemorySpace::Device).unwrap();
                            let opts = ExecuteOptions {
                                collectives: Some(xthunk_core::executor::CollectiveContext {
                                    rank: r as u32,
                                    world: 2,
                                    cliques: p,
                                }),
                                ..Default::default()
                            };
                            loaded
                                .execute(&[xb.as_ref()], &[yb.as_ref()], &opts)
                                .unwrap_or_else(|e| panic!("round {round}, rank {r}: {e}"));
                            let mut out = vec![0u8; (N * 4) as usize];
                            dev.copy_to_host(yb.ptr(), &mut out).unwrap();
                            floats(&out)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        let want: Vec<f32> = (0..N as usize)
            .map(|i| (f64::from(inputs[0][i]) + f64::from(inputs[1][i])) as f32)
            .collect();
        for out in run(0) {
            assert_eq!(out, want);
        }
        // A split: each rank its own color, then both the same.
        let parent = CliqueKey::new(0..2, StreamKind::Compute).unwrap();
        for colors in [[Some(1u64), Some(2)], [Some(7), Some(7)], [None, Some(3)]] {
            let sizes: Vec<Option<usize>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..2usize)
                    .map(|r| {
                        let (p, parent) = (providers[r].clone(), parent.clone());
                        s.spawn(move || p.split(&parent, r, colors[r]).unwrap().map(|c| c.size()))
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let want: Vec<Option<usize>> = (0..2)
                .map(|r| colors[r].map(|c| colors.iter().filter(|x| **x == Some(c)).count()))
                .collect();
            assert_eq!(sizes, want, "{flavor}: colors {colors:?}");
        }
        // Aborted, evicted and made again (a new generation of the same key).
        for p in &providers {
            p.abort_all("test: abort");
            assert!(p.failure().is_some());
            assert!(p.evict_aborted().contains(&parent));
        }
        for out in run(1) {
            assert_eq!(out, want);
        }
        println!(
            "EMULATED {flavor}: job provider across 2 coordinator ranks: all-reduce, splits, re-made after an abort"
        );
    }
}

/// Wiring errors: host devices, an empty device list, a rank outside the clique or the
/// devices. Needs no library beyond loading one (through the emulator).
#[test]
fn misuse_is_reported() {
    if !under_emulator("misuse_is_reported", 2) {
        return;
    }
    let noop: BindRank = Arc::new(|_| Ok(()));
    let e = NcclCliqueProvider::new(
        Flavor::Nccl,
        host_devices(2),
        noop.clone(),
        Timeouts::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("need `cuda` devices, got a `host` device"),
        "{e}"
    );
    let e = NcclCliqueProvider::new(Flavor::Rccl, vec![], noop.clone(), Timeouts::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one device"), "{e}");
    let devs = devices(Flavor::Nccl, 2, true);
    let p = NcclCliqueProvider::new(Flavor::Nccl, devs, noop, Timeouts::default()).unwrap();
    assert_eq!(p.num_ranks(), 2);
    let k = CliqueKey::new([0, 1], StreamKind::Compute).unwrap();
    let e = p.acquire(&k, 2).err().unwrap().to_string();
    assert!(e.contains("rank 2 is not a member of clique [0, 1]"), "{e}");
    let k3 = CliqueKey::new([0, 2], StreamKind::Compute).unwrap();
    let e = p.acquire(&k3, 0).err().unwrap().to_string();
    assert!(e.contains("rank 2 does not exist (2 cuda devices)"), "{e}");
    println!("EMULATED misuse: reported");
}
