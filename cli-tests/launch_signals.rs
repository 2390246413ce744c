//! `xthunk launch` stopped by a signal, as a scheduler's cancel (SIGTERM) or a Ctrl-C (SIGINT)
//! stops it: the ranks are told (each prints that it stops and exits 128 + the signal) and
//! are gone within the grace period, the launcher prints exactly one line of its own
//! (`xthunk launch: job J ended by SIGTERM: …`) and exits 143 (SIGINT: 130), its socket
//! folder is gone, no segment (nor, with etcd, key) of the job is left, and the job id can be
//! launched again at once; SIGHUP reaches the ranks as SIGTERM and exits 129. A rank that
//! cannot stop (SIGSTOP) is killed after the grace, or at once on a second signal. A rank sent
//! SIGTERM by someone else stops the same way and is the job's root cause.
//!
//! Each test binds its own ranks and a private `TMPDIR` (where the launcher makes its socket
//! folder); the etcd test is skipped, with a printed reason, where etcd is not installed
//! (unless `XTHUNK_REQUIRE_ETCD=1`) and exists only with the `etcd` feature.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "common/launch.rs"]
mod launch;

use launch::Launch;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use xthunk::core::host::job_segments;

const BIN: &str = env!("CARGO_BIN_EXE_xthunk");
const WORLD: usize = 2;
/// The grace of the tests (`--grace`; the lease TTL is 1 s).
const GRACE: Duration = Duration::from_secs(4);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn job_id(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "sig-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A private temporary directory (the launcher's `TMPDIR`), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(job_id(name));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `xthunk launch -n 2 --job-id JOB --lease-ttl 1 --grace 4 EXTRA -- run --backend host
/// RUN_ARGS examples/PROGRAM.txtpb` with `TMPDIR` set to `tmp`.
fn launch_cmd(tmp: &Path, job: &str, extra: &[&str], run_args: &[&str], program: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["launch", "-n", &WORLD.to_string(), "--job-id", job])
        .args(["--lease-ttl", "1", "--grace", &GRACE.as_secs().to_string()])
        .args(extra)
        .args(["--", "run", "--backend", "host"])
        .args(run_args)
        .arg(repo().join(format!("examples/{program}.txtpb")))
        .env("TMPDIR", tmp)
        .env_remove("RUST_LOG")
        .env_remove("XTHUNK_LEASE_TTL")
        .env_remove("XTHUNK_START_TIMEOUT")
        .env_remove("XTHUNK_COLLECTIVE_TIMEOUT")
        .current_dir(repo());
    cmd
}

/// A long job, once every rank has started.
fn start_long(tmp: &Path, job: &str, extra: &[&str]) -> (Launch, BTreeMap<usize, u32>) {
    let mut launch = Launch::spawn(launch_cmd(
        tmp,
        job,
        extra,
        &["--iterations", "100000000"],
        "dp_step",
    ));
    launch.wait_for(" started", WORLD, Duration::from_secs(60));
    let (pids, _) = launch.pids();
    assert_eq!(pids.len(), WORLD, "{}", launch.text());
    (launch, pids)
}

fn kill(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// Whether process `pid` has exited and been reaped (`/proc/PID` gone), or is a zombie.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

/// The launcher's own lines (those not copied from a rank).
fn own_lines(launch: &Launch) -> Vec<String> {
    launch
        .seen
        .iter()
        .map(|(l, _)| l.clone())
        .filter(|l| !l.starts_with("[rank "))
        .collect()
}

/// The id is free again: a short job of the same id runs at once and exits 0.
fn relaunch_at_once(tmp: &Path, job: &str, extra: &[&str]) {
    let o = launch_cmd(tmp, job, extra, &[], "dp_step")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the id {job} cannot be launched again: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Stops a running job with `signal`, checks everything the module promises, and returns
/// how long the launcher took to exit.
fn stop_with(signal: &str, name: &str, code: i32, extra: &[&str], tmp: &Scratch) -> Duration {
    // What the ranks get: SIGINT stays SIGINT, the others become SIGTERM.
    let sent = if name == "SIGINT" {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    let job = job_id(name);
    let (mut launch, pids) = start_long(&tmp.0, &job, extra);
    let folders = tmp.entries();
    if extra.is_empty() {
        assert!(
            folders.iter().any(|f| f.starts_with("xthunk-job-")),
            "no socket folder in {}: {folders:?}",
            tmp.0.display()
        );
    }
    kill(signal, launch.child.id());
    let hit = Instant::now();
    let (status, exited) = launch.wait(GRACE + Duration::from_secs(10));
    let took = exited - hit;
    let text = launch.text();
    assert_eq!(status.code(), Some(code), "{text}");
    assert!(took < GRACE, "the launcher took {took:?}:\n{text}");
    let own = own_lines(&launch);
    assert_eq!(own.len(), 1, "not one line of the launcher's own:\n{text}");
    assert!(
        own[0].starts_with(&format!(
            "xthunk launch: job {job} ended by {name}: ranks 0-1 sent {sent}, all exited"
        )) && own[0].ends_with("all exited within the grace period (4s)"),
        "{text}"
    );
    for (r, pid) in &pids {
        assert!(gone(*pid), "rank {r} (pid {pid}) is still there:\n{text}");
        let stopping = format!("[rank {r}] xthunk: job {job}: rank {r} stopping: {sent} received");
        assert!(
            text.contains(&stopping),
            "rank {r} did not say it stops:\n{text}"
        );
    }
    assert!(
        !text.contains("panicked"),
        "a rank panicked on {name}:\n{text}"
    );
    let left = tmp.entries();
    assert!(left.is_empty(), "left in {}: {left:?}", tmp.0.display());
    let segs = job_segments(&job);
    assert!(segs.is_empty(), "segments {segs:?} left:\n{text}");
    relaunch_at_once(&tmp.0, &job, extra);
    took
}

#[test]
fn sigterm_stops_the_ranks_within_the_grace_and_leaves_nothing() {
    let tmp = Scratch::new("term");
    let took = stop_with("-TERM", "SIGTERM", 143, &[], &tmp);
    eprintln!("SIGTERM: the launcher exited {took:.2?} after the signal");
}

#[test]
fn sigint_stops_the_ranks_within_the_grace_and_leaves_nothing() {
    let tmp = Scratch::new("int");
    let took = stop_with("-INT", "SIGINT", 130, &[], &tmp);
    eprintln!("SIGINT: the launcher exited {took:.2?} after the signal");
}

#[test]
fn sighup_stops_the_ranks_with_sigterm_and_exits_129() {
    let tmp = Scratch::new("hup");
    let took = stop_with("-HUP", "SIGHUP", 129, &[], &tmp);
    eprintln!("SIGHUP: the launcher exited {took:.2?} after the signal");
}

/// A rank sent SIGTERM by someone else (not its launcher) stops the same way, and the job
/// fails with that stop as its root cause (the launcher itself got no signal: exit 1).
#[test]
fn a_rank_stopped_by_someone_else_is_the_job_s_root_cause() {
    let tmp = Scratch::new("one");
    let job = job_id("one");
    let (mut launch, pids) = start_long(&tmp.0, &job, &[]);
    kill("-TERM", pids[&1]);
    let (status, _) = launch.wait(GRACE + Duration::from_secs(10));
    let text = launch.text();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "[rank 1] xthunk: job {job}: rank 1 stopping: SIGTERM received"
        )),
        "{text}"
    );
    assert!(
        text.contains("xthunk launch: rank 1: exit status: 143"),
        "{text}"
    );
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with(&format!(
            "error: job {job}: rank 1 stopped: SIGTERM received"
        )),
        "the launcher's last line is not the stop: {last}\n{text}"
    );
    assert!(!text.contains("panicked"), "{text}");
    for (r, pid) in &pids {
        assert!(gone(*pid), "rank {r} (pid {pid}) is still there:\n{text}");
    }
    assert!(tmp.entries().is_empty(), "{:?}", tmp.entries());
}

