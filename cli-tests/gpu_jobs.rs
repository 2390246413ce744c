//! GPU jobs of several processes, through the driver emulator (emulator/: CUDA, HIP,
//! NCCL and RCCL on host memory, labelled EMULATED; its NCCL/RCCL joins the ranks of several
//! processes by their unique id): `xthunk launch -n P -- run --backend cuda|rocm --devices D`
//! with NCCL/RCCL communicators made across the processes through the job's coordinator.
//!
//! - the SPMD examples (`dp_step`, `permute_ring`, `exchange`) as 4 processes × 1 device and
//!   2 processes × 2 devices give the host backend's outputs (`run --devices 4`);
//! - a rank stopped (SIGSTOP) inside an all-reduce: every other rank exits 1 within
//!   `--collective-timeout` + a few seconds naming the stopped rank as stuck, communicators
//!   aborted, nothing left behind (processes, the emulator's rendezvous folders);
//! - a rank killed (SIGKILL) likewise, named by every survivor.
//! - SIGTERM of the launcher: every rank aborts its communicators, says it stops and is gone
//!   within the grace, the launcher prints one line and exits 143, nothing is left.
//!
//! Needs the emulator library (built by `cargo test --workspace`); without it every test is
//! SKIPPED with the reason, a failure with `XTHUNK_REQUIRE_EMULATOR=1` (CI).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/emulator.rs"]
mod emulator;
use emulator::{emulated_command, have_emulator};
#[path = "common/launch.rs"]
mod launch;

use launch::Launch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_xthunk");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example(name: &str) -> PathBuf {
    repo().join(format!("examples/{name}.txtpb"))
}

/// A scratch folder, removed when dropped; also the `TMPDIR` of the job's processes, so that
/// whatever they leave in their temporary folder is seen here.
struct Scratch(PathBuf);

impl Scratch {
    /// Short names: the emulator's rendezvous sockets live below (a socket path has at most
    /// 107 bytes).
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("xgj-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("tmp")).unwrap();
        Scratch(d)
    }

    fn tmp(&self) -> PathBuf {
        self.0.join("tmp")
    }

    /// The emulator's NCCL rendezvous folders left in the job's temporary folder.
    fn rendezvous_left(&self) -> Vec<String> {
        std::fs::read_dir(self.tmp())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("xthunk-emu-nccl"))
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `xthunk ARGS` under the emulator with `devices` emulated devices per API, its temporary
/// folder in `scratch`.
fn emulated(scratch: &Scratch, devices: usize, args: &[&str]) -> Command {
    let mut c = emulated_command(BIN);
    c.args(args)
        .env("XTHUNK_EMU_DEVICES", devices.to_string())
        .env("TMPDIR", scratch.tmp())
        .env_remove("RUST_LOG")
        .env_remove("XTHUNK_LEASE_TTL")
        .env_remove("XTHUNK_START_TIMEOUT")
        .env_remove("XTHUNK_COLLECTIVE_TIMEOUT")
        .current_dir(repo())
        .stdin(Stdio::null());
    c
}

fn read_f32_npy(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    npyz::NpyFile::new(&bytes[..])
        .unwrap()
        .into_vec::<f32>()
        .unwrap()
}

/// Every `.npy` file below `dir`, by relative path.
fn npy_files(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().display().to_string(), p);
            }
        }
    }
    out
}

/// The outputs under `got` equal those under `want` (the host's) within `tol` (relative to
/// 1 + |want|), file by file; returns the largest difference seen.
fn assert_outputs_close(what: &str, want: &Path, got: &Path, tol: f32) -> f32 {
    let (w, g) = (npy_files(want), npy_files(got));
    assert!(!w.is_empty(), "{what}: no host outputs");
    assert_eq!(
        w.keys().collect::<Vec<_>>(),
        g.keys().collect::<Vec<_>>(),
        "{what}: other files"
    );
    let mut worst = 0f32;
    for (name, wp) in &w {
        let (a, b) = (read_f32_npy(wp), read_f32_npy(&g[name]));
        assert_eq!(a.len(), b.len(), "{what}: {name}");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let d = (x - y).abs() / (1.0 + x.abs());
            assert!(d <= tol, "{what}: {name}[{i}] = {y} where the host has {x}");
            worst = worst.max(d);
        }
    }
    worst
}

