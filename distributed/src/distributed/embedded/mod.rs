//! The embedded coordinator: `xthunk launch` serves the [`Coordinator`](super::Coordinator) of
//! its job itself, so that a job of several processes on one machine needs no etcd.
//!
//! The launcher starts an [`EmbeddedServer`] on a Unix socket in a new folder of the temporary
//! directory that only its user can enter (0700), and gives each rank `unix://<socket>` as its
//! coordinator; each rank connects an [`EmbeddedCoordinator`]. The semantics are those of the
//! etcd coordinator (the [contract](super#contract)):
//!
//! - **registration**: a rank's session starts with `Join` (job, rank, world size; a second
//!   session of the same rank, or another world size, is refused);
//! - **liveness**: the session carries a heartbeat every TTL/3; a session silent for a TTL
//!   (a hung or stopped process), or closed without `Leave` (the process died: the kernel
//!   closes its socket at once), is a failed rank, pushed to every other session at once;
//! - **barriers** and **key/value**, waited for on the server, failing as soon as a rank of
//!   the job failed;
//! - **job isolation**: everything is per job id; a job's state goes when its last rank left
//!   cleanly (a failed job keeps its failures, so that a rank joining late learns them).
//!
//! The wire format is JSON lines ([`protocol`]); the server is [`server`], the client
//! [`client`]; [`MachineJobClaim`] keeps a job id to one launch per machine. Unix only.

mod claim;
mod client;
pub mod protocol;
mod server;

pub use claim::MachineJobClaim;
pub use client::{EmbeddedCoordinator, unreachable_help};
pub use server::{EmbeddedServer, SOCKET_NAME};