/// A rank that cannot act on the signal (stopped with SIGSTOP) is killed when the grace ends,
/// or at once when a second signal comes.
#[test]
fn a_rank_that_does_not_stop_is_killed_after_the_grace_or_at_once_on_a_second_signal() {
    let tmp = Scratch::new("stuck");
    for second in [false, true] {
        let job = job_id("stuck");
        let (mut launch, pids) = start_long(&tmp.0, &job, &[]);
        kill("-STOP", pids[&1]);
        kill("-TERM", launch.child.id());
        let hit = Instant::now();
        if second {
            // Once rank 0 has stopped and exited (the launcher forwarded the first signal).
            launch.wait_for("rank 0 stopping", 1, Duration::from_secs(5));
            while !gone(pids[&0]) {
                assert!(
                    hit.elapsed() < GRACE,
                    "rank 0 did not exit:\n{}",
                    launch.text()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            kill("-INT", launch.child.id());
        }
        let (status, exited) = launch.wait(GRACE + Duration::from_secs(10));
        let took = exited - hit;
        let text = launch.text();
        assert_eq!(status.code(), Some(143), "{text}");
        let own = own_lines(&launch);
        assert_eq!(own.len(), 1, "{text}");
        let (how, range) = if second {
            (
                "rank 1 killed at once on a second SIGINT",
                Duration::ZERO..GRACE,
            )
        } else {
            (
                "rank 1 killed after the grace period (4s)",
                GRACE..GRACE + Duration::from_secs(3),
            )
        };
        assert!(own[0].ends_with(how), "{text}");
        assert!(range.contains(&took), "took {took:?}, not in {range:?}");
        for (r, pid) in &pids {
            assert!(gone(*pid), "rank {r} (pid {pid}) is still there:\n{text}");
        }
        assert!(tmp.entries().is_empty(), "{:?}", tmp.entries());
        assert!(job_segments(&job).is_empty());
        relaunch_at_once(&tmp.0, &job, &[]);
    }
}

/// With etcd: no key of the job is left after SIGTERM, and the id is free at once (the
/// launcher removed its claim rather than leaving it to expire).
#[cfg(feature = "etcd")]
#[test]
fn with_etcd_sigterm_leaves_no_key_and_the_id_is_free_at_once() {
    let test = "with_etcd_sigterm_leaves_no_key_and_the_id_is_free_at_once";
    let Some(etcd) = xthunk_etcd::server::EtcdServer::start_or_skip(test).unwrap() else {
        return;
    };
    let tmp = Scratch::new("etcd");
    let url = etcd.url();
    let job = job_id("etcd");
    let extra = ["--coordinator", url.as_str()];
    let (mut launch, pids) = start_long(&tmp.0, &job, &extra);
    kill("-TERM", launch.child.id());
    let hit = Instant::now();
    let (status, exited) = launch.wait(GRACE + Duration::from_secs(10));
    let text = launch.text();
    assert_eq!(status.code(), Some(143), "{text}");
    assert!(exited - hit < GRACE, "took {:?}:\n{text}", exited - hit);
    assert_eq!(own_lines(&launch).len(), 1, "{text}");
    for (r, pid) in &pids {
        assert!(gone(*pid), "rank {r} (pid {pid}) is still there:\n{text}");
    }
    let keys = xthunk_etcd::job_keys(&[etcd.endpoint()], &job).unwrap();
    assert!(keys.is_empty(), "etcd keys left: {keys:?}\n{text}");
    relaunch_at_once(&tmp.0, &job, &extra);
}