#[test]
fn emulated_gpu_jobs_compute_what_the_host_computes() {
    if !have_emulator("emulated_gpu_jobs_compute_what_the_host_computes") {
        return;
    }
    let scratch = Scratch::new("out");
    for program in ["dp_step", "permute_ring", "exchange"] {
        let host = scratch.0.join("host").join(program);
        let o = Command::new(BIN)
            .args(["run", "--backend", "host", "--devices", "4", "--seed", "5"])
            .arg("--output-dir")
            .arg(&host)
            .arg(example(program))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{program} on the host: {o:?}");
        for backend in ["cuda", "rocm"] {
            for (processes, devices) in [(4usize, 1usize), (2, 2)] {
                let what = format!("{program} on {backend}, {processes} processes × {devices}");
                let dir = scratch
                    .0
                    .join(format!("{backend}-{processes}x{devices}"))
                    .join(program);
                let t = Instant::now();
                let o = emulated(
                    &scratch,
                    4,
                    &[
                        "launch",
                        "-n",
                        &processes.to_string(),
                        "--",
                        "run",
                        "--backend",
                        backend,
                        "--devices",
                        &devices.to_string(),
                        "--seed",
                        "5",
                        "--collective-timeout",
                        "30",
                        "--output-dir",
                        dir.to_str().unwrap(),
                        example(program).to_str().unwrap(),
                    ],
                )
                .output()
                .unwrap();
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                assert!(o.status.success(), "{what}:\n{text}");
                let via = match backend {
                    "cuda" => "collectives through nccl",
                    _ => "collectives through rccl",
                };
                assert!(text.contains(via), "{what}:\n{text}");
                assert!(
                    text.contains("EMULATED"),
                    "{what}: not labelled EMULATED\n{text}"
                );
                let worst = assert_outputs_close(&what, &host, &dir, 1e-5);
                eprintln!(
                    "EMULATED {what}: outputs equal the host's (largest relative difference \
                     {worst:.1e}) in {:.1?}",
                    t.elapsed()
                );
                let left = scratch.rendezvous_left();
                assert!(left.is_empty(), "{what}: left {left:?}");
            }
        }
    }
}

/// Starts a long 4-process job on emulated `backend`, waits until every rank started (and
/// `after` more), sends `signal` to process `victim`, and checks that every other process
/// exits 1 within `limit` with an error naming `victim` (with one of `why`), and that nothing
/// is left. Returns the slowest survivor's time from the signal to its error.
fn fault(
    backend: &str,
    victim: usize,
    signal: &str,
    collective_timeout: Duration,
    why: &[&str],
) -> Duration {
    const WORLD: usize = 4;
    let scratch = Scratch::new(&format!("{backend}{victim}{signal}"));
    let secs = collective_timeout.as_secs_f64().to_string();
    let cmd = emulated(
        &scratch,
        WORLD,
        &[
            "launch",
            "-n",
            &WORLD.to_string(),
            // A lease longer than the collective timeout: the stuck collective is what the
            // ranks notice first.
            "--lease-ttl",
            "8",
            "--",
            "run",
            "--backend",
            backend,
            "--iterations",
            "100000000",
            "--collective-timeout",
            &secs,
            example("dp_step").to_str().unwrap(),
        ],
    );
    let mut launch = Launch::spawn(cmd);
    launch.wait_for("started", WORLD, Duration::from_secs(120));
    let (pids, _) = launch.pids();
    assert_eq!(pids.len(), WORLD, "{}", launch.text());
    // Long enough for every rank to have published its position once while running.
    thread::sleep(Duration::from_millis(1500));
    let kill = Command::new("kill")
        .args([signal, &pids[&victim].to_string()])
        .status()
        .unwrap();
    assert!(kill.success(), "{}", launch.text());
    let hit = Instant::now();
    let limit = collective_timeout + Duration::from_secs(5);
    let (status, _) = launch.wait(Duration::from_secs(90));
    let text = launch.text();
    assert_eq!(status.code(), Some(1), "{text}");
    let mut slowest = Duration::ZERO;
    for p in (0..WORLD).filter(|p| *p != victim) {
        let Some((line, at)) = launch.error_of(p) else {
            panic!("process {p} printed no error:\n{text}");
        };
        assert!(
            line.contains(&format!("rank {victim}")) && why.iter().any(|w| line.contains(w)),
            "process {p} does not name rank {victim} ({why:?}): {line}\n{text}"
        );
        let took = at.saturating_duration_since(hit);
        assert!(took < limit, "process {p} took {took:?}:\n{text}");
        slowest = slowest.max(took);
        assert!(
            text.contains(&format!("xthunk launch: rank {p}: exit status: 1")),
            "process {p} did not exit 1 on its own:\n{text}"
        );
    }
    for (p, pid) in &pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {p} (pid {pid}) is still there:\n{text}"
        );
    }
    let left = scratch.rendezvous_left();
    assert!(left.is_empty(), "left {left:?}:\n{text}");
    slowest
}

