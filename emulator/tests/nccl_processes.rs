//! NCCL across processes: this binary (its own harness) re-executes itself as child
//! processes (`XTHUNK_EMU_TEST_NCCL_ROLE` selects what a child does), each loading the
//! emulator, that form one clique with this process or with each other from a unique id made
//! here and passed in the environment, as a product passes it through its coordinator.
//!
//! Every process checks its own ranks' outputs against a reference computed here from the
//! same seeded random inputs; failures, mismatches, a killed peer, a stopped peer (timed out,
//! or woken by `ncclCommAbort`) and what is left in the temporary folder are checked from
//! both sides.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::c_void;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use xthunk_emulator::{cuda, diag, nccl};

const ROLE: &str = "XTHUNK_EMU_TEST_NCCL_ROLE";
const I32: i32 = 2;
const F32: i32 = 7;
const SUM: i32 = 0;
const MAX: i32 = 2;
/// Elements per block.
const N: usize = 6;

// ---- helpers -------------------------------------------------------------------------------

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
const SIGKILL: i32 = 9;
const SIGSTOP: i32 = 19;

fn signal(c: &Child, sig: i32) {
    // SAFETY: signals a child process of ours, still unreaped.
    assert_eq!(unsafe { kill(c.id() as i32, sig) }, 0);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"))
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Rank `rank`'s input `op`: integer-valued floats in [-100, 100] (their sums are exact).
fn values(seed: u64, rank: usize, op: u64, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = splitmix(seed ^ splitmix(rank as u64 * 1_000_003 + op * 7919 + i as u64));
            (h % 201) as f32 - 100.0
        })
        .collect()
}

