//! Tests of the shared memory transport: segments and their names, then ranks as threads, each
//! with its own coordinator, provider and mapping of the segments (the protocol is the same as
//! across processes), against the in-process host collectives.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::super::HostCliqueProvider;
use super::layout::{H_JOINED, Layout};
use super::names::{key_hash, random_u128, segment_name};
use super::segment::Segment;
use super::setup::announce_key;
use super::{ShmCliqueProvider, ShmOptions, job_segments, remove_job_segments};
use crate::backend::{Backend, Buffer, Device, Stream};
use crate::collectives::{CliqueKey, CliqueProvider, Communicator, ReduceOp, StreamKind, Timeouts};
use crate::distributed::{Coordinator, LocalCoordinator};
use crate::error::Result;
use crate::host::HostBackend;
use crate::ir::{DType, MemorySpace};
use rand::{RngCore, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn job(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "shmtest-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn tiny(timeouts: Timeouts) -> ShmOptions {
    // Chunks of a few elements: every operation goes through many phases.
    ShmOptions {
        timeouts,
        slot_bytes: 64,
        mailbox_bytes: 64,
    }
}

fn patient() -> Timeouts {
    Timeouts::new(Duration::from_secs(5), Duration::from_secs(30))
}

fn all(n: usize) -> CliqueKey {
    CliqueKey::new(0..n, StreamKind::Compute).unwrap()
}

#[test]
fn a_job_s_segments_can_be_listed_and_removed() {
    let j = job("remove");
    let k = CliqueKey::new([0, 1, 2], crate::collectives::StreamKind::Compute).unwrap();
    let layout = Layout::for_clique(3, &ShmOptions::default()).unwrap();
    let mut names: Vec<String> = (0..2)
        .map(|g| segment_name(&j, key_hash(&k), g, random_u128().unwrap()))
        .collect();
    names.sort();
    let segs: Vec<Segment> = names
        .iter()
        .map(|n| Segment::create(n, layout, 7, key_hash(&k)).unwrap())
        .collect();
    assert_eq!(job_segments(&j), names);
    // A name that exists is never taken over; a wrong token or size is refused.
    let e = Segment::create(&names[0], layout, 8, key_hash(&k))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("exists already"), "{e}");
    assert!(Segment::open(&names[0], 8, 3, key_hash(&k)).is_err());
    let again = Segment::open(&names[0], 7, 3, key_hash(&k)).unwrap();
    assert!(Segment::open(&names[0], 7, 4, key_hash(&k)).is_err());
    assert_eq!(remove_job_segments(&j), 2);
    assert!(job_segments(&j).is_empty());
    // The mappings outlive the names.
    segs[1].word(H_JOINED).fetch_add(1, Ordering::Relaxed);
    assert!(again.poison("x") && !again.poison("y"));
    assert_eq!(segs[0].poisoned().as_deref(), Some("x"));
}

/// Runs `f` on a descriptor of the segment `name` (to change its owner or mode as another
/// user could have set them); true if `f` returned 0.
fn alter(name: &str, f: impl FnOnce(libc::c_int) -> libc::c_int) -> bool {
    let c = std::ffi::CString::new(format!("/{name}")).unwrap();
    // SAFETY: a valid NUL-terminated string; plain flags.
    let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    let ok = f(fd) == 0;
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    ok
}

fn chmod(name: &str, mode: u32) {
    // SAFETY: an open descriptor; a plain mode.
    assert!(alter(name, |fd| unsafe {
        libc::fchmod(fd, mode as libc::mode_t)
    }));
}

