//! The etcd coordinator against a real etcd on loopback (started per test, killed at its end).
//! Each test is skipped, with a printed reason, where the `etcd` binary is absent, unless
//! `XTHUNK_REQUIRE_ETCD=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use xthunk_core::distributed::{Coordinator, DistributedError, exchange_unique_id};
use xthunk_etcd::server::EtcdServer;
use xthunk_etcd::{EtcdConfig, EtcdCoordinator, JobClaim, job_keys};

const T: Duration = Duration::from_secs(10);

macro_rules! etcd_or_skip {
    ($name:expr) => {
        match EtcdServer::start_or_skip($name).expect("start etcd") {
            Some(s) => s,
            None => return,
        }
    };
}

/// A job id no other test (or earlier run) uses.
fn job_id(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn config(etcd: &EtcdServer, job: &str, rank: usize, world: usize) -> EtcdConfig {
    EtcdConfig::new(vec![etcd.endpoint()], job, rank, world)
        .with_ttl(Duration::from_secs(2))
        .with_request_timeout(Duration::from_secs(5))
}

/// `world` ranks of `job`, connected concurrently.
fn join(etcd: &EtcdServer, job: &str, world: usize) -> Vec<EtcdCoordinator> {
    thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| s.spawn(move || EtcdCoordinator::connect(config(etcd, job, r, world))))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().expect("connect"))
            .collect()
    })
}

