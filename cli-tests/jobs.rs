//! Jobs of several `xthunk` processes on one machine with no etcd: `xthunk launch` serves the
//! embedded coordinator to its ranks.
//!
//! - four processes compute exactly (byte for byte) what `run --devices 4` computes;
//! - usage errors (an unknown coordinator, `local` for several processes, a grace shorter
//!   than the lease TTL) exit 2 before any rank starts;
//! - a rank killed (SIGKILL) mid-run or stopped (SIGSTOP), `XTHUNK_KILL_REPEATS` times each
//!   (default 3; CI: 10), makes every survivor exit 1 within the lease TTL + 3 s naming it,
//!   the launcher names it as the cause, and nothing is left (process, segment, socket
//!   folder); so does a launched rank that never starts (its process ends before it joins);
//! - ranks whose peer never starts fail at the start timeout naming it, after a warning (one
//!   with a longer start timeout reports the cause the first one published);
//! - `launch --collective-timeout` is every rank's collective timeout;
//! - a launched rank honours `run --no-temp-plan` and prints `run`'s temp-memory line;
//! - a rank without a reachable coordinator says what to start;
//! - ranks read per-rank inputs (`--input x=DIR/x{rank}.npy`), and one whose file is
//!   missing names it and fails the job;
//! - a stuck-but-alive rank is named as stuck, with its position, in the timeout message.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/launch.rs"]
mod launch;
mod shards;
mod stuck;

use launch::Launch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use xthunk::core::distributed::EmbeddedServer;
use xthunk::core::host::job_segments;

const BIN: &str = env!("CARGO_BIN_EXE_xthunk");
/// The lease TTL of the fault tests.
const TTL: Duration = Duration::from_secs(2);
const WORLD: usize = 4;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example(name: &str) -> PathBuf {
    repo().join(format!("examples/{name}.txtpb"))
}

fn job_id(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "jobs-{name}-{}-{}",
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
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts `xthunk launch -n WORLD LAUNCH_ARGS -- run --backend host RUN_ARGS PROGRAM`.
fn start_launch(launch_args: &[&str], run_args: &[&str], program: &Path) -> Launch {
    let mut cmd = Command::new(BIN);
    cmd.args(["launch", "-n", &WORLD.to_string()])
        .args(launch_args)
        .args(["--", "run", "--backend", "host"])
        .args(run_args)
        .arg(program)
        .env_remove("RUST_LOG")
        .env_remove("XTHUNK_LEASE_TTL")
        .env_remove("XTHUNK_START_TIMEOUT")
        .env_remove("XTHUNK_COLLECTIVE_TIMEOUT")
        .current_dir(repo());
    Launch::spawn(cmd)
}

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

/// The embedded coordinators' socket folders of this launch (named in the ranks' lines).
fn socket_dirs(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split_once("coordinator unix://"))
        .filter_map(|(_, rest)| rest.split(',').next())
        .filter_map(|sock| Path::new(sock).parent().map(Path::to_path_buf))
        .collect()
}

fn assert_nothing_left(text: &str, job: &str, pids: &BTreeMap<usize, u32>) {
    let segs = job_segments(job);
    assert!(segs.is_empty(), "job {job} left segments {segs:?}:\n{text}");
    for (r, pid) in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "rank {r} (pid {pid}) is still there:\n{text}"
        );
    }
    let dirs = socket_dirs(text);
    assert!(!dirs.is_empty(), "{text}");
    for d in dirs {
        assert!(!d.exists(), "{} was left behind", d.display());
    }
}

#[test]
fn four_processes_without_etcd_compute_what_one_process_computes() {
    let scratch = Scratch::new("outputs");
    let (spmd_dir, job_dir) = (scratch.0.join("spmd"), scratch.0.join("job"));
    for program in ["dp_step", "permute_ring", "exchange"] {
        let (spmd_dir, job_dir) = (spmd_dir.join(program), job_dir.join(program));
        let spmd: Output = Command::new(BIN)
            .args(["run", "--backend", "host", "--devices", "4", "--seed", "7"])
            .arg("--output-dir")
            .arg(&spmd_dir)
            .arg(example(program))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(spmd.status.success(), "{spmd:?}");
        let job = job_id(program);
        let mut launch = start_launch(
            &["--job-id", &job],
            &["--seed", "7", "--output-dir", job_dir.to_str().unwrap()],
            &example(program),
        );
        let (status, _) = launch.wait(Duration::from_secs(120));
        let text = launch.text();
        assert!(status.success(), "{text}");
        assert!(text.contains("embedded coordinator unix://"), "{text}");
        let (want, got) = (files(&spmd_dir), files(&job_dir));
        assert!(!want.is_empty());
        assert_eq!(want, got, "{program}: the files differ\n{text}");
        let want_summaries = summaries(&String::from_utf8_lossy(&spmd.stdout));
        assert_eq!(want_summaries.len(), want.len());
        assert_eq!(want_summaries, summaries(&text));
        let (pids, _) = launch.pids();
        assert_eq!(pids.len(), WORLD);
        assert_nothing_left(&text, &job, &pids);
    }
}