/// Gives the segment to uid and gid 65534 (`nobody`); false when this process may not (it
/// is not root).
fn give_away(name: &str) -> bool {
    // SAFETY: an open descriptor; plain ids.
    alter(name, |fd| unsafe { libc::fchown(fd, 65534, 65534) })
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_segment_of_another_user_or_another_mode_is_refused_before_it_is_mapped() {
    let j = job("owner");
    let k = all(2);
    let layout = Layout::for_clique(2, &ShmOptions::default()).unwrap();
    let name = segment_name(&j, key_hash(&k), 0, random_u128().unwrap());
    let _seg = Segment::create(&name, layout, 7, key_hash(&k)).unwrap();
    let open = || Segment::open(&name, 7, 2, key_hash(&k));
    assert!(open().is_ok());
    for mode in [0o644, 0o666, 0o640, 0o700, 0o400] {
        chmod(&name, mode);
        let e = open().err().unwrap().to_string();
        assert!(
            e.contains(&format!("refusing segment /dev/shm/{name}"))
                && e.contains(&format!("with mode {mode:04o}"))
                && e.contains("with mode 0600"),
            "{e}"
        );
    }
    chmod(&name, 0o600);
    assert!(open().is_ok());
    if is_root() {
        assert!(give_away(&name));
        let e = open().err().unwrap().to_string();
        assert!(
            e.contains(&format!("refusing segment /dev/shm/{name}"))
                && e.contains("owned by uid 65534 with mode 0600")
                && e.contains("owned by this user (uid 0)"),
            "{e}"
        );
    } else {
        eprintln!("not root: the owner check of this test needs root to give a segment away");
    }
    assert_eq!(remove_job_segments(&j), 1);
}

#[test]
fn a_rank_refuses_an_announced_segment_of_another_user_or_mode() {
    let t = Timeouts::new(Duration::from_millis(200), Duration::from_secs(2));
    let k = all(2);
    let layout = Layout::for_clique(2, &tiny(t)).unwrap();
    /// What is spoiled, how, and what the refusal says.
    type Spoil = (&'static str, fn(&str), &'static str);
    let mut cases: Vec<Spoil> = vec![("mode", |n| chmod(n, 0o644), "with mode 0644")];
    if is_root() {
        cases.push(("uid", |n| assert!(give_away(n)), "owned by uid 65534"));
    } else {
        eprintln!("not root: the owner case of this test needs root to give a segment away");
    }
    for (what, spoil, want) in cases {
        let j = job(&format!("spoiled-{what}"));
        let mut coords = LocalCoordinator::job(&j, 2).unwrap().into_iter();
        let (first, second) = (coords.next().unwrap(), coords.next().unwrap());
        // The test plays the first rank: it creates the segment, spoils it as another user
        // could have, and announces it.
        let name = segment_name(&j, key_hash(&k), 0, random_u128().unwrap());
        let seg = Segment::create(&name, layout, 9, key_hash(&k)).unwrap();
        spoil(&name);
        first
            .set(
                &announce_key(key_hash(&k), 0),
                format!("{:016x} {name} {k}", 9).as_bytes(),
            )
            .unwrap();
        let c: Arc<dyn Coordinator> = Arc::new(second);
        let p = ShmCliqueProvider::new(c, tiny(t));
        let e = p.acquire(&k, 1).err().unwrap().to_string();
        assert!(
            e.contains(&format!("refusing segment /dev/shm/{name}")) && e.contains(want),
            "{what}: {e}"
        );
        // Refused before it joined: nothing of the rank is in the segment.
        assert_eq!(seg.word(H_JOINED).load(Ordering::Acquire), 0, "{what}");
        remove_job_segments(&j);
    }
}

#[test]
fn a_rank_refuses_an_announced_name_of_another_shape() {
    let t = Timeouts::new(Duration::from_millis(200), Duration::from_secs(2));
    let k = all(2);
    let j = job("shape");
    let mut coords = LocalCoordinator::job(&j, 2).unwrap().into_iter();
    let (first, second) = (coords.next().unwrap(), coords.next().unwrap());
    first
        .set(
            &announce_key(key_hash(&k), 0),
            format!("{:016x} ../../tmp/x {k}", 9).as_bytes(),
        )
        .unwrap();
    let c: Arc<dyn Coordinator> = Arc::new(second);
    let e = ShmCliqueProvider::new(c, tiny(t))
        .acquire(&k, 1)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("announced segment \"../../tmp/x\", not a name of this setup"),
        "{e}"
    );
}

/// One rank: its device, stream and providers (shared memory, and for the reference the
/// in-process provider of all ranks).
struct Rank {
    rank: usize,
    device: Arc<dyn Device>,
    stream: Arc<dyn Stream>,
}

impl Rank {
    fn buf(&self, bytes: &[u8], len: usize) -> Buffer {
        let b = self
            .device
            .allocate(len.max(1) as u64, 64, MemorySpace::Device)
            .unwrap();
        let mut init = bytes.to_vec();
        init.resize(len.max(1), 0xEE);
        self.device.copy_from_host(&init, b.ptr()).unwrap();
        b
    }
    fn read(&self, b: &Buffer, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.device.copy_to_host(b.ptr(), &mut v).unwrap();
        v
    }
}