/// The backend name in errors and [`Coordinator::backend`](super::Coordinator::backend).
pub const BACKEND: &str = "embedded";

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::protocol::{Request, Response, read_line, write_line};
    use super::*;
    use crate::distributed::{Coordinator, DistributedError};
    use std::io::BufReader;
    use std::os::unix::net::UnixStream;
    use std::thread;
    use std::time::{Duration, Instant};

    const T: Duration = Duration::from_secs(10);
    const TTL: Duration = Duration::from_secs(1);

    fn job(server: &EmbeddedServer, id: &str, world: usize) -> Vec<EmbeddedCoordinator> {
        (0..world)
            .map(|r| EmbeddedCoordinator::connect(server.socket(), id, r, world, TTL).unwrap())
            .collect()
    }

    fn shutdown_all(ranks: &[EmbeddedCoordinator]) {
        thread::scope(|s| {
            for c in ranks {
                s.spawn(move || c.shutdown(T).unwrap());
            }
        });
    }

    /// Polls `f` until it holds, up to `limit`.
    fn eventually(limit: Duration, f: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if f() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        f()
    }

    #[test]
    fn the_folder_is_private_and_goes_with_the_server() {
        use std::os::unix::fs::PermissionsExt;
        let server = EmbeddedServer::start().unwrap();
        let dir = server.socket().parent().unwrap().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        drop(server);
        assert!(!dir.exists());
    }

    #[test]
    fn kv_and_barriers_across_ranks() {
        let server = EmbeddedServer::start().unwrap();
        let ranks = job(&server, "kv", 3);
        thread::scope(|s| {
            for c in &ranks {
                s.spawn(move || {
                    if c.rank() == 2 {
                        thread::sleep(Duration::from_millis(50));
                        c.set("answer", &[42, 0, 255]).unwrap();
                    }
                    assert_eq!(c.get("answer", T).unwrap(), vec![42, 0, 255]);
                    for _ in 0..20 {
                        c.barrier("step", T).unwrap();
                    }
                });
            }
        });
        assert_eq!(ranks[0].try_get("nothing").unwrap(), None);
        let e = ranks[0]
            .get("nothing", Duration::from_millis(50))
            .unwrap_err();
        assert!(matches!(e, DistributedError::GetTimeout { .. }), "{e}");
        let e = ranks[1]
            .barrier("alone", Duration::from_millis(100))
            .unwrap_err();
        match &e {
            DistributedError::BarrierTimeout { missing, dead, .. } => {
                assert_eq!(missing, &[0, 2]);
                assert!(dead.is_empty());
            }
            other => panic!("unexpected {other}"),
        }
        shutdown_all(&ranks);
        assert!(matches!(
            ranks[0].set("x", b""),
            Err(DistributedError::ShutDown { .. })
        ));
        assert!(
            eventually(T, || server.job_ids().is_empty()),
            "{:?}",
            server.job_ids()
        );
    }

    #[test]
    fn a_dropped_rank_is_reported_at_once() {
        let server = EmbeddedServer::start().unwrap();
        let mut ranks = job(&server, "drop", 3);
        let dead = ranks.remove(1);
        let rx = ranks[0].subscribe_failures();
        let started = Instant::now();
        let e = thread::scope(|s| {
            let w = s.spawn(|| ranks[0].barrier("never", Duration::from_secs(30)));
            thread::sleep(Duration::from_millis(50));
            drop(dead);
            w.join()
        })
        .unwrap()
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        match &e {
            DistributedError::RankFailed { failure, .. } => {
                assert_eq!(failure.rank, 1);
                assert!(failure.reason.contains("dropped without shutdown"), "{e}");
            }
            other => panic!("unexpected {other}"),
        }
        assert_eq!(rx.recv_timeout(T).unwrap().rank, 1);
        assert!(eventually(T, || ranks[1].failures().len() == 1));
        assert!(matches!(
            ranks[1].get("k", T),
            Err(DistributedError::RankFailed { .. })
        ));
    }

    #[test]
    fn a_rank_that_stops_heartbeating_is_reported_within_the_ttl() {
        let server = EmbeddedServer::start().unwrap();
        let live = EmbeddedCoordinator::connect(server.socket(), "hb", 0, 2, TTL).unwrap();
        // Rank 1 joins by hand and then says nothing, as a stopped process would.
        let mut silent = UnixStream::connect(server.socket()).unwrap();
        write_line(
            &mut silent,
            &Request::Join {
                job: "hb".into(),
                rank: 1,
                world: 2,
                ttl_ms: 1000,
            },
        )
        .unwrap();
        let mut reader = BufReader::new(silent.try_clone().unwrap());
        assert!(matches!(
            read_line::<Response>(&mut reader).unwrap(),
            Some(Response::Joined { .. })
        ));
        let joined = Instant::now();
        let f = live.subscribe_failures().recv_timeout(T).unwrap();
        let took = joined.elapsed();
        assert_eq!(f.rank, 1);
        assert!(f.reason.contains("no heartbeat"), "{}", f.reason);
        assert!(
            took >= Duration::from_millis(900) && took < TTL + Duration::from_secs(1),
            "{took:?}"
        );
        // The live rank keeps heartbeating: it is not reported, and the silent one hears
        // the verdict on itself before its session is closed.
        thread::sleep(TTL * 2);
        assert_eq!(live.failures().len(), 1);
        assert!(matches!(
            read_line::<Response>(&mut reader).unwrap(),
            Some(Response::Failure(f)) if f.rank == 1
        ));
    }

    #[test]
    fn jobs_are_isolated_and_ranks_registered_once() {
        let server = EmbeddedServer::start().unwrap();
        let a = job(&server, "a", 1);
        let b = job(&server, "b", 2);
        a[0].set("k", b"a").unwrap();
        assert_eq!(b[0].try_get("k").unwrap(), None);
        let dup = EmbeddedCoordinator::connect(server.socket(), "b", 1, 2, TTL).unwrap_err();
        assert!(dup.to_string().contains("already registered"), "{dup}");
        let world = EmbeddedCoordinator::connect(server.socket(), "b", 0, 3, TTL).unwrap_err();
        assert!(world.to_string().contains("world of 3"), "{world}");
        drop(a);
        thread::sleep(Duration::from_millis(200));
        assert!(
            b[0].failures().is_empty(),
            "a failure of job a is not job b's"
        );
        assert_eq!(server.failures("a").len(), 1);
        thread::scope(|s| {
            s.spawn(|| b[0].barrier("x", T).unwrap());
            s.spawn(|| b[1].barrier("x", T).unwrap());
        });
        shutdown_all(&b);
        assert!(eventually(T, || server.job_ids() == vec!["a".to_string()]));
    }

    #[test]
    fn without_a_server_the_rank_is_told_what_to_start() {
        let server = EmbeddedServer::start().unwrap();
        let socket = server.socket().to_path_buf();
        drop(server);
        let e = EmbeddedCoordinator::connect(&socket, "gone", 0, 2, TTL).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("xthunk launch -n N"), "{msg}");
        assert!(msg.contains("etcd://"), "{msg}");
    }

    #[test]
    fn a_rank_learns_when_its_server_goes_away() {
        let server = EmbeddedServer::start().unwrap();
        let c = EmbeddedCoordinator::connect(server.socket(), "srv", 0, 2, TTL).unwrap();
        drop(server);
        let f = c.subscribe_failures().recv_timeout(T).unwrap();
        assert_eq!(f.rank, 0);
        assert!(f.reason.contains("lost its session"), "{}", f.reason);
        // The culprit is the coordinator, not the rank.
        let lost = f.to_string();
        assert!(
            lost.starts_with("lost the coordinator unix://") && !lost.contains("rank 0 failed"),
            "{lost}"
        );
    }

    #[test]
    fn values_up_to_the_limit_pass_and_a_larger_one_names_the_limit() {
        use super::protocol::MAX_VALUE;
        let server = EmbeddedServer::start().unwrap();
        let ranks = job(&server, "big", 2);
        let big: Vec<u8> = (0..MAX_VALUE).map(|i| (i % 251) as u8).collect();
        ranks[0].set("big", &big).unwrap();
        assert_eq!(ranks[1].get("big", T).unwrap(), big);
        let mut over = big;
        over.push(7);
        let e = ranks[0].set("over", &over).unwrap_err();
        match &e {
            DistributedError::ValueTooLarge { size, limit, .. } => {
                assert_eq!((*size, *limit), (MAX_VALUE + 1, MAX_VALUE));
            }
            other => panic!("unexpected {other}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains(&MAX_VALUE.to_string()) && msg.contains("`over`"),
            "{msg}"
        );
        // Refused before sending: a value too large for a line, too, is named by its size
        // (the server would only see an over-long line).
        let huge = vec![0u8; 3 * MAX_VALUE];
        assert!(
            matches!(
                ranks[0].set("huge", &huge),
                Err(DistributedError::ValueTooLarge { size, .. }) if size == 3 * MAX_VALUE
            ),
            "a value of 12 MiB is refused by size"
        );
        // Nothing was stored, and the rank is still in the job.
        assert_eq!(ranks[1].try_get("over").unwrap(), None);
        assert!(ranks[0].failures().is_empty());
        shutdown_all(&ranks);
    }

    #[test]
    fn the_server_answers_an_over_long_line_with_an_error() {
        use super::protocol::{MAX_LINE, MAX_VALUE, WireError};
        let server = EmbeddedServer::start().unwrap();
        let ranks = job(&server, "long", 1);
        let mut conn = UnixStream::connect(server.socket()).unwrap();
        let mut line = br#"{"op":"set","job":"long","rank":0,"key":"k","value":""#.to_vec();
        line.resize(MAX_LINE + 4096, b'0');
        line.extend_from_slice(b"\"}\n");
        std::io::Write::write_all(&mut conn, &line).unwrap();
        let answer = read_line::<Response>(&mut BufReader::new(conn)).unwrap();
        match answer {
            Some(Response::Error(WireError::Protocol { message })) => {
                assert!(message.contains(&MAX_LINE.to_string()), "{message}");
                assert!(message.contains(&MAX_VALUE.to_string()), "{message}");
            }
            other => panic!("unexpected answer {other:?}"),
        }
        // A value that fits in a line but not in the limit is refused by the server too.
        let mut conn = UnixStream::connect(server.socket()).unwrap();
        write_line(
            &mut conn,
            &Request::Set {
                job: "long".into(),
                rank: 0,
                key: "k".into(),
                value: vec![1; MAX_VALUE + 1],
                if_absent: false,
            },
        )
        .unwrap();
        let answer = read_line::<Response>(&mut BufReader::new(conn)).unwrap();
        assert!(
            matches!(
                answer,
                Some(Response::Error(WireError::ValueTooLarge { .. }))
            ),
            "{answer:?}"
        );
        assert_eq!(ranks[0].try_get("k").unwrap(), None);
        shutdown_all(&ranks);
    }

    #[test]
    fn the_first_published_cause_holds() {
        let server = EmbeddedServer::start().unwrap();
        let ranks = job(&server, "cause", 2);
        assert_eq!(ranks[0].published_cause().unwrap(), None);
        assert_eq!(ranks[1].publish_cause("first").unwrap(), "first");
        assert_eq!(ranks[0].publish_cause("second").unwrap(), "first");
        assert_eq!(
            ranks[0].published_cause().unwrap().as_deref(),
            Some("first")
        );
        // It outlives its publisher.
        drop(ranks);
        assert_eq!(
            server.value("cause", crate::distributed::CAUSE_KEY),
            Some(b"first".to_vec())
        );
    }
}
