//! Jobs of `xthunk` processes on the host backend through a real etcd on loopback: each rank a
//! process started by `xthunk launch`, collectives through shared memory segments.
//!
//! - four processes compute exactly (byte for byte) what `run --devices 4` computes in one
//!   process, for both collective examples;
//! - a rank killed mid-run (SIGKILL) makes every survivor exit non-zero within the lease TTL
//!   plus a few seconds, naming it; `XTHUNK_KILL_REPEATS` times (default 3; CI: 10), with no
//!   process, shared memory segment or etcd key of the job left behind;
//! - a rank that never reaches a collective makes the others fail at the terminate timeout,
//!   naming it;
//! - etcd killed under a running job makes every rank exit 1 within the lease TTL + 3 s
//!   naming etcd, with no process or segment left; `XTHUNK_KILL_REPEATS` times;
//! - a rank stopped (SIGSTOP) or that never starts, `XTHUNK_KILL_REPEATS` times each: every
//!   other rank exits 1 within the lease TTL + 3 s naming it, so does the launcher's last
//!   line, nothing is left;
//! - a survivor reports the cause another published (it outlives its publisher), not that
//!   rank's departure;
//! - two jobs sharing one etcd at once do not interfere;
//! - two launches given the same job id at once: one runs, the other is refused whole.
//!
//! The binary is the `xthunk` next to this test's own build (`target/<profile>/xthunk`; or
//! `$XTHUNK_BIN`), which `cargo test --workspace --all-features` builds with the `etcd`
//! feature. Each test is skipped, with a printed reason, where etcd is not installed or the
//! binary is missing or was built without the `etcd` feature, unless `XTHUNK_REQUIRE_ETCD=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use xthunk_core::host::job_segments;
use xthunk_etcd::job_keys;
use xthunk_etcd::server::EtcdServer;

/// The lease TTL of every rank (`XTHUNK_LEASE_TTL`).
const TTL: Duration = Duration::from_secs(2);
const WORLD: usize = 4;

fn required() -> bool {
    std::env::var("XTHUNK_REQUIRE_ETCD").as_deref() == Ok("1")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `$XTHUNK_BIN`, else the `xthunk` of this test's target directory and profile
/// (`target/debug/deps/job-…` -> `target/debug/xthunk`).
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("XTHUNK_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    profile_dir.join(format!("xthunk{}", std::env::consts::EXE_SUFFIX))
}

/// A test's etcd and binary, or `None` (after saying why the test is skipped).
fn setup(test: &str) -> Option<(EtcdServer, PathBuf)> {
    let skip = |why: String| {
        assert!(!required(), "{test}: {why}");
        eprintln!("SKIPPED {test}: {why} (XTHUNK_REQUIRE_ETCD=1 makes this an error)");
    };
    let bin = binary();
    if !bin.is_file() {
        skip(format!(
            "{} is missing: build it with `cargo build --features etcd` (or set XTHUNK_BIN)",
            bin.display()
        ));
        return None;
    }
    // Can this binary join a job through etcd? A rank of a (fake) job of two with
    // `--devices 2` fails before connecting anywhere: with the feature, on `--devices`.
    let o = Command::new(&bin)
        .args(["run", "--backend", "host", "--devices", "2"])
        .arg(repo().join("examples/permute_ring.txtpb"))
        .env("XTHUNK_RANK", "0")
        .env("XTHUNK_WORLD_SIZE", "2")
        .env("XTHUNK_COORDINATOR", "etcd://127.0.0.1:9")
        .env("XTHUNK_JOB_ID", "probe")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("without the `etcd` feature") {
        skip(format!(
            "{} was built without the `etcd` feature: build it with `cargo build --features etcd`",
            bin.display()
        ));
        return None;
    }
    assert!(
        !o.status.success() && err.contains("drop --devices"),
        "{} does not run as a rank of a job (does `run` call job::run_job?): {err}",
        bin.display()
    );
    let etcd = EtcdServer::start_or_skip(test).expect("start etcd")?;
    Some((etcd, bin))
}

/// A job id no other test (or earlier run) uses.
fn job_id(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "jobtest-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(job_id(name));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Out,
    Err,
}

/// A running `xthunk launch`: its lines as they come (with the time they came), killed (with
/// its ranks: they die with it) when dropped.
struct Launch {
    child: Child,
    lines: mpsc::Receiver<(Pipe, String, Instant)>,
    seen: Vec<(Pipe, String, Instant)>,
}

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Launch {
    fn start(
        bin: &Path,
        etcd: &EtcdServer,
        job: &str,
        program: &Path,
        run_args: &[&str],
    ) -> Launch {
        Launch::start_with(bin, etcd, job, &["--grace", "30"], program, run_args)
    }

    /// `start` with the launcher's own options `launch_args`.
    fn start_with(
        bin: &Path,
        etcd: &EtcdServer,
        job: &str,
        launch_args: &[&str],
        program: &Path,
        run_args: &[&str],
    ) -> Launch {
        let mut child = Command::new(bin)
            .args(["launch", "-n", &WORLD.to_string(), "--coordinator"])
            .arg(etcd.url())
            .args(["--job-id", job])
            .args(launch_args)
            .args(["--", "run", "--backend", "host"])
            .args(run_args)
            .arg(program)
            .env("XTHUNK_LEASE_TTL", TTL.as_secs().to_string())
            .env_remove("RUST_LOG")
            .current_dir(repo())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        for (pipe, stream) in [
            (
                Pipe::Out,
                Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            ),
            (Pipe::Err, Box::new(child.stderr.take().unwrap())),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send((pipe, line, Instant::now()));
                }
            });
        }
        Launch {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    fn text(&self) -> String {
        self.seen
            .iter()
            .map(|(_, l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits for a line holding `needle` (`count` of them), up to `limit`.
    fn wait_for(&mut self, needle: &str, count: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.seen.iter().filter(|l| l.1.contains(needle)).count() >= count {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "no {count} lines with {needle:?} within {limit:?}; so far:\n{}",
                    self.text()
                ),
            }
        }
    }

    /// Waits for the launcher to exit, up to `limit` (then kills it and fails).
    fn wait(&mut self, limit: Duration) -> (ExitStatus, Instant) {
        let deadline = Instant::now() + limit;
        let status = loop {
            while let Ok(l) = self.lines.try_recv() {
                self.seen.push(l);
            }
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the job still ran after {limit:?}:\n{}", self.text());
            }
            thread::sleep(Duration::from_millis(10));
        };
        let exited = Instant::now();
        // The last lines (the pipes close with the launcher).
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        (status, exited)
    }

    /// The pid of every rank, from its first line.
    fn pids(&self) -> BTreeMap<usize, i32> {
        let mut pids = BTreeMap::new();
        for (_, l, _) in &self.seen {
            if let Some(rest) = l.strip_prefix("[rank ")
                && let Some((r, rest)) = rest.split_once(']')
                && let Some((_, p)) = rest.split_once("(pid ")
                && let Some((p, _)) = p.split_once(')')
            {
                pids.insert(r.parse().unwrap(), p.parse().unwrap());
            }
        }
        pids
    }

    /// The lines of rank `r` (without the prefix).
    fn rank_lines(&self, r: usize) -> Vec<(&str, Instant)> {
        let prefix = format!("[rank {r}] ");
        self.seen
            .iter()
            .filter_map(|(_, l, t)| l.strip_prefix(&prefix).map(|l| (l, *t)))
            .collect()
    }
}