#[test]
fn a_rank_stopped_inside_an_emulated_all_reduce_is_named_stuck_by_every_other() {
    if !have_emulator("a_rank_stopped_inside_an_emulated_all_reduce_is_named_stuck_by_every_other")
    {
        return;
    }
    let timeout = Duration::from_secs(3);
    for backend in ["cuda", "rocm"] {
        let took = fault(backend, 2, "-STOP", timeout, &["is stuck", "is behind"]);
        assert!(took >= timeout - Duration::from_millis(500), "{took:?}");
        eprintln!("EMULATED {backend}: a stopped rank named by every other rank after {took:.1?}");
    }
}

#[test]
fn a_rank_killed_inside_emulated_collectives_is_named_by_every_survivor() {
    if !have_emulator("a_rank_killed_inside_emulated_collectives_is_named_by_every_survivor") {
        return;
    }
    for (backend, victim) in [("cuda", 1), ("rocm", 3)] {
        let took = fault(
            backend,
            victim,
            "-KILL",
            Duration::from_secs(20),
            &["signal: 9", "closed", "exited", "remote", "failed"],
        );
        eprintln!("EMULATED {backend}: a killed rank named by every survivor after {took:.1?}");
    }
}

/// Without NCCL/RCCL (`XTHUNK_EMU_NO_NCCL=1`: the emulator's folder has neither, and the
/// default searches are off), collectives are off, not the backend: a program without
/// collectives runs in one process on 2 devices and as a job of 2 processes; one with
/// collectives fails with the reason (the library and where it was looked for).
#[test]
fn without_nccl_collectives_are_off_not_the_backend() {
    if !have_emulator("without_nccl_collectives_are_off_not_the_backend") {
        return;
    }
    let scratch = Scratch::new("nonccl");
    for (backend, lib) in [("cuda", "libnccl.so.2"), ("rocm", "librccl.so.1")] {
        let run = |args: &[&str]| {
            let o = emulated(&scratch, 2, args)
                .env("XTHUNK_EMU_NO_NCCL", "1")
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            (o.status.code(), text)
        };
        let mlp = example("mlp");
        let mlp = mlp.to_str().unwrap();
        let (code, text) = run(&["run", "--backend", backend, "--devices", "2", mlp]);
        assert_eq!(code, Some(0), "{backend}: {text}");
        assert!(text.contains("collectives are off"), "{backend}: {text}");
        let (code, text) = run(&["launch", "-n", "2", "--", "run", "--backend", backend, mlp]);
        assert_eq!(code, Some(0), "{backend}: {text}");
        assert!(text.contains("collectives are off"), "{backend}: {text}");
        let dp = example("dp_step");
        let (code, text) = run(&[
            "launch",
            "-n",
            "2",
            "--",
            "run",
            "--backend",
            backend,
            dp.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(1), "{backend}: {text}");
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: ") && last.contains("is unavailable") && last.contains(lib),
            "{backend}: {last}\n{text}"
        );
    }
}

