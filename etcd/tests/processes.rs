//! Ranks as real processes: this test binary re-runs itself as the ranks of a job (the
//! `rank_process` test, which does nothing unless `XTHUNK_TEST_RANK_PROCESS=1`), finds its
//! place from `XTHUNK_*` variables, and meets the others through a real etcd. One rank is
//! killed with SIGKILL mid-run: every survivor must exit non-zero within the lease TTL plus a
//! few seconds, naming the dead rank; no process and no etcd key of the job may be left.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use xthunk_core::distributed::{
    DistributedConfig, DistributedError, Overrides, spawn_failure_handler,
};
use xthunk_etcd::server::EtcdServer;

const CHILD: &str = "XTHUNK_TEST_RANK_PROCESS";
const TTL: Duration = Duration::from_secs(2);
const WORLD: usize = 4;
const VICTIM: usize = 2;

/// The body of one rank (only when started by the test below).
#[test]
fn rank_process() {
    if std::env::var(CHILD).as_deref() != Ok("1") {
        return;
    }
    let config = DistributedConfig::from_process_env(&Overrides::default()).unwrap();
    let coordinator = xthunk_etcd::connect(&config, TTL).unwrap();
    // XLA's behaviour on a missed heartbeat: terminate loudly, whatever the main thread does.
    let _handler = spawn_failure_handler(coordinator.as_ref(), |f| {
        eprintln!("error: (watchdog) {f}");
        std::process::exit(1);
    })
    .unwrap();
    coordinator
        .barrier("start", Duration::from_secs(30))
        .unwrap();
    println!("ready {}", config.rank);
    // "Work": rounds of barriers until a peer dies.
    let result: Result<(), DistributedError> = (|| loop {
        coordinator.barrier("step", Duration::from_secs(60))?;
        thread::sleep(Duration::from_millis(20));
    })();
    let e = result.unwrap_err();
    eprintln!("error: {e}");
    drop(coordinator);
    std::process::exit(1);
}

/// Kills every rank still running when dropped (a failing test leaves no process).
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn one_job(etcd: &EtcdServer, job: &str) {
    let exe = std::env::current_exe().unwrap();
    let (tx, rx) = mpsc::channel::<(usize, String)>();
    let mut ranks = Ranks(Vec::new());
    for rank in 0..WORLD {
        let mut child = Command::new(&exe)
            .args(["--exact", "rank_process", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("XTHUNK_RANK", rank.to_string())
            .env("XTHUNK_WORLD_SIZE", WORLD.to_string())
            .env("XTHUNK_COORDINATOR", etcd.url())
            .env("XTHUNK_JOB_ID", job)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send((rank, line));
                }
            });
        }
        ranks.0.push(child);
    }
    drop(tx);
    let mut lines: Vec<Vec<String>> = vec![Vec::new(); WORLD];
    let mut ready = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready < WORLD {
        let (r, line) = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("ranks not ready; output so far: {lines:?}"));
        if line.contains("ready ") {
            ready += 1;
        }
        lines[r].push(line);
    }

    ranks.0[VICTIM].kill().unwrap();
    let killed_at = Instant::now();
    ranks.0[VICTIM].wait().unwrap();
    let limit = TTL + Duration::from_secs(5);
    for (r, child) in ranks.0.iter_mut().enumerate() {
        if r == VICTIM {
            continue;
        }
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                killed_at.elapsed() < limit,
                "rank {r} still running {limit:?} after rank {VICTIM} was killed"
            );
            thread::sleep(Duration::from_millis(50));
        };
        assert!(!status.success(), "rank {r} exited 0");
    }
    let elapsed = killed_at.elapsed();
    // The last lines of every survivor.
    while let Ok((r, line)) = rx.recv_timeout(Duration::from_millis(500)) {
        lines[r].push(line);
    }
    for (r, out) in lines.iter().enumerate() {
        if r == VICTIM {
            continue;
        }
        assert!(
            out.iter()
                .any(|l| l.starts_with("error:") && l.contains(&format!("rank {VICTIM} failed"))),
            "rank {r} does not name rank {VICTIM}: {out:?}"
        );
    }
    let said = lines[0].iter().find(|l| l.starts_with("error:"));
    eprintln!("survivors exited {elapsed:?} after the kill (TTL {TTL:?}); rank 0: {said:?}");
    // No process left (all reaped), and no key once the dead rank's lease expired.
    drop(ranks);
    let start = Instant::now();
    loop {
        let keys = xthunk_etcd::job_keys(&[etcd.endpoint()], job).unwrap();
        if keys.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < TTL + Duration::from_secs(3),
            "keys left: {keys:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn killing_a_rank_process_fails_every_survivor_naming_it() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let Some(etcd) =
        EtcdServer::start_or_skip("killing_a_rank_process_fails_every_survivor_naming_it").unwrap()
    else {
        return;
    };
    let repeats: usize = std::env::var("XTHUNK_KILL_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for i in 0..repeats {
        one_job(&etcd, &format!("kill-{}-{i}", std::process::id()));
    }
}