/// A launched rank honours every option of `run` and prints what `run` prints: with
/// `--no-temp-plan` each rank plans no temps and prints the temp-memory line that
/// `run --no-temp-plan` prints.
#[test]
fn launched_ranks_honour_no_temp_plan_and_print_run_s_temp_memory_line() {
    let mlp = example("mlp");
    let run = Command::new(BIN)
        .args(["run", "--backend", "host", "--no-temp-plan"])
        .arg(&mlp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let want: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("temp memory: "))
        .collect();
    assert_eq!(want.len(), 1, "{stdout}");
    assert!(want[0].contains("one buffer per temp"), "{stdout}");
    let job = job_id("no-temp-plan");
    let mut cmd = Command::new(BIN);
    cmd.args(["launch", "-n", "2", "--job-id", &job])
        .args(["--", "run", "--backend", "host", "--no-temp-plan"])
        .arg(&mlp)
        .env_remove("RUST_LOG")
        .env_remove("XTHUNK_LEASE_TTL")
        .env_remove("XTHUNK_START_TIMEOUT")
        .env_remove("XTHUNK_COLLECTIVE_TIMEOUT")
        .current_dir(repo());
    let mut launch = Launch::spawn(cmd);
    let (status, _) = launch.wait(Duration::from_secs(120));
    let text = launch.text();
    assert!(status.success(), "{text}");
    for rank in 0..2 {
        let line = format!("[rank {rank}] {}", want[0]);
        let n = text.lines().filter(|l| *l == line).count();
        assert_eq!(n, 1, "rank {rank} does not print {:?}:\n{text}", want[0]);
    }
}