/// The parent of process `pid` (0 if it is gone).
fn parent_of(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(") ")?;
            rest.split(' ').nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// SIGTERM of the launcher of an emulated GPU job (2 processes, mid-run): every rank aborts
/// its NCCL/RCCL communicators, says it stops and is gone within the grace; the launcher
/// prints one line of its own and exits 143; no rendezvous folder is left.
#[test]
fn sigterm_of_the_launcher_of_an_emulated_gpu_job_stops_every_rank() {
    if !have_emulator("sigterm_of_the_launcher_of_an_emulated_gpu_job_stops_every_rank") {
        return;
    }
    let grace = Duration::from_secs(6);
    for backend in ["cuda", "rocm"] {
        let scratch = Scratch::new(&format!("term{backend}"));
        let cmd = emulated(
            &scratch,
            2,
            &[
                "launch",
                "-n",
                "2",
                "--lease-ttl",
                "2",
                "--grace",
                &grace.as_secs().to_string(),
                "--",
                "run",
                "--backend",
                backend,
                "--iterations",
                "100000000",
                example("dp_step").to_str().unwrap(),
            ],
        );
        let mut launch = Launch::spawn(cmd);
        launch.wait_for(" started", 2, Duration::from_secs(120));
        let (pids, job) = launch.pids();
        assert_eq!(pids.len(), 2, "{}", launch.text());
        // The launcher runs under ci/with-emulator.sh: it is the ranks' parent.
        let launcher = parent_of(pids[&0]);
        assert!(launcher > 0 && launcher == parent_of(pids[&1]));
        let kill = Command::new("kill")
            .args(["-TERM", &launcher.to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let hit = Instant::now();
        let (status, exited) = launch.wait(grace + Duration::from_secs(10));
        let text = launch.text();
        assert_eq!(status.code(), Some(143), "{backend}: {text}");
        assert!(exited - hit < grace, "{backend}: took {:?}", exited - hit);
        let own: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("xthunk launch:") || l.starts_with("error:"))
            .collect();
        assert_eq!(own.len(), 1, "{backend}: {text}");
        assert!(
            own[0].starts_with(&format!("xthunk launch: job {job} ended by SIGTERM")),
            "{backend}: {text}"
        );
        for (p, pid) in &pids {
            assert!(
                text.contains(&format!("rank {p} stopping: SIGTERM received")),
                "{backend}: process {p} did not say it stops:\n{text}"
            );
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "{backend}: process {p} (pid {pid}) is still there:\n{text}"
            );
        }
        assert!(!text.contains("panicked"), "{backend}: {text}");
        let left = scratch.rendezvous_left();
        assert!(left.is_empty(), "{backend}: left {left:?}:\n{text}");
    }
}

/// Collective memory and scalable initialization in a launched job: a program whose temps are
/// in `MEMORY_SPACE_COLLECTIVE` (an all-reduce over the world, an all-gather over pairs), as 4
/// processes × 1 emulated device with 2 ranks per root (`XTHUNK_NCCL_RANKS_PER_ROOT=2`: the
/// world clique initializes through 2 roots, each publishing its unique id through the
/// coordinator), gives the host's outputs on CUDA and ROCm, and the ranks say that their
/// collective memory was registered and that the clique initialized through several roots.
#[test]
fn emulated_gpu_job_with_collective_memory_and_several_roots() {
    if !have_emulator("emulated_gpu_job_with_collective_memory_and_several_roots") {
        return;
    }
    use xthunk::builder::ExecutableBuilder;
    use xthunk::ir::Thunk;
    use xthunk::ir::{CollectiveOp, CollectiveThunk, CopyThunk, DType, MemorySpace, ReduceOp};
    let scratch = Scratch::new("cmem");
    let program = scratch.0.join("collective_memory.txtpb");
    let exe = {
        let mut b = ExecutableBuilder::new("collective_memory");
        let x = b.parameter("x", DType::F32, &[256]);
        let y = b.output("y", DType::F32, &[256]);
        let z = b.output("z", DType::F32, &[512]);
        let t1 = b.temp_in(DType::F32, &[256], MemorySpace::Collective);
        let t2 = b.temp_in(DType::F32, &[256], MemorySpace::Collective);
        let t3 = b.temp_in(DType::F32, &[512], MemorySpace::Collective);
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
    };
    xthunk::proto::save_file(&program, &exe).unwrap();
    let host = scratch.0.join("host");
    let o = Command::new(BIN)
        .args(["run", "--backend", "host", "--devices", "4", "--seed", "5"])
        .arg("--output-dir")
        .arg(&host)
        .arg(&program)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "on the host: {o:?}");
    for backend in ["cuda", "rocm"] {
        let dir = scratch.0.join(backend);
        let o = emulated(
            &scratch,
            4,
            &[
                "launch",
                "-n",
                "4",
                "--",
                "run",
                "-v",
                "--backend",
                backend,
                "--seed",
                "5",
                "--collective-timeout",
                "30",
                "--output-dir",
                dir.to_str().unwrap(),
                program.to_str().unwrap(),
            ],
        )
        .env("XTHUNK_NCCL_RANKS_PER_ROOT", "2")
        .output()
        .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{backend}:\n{text}");
        for said in [
            "collective memory registered",
            "initializing through several roots",
        ] {
            assert!(text.contains(said), "{backend}: no `{said}`:\n{text}");
        }
        assert_outputs_close(backend, &host, &dir, 1e-6);
        assert!(scratch.rendezvous_left().is_empty(), "{backend}");
    }
}