fn xthunk(bin: &Path, args: &[&str], program: &Path) -> Output {
    let o = Command::new(bin)
        .args(args)
        .arg(program)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "xthunk {args:?} {}: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The `rank R output ...` summary lines of a report, sorted.
fn summaries(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix("[rank ") {
            Some(rest) => rest.split_once("] ").map_or(l, |x| x.1),
            None => l,
        })
        .filter(|l| l.starts_with("rank ") && l.contains(" output "))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// Nothing of `job` is left: no segment now, and no etcd key within `limit` (the keys of a
/// killed rank go when its lease expires).
fn assert_nothing_left(etcd: &EtcdServer, job: &str, limit: Duration) {
    let segs = job_segments(job);
    assert!(
        segs.is_empty(),
        "job {job} left shared memory segments: {segs:?}"
    );
    let start = Instant::now();
    loop {
        let keys = job_keys(&[etcd.endpoint()], job).unwrap();
        if keys.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "job {job} left etcd keys {limit:?} after it ended: {keys:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `program` as a job of four processes and with `run --devices 4`, with the same seed,
/// and checks that every rank wrote the same bytes and printed the same summaries.
fn check_job_against_spmd(bin: &Path, etcd: &EtcdServer, job: &str, program: &Path, seed: u64) {
    let scratch = Scratch::new("outputs");
    let (spmd_dir, job_dir) = (scratch.0.join("spmd"), scratch.0.join("job"));
    let seed = seed.to_string();
    let spmd = xthunk(
        bin,
        &[
            "run",
            "--backend",
            "host",
            "--devices",
            "4",
            "--seed",
            &seed,
            "--output-dir",
            spmd_dir.to_str().unwrap(),
        ],
        program,
    );
    let mut launch = Launch::start(
        bin,
        etcd,
        job,
        program,
        &["--seed", &seed, "--output-dir", job_dir.to_str().unwrap()],
    );
    let (status, _) = launch.wait(Duration::from_secs(120));
    let text = launch.text();
    assert!(status.success(), "job {job} failed:\n{text}");
    let (want, got) = (files(&spmd_dir), files(&job_dir));
    assert!(!want.is_empty());
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>(),
        "{text}"
    );
    for (name, bytes) in &want {
        assert!(
            got[name] == *bytes,
            "{}: {name} differs between the job and run --devices 4:\n{text}",
            program.display()
        );
    }
    let spmd_summaries = summaries(&String::from_utf8_lossy(&spmd.stdout));
    assert_eq!(spmd_summaries.len(), want.len());
    assert_eq!(spmd_summaries, summaries(&text));
    assert_nothing_left(etcd, job, Duration::ZERO);
}

#[test]
fn four_processes_compute_what_one_process_computes() {
    let Some((etcd, bin)) = setup("four_processes_compute_what_one_process_computes") else {
        return;
    };
    for program in ["dp_step", "permute_ring"] {
        let path = repo().join(format!("examples/{program}.txtpb"));
        check_job_against_spmd(&bin, &etcd, &job_id(program), &path, 7);
    }
}

#[test]
fn two_jobs_share_one_etcd_without_mixing() {
    let Some((etcd, bin)) = setup("two_jobs_share_one_etcd_without_mixing") else {
        return;
    };
    // The same program (the same cliques, the same segment hashes) with different inputs, at
    // once: a segment, key or barrier shared between the two would show in the results.
    let program = repo().join("examples/dp_step.txtpb");
    thread::scope(|s| {
        let (etcd, bin, program) = (&etcd, &bin, &program);
        let a = s.spawn(move || check_job_against_spmd(bin, etcd, &job_id("a"), program, 1));
        let b = s.spawn(move || check_job_against_spmd(bin, etcd, &job_id("b"), program, 2));
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// `long_loop`: an all-reduce, a loop of copies lasting far longer than any test, an
/// all-reduce. A rank killed in the loop leaves the survivors computing (only the failure
/// handler can stop them); one killed in `dp_step --iterations 100000000` leaves them waiting
/// in a collective.
const LONG_LOOP: &str = r#"abi_version: 1
name: "long_loop"
allocations: [{
  size: 1024
  alignment: 64
  parameter: 0
}, {
  index: 1
  size: 1024
  alignment: 64
  output: 0
}, {
  index: 2
  size: 1024
  alignment: 64
  temp {}
}, {
  index: 3
  size: 1
  alignment: 64
  temp {}
}]
entry: [{
  all_reduce {
    src {
      size: 1024
    }
    dst {
      allocation: 1
      size: 1024
    }
    dtype: DTYPE_F32
    op: REDUCE_OP_SUM
  }
}, {
  while {
    pred {
      allocation: 3
      size: 1
    }
    body: [{
      copy {
        src {
          allocation: 1
          size: 1024
        }
        dst {
          allocation: 2
          size: 1024
        }
      }
    }, {
      copy {
        src {
          allocation: 2
          size: 1024
        }
        dst {
          allocation: 1
          size: 1024
        }
      }
    }]
    trip_count: 4000000000
  }
}, {
  all_reduce {
    src {
      allocation: 1
      size: 1024
    }
    dst {
      allocation: 1
      size: 1024
    }
    dtype: DTYPE_F32
    op: REDUCE_OP_SUM
  }
}]
signature {
  parameters: [{
    name: "x"
    dtype: DTYPE_F32
    dims: [256]
  }]
  outputs: [{
    name: "y"
    dtype: DTYPE_F32
    dims: [256]
    allocation: 1
  }]
}
"#;

/// `rank3_skips`: every rank all-reduces `x` into `y`; then ranks 0, 1 and 2 all-reduce `y`
/// again (a conditional on the rank id) while rank 3 does not.
const RANK3_SKIPS: &str = r#"abi_version: 1
name: "rank3_skips"
allocations: [{
  size: 64
  alignment: 64
  parameter: 0
}, {
  index: 1
  size: 64
  alignment: 64
  output: 0
}, {
  index: 2
  size: 4
  alignment: 64
  temp {}
}]
entry: [{
  all_reduce {
    src {
      size: 64
    }
    dst {
      allocation: 1
      size: 64
    }
    dtype: DTYPE_F32
    op: REDUCE_OP_SUM
  }
}, {
  rank_id {
    dst {
      allocation: 2
      size: 4
    }
  }
}, {
  conditional {
    index {
      allocation: 2
      size: 4
    }
    index_type: DTYPE_I32
    branches: [{
      thunks: [{
        all_reduce {
          src {
            allocation: 1
            size: 64
          }
          dst {
            allocation: 1
            size: 64
          }
          dtype: DTYPE_F32
          op: REDUCE_OP_SUM
        }
      }]
    }, {
      thunks: [{
        all_reduce {
          src {
            allocation: 1
            size: 64
          }
          dst {
            allocation: 1
            size: 64
          }
          dtype: DTYPE_F32
          op: REDUCE_OP_SUM
        }
      }]
    }, {
      thunks: [{
        all_reduce {
          src {
            allocation: 1
            size: 64
          }
          dst {
            allocation: 1
            size: 64
          }
          dtype: DTYPE_F32
          op: REDUCE_OP_SUM
        }
      }]
    }, {}]
  }
}]
signature {
  parameters: [{
    name: "x"
    dtype: DTYPE_F32
    dims: [16]
  }]
  outputs: [{
    name: "y"
    dtype: DTYPE_F32
    dims: [16]
    allocation: 1
  }]
}
"#;

fn kill_repeats() -> usize {
    std::env::var("XTHUNK_KILL_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[test]
fn a_killed_rank_fails_every_survivor_promptly_and_leaves_nothing() {
    let Some((etcd, bin)) = setup("a_killed_rank_fails_every_survivor_promptly_and_leaves_nothing")
    else {
        return;
    };
    let scratch = Scratch::new("kill");
    let long_loop = scratch.file("long_loop.txtpb", LONG_LOOP);
    let dp_step = repo().join("examples/dp_step.txtpb");
    let limit = TTL + Duration::from_secs(5);
    let mut latencies = vec![];
    for i in 0..kill_repeats() {
        let victim = [2usize, 0, 3, 1][i % 4];
        let (program, args, what) = if i % 2 == 0 {
            (
                &dp_step,
                &["--iterations", "100000000"][..],
                "in a collective",
            )
        } else {
            (&long_loop, &[][..], "computing")
        };
        let job = job_id("kill");
        let mut launch = Launch::start(&bin, &etcd, &job, program, args);
        launch.wait_for("started", WORLD, Duration::from_secs(60));
        let pids = launch.pids();
        assert_eq!(pids.len(), WORLD, "{}", launch.text());
        // Mid-run.
        thread::sleep(Duration::from_millis(300));
        // SAFETY: a plain kill(2) of a process this test started (through the launcher).
        assert_eq!(unsafe { libc::kill(pids[&victim], libc::SIGKILL) }, 0);
        let killed = Instant::now();
        let (status, exited) = launch.wait(limit + Duration::from_secs(30));
        let text = launch.text();
        assert_eq!(status.code(), Some(1), "{text}");
        assert!(
            exited - killed < limit,
            "repeat {i}: the survivors took {:?} to exit after rank {victim} was killed \
             (limit: the TTL {TTL:?} + 5 s):\n{text}",
            exited - killed
        );
        let mut slowest = Duration::ZERO;
        for r in (0..WORLD).filter(|r| *r != victim) {
            let lines = launch.rank_lines(r);
            let Some((line, at)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("repeat {i}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.contains(&format!("rank {victim} failed")),
                "repeat {i}: rank {r} does not name rank {victim}: {line}\n{text}"
            );
            slowest = slowest.max(at.saturating_duration_since(killed));
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "repeat {i}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        assert!(text.contains(&format!("xthunk launch: rank {victim}: signal: 9")));
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ")
                && last.contains(&format!(
                    "rank {victim} failed: its process ended (signal: 9"
                )),
            "repeat {i}: the launcher's last line does not name rank {victim}: {last}\n{text}"
        );
        eprintln!(
            "repeat {i}: rank {victim} killed {what}; every survivor named it within \
             {slowest:.2?}, exited within {:.2?} (TTL {TTL:?})",
            exited - killed
        );
        latencies.push(slowest);
        for (r, pid) in &pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "repeat {i}: rank {r} (pid {pid}) is still there"
            );
        }
        // The launcher deleted the job's keys before it exited.
        assert_nothing_left(&etcd, &job, Duration::ZERO);
    }
    eprintln!("detection latencies after SIGKILL: {latencies:.2?}");
}

/// etcd killed (SIGKILL) under a running job, 0 to 700 ms after every rank started,
/// `XTHUNK_KILL_REPEATS` times (a fresh etcd each): every rank exits 1 on its own within the
/// lease TTL + 3 s with one `error:` line naming etcd, the coordinator it lost, and no rank
/// process or shared memory segment of the job is left (the keys went with etcd).
#[test]
fn a_killed_etcd_fails_every_rank_naming_it_and_leaves_nothing() {
    let test = "a_killed_etcd_fails_every_rank_naming_it_and_leaves_nothing";
    let Some((first, bin)) = setup(test) else {
        return;
    };
    drop(first);
    let dp_step = repo().join("examples/dp_step.txtpb");
    let limit = TTL + Duration::from_secs(3);
    let mut latencies = vec![];
    for i in 0..kill_repeats() {
        let etcd = EtcdServer::start().expect("start etcd");
        let job = job_id("etcd-killed");
        let mut launch = Launch::start(&bin, &etcd, &job, &dp_step, &["--iterations", "100000000"]);
        launch.wait_for("started", WORLD, Duration::from_secs(60));
        let pids = launch.pids();
        assert_eq!(pids.len(), WORLD, "{}", launch.text());
        thread::sleep(Duration::from_millis([0, 700, 350, 100][i % 4]));
        let etcd_pid = i32::try_from(etcd.pid().unwrap()).unwrap();
        // SAFETY: a plain kill(2) of the etcd this test started.
        assert_eq!(unsafe { libc::kill(etcd_pid, libc::SIGKILL) }, 0);
        let killed = Instant::now();
        let (status, exited) = launch.wait(limit + Duration::from_secs(30));
        let text = launch.text();
        assert_eq!(status.code(), Some(1), "repeat {i}:\n{text}");
        let mut slowest = Duration::ZERO;
        let mut said = String::new();
        for r in 0..WORLD {
            let lines = launch.rank_lines(r);
            let Some((line, at)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("repeat {i}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.starts_with(&format!("error: lost the coordinator {}: ", etcd.url())),
                "repeat {i}: rank {r} does not name the lost etcd first: {line}\n{text}"
            );
            if r == 0 {
                said = line.to_string();
            }
            let took = at.saturating_duration_since(killed);
            assert!(took < limit, "repeat {i}: rank {r} took {took:?}:\n{text}");
            slowest = slowest.max(took);
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "repeat {i}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ")
                && last.contains(&format!("lost the coordinator {}", etcd.url())),
            "repeat {i}: the launcher's last line does not name the lost etcd: {last}\n{text}"
        );
        eprintln!(
            "repeat {i}: etcd killed; every rank named it within {slowest:.2?}, the job ended \
             within {:.2?} (TTL {TTL:?}); rank 0: {said}",
            exited - killed
        );
        latencies.push(slowest);
        for (r, pid) in &pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "repeat {i}: rank {r} (pid {pid}) is still there"
            );
        }
        let segs = job_segments(&job);
        assert!(segs.is_empty(), "repeat {i}: segments {segs:?} left");
        drop(etcd);
    }
    eprintln!("latencies after etcd was killed: {latencies:.2?}");
}

#[test]
fn a_rank_that_never_reaches_a_collective_is_named_at_the_timeout() {
    let Some((etcd, bin)) = setup("a_rank_that_never_reaches_a_collective_is_named_at_the_timeout")
    else {
        return;
    };
    let scratch = Scratch::new("skip");
    let program = scratch.file("rank3_skips.txtpb", RANK3_SKIPS);
    let job = job_id("skip");
    let timeout = Duration::from_secs(2);
    let mut launch = Launch::start(&bin, &etcd, &job, &program, &["--collective-timeout", "2"]);
    launch.wait_for("started", WORLD, Duration::from_secs(60));
    let started = Instant::now();
    let (status, exited) = launch.wait(Duration::from_secs(60));
    let text = launch.text();
    assert_eq!(status.code(), Some(1), "{text}");
    let took = exited - started;
    assert!(
        took >= timeout - Duration::from_millis(500) && took < timeout + Duration::from_secs(8),
        "the job ended {took:?} after it started (terminate timeout {timeout:?}):\n{text}"
    );
    for r in 0..3 {
        let lines = launch.rank_lines(r);
        let Some((line, _)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
            panic!("rank {r} printed no error:\n{text}");
        };
        assert!(
            line.contains("rank 3 did not arrive within 2s"),
            "rank {r} does not name rank 3: {line}\n{text}"
        );
    }
    // Rank 3 finished its program, then learnt at its shutdown barrier that the others failed.
    assert!(
        launch
            .rank_lines(3)
            .iter()
            .any(|(l, _)| l.starts_with("error:") && l.contains("failed")),
        "{text}"
    );
    for r in 0..WORLD {
        assert!(
            text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
            "rank {r} did not exit 1 on its own:\n{text}"
        );
    }
    eprintln!("the job failed {took:.2?} after it started (terminate timeout {timeout:?})");
    assert_nothing_left(&etcd, &job, Duration::ZERO);
}

/// Two launches given the same job id at the same instant, 10 times (`XTHUNK_CLAIM_REPEATS`):
/// exactly one runs and writes what `run --devices 4` writes; the other is refused whole
/// (exit 1, one `error:` line naming the job id, no rank started); nothing is left.
#[test]
fn two_launches_of_one_job_id_at_once_run_one_and_refuse_the_other() {
    let Some((etcd, bin)) =
        setup("two_launches_of_one_job_id_at_once_run_one_and_refuse_the_other")
    else {
        return;
    };
    let repeats = std::env::var("XTHUNK_CLAIM_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let scratch = Scratch::new("claim");
    let program = repo().join("examples/permute_ring.txtpb");
    let spmd_dir = scratch.0.join("spmd");
    let dir = spmd_dir.to_str().unwrap();
    let seed = ["--seed", "5"];
    xthunk(
        &bin,
        &[
            "run",
            "--backend",
            "host",
            "--devices",
            "4",
            seed[0],
            seed[1],
            "--output-dir",
            dir,
        ],
        &program,
    );
    let want = files(&spmd_dir);
    for i in 0..repeats {
        let job = job_id("claim");
        let dirs = [
            scratch.0.join(format!("{i}a")),
            scratch.0.join(format!("{i}b")),
        ];
        // Long enough (a few hundred iterations) that the two are sure to overlap.
        let args = |d: &Path| {
            let mut v = vec!["--iterations".to_string(), "1000".into()];
            v.extend(seed.iter().map(|s| s.to_string()));
            v.extend(["--output-dir".to_string(), d.display().to_string()]);
            v
        };
        let (a_args, b_args) = (args(&dirs[0]), args(&dirs[1]));
        let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
        let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
        let mut launches = [
            Launch::start(&bin, &etcd, &job, &program, &a_args),
            Launch::start(&bin, &etcd, &job, &program, &b_args),
        ];
        let ends: Vec<(ExitStatus, String)> = launches
            .iter_mut()
            .map(|l| {
                let (status, _) = l.wait(Duration::from_secs(120));
                (status, l.text())
            })
            .collect();
        let ran: Vec<usize> = (0..2).filter(|k| ends[*k].0.success()).collect();
        assert_eq!(
            ran.len(),
            1,
            "repeat {i}: {} launches ran:\n--- a:\n{}\n--- b:\n{}",
            ran.len(),
            ends[0].1,
            ends[1].1
        );
        let (winner, loser) = (ran[0], 1 - ran[0]);
        let (status, text) = &ends[loser];
        assert_eq!(status.code(), Some(1), "repeat {i}: {text}");
        assert!(
            !text.contains("[rank"),
            "repeat {i}: the refused launch started ranks:\n{text}"
        );
        let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "repeat {i}: {text}");
        assert!(
            errors[0].contains(&format!(
                "job id `{job}` is taken: another launch runs it (incarnation"
            )),
            "repeat {i}: {text}"
        );
        assert!(
            !dirs[loser].exists(),
            "repeat {i}: the refused launch wrote outputs"
        );
        assert_eq!(
            files(&dirs[winner]),
            want,
            "repeat {i}: the outputs differ from run --devices 4:\n{}",
            ends[winner].1
        );
        assert_nothing_left(&etcd, &job, Duration::ZERO);
    }
}

/// Whether process `pid` has exited (gone, or a zombie its launcher has not reaped yet).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// Watches `pids` on a thread: when each exited (polled every 5 ms, up to `limit`).
fn watch_exits(
    pids: BTreeMap<usize, i32>,
    limit: Duration,
) -> thread::JoinHandle<BTreeMap<usize, Instant>> {
    thread::spawn(move || {
        let deadline = Instant::now() + limit;
        let mut ends = BTreeMap::new();
        while ends.len() < pids.len() && Instant::now() < deadline {
            for (r, pid) in &pids {
                if !ends.contains_key(r) && exited(*pid) {
                    ends.insert(*r, Instant::now());
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        ends
    })
}

fn span(v: &[Duration]) -> (Duration, Duration) {
    (
        v.iter().min().copied().unwrap_or_default(),
        v.iter().max().copied().unwrap_or_default(),
    )
}

/// SIGSTOP of a rank 0 to 700 ms after every rank started, `XTHUNK_KILL_REPEATS` times (a
/// different rank each), with the least grace allowed (TTL + 1 s): every survivor exits 1 on
/// its own within the lease TTL + 3 s naming the stopped rank (its lease expired), the
/// launcher's last line names it (the survivor that saw it first published it: not the
/// survivor that exited first), and no process, segment or key of the job is left. The
/// stopped rank is killed by the launcher after the grace (even repetitions) or continued
/// once the survivors exited (odd ones: it exits 1 by itself, its lease gone).
#[test]
fn a_stopped_rank_is_named_by_every_survivor_and_the_launcher_and_leaves_nothing() {
    let Some((etcd, bin)) =
        setup("a_stopped_rank_is_named_by_every_survivor_and_the_launcher_and_leaves_nothing")
    else {
        return;
    };
    let dp_step = repo().join("examples/dp_step.txtpb");
    let grace = TTL + Duration::from_secs(1);
    let grace_arg = grace.as_secs().to_string();
    let limit = TTL + Duration::from_secs(3);
    let (mut survivors_out, mut all_out) = (vec![], vec![]);
    for i in 0..kill_repeats() {
        let victim = [1usize, 3, 0, 2][i % 4];
        let job = job_id("stop");
        let mut launch = Launch::start_with(
            &bin,
            &etcd,
            &job,
            &["--grace", &grace_arg],
            &dp_step,
            &["--iterations", "100000000"],
        );
        launch.wait_for("started", WORLD, Duration::from_secs(60));
        let pids = launch.pids();
        assert_eq!(pids.len(), WORLD, "{}", launch.text());
        thread::sleep(Duration::from_millis([200, 0, 700, 350][i % 4]));
        // SAFETY: a plain kill(2) of a process this test started (through the launcher).
        assert_eq!(unsafe { libc::kill(pids[&victim], libc::SIGSTOP) }, 0);
        let hit = Instant::now();
        let watch = watch_exits(pids.clone(), limit + grace + Duration::from_secs(20));
        // In odd repetitions the stopped rank is continued once every survivor has exited:
        // its lease is gone, and it exits non-zero by itself.
        let resumed = i % 2 == 1;
        if resumed {
            let survivors: BTreeMap<usize, i32> = pids
                .iter()
                .filter(|(r, _)| **r != victim)
                .map(|(r, p)| (*r, *p))
                .collect();
            let out = watch_exits(survivors, limit + Duration::from_secs(10))
                .join()
                .unwrap();
            assert_eq!(out.len(), WORLD - 1, "repeat {i}: survivors still run");
            // SAFETY: a plain kill(2) of a process this test started (through the launcher).
            assert_eq!(unsafe { libc::kill(pids[&victim], libc::SIGCONT) }, 0);
        }
        let (status, _) = launch.wait(limit + grace + Duration::from_secs(30));
        let ends = watch.join().unwrap();
        let text = launch.text();
        let what = format!("repeat {i}: rank {victim} stopped (continued: {resumed})");
        assert_eq!(status.code(), Some(1), "{what}\n{text}");
        assert_eq!(ends.len(), WORLD, "{what}: ranks still ran\n{text}");
        let last_survivor = ends
            .iter()
            .filter(|(r, _)| **r != victim)
            .map(|(_, t)| t.saturating_duration_since(hit))
            .max()
            .unwrap();
        assert!(
            last_survivor < limit,
            "{what}: the last survivor exited after {last_survivor:?}\n{text}"
        );
        survivors_out.push(last_survivor);
        all_out.push(
            ends[&victim]
                .saturating_duration_since(hit)
                .max(last_survivor),
        );
        for r in (0..WORLD).filter(|r| *r != victim) {
            let lines = launch.rank_lines(r);
            let Some((line, _)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("{what}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.contains(&format!("rank {victim} failed: its liveness lease expired")),
                "{what}: rank {r} does not name rank {victim}: {line}\n{text}"
            );
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "{what}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        let end = if resumed {
            "exit status: 1"
        } else {
            "signal: 9"
        };
        assert!(
            text.contains(&format!("xthunk launch: rank {victim}: {end}")),
            "{what}: the stopped rank did not end with {end}:\n{text}"
        );
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ")
                && last.contains(&format!("rank {victim} failed: its liveness lease expired")),
            "{what}: the launcher's last line does not name rank {victim}: {last}\n{text}"
        );
        for (r, pid) in &pids {
            assert!(exited(*pid), "{what}: rank {r} (pid {pid}) is still there");
        }
        assert_nothing_left(&etcd, &job, Duration::ZERO);
    }
    let (s, a) = (span(&survivors_out), span(&all_out));
    eprintln!(
        "SIGSTOP (etcd, TTL {TTL:?}, grace {grace:?}, {} repeats): fault to the last survivor's \
         exit {:.2?}..{:.2?}; to the last rank's exit (the stopped one, killed after the grace or \
         continued) {:.2?}..{:.2?}",
        survivors_out.len(),
        s.0,
        s.1,
        a.0,
        a.1
    );
}

/// A minimal `.npy` of f32 values (format 1.0, C order).
fn write_npy_f32(path: &Path, shape: &[usize], values: &[f32]) {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    // Magic (6) + version (2) + length (2) + header, padded to 64 bytes with a final \n.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// A rank that never starts (its process exits before it joins: its file of a per-rank input
/// is missing), `XTHUNK_KILL_REPEATS` times (a different rank each): the launcher publishes
/// the cause when that process ends, so every other rank, waiting at the start barrier, exits
/// 1 within the lease TTL + 3 s (not the start timeout) naming it; the launcher's last line
/// names it; no process, segment or key of the job is left.
#[test]
fn a_rank_that_never_starts_is_named_by_every_other_rank_at_once_and_leaves_nothing() {
    let Some((etcd, bin)) =
        setup("a_rank_that_never_starts_is_named_by_every_other_rank_at_once_and_leaves_nothing")
    else {
        return;
    };
    let scratch = Scratch::new("never-start");
    let dp_step = repo().join("examples/dp_step.txtpb");
    let limit = TTL + Duration::from_secs(3);
    let mut outs = vec![];
    for i in 0..kill_repeats() {
        let victim = [3usize, 0, 2, 1][i % 4];
        let dir = scratch.0.join(i.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        for r in (0..WORLD).filter(|r| *r != victim) {
            let x: Vec<f32> = (0..32 * 64)
                .map(|k| (k % 7) as f32 * 0.25 - r as f32)
                .collect();
            write_npy_f32(&dir.join(format!("x{r}.npy")), &[32, 64], &x);
        }
        let input = format!("x={}/x{{rank}}.npy", dir.display());
        let job = job_id("never-start");
        // A start timeout far longer than the limit: the ranks must not wait for it.
        let mut launch = Launch::start_with(
            &bin,
            &etcd,
            &job,
            &["--grace", "30", "--start-timeout", "60"],
            &dp_step,
            &["--input", &input, "--iterations", "100000000"],
        );
        // The job ends within milliseconds: the launcher's exit (it reaps its ranks first) is
        // when the last rank had exited.
        let (status, ended) = launch.wait(Duration::from_secs(60));
        let text = launch.text();
        let what = format!("repeat {i}: rank {victim} never starts");
        assert_eq!(status.code(), Some(1), "{what}\n{text}");
        let missing = format!("{}/x{victim}.npy", dir.display());
        let own = launch.rank_lines(victim);
        let Some((_, fault)) = own
            .iter()
            .find(|(l, _)| l.starts_with("error:") && l.contains(&missing))
        else {
            panic!("{what}: it does not name its missing file:\n{text}");
        };
        let fault = *fault;
        let mut slowest = Duration::ZERO;
        for r in (0..WORLD).filter(|r| *r != victim) {
            let lines = launch.rank_lines(r);
            let Some((line, at)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("{what}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.contains(&format!("rank {victim} failed: its process ended")),
                "{what}: rank {r} does not name rank {victim}: {line}\n{text}"
            );
            let took = at.saturating_duration_since(fault);
            assert!(took < limit, "{what}: rank {r} took {took:?}: {line}");
            slowest = slowest.max(took);
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "{what}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        let last_out = ended.saturating_duration_since(fault);
        assert!(
            last_out < limit,
            "{what}: the last rank exited after {last_out:?}\n{text}"
        );
        outs.push(last_out);
        eprintln!(
            "{what}: every other rank named it within {slowest:.2?}, the job ended after \
             {last_out:.2?}"
        );
        for (r, pid) in launch.pids() {
            assert!(exited(pid), "{what}: rank {r} (pid {pid}) is still there");
        }
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ")
                && last.contains(&format!("rank {victim} failed: its process ended")),
            "{what}: the launcher's last line does not name rank {victim}: {last}\n{text}"
        );
        assert_nothing_left(&etcd, &job, Duration::ZERO);
    }
    let (min, max) = span(&outs);
    eprintln!(
        "a rank that never starts (etcd, {} repeats): from its error to the launcher's exit \
         (every rank reaped) {min:.2?}..{max:.2?}",
        outs.len()
    );
}

/// Ranks started by hand (no launcher, no claim), rank 2 never starts, and rank 0's start
/// timeout (2 s) is far shorter than rank 1's (30 s): rank 0 names rank 2, publishes that
/// cause and leaves (its lease revoked); rank 1 then reports the published cause, rank 2
/// never started, not rank 0's departure, at once. The cause outlives its publisher on a
/// lease of its own, and expires a few TTLs later: nothing of the job is left.
#[test]
fn a_survivor_reports_the_published_cause_not_the_rank_that_left_first() {
    let Some((etcd, bin)) =
        setup("a_survivor_reports_the_published_cause_not_the_rank_that_left_first")
    else {
        return;
    };
    let job = job_id("cause");
    let started = Instant::now();
    let ranks: Vec<Child> = ["2", "30"]
        .iter()
        .enumerate()
        .map(|(r, start)| {
            Command::new(&bin)
                .args(["run", "--backend", "host"])
                .arg(repo().join("examples/dp_step.txtpb"))
                .env("XTHUNK_RANK", r.to_string())
                .env("XTHUNK_WORLD_SIZE", "3")
                .env("XTHUNK_JOB_ID", &job)
                .env("XTHUNK_COORDINATOR", etcd.url())
                .env("XTHUNK_LEASE_TTL", TTL.as_secs().to_string())
                .env("XTHUNK_START_TIMEOUT", start)
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<(Output, Duration)> = ranks
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            (o, started.elapsed())
        })
        .collect();
    for (r, (o, _)) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {r}: {err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_else(|| panic!("rank {r} printed no error: {err}"));
        assert!(
            line.contains("rank 2 never started") && line.contains("within 2s"),
            "rank {r} does not name rank 2: {line}"
        );
        // The root cause comes first; the departure it aborts for, if named, after it.
        let (root, left) = (
            line.find("rank 2 never started"),
            line.find("rank 0 failed"),
        );
        assert!(
            left.is_none_or(|l| root.is_some_and(|c| c < l)),
            "rank {r} blames rank 0: {line}"
        );
    }
    let rank1 = outs[1].1;
    assert!(
        rank1 < Duration::from_secs(2) + TTL + Duration::from_secs(3),
        "rank 1 waited {rank1:?}"
    );
    // The cause's own lease: 4 TTLs after it was published.
    let cause_ttl = TTL * 4;
    let start = Instant::now();
    while !job_keys(&[etcd.endpoint()], &job).unwrap().is_empty() {
        assert!(
            start.elapsed() < cause_ttl + Duration::from_secs(3),
            "keys left: {:?}",
            job_keys(&[etcd.endpoint()], &job)
        );
        thread::sleep(Duration::from_millis(200));
    }
}