fn ints(seed: u64, rank: usize, op: u64, len: usize) -> Vec<i32> {
    (0..len)
        .map(|i| splitmix(seed ^ splitmix((rank as u64) << 40 | op << 20 | i as u64)) as i32)
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn check(r: u32, what: &str) {
    assert_eq!(r, 0, "{what} returned {r}; diagnostics: {:?}", diag::take());
}

fn nok(r: i32, what: &str) {
    assert_eq!(r, 0, "{what} returned {r}; diagnostics: {:?}", diag::take());
}

/// `ncclConfig_t` as NCCL 2.14 laid it out.
#[repr(C)]
struct Config {
    size: usize,
    magic: u32,
    version: u32,
    blocking: i32,
}

/// One local rank: its device's primary context, buffers and communicator.
struct Local {
    rank: usize,
    dev: i32,
    ctx: usize,
    send: u64,
    recv: u64,
    comm: usize,
}

impl Local {
    fn new(rank: usize, dev: i32, nranks: usize) -> Local {
        check(cuda::cuInit(0), "cuInit");
        let mut ctx = 0usize;
        // SAFETY: valid out-pointers.
        unsafe {
            check(cuda::cuDevicePrimaryCtxRetain(&mut ctx, dev), "retain");
        }
        let mut l = Local {
            rank,
            dev,
            ctx,
            send: 0,
            recv: 0,
            comm: 0,
        };
        l.current();
        // SAFETY: valid out-pointers.
        unsafe {
            check(cuda::cuMemAlloc_v2(&mut l.send, 4 * N * nranks), "alloc");
            check(cuda::cuMemAlloc_v2(&mut l.recv, 4 * N * nranks), "alloc");
        }
        l
    }

    fn current(&self) {
        // SAFETY: a retained context.
        check(
            unsafe { cuda::cuCtxSetCurrent(self.ctx) },
            "cuCtxSetCurrent",
        );
    }

    fn put(&self, dst: u64, b: &[u8]) {
        self.current();
        // SAFETY: `b` is a live host buffer; `dst` a device buffer large enough.
        check(
            unsafe { cuda::cuMemcpyHtoD_v2(dst, b.as_ptr().cast(), b.len()) },
            "upload",
        );
    }

    /// Downloads `n` bytes (a synchronous copy: waits for the collectives queued before).
    fn get(&self, src: u64, n: usize) -> Result<Vec<u8>, u32> {
        self.current();
        let mut out = vec![0u8; n];
        // SAFETY: `out` holds `n` bytes.
        match unsafe { cuda::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, n) } {
            0 => Ok(out),
            e => Err(e),
        }
    }

    fn floats(&self, src: u64, n: usize) -> Vec<f32> {
        let b = self.get(src, 4 * n).unwrap_or_else(|e| {
            panic!(
                "rank {}: download failed ({e}): {:?}",
                self.rank,
                diag::take()
            )
        });
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn free(self) {
        self.current();
        // SAFETY: our buffers and retained context.
        unsafe {
            let _ = cuda::cuMemFree_v2(self.send);
            let _ = cuda::cuMemFree_v2(self.recv);
            let _ = cuda::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }

    fn sp(&self, elems: usize) -> *const c_void {
        (self.send as usize + 4 * elems) as *const c_void
    }

    fn rp(&self, elems: usize) -> *mut c_void {
        (self.recv as usize + 4 * elems) as *mut c_void
    }
}

/// Initializes the communicators of `ls` (one thread for all of them: inside a group).
fn init(ls: &mut [Local], id: nccl::UniqueId, nranks: usize, blocking: bool) {
    let grouped = ls.len() > 1;
    if grouped {
        nok(nccl::ncclGroupStart(), "ncclGroupStart");
    }
    let mut rcs = vec![];
    for l in ls.iter_mut() {
        l.current();
        let mut cfg = Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 21400,
            blocking: i32::from(blocking),
        };
        // SAFETY: valid out-pointer and config.
        let rc = unsafe {
            nccl::ncclCommInitRankConfig(
                &mut l.comm,
                nranks as i32,
                id,
                l.rank as i32,
                (&mut cfg as *mut Config).cast(),
            )
        };
        rcs.push(rc);
    }
    if grouped {
        // SAFETY: ends the group begun above.
        rcs.push(unsafe { nccl::ncclGroupEnd() });
    }
    for rc in rcs {
        assert!(
            rc == 0 || (!blocking && rc == nccl::IN_PROGRESS),
            "init returned {rc}: {:?}",
            diag::take()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for l in ls.iter() {
        loop {
            let mut state = -1;
            // SAFETY: valid out-pointer.
            nok(
                unsafe { nccl::ncclCommGetAsyncError(l.comm, &mut state) },
                "ncclCommGetAsyncError",
            );
            if state == 0 {
                break;
            }
            assert_eq!(state, nccl::IN_PROGRESS, "{:?}", diag::take());
            assert!(Instant::now() < deadline, "init never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (mut count, mut me) = (0, 0);
        // SAFETY: valid out-pointers.
        unsafe {
            nok(nccl::ncclCommCount(l.comm, &mut count), "ncclCommCount");
            nok(nccl::ncclCommUserRank(l.comm, &mut me), "ncclCommUserRank");
        }
        assert_eq!((count as usize, me as usize), (nranks, l.rank));
    }
}

/// Issues `f` for every local rank (one group when several).
fn each(ls: &[Local], f: impl Fn(&Local)) {
    let grouped = ls.len() > 1;
    if grouped {
        nok(nccl::ncclGroupStart(), "ncclGroupStart");
    }
    for l in ls {
        l.current();
        f(l);
    }
    if grouped {
        // SAFETY: ends the group begun above.
        nok(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd");
    }
}

fn assert_eq_f(got: Vec<f32>, want: Vec<f32>, what: &str, rank: usize) {
    assert_eq!(got, want, "rank {rank}: {what}");
}

/// Every collective and grouped send/receive, checked against the reference.
fn collectives(ls: &[Local], nranks: usize, seed: u64) {
    let sum_of = |op: u64, at: usize| -> Vec<f32> {
        (0..N)
            .map(|i| {
                (0..nranks)
                    .map(|q| values(seed, q, op, N * nranks)[at + i])
                    .sum()
            })
            .collect()
    };
    for l in ls {
        l.put(l.send, &f32_bytes(&values(seed, l.rank, 1, N * nranks)));
    }
    // All-reduce (sum), then in place (max).
    each(ls, |l| {
        nok(
            nccl::ncclAllReduce(l.sp(0), l.rp(0), N, F32, SUM, l.comm, 0),
            "ncclAllReduce",
        )
    });
    for l in ls {
        assert_eq_f(l.floats(l.recv, N), sum_of(1, 0), "all-reduce", l.rank);
    }
    each(ls, |l| {
        let p = l.send as *mut c_void;
        nok(
            nccl::ncclAllReduce(p, p, N, F32, MAX, l.comm, 0),
            "ncclAllReduce",
        )
    });
    let max: Vec<f32> = (0..N)
        .map(|i| {
            (0..nranks)
                .map(|q| values(seed, q, 1, N * nranks)[i])
                .fold(f32::MIN, f32::max)
        })
        .collect();
    for l in ls {
        assert_eq_f(l.floats(l.send, N), max.clone(), "in-place max", l.rank);
        l.put(l.send, &f32_bytes(&values(seed, l.rank, 3, N * nranks)));
    }
    // All-gather.
    each(ls, |l| {
        nok(
            nccl::ncclAllGather(l.sp(0), l.rp(0), N, F32, l.comm, 0),
            "ncclAllGather",
        )
    });
    let gathered: Vec<f32> = (0..nranks)
        .flat_map(|q| values(seed, q, 3, N * nranks)[..N].to_vec())
        .collect();
    for l in ls {
        assert_eq_f(
            l.floats(l.recv, N * nranks),
            gathered.clone(),
            "all-gather",
            l.rank,
        );
    }
    // Reduce-scatter: rank r gets block r of the sum.
    each(ls, |l| {
        nok(
            nccl::ncclReduceScatter(l.sp(0), l.rp(0), N, F32, SUM, l.comm, 0),
            "ncclReduceScatter",
        )
    });
    for l in ls {
        assert_eq_f(
            l.floats(l.recv, N),
            sum_of(3, l.rank * N),
            "reduce-scatter",
            l.rank,
        );
    }
    // Broadcast from the last rank.
    let root = nranks - 1;
    each(ls, |l| {
        nok(
            nccl::ncclBroadcast(l.sp(0), l.rp(0), N, F32, root as i32, l.comm, 0),
            "ncclBroadcast",
        )
    });
    for l in ls {
        let want = values(seed, root, 3, N * nranks)[..N].to_vec();
        assert_eq_f(l.floats(l.recv, N), want, "broadcast", l.rank);
    }
    // Reduce to rank 1: the others' receive buffers are untouched.
    let sentinel = vec![7777.0f32; N];
    for l in ls {
        l.put(l.recv, &f32_bytes(&sentinel));
    }
    each(ls, |l| {
        nok(
            nccl::ncclReduce(l.sp(0), l.rp(0), N, F32, SUM, 1, l.comm, 0),
            "ncclReduce",
        )
    });
    for l in ls {
        let want = if l.rank == 1 {
            sum_of(3, 0)
        } else {
            sentinel.clone()
        };
        assert_eq_f(l.floats(l.recv, N), want, "reduce", l.rank);
    }
    // An int32 all-reduce over the whole range (wrapping sums).
    for l in ls {
        let b: Vec<u8> = ints(seed, l.rank, 7, N)
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        l.put(l.send, &b);
    }
    each(ls, |l| {
        nok(
            nccl::ncclAllReduce(l.sp(0), l.rp(0), N, I32, SUM, l.comm, 0),
            "ncclAllReduce",
        )
    });
    let want: Vec<i32> = (0..N)
        .map(|i| (0..nranks).fold(0i32, |a, q| a.wrapping_add(ints(seed, q, 7, N)[i])))
        .collect();
    for l in ls {
        let got: Vec<i32> = l
            .get(l.recv, 4 * N)
            .unwrap()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(got, want, "rank {}: int32 all-reduce", l.rank);
        l.put(l.send, &f32_bytes(&values(seed, l.rank, 3, N * nranks)));
    }
    // A ring: send to the next rank, receive from the previous.
    each(ls, |l| {
        let (next, prev) = ((l.rank + 1) % nranks, (l.rank + nranks - 1) % nranks);
        nok(nccl::ncclGroupStart(), "ncclGroupStart");
        nok(
            nccl::ncclSend(l.sp(0), N, F32, next as i32, l.comm, 0),
            "ncclSend",
        );
        nok(
            nccl::ncclRecv(l.rp(0), N, F32, prev as i32, l.comm, 0),
            "ncclRecv",
        );
        // SAFETY: ends the group begun above (nested in `each`'s).
        nok(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd");
    });
    for l in ls {
        let prev = (l.rank + nranks - 1) % nranks;
        let want = values(seed, prev, 3, N * nranks)[..N].to_vec();
        assert_eq_f(l.floats(l.recv, N), want, "ring send/recv", l.rank);
        l.put(l.send, &f32_bytes(&values(seed, l.rank, 9, N * nranks)));
    }
    // An all-to-all of grouped sends and receives, the rank itself included.
    each(ls, |l| {
        nok(nccl::ncclGroupStart(), "ncclGroupStart");
        for q in 0..nranks {
            nok(
                nccl::ncclSend(l.sp(q * N), N, F32, q as i32, l.comm, 0),
                "ncclSend",
            );
            nok(
                nccl::ncclRecv(l.rp(q * N), N, F32, q as i32, l.comm, 0),
                "ncclRecv",
            );
        }
        // SAFETY: ends the group begun above.
        nok(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd");
    });
    for l in ls {
        let want: Vec<f32> = (0..nranks)
            .flat_map(|q| values(seed, q, 9, N * nranks)[l.rank * N..(l.rank + 1) * N].to_vec())
            .collect();
        assert_eq_f(l.floats(l.recv, N * nranks), want, "all-to-all", l.rank);
        let mut state = -1;
        // SAFETY: valid out-pointer.
        nok(
            unsafe { nccl::ncclCommGetAsyncError(l.comm, &mut state) },
            "ncclCommGetAsyncError",
        );
        assert_eq!(state, 0, "rank {}: async error", l.rank);
    }
}

fn finish(ls: Vec<Local>) {
    for l in &ls {
        let rc = nccl::ncclCommFinalize(l.comm);
        assert!(rc == 0 || rc == nccl::IN_PROGRESS, "ncclCommFinalize: {rc}");
        // A non-blocking communicator finalizes in the background.
        loop {
            let mut state = -1;
            // SAFETY: valid out-pointer.
            nok(
                unsafe { nccl::ncclCommGetAsyncError(l.comm, &mut state) },
                "ncclCommGetAsyncError",
            );
            if state == 0 {
                break;
            }
            assert_eq!(state, nccl::IN_PROGRESS);
            std::thread::yield_now();
        }
        nok(nccl::ncclCommDestroy(l.comm), "ncclCommDestroy");
    }
    for l in ls {
        l.free();
    }
}

/// The local ranks of a process: one thread each (`threads`), or all on this thread.
fn run_ranks(
    ranks: &[usize],
    id: nccl::UniqueId,
    nranks: usize,
    seed: u64,
    threads: bool,
    blocking: bool,
) {
    xthunk_emulator::config::set("devices", &ranks.len().max(1).to_string()).unwrap();
    if threads {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(dev, &rank)| {
                std::thread::spawn(move || {
                    let mut ls = vec![Local::new(rank, dev as i32, nranks)];
                    init(&mut ls, id, nranks, blocking);
                    collectives(&ls, nranks, seed);
                    finish(ls);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    } else {
        let mut ls: Vec<Local> = ranks
            .iter()
            .enumerate()
            .map(|(dev, &rank)| Local::new(rank, dev as i32, nranks))
            .collect();
        init(&mut ls, id, nranks, blocking);
        collectives(&ls, nranks, seed);
        finish(ls);
    }
}

// ---- children ------------------------------------------------------------------------------

/// What a child does (from the environment): form the clique with its ranks and run a
/// scenario. Exits 0 when everything it checks holds (a panic exits non-zero).
fn child(role: &str) {
    let uid: [u8; 128] = unhex(&env("XTHUNK_EMU_TEST_ID")).try_into().unwrap();
    let id = nccl::UniqueId { internal: uid };
    let nranks: usize = env("XTHUNK_EMU_TEST_NRANKS").parse().unwrap();
    let ranks: Vec<usize> = env("XTHUNK_EMU_TEST_RANKS")
        .split(',')
        .map(|r| r.parse().unwrap())
        .collect();
    let seed: u64 = env("XTHUNK_EMU_TEST_SEED").parse().unwrap();
    let threads = std::env::var("XTHUNK_EMU_TEST_THREADS").is_ok();
    let blocking = std::env::var("XTHUNK_EMU_TEST_NONBLOCKING").is_err();
    match role {
        "collectives" => run_ranks(&ranks, id, nranks, seed, threads, blocking),
        "mismatch" | "mismatch-p2p" => {
            let mut ls = vec![Local::new(ranks[0], 0, nranks)];
            init(&mut ls, id, nranks, true);
            let reported = mismatch(&ls[0], role == "mismatch-p2p");
            println!("REPORTED {reported}");
        }
        "split" => split(&ranks, id, nranks, seed),
        "init-fails" => println!("REPORTED {}", init_fails(ranks[0], id, nranks)),
        "idle" => {
            let mut ls = vec![Local::new(ranks[0], 0, nranks)];
            init(&mut ls, id, nranks, true);
            println!("READY");
            // Killed by the parent.
            std::thread::sleep(Duration::from_secs(120));
            std::process::exit(3);
        }
        r => panic!("unknown role {r}"),
    }
    println!("OK");
}

/// Rank 0 and rank 1 disagree (a count one larger on rank 1): the operation fails on this
/// rank too, and a diagnostic says why; its text.
fn mismatch(l: &Local, p2p: bool) -> String {
    let n = N + l.rank;
    let rc = if p2p {
        if l.rank == 0 {
            nccl::ncclSend(l.sp(0), N, F32, 1, l.comm, 0)
        } else {
            nccl::ncclRecv(l.rp(0), n, F32, 0, l.comm, 0)
        }
    } else {
        nccl::ncclAllReduce(l.sp(0), l.rp(0), n, F32, SUM, l.comm, 0)
    };
    nok(rc, "issue");
    assert!(
        l.get(l.recv, 4).is_err(),
        "rank {}: the mismatch went unnoticed",
        l.rank
    );
    let mut state = 0;
    // SAFETY: valid out-pointer.
    nok(
        unsafe { nccl::ncclCommGetAsyncError(l.comm, &mut state) },
        "ncclCommGetAsyncError",
    );
    assert_eq!(state, 2, "rank {}: async error", l.rank);
    let want = if p2p {
        "rank 0 sends 24 bytes, rank 1 receives 28 bytes"
    } else {
        "rank 1 passed 7 × float32 (28 bytes), sum, rank 0 passed 6 × float32 (24 bytes), sum"
    };
    let d = diag::take()
        .into_iter()
        .find(|d| d.message.contains(want))
        .unwrap_or_else(|| panic!("rank {}: no diagnostic says `{want}`", l.rank));
    d.message
}

/// A blocking init that must fail because the processes disagree on the clique's size: the
/// diagnostic that says so.
fn init_fails(rank: usize, id: nccl::UniqueId, nranks: usize) -> String {
    let l = Local::new(rank, 0, nranks);
    let mut comm = 0usize;
    // SAFETY: valid out-pointer.
    let rc = unsafe { nccl::ncclCommInitRank(&mut comm, nranks as i32, id, rank as i32) };
    assert!(
        rc == nccl::INVALID_USAGE || rc == nccl::REMOTE_ERROR,
        "rank {rank}: init returned {rc}"
    );
    assert_eq!(comm, 0);
    let want = "says the clique has";
    let d = diag::take()
        .into_iter()
        .find(|d| d.message.contains(want))
        .unwrap_or_else(|| panic!("rank {rank}: no diagnostic says `{want}`"));
    l.free();
    d.message
}

/// A 4-rank clique splits by rank parity into two cliques that each span both processes.
fn split(ranks: &[usize], id: nccl::UniqueId, nranks: usize, seed: u64) {
    xthunk_emulator::config::set("devices", &ranks.len().to_string()).unwrap();
    let hs: Vec<_> = ranks
        .iter()
        .enumerate()
        .map(|(dev, &rank)| {
            std::thread::spawn(move || {
                let mut ls = vec![Local::new(rank, dev as i32, nranks)];
                init(&mut ls, id, nranks, true);
                let l = &ls[0];
                let mut sub = 0usize;
                let color = (rank % 2) as i32;
                // SAFETY: valid out-pointer; no config (inherits blocking).
                let rc = unsafe {
                    nccl::ncclCommSplit(l.comm, color, rank as i32, &mut sub, std::ptr::null_mut())
                };
                nok(rc, "ncclCommSplit");
                let (mut count, mut me) = (0, 0);
                // SAFETY: valid out-pointers.
                unsafe {
                    nok(nccl::ncclCommCount(sub, &mut count), "ncclCommCount");
                    nok(nccl::ncclCommUserRank(sub, &mut me), "ncclCommUserRank");
                }
                assert_eq!((count, me as usize), (2, rank / 2));
                l.put(l.send, &f32_bytes(&values(seed, rank, 11, N)));
                nok(
                    nccl::ncclAllReduce(l.sp(0), l.rp(0), N, F32, SUM, sub, 0),
                    "ncclAllReduce",
                );
                let want: Vec<f32> = (0..N)
                    .map(|i| {
                        (0..nranks)
                            .filter(|q| q % 2 == rank % 2)
                            .map(|q| values(seed, q, 11, N)[i])
                            .sum()
                    })
                    .collect();
                assert_eq_f(
                    l.floats(l.recv, N),
                    want,
                    "all-reduce after the split",
                    rank,
                );
                nok(nccl::ncclCommDestroy(sub), "ncclCommDestroy");
                finish(ls);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

// ---- the parent's side ---------------------------------------------------------------------

struct Clique {
    id: nccl::UniqueId,
    nranks: usize,
    seed: u64,
}

impl Clique {
    fn new(nranks: usize) -> Clique {
        let mut id = nccl::UniqueId { internal: [0; 128] };
        // SAFETY: valid out-pointer.
        nok(unsafe { nccl::ncclGetUniqueId(&mut id) }, "ncclGetUniqueId");
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Clique { id, nranks, seed }
    }

    /// A child holding `ranks` in `role`.
    fn spawn(&self, role: &str, ranks: &[usize], extra: &[(&str, &str)]) -> Child {
        let list: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.env(ROLE, role)
            .env("XTHUNK_EMU_TEST_ID", hex(&self.id.internal))
            .env("XTHUNK_EMU_TEST_NRANKS", self.nranks.to_string())
            .env("XTHUNK_EMU_TEST_RANKS", list.join(","))
            .env("XTHUNK_EMU_TEST_SEED", self.seed.to_string())
            .env("XTHUNK_EMU_DEVICES", ranks.len().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in extra {
            c.env(k, v);
        }
        c.spawn().unwrap()
    }

    /// The rendezvous folder is gone (nothing left on disk).
    fn assert_clean(&self) {
        let dir = nccl::rendezvous_dir(&self.id.internal);
        let deadline = Instant::now() + Duration::from_secs(5);
        while dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !dir.exists(),
            "{} was left behind: {:?}",
            dir.display(),
            std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        );
    }
}

/// Waits for a child and requires it to have succeeded; its stdout.
fn succeeded(c: Child, what: &str) -> String {
    let out: Output = c.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{what}: child failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Reads the child's stdout up to its `READY` line.
fn wait_ready(c: &mut Child) {
    use std::io::{BufRead, BufReader};
    let out = c.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    for l in lines.by_ref() {
        if l.unwrap().contains("READY") {
            return;
        }
    }
    panic!("the child ended before it was ready");
}

fn two_processes_one_rank_each() {
    let cl = Clique::new(2);
    // This process made the id and holds rank 0 (non-blocking init); the child holds rank 1.
    let child = cl.spawn("collectives", &[1], &[("XTHUNK_EMU_TEST_THREADS", "1")]);
    run_ranks(&[0], cl.id, 2, cl.seed, true, false);
    succeeded(child, "rank 1");
    cl.assert_clean();
}

fn two_processes_two_ranks_each() {
    let cl = Clique::new(4);
    // This process holds ranks 0 and 2 on two threads; the child ranks 1 and 3, driven from
    // one thread in groups.
    let child = cl.spawn("collectives", &[1, 3], &[]);
    run_ranks(&[0, 2], cl.id, 4, cl.seed, true, true);
    succeeded(child, "ranks 1 and 3");
    cl.assert_clean();
}

fn two_children_without_the_maker() {
    // The process that made the id holds no rank: two other processes form the clique.
    let cl = Clique::new(2);
    let a = cl.spawn("collectives", &[0], &[("XTHUNK_EMU_TEST_NONBLOCKING", "1")]);
    let b = cl.spawn("collectives", &[1], &[]);
    succeeded(a, "rank 0");
    succeeded(b, "rank 1");
    cl.assert_clean();
}

fn split_across_processes() {
    let cl = Clique::new(4);
    let child = cl.spawn("split", &[2, 3], &[]);
    split(&[0, 1], cl.id, 4, cl.seed);
    succeeded(child, "ranks 2 and 3");
    cl.assert_clean();
    // The derived cliques' folders are gone too.
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("xthunk-emu-nccl-")
                && std::fs::read_dir(e.path()).is_ok_and(|d| {
                    d.flatten().any(|f| {
                        f.file_name().to_string_lossy() == format!("{}.sock", std::process::id())
                    })
                })
        })
        .collect();
    assert!(left.is_empty(), "sockets of this process left: {left:?}");
}

fn mismatch_reported_on_both_sides() {
    for role in ["mismatch", "mismatch-p2p"] {
        let cl = Clique::new(2);
        let child = cl.spawn(role, &[1], &[]);
        let _ = diag::take();
        xthunk_emulator::config::set("devices", "1").unwrap();
        let mut ls = vec![Local::new(0, 0, 2)];
        init(&mut ls, cl.id, 2, true);
        let mine = std::panic::catch_unwind(|| mismatch(&ls[0], role == "mismatch-p2p"));
        let theirs = succeeded(child, role);
        let mine =
            mine.unwrap_or_else(|_| panic!("{role}: this side failed; the child's:\n{theirs}"));
        assert!(theirs.contains("REPORTED"), "{theirs}");
        if role == "mismatch-p2p" {
            assert!(mine.contains("reported by process"), "{mine}");
        }
        // The same clique name on both sides.
        let name = mine.split(':').next().unwrap().to_string();
        let clique = name
            .split("of clique ")
            .nth(1)
            .unwrap_or_else(|| panic!("no clique in `{mine}`"))
            .to_string();
        assert!(
            theirs.contains(&clique),
            "`{theirs}` does not name {clique}"
        );
        // The child exited normally without destroying its communicator: it left the clique,
        // which is no error here.
        std::thread::sleep(Duration::from_millis(200));
        let later = diag::take();
        assert!(
            !later.iter().any(|d| d.message.contains("ncclRemoteError")),
            "{later:?}"
        );
        let l = ls.pop().unwrap();
        // SAFETY: a handle of ours.
        nok(nccl::ncclCommAbort(l.comm), "ncclCommAbort");
        l.free();
        let _ = diag::take();
        cl.assert_clean();
    }
}

/// Runs an all-reduce of rank 0 on a thread: the time it failed (or `None` if it succeeded).
fn waiter(l: &Local) -> std::thread::JoinHandle<(Option<Instant>, u32)> {
    let (send, recv, comm, ctx) = (l.send, l.recv, l.comm, l.ctx);
    std::thread::spawn(move || {
        // SAFETY: a retained context.
        check(unsafe { cuda::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent");
        let rc = nccl::ncclAllReduce(
            send as *const c_void,
            recv as *mut c_void,
            N,
            F32,
            SUM,
            comm,
            0,
        );
        nok(rc, "ncclAllReduce");
        let mut out = vec![0u8; 4];
        // SAFETY: `out` holds 4 bytes.
        let r = unsafe { cuda::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), recv, 4) };
        ((r != 0).then(Instant::now), r)
    })
}

fn peer(cl: &Clique) -> (Child, Local) {
    let mut child = cl.spawn("idle", &[1], &[]);
    xthunk_emulator::config::set("devices", "1").unwrap();
    let mut ls = vec![Local::new(0, 0, 2)];
    init(&mut ls, cl.id, 2, true);
    wait_ready(&mut child);
    (child, ls.pop().unwrap())
}

fn killed_peer_fails_the_waiter_promptly() {
    let cl = Clique::new(2);
    let _ = diag::take();
    let (mut child, l) = peer(&cl);
    let pid = child.id();
    let w = waiter(&l);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!w.is_finished(), "the all-reduce finished without its peer");
    let killed = Instant::now();
    child.kill().unwrap();
    let (failed, rc) = w.join().unwrap();
    let failed = failed.unwrap_or_else(|| panic!("the all-reduce succeeded without its peer"));
    let took = failed - killed;
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} (the timeout is 60 s)"
    );
    assert_ne!(rc, 0);
    let mut state = 0;
    // SAFETY: valid out-pointer.
    nok(
        unsafe { nccl::ncclCommGetAsyncError(l.comm, &mut state) },
        "ncclCommGetAsyncError",
    );
    assert_eq!(state, nccl::REMOTE_ERROR);
    let ds = diag::take();
    let want = format!("process {pid} (ranks [1])");
    assert!(
        ds.iter()
            .any(|d| d.call == "ncclAllReduce" && d.message.contains(&want)),
        "no diagnostic names {want} for the all-reduce: {ds:?}"
    );
    let _ = child.wait();
    // SAFETY: a handle of ours.
    nok(nccl::ncclCommAbort(l.comm), "ncclCommAbort");
    l.free();
    let _ = diag::take();
    cl.assert_clean();
    eprintln!("  (the waiter failed {took:?} after the kill)");
}

fn stopped_peer_and_abort_wake_the_waiter() {
    let cl = Clique::new(2);
    let _ = diag::take();
    let (mut child, l) = peer(&cl);
    signal(&child, SIGSTOP);
    let w = waiter(&l);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!w.is_finished(), "the all-reduce finished without its peer");
    let aborted = Instant::now();
    // SAFETY: a handle of ours; another thread waits in its all-reduce.
    nok(nccl::ncclCommAbort(l.comm), "ncclCommAbort");
    let (failed, _) = w.join().unwrap();
    let took = failed.expect("the all-reduce succeeded") - aborted;
    assert!(
        took < Duration::from_secs(2),
        "abort took {took:?} to wake the waiter"
    );
    let ds = diag::take();
    assert!(
        ds.iter().any(|d| d.message.contains("was aborted")),
        "no diagnostic for the aborted all-reduce: {ds:?}"
    );
    signal(&child, SIGKILL);
    let _ = child.wait();
    l.free();
    let _ = diag::take();
    cl.assert_clean();
}

fn stopped_peer_times_out() {
    let cl = Clique::new(2);
    let _ = diag::take();
    let (mut child, l) = peer(&cl);
    let pid = child.id();
    signal(&child, SIGSTOP);
    xthunk_emulator::config::set("nccl_timeout", "2").unwrap();
    let started = Instant::now();
    let (failed, _) = waiter(&l).join().unwrap();
    xthunk_emulator::config::set("nccl_timeout", "60").unwrap();
    let took = failed.expect("the all-reduce succeeded") - started;
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(10),
        "timed out after {took:?} (2 s asked)"
    );
    let ds = diag::take();
    let want = format!("rank 1 (process {pid})");
    assert!(
        ds.iter()
            .any(|d| d.message.contains("timed out") && d.message.contains(&want)),
        "no timeout diagnostic names {want}: {ds:?}"
    );
    signal(&child, SIGKILL);
    let _ = child.wait();
    // SAFETY: a handle of ours.
    nok(nccl::ncclCommAbort(l.comm), "ncclCommAbort");
    l.free();
    let _ = diag::take();
    cl.assert_clean();
}

fn a_peer_killed_during_init_fails_it() {
    // Rank 2 of 3 never comes: rank 1's process is killed while both wait for it.
    let cl = Clique::new(3);
    let _ = diag::take();
    let mut child = cl.spawn("idle", &[1], &[]);
    let pid = child.id();
    xthunk_emulator::config::set("devices", "1").unwrap();
    let mut l = Local::new(0, 0, 3);
    let mut cfg = Config {
        size: std::mem::size_of::<Config>(),
        magic: 0xcafe_beef,
        version: 21400,
        blocking: 0,
    };
    // SAFETY: valid out-pointer and config.
    let rc = unsafe {
        nccl::ncclCommInitRankConfig(&mut l.comm, 3, cl.id, 0, (&mut cfg as *mut Config).cast())
    };
    assert_eq!(rc, nccl::IN_PROGRESS);
    // Both processes are at the rendezvous (their sockets are there), then this one has
    // surely connected to the child.
    let dir = nccl::rendezvous_dir(&cl.id.internal);
    let both = || {
        [pid, std::process::id()]
            .iter()
            .all(|p| dir.join(format!("{p}.sock")).exists())
    };
    let t = Instant::now();
    while !both() {
        assert!(t.elapsed() < Duration::from_secs(30), "no rendezvous");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    let state = |c: usize| {
        let mut s = -1;
        // SAFETY: valid out-pointer.
        nok(
            unsafe { nccl::ncclCommGetAsyncError(c, &mut s) },
            "ncclCommGetAsyncError",
        );
        s
    };
    assert_eq!(state(l.comm), nccl::IN_PROGRESS);
    let killed = Instant::now();
    child.kill().unwrap();
    while state(l.comm) == nccl::IN_PROGRESS && killed.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = killed.elapsed();
    assert_eq!(state(l.comm), nccl::REMOTE_ERROR);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let ds = diag::take();
    let want = format!("process {pid} (ranks [1])");
    assert!(
        ds.iter().any(|d| d.message.contains(&want)),
        "no diagnostic names {want}: {ds:?}"
    );
    let _ = child.wait();
    // SAFETY: a handle of ours.
    nok(nccl::ncclCommAbort(l.comm), "ncclCommAbort");
    l.free();
    let _ = diag::take();
    // The dead child's socket is removed for it.
    cl.assert_clean();
}

fn processes_that_disagree_on_the_size_both_fail() {
    let cl = Clique::new(2);
    let child = cl.spawn("init-fails", &[1], &[("XTHUNK_EMU_TEST_NRANKS", "3")]);
    xthunk_emulator::config::set("devices", "1").unwrap();
    let _ = diag::take();
    let mine = init_fails(0, cl.id, 2);
    let theirs = succeeded(child, "rank 1 of 3");
    assert!(mine.contains("ranks"), "{mine}");
    assert!(theirs.contains("REPORTED"), "{theirs}");
    cl.assert_clean();
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        child(&role);
        return;
    }
    let tests: [(&str, fn()); 10] = [
        ("two_processes_one_rank_each", two_processes_one_rank_each),
        ("two_processes_two_ranks_each", two_processes_two_ranks_each),
        (
            "two_children_without_the_maker",
            two_children_without_the_maker,
        ),
        ("split_across_processes", split_across_processes),
        (
            "mismatch_reported_on_both_sides",
            mismatch_reported_on_both_sides,
        ),
        (
            "killed_peer_fails_the_waiter_promptly",
            killed_peer_fails_the_waiter_promptly,
        ),
        (
            "stopped_peer_and_abort_wake_the_waiter",
            stopped_peer_and_abort_wake_the_waiter,
        ),
        ("stopped_peer_times_out", stopped_peer_times_out),
        (
            "a_peer_killed_during_init_fails_it",
            a_peer_killed_during_init_fails_it,
        ),
        (
            "processes_that_disagree_on_the_size_both_fail",
            processes_that_disagree_on_the_size_both_fail,
        ),
    ];
    // `cargo test -- NAME` runs the tests whose name contains NAME; libtest's flags are
    // accepted and ignored.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut failed = vec![];
    let mut ran = 0;
    for (name, f) in tests {
        if !filter.is_empty() && !filter.iter().any(|x| name.contains(x.as_str())) {
            continue;
        }
        ran += 1;
        let t = Instant::now();
        let r = std::panic::catch_unwind(f);
        let took = t.elapsed();
        match r {
            Ok(()) => println!("test {name} ... ok ({took:.2?})"),
            Err(_) => {
                println!("test {name} ... FAILED ({took:.2?})");
                failed.push(name);
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