/// Runs `body` on `n` threads, one rank each, with the shared memory provider of that rank
/// (`job_id`, `opts`); every thread is joined. `hold` lets a rank keep its coordinator
/// alive (false: it is dropped without shutdown when the body returns: a dead rank).
fn with_ranks<T: Send>(
    n: usize,
    job_id: &str,
    opts: ShmOptions,
    body: impl Fn(&Rank, &ShmCliqueProvider) -> T + Sync,
) -> Vec<T> {
    let backend = HostBackend::with_devices(n);
    let coords = LocalCoordinator::job(job_id, n).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = coords
            .into_iter()
            .enumerate()
            .map(|(rank, c)| {
                let device = backend.device(rank).unwrap();
                let body = &body;
                s.spawn(move || {
                    let c: Arc<dyn Coordinator> = Arc::new(c);
                    let provider = ShmCliqueProvider::new(c.clone(), opts);
                    let stream = device.create_stream().unwrap();
                    let r = Rank {
                        rank,
                        device,
                        stream,
                    };
                    let out = body(&r, &provider);
                    // A clean exit: every rank shuts down together.
                    let _ = c.shutdown(Duration::from_secs(30));
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The same, with the in-process host provider (the reference).
fn with_host_ranks<T: Send>(
    n: usize,
    body: impl Fn(&Rank, &dyn CliqueProvider) -> T + Sync,
) -> Vec<T> {
    let backend = HostBackend::with_devices(n);
    let devices: Vec<Arc<dyn Device>> = (0..n).map(|i| backend.device(i).unwrap()).collect();
    let provider = HostCliqueProvider::new(devices.clone(), patient()).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let (body, provider) = (&body, &provider);
                let device = device.clone();
                s.spawn(move || {
                    let stream = device.create_stream().unwrap();
                    body(
                        &Rank {
                            rank,
                            device,
                            stream,
                        },
                        provider,
                    )
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[derive(Clone, Copy, Debug)]
enum Case {
    AllReduce(ReduceOp),
    AllReduceInPlace,
    AllGather,
    ReduceScatter(ReduceOp),
    AllToAll,
    AllToAllInPlace,
    Broadcast(usize),
}

/// Issues `case` on `comm` with this rank's `input`; returns the output bytes.
fn issue(r: &Rank, comm: &dyn Communicator, case: Case, d: DType, count: usize) -> Result<Vec<u8>> {
    let n = comm.size();
    let s = d.size();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64((r.rank * 7919 + count) as u64);
    let mut bytes = |len: usize| {
        let mut v = vec![0u8; len];
        rng.fill_bytes(&mut v);
        if matches!(d, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
            // Finite values: small integers as floats.
            for c in v.chunks_mut(s) {
                let x = (c[0] % 16) as f64 - 8.0;
                let e: Vec<u8> = match d {
                    DType::F16 => half::f16::from_f64(x).to_le_bytes().to_vec(),
                    DType::BF16 => half::bf16::from_f64(x).to_le_bytes().to_vec(),
                    DType::F32 => (x as f32 + 0.125).to_le_bytes().to_vec(),
                    _ => (x + 1.0 / 3.0).to_le_bytes().to_vec(),
                };
                c.copy_from_slice(&e);
            }
        }
        v
    };
    let (sl, dl) = match case {
        Case::AllReduce(_) | Case::AllReduceInPlace | Case::Broadcast(_) => (count * s, count * s),
        Case::AllGather => (count * s, n * count * s),
        Case::ReduceScatter(_) => (n * count * s, count * s),
        Case::AllToAll | Case::AllToAllInPlace => (n * count * s, n * count * s),
    };
    let input = bytes(sl);
    let src = r.buf(&input, sl);
    let dst = r.buf(&[], dl);
    let st = r.stream.as_ref();
    let res = match case {
        Case::AllReduce(op) => comm.all_reduce(st, src.ptr(), dst.ptr(), count as u64, d, op),
        Case::AllReduceInPlace => {
            comm.all_reduce(st, src.ptr(), src.ptr(), count as u64, d, ReduceOp::Sum)
        }
        Case::AllGather => comm.all_gather(st, src.ptr(), dst.ptr(), count as u64, d),
        Case::ReduceScatter(op) => {
            comm.reduce_scatter(st, src.ptr(), dst.ptr(), count as u64, d, op)
        }
        Case::AllToAll => comm.all_to_all(st, src.ptr(), dst.ptr(), count as u64, d),
        Case::AllToAllInPlace => comm.all_to_all(st, src.ptr(), src.ptr(), count as u64, d),
        Case::Broadcast(root) => comm.broadcast(st, src.ptr(), dst.ptr(), count as u64, d, root),
    };
    res.and_then(|()| r.stream.synchronize())?;
    Ok(match case {
        Case::AllReduceInPlace | Case::AllToAllInPlace => r.read(&src, sl),
        _ => r.read(&dst, dl),
    })
}

#[test]
fn every_operation_matches_the_in_process_collectives_bit_for_bit() {
    let cases = [
        Case::AllReduce(ReduceOp::Sum),
        Case::AllReduce(ReduceOp::Max),
        Case::AllReduce(ReduceOp::Prod),
        Case::AllReduceInPlace,
        Case::AllGather,
        Case::ReduceScatter(ReduceOp::Sum),
        Case::ReduceScatter(ReduceOp::Min),
        Case::AllToAll,
        Case::AllToAllInPlace,
        Case::Broadcast(0),
        Case::Broadcast(1),
    ];
    let dtypes = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::U8,
    ];
    let counts = [0usize, 1, 7, 100];
    for n in [2usize, 3, 4] {
        let key = all(n);
        let body = |r: &Rank, p: &dyn CliqueProvider| {
            let comm = p.acquire(&key, r.rank).unwrap();
            let mut outs = vec![];
            for case in cases {
                for d in dtypes {
                    for count in counts {
                        let out = issue(r, comm.as_ref(), case, d, count)
                            .unwrap_or_else(|e| panic!("{case:?} {d} x{count}: {e}"));
                        outs.push((format!("{case:?} {d} x{count}"), out));
                    }
                }
            }
            outs
        };
        let want = with_host_ranks(n, |r, p| body(r, p));
        let got = with_ranks(n, &job("ops"), tiny(patient()), |r, p| body(r, p));
        for (rank, (g, w)) in got.iter().zip(&want).enumerate() {
            for ((name, a), (_, b)) in g.iter().zip(w) {
                assert!(a == b, "n={n} rank {rank} {name}: {a:?} != {b:?}");
            }
        }
    }
}

#[test]
fn large_buffers_go_through_in_chunks() {
    // Default sizes: 1 MiB of f32 is 4 slots per rank.
    let n = 3;
    let key = all(n);
    let body = |r: &Rank, p: &dyn CliqueProvider| {
        let comm = p.acquire(&key, r.rank).unwrap();
        issue(
            r,
            comm.as_ref(),
            Case::AllReduce(ReduceOp::Sum),
            DType::F32,
            1 << 18,
        )
        .unwrap()
    };
    let want = with_host_ranks(n, |r, p| body(r, p));
    let got = with_ranks(n, &job("large"), ShmOptions::default(), |r, p| {
        let comm = p.communicator(&key, r.rank).unwrap();
        assert!(comm.chunk_bytes().0 < 1 << 20);
        body(r, p)
    });
    assert!(got == want);
}

/// A ring of sends and receives (one group per rank), many chunks each.
#[test]
fn permute_rings_and_repeated_sends() {
    for n in [2usize, 3, 4] {
        let key = all(n);
        let count = 1000usize;
        let outs = with_ranks(n, &job("ring"), tiny(patient()), |r, p| {
            let comm = p.acquire(&key, r.rank).unwrap();
            let mine: Vec<u8> = (0..count * 4)
                .map(|i| (i * 31 + r.rank * 7) as u8)
                .collect();
            let src = r.buf(&mine, count * 4);
            let dst = r.buf(&[], count * 4);
            let dst2 = r.buf(&[], 8);
            let st = r.stream.as_ref();
            for _ in 0..3 {
                comm.group_start().unwrap();
                comm.send(st, src.ptr(), count as u64, DType::F32, (r.rank + 1) % n)
                    .unwrap();
                comm.recv(
                    st,
                    dst.ptr(),
                    count as u64,
                    DType::F32,
                    (r.rank + n - 1) % n,
                )
                .unwrap();
                // A second, small message on the same pair in the same group.
                comm.send(st, src.ptr(), 2, DType::F32, (r.rank + 1) % n)
                    .unwrap();
                comm.recv(st, dst2.ptr(), 2, DType::F32, (r.rank + n - 1) % n)
                    .unwrap();
                comm.group_end_on(st).unwrap();
            }
            st.synchronize().unwrap();
            (r.read(&dst, count * 4), r.read(&dst2, 8))
        });
        for (rank, (got, got2)) in outs.iter().enumerate() {
            let from = (rank + n - 1) % n;
            let want: Vec<u8> = (0..count * 4).map(|i| (i * 31 + from * 7) as u8).collect();
            assert!(*got == want, "n={n} rank {rank}");
            assert_eq!(got2[..], want[..8], "n={n} rank {rank}");
        }
    }
}

#[test]
fn mismatched_operations_fail_on_every_rank() {
    let outs = with_ranks(3, &job("mismatch"), tiny(patient()), |r, p| {
        let comm = p.acquire(&all(3), r.rank).unwrap();
        let count = if r.rank == 1 { 8 } else { 9 };
        issue(
            r,
            comm.as_ref(),
            Case::AllReduce(ReduceOp::Sum),
            DType::F32,
            count,
        )
        .unwrap_err()
        .to_string()
    });
    for m in outs {
        assert!(m.contains("issued different collectives"), "{m}");
        assert!(m.contains("8 elements") && m.contains("9 elements"), "{m}");
    }
}

#[test]
fn a_rank_that_never_arrives_is_named_at_the_terminate_timeout() {
    let t = Timeouts::new(Duration::from_millis(100), Duration::from_millis(700));
    let start = Instant::now();
    let outs = with_ranks(4, &job("late"), tiny(t), |r, p| {
        let comm = p.acquire(&all(4), r.rank).unwrap();
        issue(
            r,
            comm.as_ref(),
            Case::AllReduce(ReduceOp::Sum),
            DType::F32,
            40,
        )
        .unwrap();
        if r.rank == 3 {
            // Rank 3 skips the second collective (and waits for the others to give up).
            std::thread::sleep(Duration::from_millis(1500));
            return String::new();
        }
        let e = issue(
            r,
            comm.as_ref(),
            Case::AllReduce(ReduceOp::Sum),
            DType::F32,
            40,
        )
        .unwrap_err();
        e.to_string()
    });
    assert!(start.elapsed() < Duration::from_secs(10));
    for m in &outs[..3] {
        assert!(m.contains("rank 3 did not arrive"), "{m}");
    }
}

#[test]
fn a_first_rank_that_never_sets_up_is_named() {
    let t = Timeouts::new(Duration::from_millis(100), Duration::from_millis(500));
    let j = job("setup");
    let outs = with_ranks(3, &j, tiny(t), |r, p| {
        if r.rank == 0 {
            std::thread::sleep(Duration::from_millis(1200));
            return String::new();
        }
        p.acquire(&all(3), r.rank).err().unwrap().to_string()
    });
    for m in &outs[1..] {
        assert!(m.contains("rank 0 did not arrive"), "{m}");
    }
    // A member that never joins: the first rank names it and removes the segment.
    let outs = with_ranks(3, &j, tiny(t), |r, p| {
        if r.rank == 2 {
            std::thread::sleep(Duration::from_millis(1200));
            return String::new();
        }
        p.acquire(&all(3), r.rank).err().unwrap().to_string()
    });
    for m in &outs[..2] {
        assert!(m.contains("rank 2 did not arrive"), "{m}");
    }
    assert!(job_segments(&j).is_empty(), "{:?}", job_segments(&j));
}

#[test]
fn an_abort_fails_the_others_at_once() {
    let start = Instant::now();
    let outs = with_ranks(3, &job("abort"), tiny(patient()), |r, p| {
        let comm = p.acquire(&all(3), r.rank).unwrap();
        if r.rank == 0 {
            std::thread::sleep(Duration::from_millis(200));
            comm.abort("test abort");
            assert!(comm.async_error().is_err());
            return String::new();
        }
        issue(r, comm.as_ref(), Case::AllGather, DType::I32, 5)
            .unwrap_err()
            .to_string()
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    for m in &outs[1..] {
        assert!(m.contains("test abort"), "{m}");
    }
}

#[test]
fn a_dead_rank_is_named_as_soon_as_the_coordinator_knows() {
    let j = job("dead");
    let mut coords: Vec<Option<LocalCoordinator>> = LocalCoordinator::job(&j, 3)
        .unwrap()
        .into_iter()
        .map(Some)
        .collect();
    let victim = coords[1].take().unwrap();
    let start = Instant::now();
    let outs: Vec<String> = std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(victim);
        });
        let hs: Vec<_> = [0usize, 2]
            .into_iter()
            .map(|rank| {
                let c: Arc<dyn Coordinator> = Arc::new(coords[rank].take().unwrap());
                s.spawn(move || {
                    let p = ShmCliqueProvider::new(c, tiny(patient()));
                    match p.acquire(&all(3), rank) {
                        Ok(_) => String::from("acquired?"),
                        Err(e) => e.to_string(),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for m in outs {
        assert!(m.contains("rank 1 failed"), "{m}");
    }
    assert!(job_segments(&j).is_empty());
}

#[test]
fn no_segment_outlives_the_setup_and_jobs_do_not_mix() {
    let (a, b) = (job("mix-a"), job("mix-b"));
    let results: Vec<Vec<u8>> = std::thread::scope(|s| {
        let ha = s.spawn(|| {
            with_ranks(2, &a, tiny(patient()), |r, p| {
                let comm = p.acquire(&all(2), r.rank).unwrap();
                assert!(job_segments(&a).is_empty());
                issue(r, comm.as_ref(), Case::AllGather, DType::U8, 300).unwrap()
            })
        });
        let hb = s.spawn(|| {
            with_ranks(2, &b, tiny(patient()), |r, p| {
                let comm = p.acquire(&all(2), r.rank).unwrap();
                issue(r, comm.as_ref(), Case::AllGather, DType::U8, 300).unwrap()
            })
        });
        vec![ha.join().unwrap().concat(), hb.join().unwrap().concat()]
    });
    assert_eq!(results[0], results[1]);
    let want = with_host_ranks(2, |r, p| {
        let comm = p.acquire(&all(2), r.rank).unwrap();
        issue(r, comm.as_ref(), Case::AllGather, DType::U8, 300).unwrap()
    });
    assert_eq!(results[0], want.concat());
    assert!(job_segments(&a).is_empty() && job_segments(&b).is_empty());
}

#[test]
fn send_receive_mismatches_and_missing_receivers_are_named() {
    let t = Timeouts::new(Duration::from_millis(100), Duration::from_millis(600));
    let outs = with_ranks(2, &job("p2p-mismatch"), tiny(t), |r, p| {
        let comm = p.acquire(&all(2), r.rank).unwrap();
        let b = r.buf(&[0u8; 64], 64);
        let st = r.stream.as_ref();
        let res = if r.rank == 0 {
            // An eager send of one chunk completes; the failure shows at the next operation
            // (or in `async_error`).
            comm.send(st, b.ptr(), 8, DType::F32, 1)
                .and_then(|()| st.synchronize())
                .unwrap();
            issue(r, comm.as_ref(), Case::AllGather, DType::U8, 4)
        } else {
            comm.recv(st, b.ptr(), 9, DType::F32, 0)
                .and_then(|()| st.synchronize())
                .map(|()| vec![])
        };
        res.unwrap_err().to_string()
    });
    for m in outs {
        assert!(
            m.contains("the sender sends 8 f32 but the receiver expects 9 f32"),
            "{m}"
        );
    }
    // A send of many chunks whose receiver never comes: named at the timeout.
    let outs = with_ranks(2, &job("p2p-missing"), tiny(t), |r, p| {
        let comm = p.acquire(&all(2), r.rank).unwrap();
        if r.rank == 1 {
            std::thread::sleep(Duration::from_millis(1200));
            return String::new();
        }
        let b = r.buf(&[0u8; 4000], 4000);
        let st = r.stream.as_ref();
        comm.send(st, b.ptr(), 1000, DType::F32, 1)
            .and_then(|()| st.synchronize())
            .unwrap_err()
            .to_string()
    });
    assert!(
        outs[0].contains("send #0 from rank 0 to rank 1")
            && outs[0].contains("rank 1 did not arrive"),
        "{}",
        outs[0]
    );
}

#[test]
fn splits_and_sub_cliques() {
    let outs = with_ranks(4, &job("split"), tiny(patient()), |r, p| {
        let parent = all(4);
        let color = (r.rank % 2) as u64;
        let sub = p.split(&parent, r.rank, Some(color)).unwrap().unwrap();
        assert_eq!(sub.size(), 2);
        issue(r, sub.as_ref(), Case::AllGather, DType::I32, 3).unwrap()
    });
    let want = with_host_ranks(4, |r, p| {
        let key = CliqueKey::new([r.rank % 2, r.rank % 2 + 2], StreamKind::Compute)
            .unwrap()
            .with_color((r.rank % 2) as u64);
        let comm = p.acquire(&key, r.rank).unwrap();
        issue(r, comm.as_ref(), Case::AllGather, DType::I32, 3).unwrap()
    });
    assert_eq!(outs, want);
}