fn shutdown_all(ranks: &[EtcdCoordinator]) -> Vec<Result<(), DistributedError>> {
    thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .map(|c| s.spawn(move || c.shutdown(T)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn keys(etcd: &EtcdServer, job: &str) -> Vec<String> {
    job_keys(&[etcd.endpoint()], job).expect("list job keys")
}

/// Polls until the job has no keys left (leases of dead ranks expire within their TTL).
fn wait_no_keys(etcd: &EtcdServer, job: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let left = keys(etcd, job);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < within,
            "keys left after {within:?}: {left:?}"
        );
        thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn kv_get_with_timeout_barriers_and_unique_id_across_ranks() {
    let etcd = etcd_or_skip!("kv_get_with_timeout_barriers_and_unique_id_across_ranks");
    let job = job_id("kv");
    let ranks = join(&etcd, &job, 4);
    assert!(!keys(&etcd, &job).is_empty());
    thread::scope(|s| {
        for c in &ranks {
            s.spawn(move || {
                // get blocks until the writer sets the key.
                if c.rank() == 3 {
                    thread::sleep(Duration::from_millis(300));
                    c.set("config", b"from rank 3").unwrap();
                }
                assert_eq!(c.get("config", T).unwrap(), b"from rank 3");
                // Barriers can be reused, in the same order on every rank.
                for i in 0..5 {
                    c.set(&format!("step/{i}/{}", c.rank()), &[i as u8])
                        .unwrap();
                    c.barrier("step", T).unwrap();
                    for r in 0..4 {
                        let key = format!("step/{i}/{r}");
                        assert_eq!(c.try_get(&key).unwrap(), Some(vec![i as u8]), "{key}");
                    }
                }
                // The NCCL bootstrap: the clique's first rank makes the id, the others get it.
                let id = exchange_unique_id(c, "clique [0, 1, 2, 3]", c.rank() == 0, T, || {
                    Ok((0..128).collect())
                })
                .unwrap();
                assert_eq!(id, (0..128).collect::<Vec<u8>>());
            });
        }
    });

    // A key nobody sets: a timeout naming it, after about the timeout.
    let start = Instant::now();
    let e = ranks[1]
        .get("never", Duration::from_millis(500))
        .unwrap_err();
    assert!(matches!(e, DistributedError::GetTimeout { .. }), "{e}");
    assert!(e.to_string().contains("`never`"), "{e}");
    assert!(start.elapsed() >= Duration::from_millis(450));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(ranks[1].try_get("never").unwrap(), None);

    // A barrier rank 2 does not reach: the others time out naming it.
    let errors: Vec<DistributedError> = thread::scope(|s| {
        let hs: Vec<_> = [0, 1, 3]
            .iter()
            .map(|&r| {
                let c = &ranks[r];
                s.spawn(move || c.barrier("partial", Duration::from_secs(1)).unwrap_err())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in errors {
        match &e {
            DistributedError::BarrierTimeout { missing, dead, .. } => {
                assert_eq!(missing, &[2]);
                assert!(dead.is_empty(), "{e}");
            }
            other => panic!("unexpected {other}"),
        }
        assert!(e.to_string().contains("rank 2 did not arrive"), "{e}");
    }
    // Rank 2 arrives late at that barrier round on its own: the others already left it. The
    // next barrier name still works for everyone (rounds are per name).
    assert!(
        ranks[2]
            .barrier("partial", Duration::from_millis(300))
            .is_ok()
    );
    thread::scope(|s| {
        for c in &ranks {
            s.spawn(move || c.barrier("after", T).unwrap());
        }
    });

    for r in shutdown_all(&ranks) {
        r.unwrap();
    }
    assert!(ranks.iter().all(|c| c.failures().is_empty()));
    // A clean shutdown leaves nothing of the job.
    assert_eq!(keys(&etcd, &job), Vec::<String>::new());
    assert!(matches!(
        ranks[0].set("x", b""),
        Err(DistributedError::ShutDown { .. })
    ));
    assert!(
        ranks[0].shutdown(T).is_ok(),
        "a second shutdown does nothing"
    );
}

#[test]
fn two_jobs_on_one_etcd_do_not_mix() {
    let etcd = etcd_or_skip!("two_jobs_on_one_etcd_do_not_mix");
    // "job" is a prefix of "job-2" as a string, not as a key path.
    let a = job_id("job");
    let b = format!("{a}-2");
    let ja = join(&etcd, &a, 2);
    let jb = join(&etcd, &b, 2);
    ja[0].set("k", b"a").unwrap();
    jb[0].set("k", b"b").unwrap();
    assert_eq!(ja[1].get("k", T).unwrap(), b"a");
    assert_eq!(jb[1].get("k", T).unwrap(), b"b");
    ja[0].set("only-a", b"1").unwrap();
    assert_eq!(jb[1].try_get("only-a").unwrap(), None);

    // A barrier of one rank of each job completes in neither.
    let (ea, eb) = thread::scope(|s| {
        let x = s.spawn(|| ja[0].barrier("x", Duration::from_millis(800)));
        let y = s.spawn(|| jb[1].barrier("x", Duration::from_millis(800)));
        (x.join().unwrap(), y.join().unwrap())
    });
    assert!(
        matches!(ea, Err(DistributedError::BarrierTimeout { ref missing, .. }) if missing == &[1])
    );
    assert!(
        matches!(eb, Err(DistributedError::BarrierTimeout { ref missing, .. }) if missing == &[0])
    );

    // The same rank twice in one job is refused; so is another world size.
    let e = EtcdCoordinator::connect(config(&etcd, &a, 1, 2)).unwrap_err();
    assert!(e.to_string().contains("already alive"), "{e}");
    let e = EtcdCoordinator::connect(config(&etcd, &a, 0, 3)).unwrap_err();
    assert!(e.to_string().contains("has 2 ranks"), "{e}");

    // A rank of job a dies: job a hears of it, job b does not.
    let mut ja = ja;
    let dead = ja.remove(1);
    drop(dead);
    let f = ja[0]
        .subscribe_failures()
        .recv_timeout(Duration::from_secs(5))
        .expect("job a sees its rank 1 fail");
    assert_eq!(f.rank, 1);
    thread::sleep(Duration::from_millis(500));
    assert!(jb.iter().all(|c| c.failures().is_empty()));

    for r in shutdown_all(&jb) {
        r.unwrap();
    }
    assert!(ja[0].shutdown(T).is_err(), "its peer is dead");
    wait_no_keys(&etcd, &a, Duration::from_secs(5));
    assert!(keys(&etcd, &b).is_empty());
}

#[test]
fn a_rank_whose_heartbeats_stop_is_reported_within_the_ttl() {
    let etcd = etcd_or_skip!("a_rank_whose_heartbeats_stop_is_reported_within_the_ttl");
    let job = job_id("expire");
    let mut ranks = join(&etcd, &job, 3);
    let ttl = ranks[0].ttl();
    assert!(ttl <= Duration::from_secs(3), "granted TTL {ttl:?}");
    // Heartbeats keep everyone alive well past the TTL.
    thread::sleep(ttl * 2);
    assert!(ranks.iter().all(|c| c.failures().is_empty()));

    let subs: Vec<_> = ranks.iter().map(|c| c.subscribe_failures()).collect();
    let victim = ranks.remove(1);
    let started = Instant::now();
    // As a killed process: no revoke, no cleanup; only the lease expiring tells.
    victim.abandon();
    // Rank 0 waits at a barrier rank 1 will never reach: it fails naming rank 1.
    let e = ranks[0]
        .barrier("never", Duration::from_secs(60))
        .unwrap_err();
    let elapsed = started.elapsed();
    match &e {
        DistributedError::RankFailed { failure, .. } => {
            assert_eq!(failure.rank, 1);
            assert!(failure.reason.contains("lease"), "{e}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(e.to_string().contains("rank 1 failed"), "{e}");
    assert!(
        elapsed < ttl + Duration::from_secs(3),
        "noticed after {elapsed:?}"
    );
    assert!(
        elapsed >= ttl / 2,
        "noticed before the lease could expire: {elapsed:?}"
    );
    for (i, rx) in [&subs[0], &subs[2]].into_iter().enumerate() {
        let f = rx
            .recv_timeout(Duration::from_secs(3))
            .expect("failure reported");
        assert_eq!(f.rank, 1, "subscriber {i}");
    }
    assert!(matches!(
        ranks[1].get("k", T),
        Err(DistributedError::RankFailed { .. })
    ));
    // The survivors' shutdown fails (a rank is dead) but still removes their state; the dead
    // rank's keys went with its lease.
    for r in shutdown_all(&ranks) {
        assert!(
            matches!(r, Err(DistributedError::RankFailed { .. })),
            "{r:?}"
        );
    }
    wait_no_keys(&etcd, &job, Duration::from_secs(3));
}

#[test]
fn a_rank_dropped_without_shutdown_is_reported_at_once() {
    let etcd = etcd_or_skip!("a_rank_dropped_without_shutdown_is_reported_at_once");
    let job = job_id("drop");
    let mut ranks = join(&etcd, &job, 2);
    let rx = ranks[0].subscribe_failures();
    let started = Instant::now();
    drop(ranks.remove(1));
    let f = rx.recv_timeout(Duration::from_secs(5)).expect("reported");
    assert_eq!(f.rank, 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(ranks[0].check().is_err());
    let _ = ranks[0].shutdown(T);
    wait_no_keys(&etcd, &job, Duration::from_secs(2));
}

#[test]
fn losing_etcd_is_a_loud_failure_of_every_rank() {
    let etcd = etcd_or_skip!("losing_etcd_is_a_loud_failure_of_every_rank");
    let job = job_id("lost");
    let ranks = join(&etcd, &job, 2);
    let ttl = ranks[0].ttl();
    let url = etcd.url();
    let started = Instant::now();
    etcd.stop();
    for c in &ranks {
        let f = c
            .subscribe_failures()
            .recv_timeout(ttl + Duration::from_secs(10))
            .expect("a lost etcd is reported");
        assert_eq!(f.rank, c.rank(), "each rank reports itself: {f}");
        // The culprit is etcd, named as the coordinator lost, not the rank.
        assert_eq!(f.coordinator_lost.as_deref(), Some(url.as_str()), "{f}");
        assert!(
            f.to_string()
                .starts_with(&format!("lost the coordinator {url}: ")),
            "{f}"
        );
    }
    assert!(started.elapsed() < ttl + Duration::from_secs(10));
    let e = ranks[0].barrier("x", T).unwrap_err();
    assert!(matches!(e, DistributedError::RankFailed { .. }), "{e}");
    assert!(
        e.to_string().contains("lost the coordinator etcd://"),
        "{e}"
    );
    // A request etcd cannot answer is the loss of the coordinator too.
    let e = ranks[1].try_get("k").unwrap_err();
    match &e {
        DistributedError::CoordinatorLost { coordinator, .. } => {
            assert_eq!(coordinator, &url);
        }
        other => panic!("unexpected {other}"),
    }
}

/// The first published cause holds and outlives its publisher (its own lease is revoked when
/// it leaves; the cause's is not), the last rank out leaves the cause and the claim, and the
/// launcher's `finish` deletes every key of the job.
#[test]
fn the_published_cause_outlives_its_publisher_until_the_launcher_finishes() {
    let etcd =
        etcd_or_skip!("the_published_cause_outlives_its_publisher_until_the_launcher_finishes");
    let job = job_id("cause");
    let ends = vec![etcd.endpoint()];
    let claim = JobClaim::acquire(&ends, &job, Duration::from_secs(2)).unwrap();
    let mut ranks: Vec<EtcdCoordinator> = thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let c = config(&etcd, &job, r, 3).with_incarnation(Some(claim.token().into()));
                s.spawn(move || EtcdCoordinator::connect(c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    assert_eq!(ranks[1].published_cause().unwrap(), None);
    assert_eq!(
        ranks[1].publish_cause("rank 1 found it").unwrap(),
        "rank 1 found it"
    );
    assert_eq!(
        ranks[2].publish_cause("rank 2 too").unwrap(),
        "rank 1 found it"
    );
    assert_eq!(
        claim.publish_cause("the launcher").unwrap(),
        "rank 1 found it"
    );
    // The publisher leaves without shutdown: its lease is revoked, the others learn at once.
    let rx = ranks[0].subscribe_failures();
    drop(ranks.remove(1));
    assert_eq!(rx.recv_timeout(T).unwrap().rank, 1);
    assert_eq!(
        ranks[0].published_cause().unwrap().as_deref(),
        Some("rank 1 found it")
    );
    // Longer than the ranks' TTL (2 s): the cause is still there.
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        ranks[1].published_cause().unwrap().as_deref(),
        Some("rank 1 found it")
    );
    // The last rank out deletes the job's keys, but not the claim and the cause.
    let _ = shutdown_all(&ranks);
    drop(ranks);
    let mut left = keys(&etcd, &job);
    left.sort();
    assert_eq!(
        left,
        vec![
            format!("/xthunk/{job}/cause/{}", claim.token()),
            format!("/xthunk/{job}/meta/claim")
        ]
    );
    assert_eq!(
        claim.published_cause().unwrap().as_deref(),
        Some("rank 1 found it")
    );
    assert!(claim.finish().unwrap());
    assert!(keys(&etcd, &job).is_empty());
    drop(claim);
    // A new launch of the id starts without a cause; the launcher's own cause holds.
    let again = JobClaim::acquire(&ends, &job, Duration::from_secs(2)).unwrap();
    assert_eq!(again.published_cause().unwrap(), None);
    assert_eq!(again.publish_cause("rank 3 ended").unwrap(), "rank 3 ended");
    drop(again);
    wait_no_keys(&etcd, &job, T);
}

#[test]
fn connecting_to_nothing_fails_clearly() {
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = EtcdConfig::new(vec![format!("127.0.0.1:{port}")], "nothing", 0, 1)
        .with_request_timeout(Duration::from_secs(2));
    let started = Instant::now();
    let e = EtcdCoordinator::connect(cfg).unwrap_err();
    assert!(matches!(e, DistributedError::Store { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("connect to 127.0.0.1:{port}")),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(6));
}

#[test]
fn the_test_server_leaves_no_process() {
    let etcd = etcd_or_skip!("the_test_server_leaves_no_process");
    let pid = etcd.pid().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(etcd);
    // Killed and reaped: no process, not even a zombie.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn connect_follows_the_detected_configuration() {
    use std::collections::HashMap;
    use xthunk_core::distributed::{DistributedConfig, Overrides};
    let local = xthunk_etcd::connect(&DistributedConfig::single(), T).unwrap();
    assert_eq!((local.backend(), local.world_size()), ("local", 1));
    let mut two = DistributedConfig::single();
    two.world_size = 2;
    let e = xthunk_etcd::connect(&two, T).unwrap_err();
    assert!(
        e.to_string()
            .contains("local coordinator serves the threads of one process"),
        "{e}"
    );

    let etcd = etcd_or_skip!("connect_follows_the_detected_configuration");
    let job = job_id("detected");
    let env: HashMap<String, String> = [
        ("XTHUNK_RANK", "0".to_string()),
        ("XTHUNK_WORLD_SIZE", "1".to_string()),
        ("XTHUNK_COORDINATOR", etcd.url()),
        ("XTHUNK_JOB_ID", job.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = DistributedConfig::detect(&env, &Overrides::default()).unwrap();
    let c = xthunk_etcd::connect(&config, Duration::from_secs(2)).unwrap();
    assert_eq!((c.backend(), c.job_id()), ("etcd", job.as_str()));
    c.set("k", b"v").unwrap();
    assert!(keys(&etcd, &job).len() >= 3, "{:?}", keys(&etcd, &job));
    // An administrator (or a launcher whose ranks were killed) can clear a job at once.
    assert!(xthunk_etcd::delete_job(&[etcd.endpoint()], &job).unwrap() >= 3);
    assert!(keys(&etcd, &job).is_empty());
    // The rank sees its own liveness key go: it reports itself.
    let f = c
        .subscribe_failures()
        .recv_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(f.rank, 0);
    assert!(f.reason.contains("own liveness key"), "{f}");
}

/// One job id, one incarnation: a second claim of a claimed id is refused naming it; a rank
/// joins only the incarnation whose token it carries (another token, or a job without a
/// claim, is refused); the claim goes with its holder.
#[test]
fn a_claimed_job_admits_only_ranks_of_its_own_incarnation() {
    let etcd = etcd_or_skip!("a_claimed_job_admits_only_ranks_of_its_own_incarnation");
    let job = job_id("claim");
    let ends = vec![etcd.endpoint()];
    let ttl = Duration::from_secs(2);
    let claim = JobClaim::acquire(&ends, &job, ttl).unwrap();
    let second = JobClaim::acquire(&ends, &job, ttl).unwrap_err().to_string();
    assert!(
        second.contains(&format!("job id `{job}` is taken")) && second.contains(claim.token()),
        "{second}"
    );
    let stranger = EtcdCoordinator::connect(
        config(&etcd, &job, 0, 2).with_incarnation(Some("another-token".into())),
    )
    .unwrap_err()
    .to_string();
    assert!(
        stranger.contains("claimed by another launch") && stranger.contains(&job),
        "{stranger}"
    );
    let own: Vec<EtcdCoordinator> = thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let c = config(&etcd, &job, r, 2).with_incarnation(Some(claim.token().into()));
                s.spawn(move || EtcdCoordinator::connect(c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    assert!(shutdown_all(&own).iter().all(Result::is_ok));
    drop(claim);
    wait_no_keys(&etcd, &job, T);
    let orphan =
        EtcdCoordinator::connect(config(&etcd, &job, 0, 2).with_incarnation(Some("gone".into())))
            .unwrap_err()
            .to_string();
    assert!(orphan.contains("has no claim"), "{orphan}");
    // The id is free again once its holder is gone.
    drop(JobClaim::acquire(&ends, &job, ttl).unwrap());
    wait_no_keys(&etcd, &job, T);
}

/// Ranks started by a scheduler (no incarnation token): a cause left by a failed run of the
/// job id (on its own lease, alive for a few TTLs) is not read as the next run's.
#[test]
fn a_cause_left_by_an_earlier_run_is_not_the_next_run_s() {
    let etcd = etcd_or_skip!("a_cause_left_by_an_earlier_run_is_not_the_next_run_s");
    let job = job_id("rerun");
    let first = join(&etcd, &job, 2);
    assert_eq!(
        first[0].publish_cause("run 1 failed").unwrap(),
        "run 1 failed"
    );
    assert!(shutdown_all(&first).iter().all(Result::is_ok));
    drop(first);
    let left = keys(&etcd, &job);
    assert_eq!(left.len(), 1, "only the cause is left: {left:?}");
    let second = join(&etcd, &job, 2);
    assert_eq!(second[1].published_cause().unwrap(), None);
    assert_eq!(
        second[1].publish_cause("run 2 failed").unwrap(),
        "run 2 failed"
    );
    assert_eq!(
        second[0].published_cause().unwrap().as_deref(),
        Some("run 2 failed")
    );
    assert!(shutdown_all(&second).iter().all(Result::is_ok));
    drop(second);
    // The causes expire with their leases (4 x the 2 s TTL).
    wait_no_keys(&etcd, &job, Duration::from_secs(15));
}