#[test]
fn usage_errors_exit_2_before_any_rank_starts() {
    for (args, needle) in [
        (&["--coordinator", "local"][..], "--coordinator local"),
        (&["--coordinator", "zk://a:1"][..], "invalid coordinator"),
        (
            &["--grace", "1", "--lease-ttl", "2"][..],
            "shorter than the lease TTL",
        ),
        (&["--lease-ttl", "0"][..], "positive"),
    ] {
        let o = Command::new(BIN)
            .args(["launch", "-n", "2"])
            .args(args)
            .args(["--", "run", "--backend", "host"])
            .arg(example("dp_step"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("[rank"), "{args:?}: a rank started: {err}");
    }
}

fn kill_repeats() -> usize {
    std::env::var("XTHUNK_KILL_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Starts a long job, waits until every rank started (plus `after`), sends `signal` to
/// `victim`, and checks that every survivor exits 1 within the TTL + 3 s naming it (with
/// `why` in the reason), that the launcher names it as the cause, and that nothing is left.
fn fault(victim: usize, signal: &str, after: Duration, why: &[&str]) -> Duration {
    let program = example("dp_step");
    let ttl = TTL.as_secs().to_string();
    let mut launch = start_launch(
        &["--lease-ttl", &ttl],
        &["--iterations", "100000000"],
        &program,
    );
    launch.wait_for("started", WORLD, Duration::from_secs(60));
    let (pids, job) = launch.pids();
    assert_eq!(pids.len(), WORLD, "{}", launch.text());
    thread::sleep(after);
    let kill = Command::new("kill")
        .args([signal, &pids[&victim].to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let hit = Instant::now();
    let limit = TTL + Duration::from_secs(3);
    // The survivors exit within the limit; a stopped victim is killed after the grace.
    let (status, _) = launch.wait(limit + TTL + Duration::from_secs(30));
    let text = launch.text();
    assert_eq!(status.code(), Some(1), "{text}");
    let mut slowest = Duration::ZERO;
    for r in (0..WORLD).filter(|r| *r != victim) {
        let lines = launch.rank_lines(r);
        let Some((line, at)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
            panic!("rank {r} printed no error:\n{text}");
        };
        assert!(
            line.contains(&format!("rank {victim} failed")) && why.iter().any(|w| line.contains(w)),
            "rank {r} does not name rank {victim} ({why:?}): {line}\n{text}"
        );
        let took = at.saturating_duration_since(hit);
        assert!(took < limit, "rank {r} took {took:?}:\n{text}");
        slowest = slowest.max(took);
        assert!(
            text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
            "rank {r} did not exit 1 on its own:\n{text}"
        );
    }
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with("error: job ") && last.contains(&format!("rank {victim} failed")),
        "the launcher's last line does not name rank {victim}: {last}\n{text}"
    );
    assert_nothing_left(&text, &job, &pids);
    slowest
}

#[test]
fn a_killed_rank_fails_every_survivor_promptly_naming_it() {
    let mut latencies = vec![];
    for i in 0..kill_repeats() {
        let victim = [2, 0, 3, 1][i % 4];
        let after = Duration::from_millis([0, 150, 300, 700][i % 4]);
        // The launcher (reaping it) or the coordinator (its socket closing) says it first.
        let why = ["signal: 9", "closed without a clean shutdown"];
        latencies.push(fault(victim, "-KILL", after, &why));
    }
    eprintln!("detection latencies after SIGKILL: {latencies:.2?}");
}

/// Whether process `pid` has exited (gone, or a zombie its launcher has not reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// Watches `pids` on a thread: when each exited (polled every 5 ms, up to `limit`).
fn watch_exits(
    pids: BTreeMap<usize, u32>,
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

/// Min and max of `v`.
fn span(v: &[Duration]) -> (Duration, Duration) {
    let min = v.iter().min().copied().unwrap_or_default();
    let max = v.iter().max().copied().unwrap_or_default();
    (min, max)
}

/// The lease TTL of the repeated SIGSTOP test, and the grace its launcher gives (the least
/// allowed: TTL + 1 s), so that ten repetitions stay short.
const STOP_TTL: Duration = Duration::from_secs(2);
const STOP_GRACE: Duration = Duration::from_secs(3);

/// SIGSTOP of a rank 0 to 700 ms after every rank started, `XTHUNK_KILL_REPEATS` times (a
/// different rank each): every survivor exits 1 on its own within the lease TTL + 3 s naming
/// the stopped rank (its heartbeats stopped), the launcher's last line names it, and nothing
/// of the job is left. In even repetitions the launcher kills the stopped rank after its
/// grace; in odd ones the test continues it (SIGCONT) once the survivors have exited, and it
/// exits non-zero by itself (it hears that the others consider it dead).
#[test]
fn a_stopped_rank_is_named_after_the_lease_ttl_and_leaves_nothing() {
    let (ttl, grace) = (
        STOP_TTL.as_secs_f64().to_string(),
        STOP_GRACE.as_secs_f64().to_string(),
    );
    let limit = STOP_TTL + Duration::from_secs(3);
    let (mut survivors_out, mut all_out) = (vec![], vec![]);
    for i in 0..kill_repeats() {
        let victim = [1usize, 3, 0, 2][i % 4];
        let after = Duration::from_millis([200, 0, 700, 350][i % 4]);
        let job = job_id("stop");
        let mut launch = start_launch(
            &["--job-id", &job, "--lease-ttl", &ttl, "--grace", &grace],
            &["--iterations", "100000000"],
            &example("dp_step"),
        );
        launch.wait_for("started", WORLD, Duration::from_secs(60));
        let (pids, _) = launch.pids();
        assert_eq!(pids.len(), WORLD, "{}", launch.text());
        thread::sleep(after);
        let stop = Command::new("kill")
            .args(["-STOP", &pids[&victim].to_string()])
            .status()
            .unwrap();
        assert!(stop.success());
        let hit = Instant::now();
        let survivors: BTreeMap<usize, u32> = pids
            .iter()
            .filter(|(r, _)| **r != victim)
            .map(|(r, p)| (*r, *p))
            .collect();
        let mut watch = Some(watch_exits(
            survivors.clone(),
            limit + Duration::from_secs(10),
        ));
        let victim_watch = watch_exits(
            BTreeMap::from([(victim, pids[&victim])]),
            limit + STOP_GRACE + Duration::from_secs(20),
        );
        let resumed = i % 2 == 1;
        if resumed {
            let ends = watch.take().unwrap().join().unwrap();
            assert_eq!(ends.len(), WORLD - 1, "repeat {i}: survivors still run");
            let cont = Command::new("kill")
                .args(["-CONT", &pids[&victim].to_string()])
                .status()
                .unwrap();
            assert!(cont.success());
            survivors_out.push(ends.values().max().unwrap().saturating_duration_since(hit));
        }
        let (status, _) = launch.wait(limit + STOP_GRACE + Duration::from_secs(30));
        let text = launch.text();
        let what = format!("repeat {i}: rank {victim} stopped {after:?} after the start");
        assert_eq!(status.code(), Some(1), "{what}\n{text}");
        if !resumed {
            let ends = watch.take().unwrap().join().unwrap();
            assert_eq!(ends.len(), WORLD - 1, "{what}: survivors still ran\n{text}");
            survivors_out.push(ends.values().max().unwrap().saturating_duration_since(hit));
        }
        let victim_end = victim_watch.join().unwrap();
        let last_out = *survivors_out.last().unwrap();
        assert!(
            last_out < limit,
            "{what}: the last survivor exited after {last_out:?}\n{text}"
        );
        if let Some(end) = victim_end.get(&victim) {
            all_out.push(end.saturating_duration_since(hit).max(last_out));
        }
        for r in survivors.keys() {
            let lines = launch.rank_lines(*r);
            let Some((line, at)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("{what}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.contains(&format!("rank {victim} failed")) && line.contains("no heartbeat"),
                "{what}: rank {r} does not name rank {victim}: {line}\n{text}"
            );
            assert!(
                at.saturating_duration_since(hit) < limit,
                "{what}: rank {r}: {line}"
            );
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "{what}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        if resumed {
            // Continued, it learnt that the others consider it dead, and exited by itself.
            assert!(
                text.contains(&format!("xthunk launch: rank {victim}: exit status: 1")),
                "{what}: the continued rank did not exit 1 by itself:\n{text}"
            );
        } else {
            assert!(
                text.contains(&format!("xthunk launch: rank {victim}: signal: 9")),
                "{what}: the stopped rank was not killed after the grace:\n{text}"
            );
        }
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ")
                && last.contains(&format!("rank {victim} failed"))
                && last.contains("no heartbeat"),
            "{what}: the launcher's last line does not name rank {victim}: {last}\n{text}"
        );
        assert_nothing_left(&text, &job, &pids);
        let left = processes_of_job(&job);
        assert!(left.is_empty(), "{what}: processes {left:?} left");
    }
    let (s, a) = (span(&survivors_out), span(&all_out));
    eprintln!(
        "SIGSTOP (embedded, TTL {STOP_TTL:?}, grace {STOP_GRACE:?}, {} repeats): fault to the \
         last survivor's exit {:.2?}..{:.2?}; to the last rank's exit (the stopped one killed \
         after the grace or continued) {:.2?}..{:.2?}",
        survivors_out.len(),
        s.0,
        s.1,
        a.0,
        a.1
    );
}

fn rank(server: &EmbeddedServer, job: &str, rank: usize, world: usize, start: &str) -> Child {
    Command::new(BIN)
        .args(["run", "--backend", "host"])
        .arg(example("dp_step"))
        .env("XTHUNK_RANK", rank.to_string())
        .env("XTHUNK_WORLD_SIZE", world.to_string())
        .env("XTHUNK_JOB_ID", job)
        .env("XTHUNK_COORDINATOR", server.spec().to_string())
        .env("XTHUNK_START_TIMEOUT", start)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn ranks_whose_peer_never_starts_warn_then_name_it_at_the_start_timeout() {
    let server = EmbeddedServer::start().unwrap();
    let job = job_id("never");
    let started = Instant::now();
    // Rank 1 would wait far longer: it learns the cause rank 0 found (and published) when
    // rank 0 leaves, and names rank 2, not rank 0's departure.
    let ranks: Vec<Child> = (0..2)
        .map(|r| rank(&server, &job, r, 3, ["6", "30"][r]))
        .collect();
    for (r, child) in ranks.into_iter().enumerate() {
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {r}: {err}");
        assert!(
            err.contains("rank 2 never started") && err.contains("within 6s"),
            "rank {r}: {err}"
        );
        if r == 0 {
            assert!(err.contains("waiting for rank 2 to start"), "{err}");
        }
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(6 + 5), "{took:?}");
}

#[test]
fn a_rank_without_its_coordinator_says_what_to_start() {
    let server = EmbeddedServer::start().unwrap();
    let spec = server.spec();
    drop(server);
    let o = Command::new(BIN)
        .args(["run", "--backend", "host"])
        .arg(example("dp_step"))
        .env("XTHUNK_RANK", "0")
        .env("XTHUNK_WORLD_SIZE", "2")
        .env("XTHUNK_JOB_ID", "orphan")
        .env("XTHUNK_COORDINATOR", spec.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("xthunk launch -n N"), "{err}");
    assert!(err.contains("XTHUNK_COORDINATOR=etcd://"), "{err}");
}

/// Launched ranks read their own shard from `--input x=DIR/x{rank}.npy`: the all-reduced
/// gradient and the weights equal an f64 reference over all the shards.
#[test]
fn launched_ranks_read_their_own_file_from_a_pattern() {
    let scratch = Scratch::new("shards");
    let data = shards::Shards::new(31);
    data.write(&scratch.0, &[0, 1, 2, 3]);
    let out = scratch.0.join("out");
    let mut run_args = shards::Shards::inputs(&scratch.0);
    run_args.extend(["--output-dir".to_string(), out.display().to_string()]);
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let job = job_id("shards");
    let mut launch = start_launch(&["--job-id", &job], &run_args, &example("dp_step"));
    let (status, _) = launch.wait(Duration::from_secs(120));
    let text = launch.text();
    assert!(status.success(), "{text}");
    data.check(&out);
}

/// A rank whose file of the pattern is missing fails naming the rank and the path; the job
/// fails at once (every rank exits non-zero), the launcher naming that rank as the cause.
#[test]
fn a_launched_rank_without_its_file_names_it_and_fails_the_job() {
    let scratch = Scratch::new("no-shard");
    let data = shards::Shards::new(32);
    data.write(&scratch.0, &[0, 1, 2]);
    let run_args = shards::Shards::inputs(&scratch.0);
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let job = job_id("no-shard");
    let start = Instant::now();
    let mut launch = start_launch(&["--job-id", &job], &run_args, &example("dp_step"));
    let (status, _) = launch.wait(Duration::from_secs(60));
    let text = launch.text();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(start.elapsed() < TTL + Duration::from_secs(10), "{text}");
    let missing = format!("{}/x3.npy", scratch.0.display());
    let own = launch.rank_lines(3);
    assert!(
        own.iter()
            .any(|(l, _)| l.starts_with("error:") && l.contains("rank 3") && l.contains(&missing)),
        "{text}"
    );
    for r in 0..WORLD {
        assert!(
            text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
            "rank {r}:\n{text}"
        );
    }
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: job ") && last.contains("rank 3 failed"),
        "{last}\n{text}"
    );
}

/// A rank that never starts (its process exits before it joins: its file of a per-rank
/// input is missing), `XTHUNK_KILL_REPEATS` times (a different rank each): every other rank
/// exits 1 within the lease TTL + 3 s of the fault (the missing rank's own error line) naming
/// it, the launcher's last line names it, and nothing of the job is left.
#[test]
fn a_rank_that_never_starts_fails_every_other_rank_naming_it_and_leaves_nothing() {
    let scratch = Scratch::new("never-start");
    let data = shards::Shards::new(33);
    let limit = TTL + Duration::from_secs(3);
    let ttl = TTL.as_secs_f64().to_string();
    let mut outs = vec![];
    for i in 0..kill_repeats() {
        let victim = [3usize, 0, 2, 1][i % 4];
        let dir = scratch.0.join(format!("{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let present: Vec<usize> = (0..WORLD).filter(|r| *r != victim).collect();
        data.write(&dir, &present);
        let run_args = shards::Shards::inputs(&dir);
        let mut run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
        run_args.extend(["--iterations", "100000000"]);
        let job = job_id("never-start");
        let mut launch = start_launch(
            &["--job-id", &job, "--lease-ttl", &ttl],
            &run_args,
            &example("dp_step"),
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
        let last_out = ended.saturating_duration_since(fault);
        assert!(
            last_out < limit,
            "{what}: the last rank exited after {last_out:?}\n{text}"
        );
        outs.push(last_out);
        for r in present {
            let lines = launch.rank_lines(r);
            let Some((line, _)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("{what}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.contains(&format!("rank {victim} failed"))
                    && line.contains("before it joined the job"),
                "{what}: rank {r} does not name rank {victim}: {line}\n{text}"
            );
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "{what}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ") && last.contains(&format!("rank {victim} failed")),
            "{what}: the launcher's last line does not name rank {victim}: {last}\n{text}"
        );
        let segs = job_segments(&job);
        assert!(segs.is_empty(), "{what}: segments {segs:?} left:\n{text}");
        let left = processes_of_job(&job);
        assert!(left.is_empty(), "{what}: processes {left:?} left:\n{text}");
        for (r, pid) in launch.pids().0 {
            assert!(exited(pid), "{what}: rank {r} (pid {pid}) is still there");
        }
        // The coordinator's folder went with the launcher.
        let dirs = socket_dirs(&text);
        assert!(
            !dirs.is_empty(),
            "{what}: no rank named its coordinator:\n{text}"
        );
        for d in dirs {
            assert!(!d.exists(), "{what}: {} was left", d.display());
        }
    }
    let (min, max) = span(&outs);
    eprintln!(
        "a rank that never starts (embedded, {} repeats): from its error to the launcher's exit \
         (every rank reaped) {min:.2?}..{max:.2?}",
        outs.len()
    );
}

/// `xthunk launch --collective-timeout` is every rank's collective timeout (a stalled
/// collective fails within it, naming the rank that is late), and a rank's own
/// `run --collective-timeout` still wins over it. `launch --help` shows every timer.
#[test]
fn launch_sets_every_rank_s_collective_timeout() {
    let help = Command::new(BIN)
        .args(["launch", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for option in [
        "--lease-ttl",
        "--start-timeout",
        "--collective-timeout",
        "--grace",
    ] {
        assert!(
            help.contains(option),
            "launch --help does not show {option}:\n{help}"
        );
    }
    let scratch = Scratch::new("collective-timeout");
    let program = stuck::write_stuck_rank(&scratch.0);
    // (launch's option, the ranks' own option, the timeout that must hold)
    for (launch_timeout, own, want) in [("1", None, "1s"), ("30", Some("1.5"), "1.5s")] {
        let job = job_id("collective-timeout");
        let own_args: Vec<&str> = own
            .map(|t| vec!["--collective-timeout", t])
            .unwrap_or_default();
        let started = Instant::now();
        let mut launch = start_launch(
            &["--job-id", &job, "--collective-timeout", launch_timeout],
            &own_args,
            &program,
        );
        let (status, _) = launch.wait(Duration::from_secs(120));
        let took = started.elapsed();
        let text = launch.text();
        assert_eq!(status.code(), Some(1), "{text}");
        let line = text
            .lines()
            .find(|l| l.contains("error:") && l.contains("is stuck"))
            .unwrap_or_else(|| panic!("no error line names a stuck rank:\n{text}"));
        assert!(
            line.contains(&format!("did not arrive within {want}")),
            "launch --collective-timeout {launch_timeout}, run {own:?}: {line}"
        );
        stuck::check_positions(line);
        // Well before rank 3's busy loop (seconds) could end, or a 30 s timeout.
        assert!(took < Duration::from_secs(20), "{took:?}:\n{text}");
    }
}

/// Two launches given the same job id at once on one machine: each serves its own embedded
/// coordinator, so they could never merge, but their ranks would meet in /dev/shm; the id is
/// claimed on the machine, so one runs (outputs those of `run --devices 4`) and the other is
/// refused whole (exit 1, one `error:` line naming the id, no rank started). 10 times.
#[test]
fn two_launches_of_one_job_id_at_once_on_one_machine_run_one() {
    let scratch = Scratch::new("claim");
    let spmd_dir = scratch.0.join("spmd");
    let spmd: Output = Command::new(BIN)
        .args(["run", "--backend", "host", "--devices", "4", "--seed", "5"])
        .arg("--output-dir")
        .arg(&spmd_dir)
        .arg(example("permute_ring"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(spmd.status.success(), "{spmd:?}");
    let want = files(&spmd_dir);
    for i in 0..10 {
        let job = job_id("claim");
        let dirs = [
            scratch.0.join(format!("{i}a")),
            scratch.0.join(format!("{i}b")),
        ];
        let args: Vec<Vec<String>> = dirs
            .iter()
            .map(|d| {
                ["--iterations", "1000", "--seed", "5", "--output-dir"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([d.display().to_string()])
                    .collect()
            })
            .collect();
        let mut launches: Vec<Launch> = args
            .iter()
            .map(|a| {
                let a: Vec<&str> = a.iter().map(String::as_str).collect();
                start_launch(&["--job-id", &job], &a, &example("permute_ring"))
            })
            .collect();
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
            "repeat {i}:\n--- a:\n{}\n--- b:\n{}",
            ends[0].1,
            ends[1].1
        );
        let (winner, loser) = (ran[0], 1 - ran[0]);
        let (status, text) = &ends[loser];
        assert_eq!(status.code(), Some(1), "repeat {i}: {text}");
        assert!(!text.contains("[rank"), "repeat {i}: {text}");
        let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "repeat {i}: {text}");
        assert!(
            errors[0].contains(&format!("job id `{job}` is taken")),
            "repeat {i}: {text}"
        );
        assert!(!dirs[loser].exists(), "repeat {i}");
        assert_eq!(
            files(&dirs[winner]),
            want,
            "repeat {i}:\n{}",
            ends[winner].1
        );
        let (pids, _) = launches[winner].pids();
        assert_nothing_left(&ends[winner].1, &job, &pids);
    }
}

/// Rank 3 is busy (alive, its lease renewed) before the second all-reduce that ranks 0–2 time
/// out in (`--collective-timeout 1`): the timeout message, read from the positions the ranks
/// publish through the coordinator, names rank 3 as stuck after the first all-reduce and the
/// others as waiting in the second; every rank exits 1.
#[test]
fn a_stuck_but_alive_rank_is_named_with_its_position_in_a_launched_job() {
    let scratch = Scratch::new("stuck");
    let program = stuck::write_stuck_rank(&scratch.0);
    let job = job_id("stuck");
    let mut launch = start_launch(
        &["--job-id", &job],
        &["--collective-timeout", "1"],
        &program,
    );
    let (status, _) = launch.wait(Duration::from_secs(120));
    let text = launch.text();
    assert_eq!(status.code(), Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("error:") && l.contains("is stuck"))
        .unwrap_or_else(|| panic!("no error line names a stuck rank:\n{text}"));
    stuck::check_positions(line);
}

/// A few random bits (the std hasher's random keys; no generator crate needed).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// `XTHUNK_VAR=value` entries of a process's environment (empty if it is gone or not ours).
fn environ(pid: u32) -> BTreeMap<String, String> {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return BTreeMap::new();
    };
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            k.starts_with("XTHUNK_")
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// The pids of the processes now running whose environment says they belong to job `job`.
fn processes_of_job(job: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| environ(*pid).get("XTHUNK_JOB_ID").map(String::as_str) == Some(job))
        .collect()
}

/// The ranks of `job` (rank -> pid), once `world` of them run (they are read from /proc as
/// soon as they exist, before they print anything).
fn rank_pids(job: &str, world: usize, limit: Duration) -> BTreeMap<usize, u32> {
    let deadline = Instant::now() + limit;
    loop {
        let pids: BTreeMap<usize, u32> = processes_of_job(job)
            .into_iter()
            .filter_map(|pid| Some((environ(pid).get("XTHUNK_RANK")?.parse().ok()?, pid)))
            .collect();
        if pids.len() == world {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "only ranks {pids:?} of {job} started"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// SIGKILL of a random rank at a random moment from 0 to 1.5 s after the launch (spread over
/// the repetitions, denser early: before the ranks connect, at the start barrier, while they
/// set their cliques up, or mid-run), `XTHUNK_KILL_REPEATS` times: every survivor exits 1 on its own
/// within the lease TTL + 3 s of the kill naming the killed rank, the launcher's last line
/// names it, and nothing of the job is left (no process, `/dev/shm` segment or socket folder).
#[test]
fn a_rank_killed_at_a_random_moment_setup_included_fails_the_job_and_leaves_nothing() {
    let repeats = kill_repeats();
    let mut seen = vec![];
    for i in 0..repeats {
        let bits = random_u64();
        let victim = (bits % WORLD as u64) as usize;
        // Spread over 0..1.5 s, denser early (connecting, the start barrier and the clique
        // setups take the first few hundred milliseconds): repeat i draws u within its own
        // slice of 0..1, and is killed 1.5 s × u² after the launch.
        let u = (i as f64 + ((bits >> 8) % 1000) as f64 / 1000.0) / repeats as f64;
        let at_ms = 1500.0 * u * u;
        let delay = Duration::from_secs_f64(at_ms / 1000.0);
        let job = job_id("kill-any");
        let ttl = TTL.as_secs().to_string();
        let launched = Instant::now();
        let mut launch = start_launch(
            &["--job-id", &job, "--lease-ttl", &ttl],
            &["--iterations", "100000000"],
            &example("dp_step"),
        );
        let pids = rank_pids(&job, WORLD, Duration::from_secs(30));
        let socket = environ(pids[&victim])
            .get("XTHUNK_COORDINATOR")
            .and_then(|c| c.strip_prefix("unix://").map(PathBuf::from))
            .unwrap_or_else(|| panic!("repeat {i}: rank {victim} has no unix:// coordinator"));
        thread::sleep(delay.saturating_sub(launched.elapsed()));
        let kill = Command::new("kill")
            .args(["-KILL", &pids[&victim].to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let hit = Instant::now();
        let at = hit - launched;
        let limit = TTL + Duration::from_secs(3);
        let (status, _) = launch.wait(limit + Duration::from_secs(30));
        let text = launch.text();
        let what = format!("repeat {i}: rank {victim} killed {at:.2?} after the launch");
        assert_eq!(status.code(), Some(1), "{what}\n{text}");
        let mut slowest = Duration::ZERO;
        for r in (0..WORLD).filter(|r| *r != victim) {
            let lines = launch.rank_lines(r);
            let Some((line, at)) = lines.iter().find(|(l, _)| l.starts_with("error:")) else {
                panic!("{what}: rank {r} printed no error:\n{text}");
            };
            assert!(
                line.contains(&format!("rank {victim} failed")),
                "{what}: rank {r} does not name it: {line}\n{text}"
            );
            let took = at.saturating_duration_since(hit);
            assert!(took < limit, "{what}: rank {r} took {took:?}:\n{text}");
            slowest = slowest.max(took);
            assert!(
                text.contains(&format!("xthunk launch: rank {r}: exit status: 1")),
                "{what}: rank {r} did not exit 1 on its own:\n{text}"
            );
        }
        let last = text.lines().last().unwrap_or("");
        assert!(
            last.starts_with("error: job ") && last.contains(&format!("rank {victim} failed")),
            "{what}: the launcher's last line does not name it: {last}\n{text}"
        );
        let segs = job_segments(&job);
        assert!(segs.is_empty(), "{what}: segments {segs:?} left:\n{text}");
        let left = processes_of_job(&job);
        assert!(left.is_empty(), "{what}: processes {left:?} left:\n{text}");
        for (r, pid) in &pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "{what}: rank {r} (pid {pid}) is still there"
            );
        }
        let dir = socket.parent().unwrap();
        assert!(!dir.exists(), "{what}: {} was left", dir.display());
        // Where the victim was: had it joined (its first line), started (the start barrier
        // passed; its cliques are set up at its first collective)?
        let victim_lines = launch.rank_lines(victim);
        let phase = if victim_lines
            .iter()
            .any(|(l, t)| l.ends_with(" started") && *t < hit)
        {
            "after the start barrier"
        } else if victim_lines
            .iter()
            .any(|(l, t)| l.contains("(pid ") && *t < hit)
        {
            "after joining"
        } else {
            "before joining"
        };
        seen.push((victim, at, phase, slowest));
    }
    eprintln!("(victim, killed after launch, where, slowest survivor): {seen:.2?}");
}

/// The launcher removes the job's `/dev/shm` segments when it exits, whatever its ranks did:
/// here one is there before the launch (as a rank killed during a clique's setup leaves it)
/// and the ranks fail before any clique exists.
#[cfg(target_os = "linux")]
#[test]
fn the_launcher_sweeps_the_job_s_segments_when_it_exits() {
    let job = job_id("sweep");
    let left = format!(
        "/dev/shm/{}00000000deadbeef.0",
        xthunk::core::host::job_segment_prefix(&job)
    );
    std::fs::write(&left, b"left by a killed rank").unwrap();
    assert_eq!(job_segments(&job).len(), 1);
    let o = Command::new(BIN)
        .args([
            "launch",
            "-n",
            "2",
            "--job-id",
            &job,
            "--",
            "run",
            "--backend",
            "host",
        ])
        .arg(repo().join("examples/no-such-program.txtpb"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!Path::new(&left).exists(), "{left} was left:\n{err}");
    assert!(job_segments(&job).is_empty());
}

/// The embedded coordinator killed (it is the launcher: SIGKILL): its ranks die with it (the
/// kernel's parent-death signal) within the TTL + 3 s, and the next launch by this user sweeps
/// the socket folder the killed launcher could not remove.
#[test]
fn a_killed_launcher_takes_its_ranks_and_the_next_launch_sweeps_its_folder() {
    let mut launch = start_launch(
        &["--lease-ttl", &TTL.as_secs().to_string()],
        &["--iterations", "100000000"],
        &example("dp_step"),
    );
    launch.wait_for("started", WORLD, Duration::from_secs(60));
    let (pids, _) = launch.pids();
    assert_eq!(pids.len(), WORLD, "{}", launch.text());
    let text = launch.text();
    let dirs = socket_dirs(&text);
    assert!(!dirs.is_empty(), "{text}");
    let killed = Command::new("kill")
        .args(["-KILL", &launch.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let hit = Instant::now();
    let limit = TTL + Duration::from_secs(3);
    for (r, pid) in &pids {
        while Path::new(&format!("/proc/{pid}")).exists() {
            // A zombie until reaped by init: gone as far as running goes.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.contains(") Z ") {
                break;
            }
            assert!(
                hit.elapsed() < limit,
                "rank {r} (pid {pid}) outlived its launcher"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!(
        "the ranks of a killed launcher were gone after {:.2?}",
        hit.elapsed()
    );
    // Nothing but a sweep removes the folder of a launcher killed with SIGKILL (a launch of a
    // test running meanwhile may already have swept it); any later launch does.
    let o = Command::new(BIN)
        .args(["launch", "-n", "4", "--", "run", "--backend", "host"])
        .arg(example("permute_ring"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    for d in &dirs {
        assert!(!d.exists(), "{} was not swept", d.display());
    }
}
