//! Host collectives against independent references: every operation × dtype × clique shape
//! (1–4 ranks, sub-cliques leaving devices out), fresh random inputs seeded from the case name,
//! poisoned outputs with guard bytes around every buffer and unaligned buffers; reductions
//! compared with an f64 (floats, explicit tolerances) or exact wrapping i128 (integers)
//! reference; in place; send/receive groups and permute rings; command-buffer replay; and the
//! failure paths — mismatched operations reported on every rank, a rank that never arrives
//! named at the terminate timeout, abort, the watchdog — each with every thread joined.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

use half::{bf16, f16};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Buffer, Device, DevicePtr, Stream};
use xthunk_core::collectives::{
    CliqueKey, CliqueProvider, Communicator, ReduceOp, StreamKind, Timeouts, Watchdog, split_color,
};
use xthunk_core::host::{HostBackend, HostCliqueProvider};
use xthunk_core::ir::{DType, MemorySpace};

use DType::{BF16, F16, F32, F64, I8, I32, I64, Pred, U8};

const DTYPES: [DType; 8] = [F16, BF16, F32, F64, I8, U8, I32, I64];
const GUARD: u64 = 64;
const POISON: u8 = 0xFF;

// ---------------------------------------------------------------------------------------------
// A world of host devices, one stream each.

struct World {
    devices: Vec<Arc<dyn Device>>,
    streams: Vec<Arc<dyn Stream>>,
    provider: HostCliqueProvider,
}

fn world(n: usize, timeouts: Timeouts) -> World {
    let backend = HostBackend::with_devices(n);
    let devices: Vec<Arc<dyn Device>> = (0..n).map(|i| backend.device(i).unwrap()).collect();
    let streams = devices.iter().map(|d| d.create_stream().unwrap()).collect();
    let provider = HostCliqueProvider::new(devices.clone(), timeouts).unwrap();
    World {
        devices,
        streams,
        provider,
    }
}

fn patient() -> Timeouts {
    // Long enough never to fire in a passing run, short enough that a hang fails the test.
    Timeouts::new(Duration::from_secs(5), Duration::from_secs(30))
}

fn key(ranks: &[usize]) -> CliqueKey {
    CliqueKey::new(ranks.iter().copied(), StreamKind::Communication).unwrap()
}

/// `len` bytes at `misalign` bytes past a guard, inside an allocation poisoned all over.
struct Buf {
    mem: Buffer,
    off: u64,
    len: u64,
}

impl Buf {
    fn new(dev: &Arc<dyn Device>, len: u64, misalign: u64) -> Buf {
        let total = GUARD * 2 + misalign + len;
        let mem = dev.allocate(total, 64, MemorySpace::Device).unwrap();
        dev.copy_from_host(&vec![POISON; total as usize], mem.ptr())
            .unwrap();
        Buf {
            mem,
            off: GUARD + misalign,
            len,
        }
    }
    fn ptr(&self) -> DevicePtr {
        self.mem.ptr().offset(self.off)
    }
    fn write(&self, dev: &Arc<dyn Device>, bytes: &[u8]) {
        assert_eq!(bytes.len() as u64, self.len);
        dev.copy_from_host(bytes, self.ptr()).unwrap();
    }
    /// The payload, after checking that the guards around it are intact.
    fn read(&self, dev: &Arc<dyn Device>, ctx: &str) -> Vec<u8> {
        let mut all = vec![0u8; self.mem.size() as usize];
        dev.copy_to_host(self.mem.ptr(), &mut all).unwrap();
        let (a, b) = (self.off as usize, (self.off + self.len) as usize);
        assert!(
            all[..a].iter().chain(&all[b..]).all(|x| *x == POISON),
            "{ctx}: bytes outside the buffer were written"
        );
        all[a..b].to_vec()
    }
}

fn rng_for(name: &str) -> ChaCha8Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ChaCha8Rng::seed_from_u64(h)
}

// ---------------------------------------------------------------------------------------------
// Values and the reference (independent of the implementation).

fn is_float(d: DType) -> bool {
    matches!(d, F16 | BF16 | F32 | F64)
}

fn encode_f(d: DType, x: f64, out: &mut Vec<u8>) {
    match d {
        F16 => out.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
        BF16 => out.extend_from_slice(&bf16::from_f64(x).to_le_bytes()),
        F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
        F64 => out.extend_from_slice(&x.to_le_bytes()),
        _ => unreachable!(),
    }
}

fn decode_f(d: DType, b: &[u8]) -> Vec<f64> {
    b.chunks_exact(d.size())
        .map(|c| match d {
            F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
            BF16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            F64 => f64::from_le_bytes(c.try_into().unwrap()),
            _ => unreachable!(),
        })
        .collect()
}

fn decode_i(d: DType, b: &[u8]) -> Vec<i128> {
    b.chunks_exact(d.size())
        .map(|c| match d {
            Pred | U8 => c[0] as i128,
            I8 => c[0] as i8 as i128,
            I32 => i32::from_le_bytes(c.try_into().unwrap()) as i128,
            I64 => i64::from_le_bytes(c.try_into().unwrap()) as i128,
            _ => unreachable!(),
        })
        .collect()
}

/// Truncates to the dtype's width (two's complement), as wrapping arithmetic does.
fn wrap(d: DType, v: i128) -> i128 {
    match d {
        Pred | U8 => v as u8 as i128,
        I8 => v as i8 as i128,
        I32 => v as i32 as i128,
        I64 => v as i64 as i128,
        _ => unreachable!(),
    }
}

fn random_input(d: DType, op: Option<ReduceOp>, n: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    if !is_float(d) {
        let mut out = vec![0u8; n * d.size()];
        rng.fill_bytes(&mut out);
        if d == Pred {
            out.iter_mut().for_each(|b| *b &= 1);
        }
        return out;
    }
    // Uniform in [0.5, 1.5) for products, [-4, 4) otherwise, then rounded to the dtype.
    let (lo, width) = if op == Some(ReduceOp::Prod) {
        (0.5, 1.0)
    } else {
        (-4.0, 8.0)
    };
    let mut out = Vec::with_capacity(n * d.size());
    for _ in 0..n {
        let x = lo + width * (rng.next_u32() as f64 / 4294967296.0);
        encode_f(d, x, &mut out);
    }
    out
}

/// Relative precision of the output type.
fn eps(d: DType) -> f64 {
    match d {
        F16 => 2f64.powi(-10),
        BF16 => 2f64.powi(-7),
        F32 => 2f64.powi(-23),
        F64 => 2f64.powi(-52),
        _ => 0.0,
    }
}

/// Checks `got` against the reduction of `inputs` (element-wise, in rank order): integers
/// exactly (wrapping), float min/max exactly, float sums within `2 eps · Σ|x|` and products
/// within `2 eps · n · |ref|` (one rounding of the output plus the f32 accumulation of the
/// half types, with margin).
fn check_reduction(d: DType, op: ReduceOp, inputs: &[&[u8]], got: &[u8], ctx: &str) {
    if is_float(d) {
        let ins: Vec<Vec<f64>> = inputs.iter().map(|b| decode_f(d, b)).collect();
        let got = decode_f(d, got);
        for (i, g) in got.iter().enumerate() {
            let xs = ins.iter().map(|v| v[i]);
            let (want, tol) = match op {
                ReduceOp::Sum => (
                    xs.clone().sum::<f64>(),
                    2.0 * eps(d) * xs.map(f64::abs).sum::<f64>(),
                ),
                ReduceOp::Prod => {
                    let p: f64 = xs.product();
                    (p, 2.0 * eps(d) * ins.len() as f64 * p.abs())
                }
                ReduceOp::Min => (xs.fold(f64::INFINITY, f64::min), 0.0),
                ReduceOp::Max => (xs.fold(f64::NEG_INFINITY, f64::max), 0.0),
            };
            if (g - want).abs() > tol {
                let xs: Vec<f64> = ins.iter().map(|v| v[i]).collect();
                panic!("{ctx}: element {i}: got {g}, want {want} ± {tol} (inputs {xs:?})");
            }
        }
    } else {
        let ins: Vec<Vec<i128>> = inputs.iter().map(|b| decode_i(d, b)).collect();
        let got = decode_i(d, got);
        for (i, g) in got.iter().enumerate() {
            let xs = ins.iter().map(|v| v[i]);
            let want = if d == Pred {
                match op {
                    ReduceOp::Sum | ReduceOp::Max => xs.clone().any(|x| x != 0) as i128,
                    ReduceOp::Prod | ReduceOp::Min => xs.clone().all(|x| x != 0) as i128,
                }
            } else {
                match op {
                    ReduceOp::Sum => wrap(d, xs.sum()),
                    ReduceOp::Prod => wrap(d, xs.fold(1i128, |a, b| a.wrapping_mul(b))),
                    ReduceOp::Min => xs.min().unwrap(),
                    ReduceOp::Max => xs.max().unwrap(),
                }
            };
            if *g != want {
                let xs: Vec<i128> = ins.iter().map(|v| v[i]).collect();
                panic!("{ctx}: element {i}: got {g}, want {want} (inputs {xs:?})");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One collective on one clique.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Case {
    AllReduce(ReduceOp),
    AllGather,
    ReduceScatter(ReduceOp),
    AllToAll,
    Broadcast(usize),
}

impl Case {
    fn op(self) -> Option<ReduceOp> {
        match self {
            Case::AllReduce(op) | Case::ReduceScatter(op) => Some(op),
            _ => None,
        }
    }
    /// (source, destination) element counts per rank.
    fn sizes(self, count: usize, n: usize) -> (usize, usize) {
        match self {
            Case::AllReduce(_) | Case::Broadcast(_) => (count, count),
            Case::AllGather => (count, count * n),
            Case::ReduceScatter(_) => (count * n, count),
            Case::AllToAll => (count * n, count * n),
        }
    }
}

fn issue(
    comm: &dyn Communicator,
    s: &dyn Stream,
    case: Case,
    src: DevicePtr,
    dst: DevicePtr,
    count: u64,
    d: DType,
) -> xthunk_core::Result<()> {
    match case {
        Case::AllReduce(op) => comm.all_reduce(s, src, dst, count, d, op),
        Case::AllGather => comm.all_gather(s, src, dst, count, d),
        Case::ReduceScatter(op) => comm.reduce_scatter(s, src, dst, count, d, op),
        Case::AllToAll => comm.all_to_all(s, src, dst, count, d),
        Case::Broadcast(root) => comm.broadcast(s, src, dst, count, d, root),
    }
}

/// Runs `case` on the clique `ranks` of `w` (issuing every rank from this thread on queued
/// streams) and checks every rank's output against the reference. `in_place` uses the NCCL
/// in-place layouts.
fn run_case(w: &World, ranks: &[usize], case: Case, d: DType, count: usize, in_place: bool) {
    let n = ranks.len();
    let ctx = format!(
        "{case:?} {d} x{count} on {ranks:?}{}",
        if in_place { " in place" } else { "" }
    );
    let mut rng = rng_for(&ctx);
    let es = d.size();
    let (sc, dc) = case.sizes(count, n);
    let k = key(ranks);
    let misalign = (count % 2) as u64;
    let mut inputs = vec![];
    let mut bufs = vec![];
    for (r, &g) in ranks.iter().enumerate() {
        let dev = &w.devices[g];
        let input = random_input(d, case.op(), sc, &mut rng);
        // In place: one buffer, the source inside the destination (or the reverse).
        let (src, dst, src_off) = if in_place {
            let big = sc.max(dc);
            let b = Buf::new(dev, (big * es) as u64, misalign);
            let src_off = match case {
                Case::AllGather => r * count * es,
                _ => 0,
            };
            (None, b, src_off)
        } else {
            (
                Some(Buf::new(dev, (sc * es) as u64, misalign)),
                Buf::new(dev, (dc * es) as u64, misalign),
                0,
            )
        };
        match &src {
            Some(s) => s.write(dev, &input),
            None => {
                let mut full = vec![POISON; dst.len as usize];
                full[src_off..src_off + input.len()].copy_from_slice(&input);
                dst.write(dev, &full);
            }
        }
        inputs.push(input);
        bufs.push((src, dst, src_off));
    }
    let comms: Vec<_> = ranks
        .iter()
        .map(|&g| w.provider.acquire(&k, g).unwrap())
        .collect();
    for (r, &g) in ranks.iter().enumerate() {
        let (src, dst, src_off) = &bufs[r];
        let s_ptr = src
            .as_ref()
            .map_or(dst.ptr().offset(*src_off as u64), Buf::ptr);
        let d_ptr = match (case, src) {
            (Case::ReduceScatter(_), None) => dst.ptr().offset((r * count * es) as u64),
            _ => dst.ptr(),
        };
        issue(
            comms[r].as_ref(),
            w.streams[g].as_ref(),
            case,
            s_ptr,
            d_ptr,
            count as u64,
            d,
        )
        .unwrap_or_else(|e| panic!("{ctx}: issue on rank {r}: {e}"));
    }
    for &g in ranks {
        w.streams[g]
            .synchronize()
            .unwrap_or_else(|e| panic!("{ctx}: rank {g}: {e}"));
    }
    let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let block = count * es;
    for (r, &g) in ranks.iter().enumerate() {
        let (_, dst, _) = &bufs[r];
        let all = dst.read(&w.devices[g], &ctx);
        let ctx = format!("{ctx}, rank {r}");
        match case {
            Case::AllReduce(op) => check_reduction(d, op, &ins, &all, &ctx),
            Case::ReduceScatter(op) => {
                let (lo, hi) = (r * block, (r + 1) * block);
                let got = if in_place { &all[lo..hi] } else { &all[..] };
                let blocks: Vec<&[u8]> = ins.iter().map(|b| &b[lo..hi]).collect();
                check_reduction(d, op, &blocks, got, &ctx);
            }
            Case::AllGather => assert!(all == ins.concat(), "{ctx}"),
            Case::AllToAll => {
                let want: Vec<u8> = ins
                    .iter()
                    .flat_map(|b| b[r * block..(r + 1) * block].iter().copied())
                    .collect();
                assert!(all == want, "{ctx}");
            }
            Case::Broadcast(root) => assert!(all == ins[root], "{ctx}"),
        }
    }
}

const CLIQUES: [&[usize]; 6] = [
    &[0],
    &[0, 1],
    &[0, 1, 2],
    &[0, 1, 2, 3],
    &[1, 3],
    &[0, 2, 3],
];
const COUNTS: [usize; 4] = [1, 7, 1000, 9001];

fn matrix(cases: impl Fn(usize) -> Vec<Case>, dtypes: &[DType]) {
    let w = world(4, patient());
    for ranks in CLIQUES {
        for case in cases(ranks.len()) {
            for &d in dtypes {
                for count in COUNTS {
                    run_case(&w, ranks, case, d, count, false);
                }
            }
        }
    }
    assert!(w.provider.pending().is_none());
}

#[test]
fn all_reduce_every_op_dtype_and_clique() {
    matrix(|_| ReduceOp::ALL.map(Case::AllReduce).to_vec(), &DTYPES);
}

#[test]
fn reduce_scatter_every_op_dtype_and_clique() {
    matrix(|_| ReduceOp::ALL.map(Case::ReduceScatter).to_vec(), &DTYPES);
}

#[test]
fn all_gather_all_to_all_broadcast_every_dtype_and_clique() {
    matrix(
        |n| {
            let mut v = vec![Case::AllGather, Case::AllToAll, Case::Broadcast(0)];
            if n > 1 {
                v.push(Case::Broadcast(n - 1));
            }
            v
        },
        &DTYPES,
    );
}

#[test]
fn pred_all_reduce_is_or_and_and() {
    matrix(|_| ReduceOp::ALL.map(Case::AllReduce).to_vec(), &[Pred]);
}

#[test]
fn large_all_reduce_crosses_blocks_and_streams_stores() {
    // Just over 4 MiB per rank: many blocks per chunk, chunk edges inside blocks. (The
    // streaming-store path, used above 3/4 of the last-level cache, has its unit test.)
    let w = world(4, patient());
    let big = (1 << 20) + 5;
    run_case(
        &w,
        &[0, 1, 3],
        Case::AllReduce(ReduceOp::Sum),
        F32,
        big,
        false,
    );
    run_case(
        &w,
        &[0, 1],
        Case::AllReduce(ReduceOp::Max),
        BF16,
        2 * big,
        false,
    );
    run_case(
        &w,
        &[1, 2],
        Case::ReduceScatter(ReduceOp::Sum),
        F32,
        big,
        false,
    );
}

#[test]
fn zero_elements_is_a_no_op() {
    let w = world(4, patient());
    let k = key(&[0, 1, 2]);
    for &g in k.ranks() {
        let c = w.provider.acquire(&k, g).unwrap();
        let s = w.streams[g].as_ref();
        c.all_reduce(s, DevicePtr(0), DevicePtr(0), 0, F32, ReduceOp::Sum)
            .unwrap();
        c.all_gather(s, DevicePtr(0), DevicePtr(0), 0, F32).unwrap();
    }
    for &g in k.ranks() {
        w.streams[g].synchronize().unwrap();
    }
}

#[test]
fn in_place_forms() {
    let w = world(4, patient());
    for ranks in [&[0usize][..], &[0, 1], &[0, 1, 2, 3], &[1, 2, 3]] {
        let n = ranks.len();
        for d in [F32, BF16, I64, U8] {
            for count in [1, 1000, 5003] {
                for case in [
                    Case::AllReduce(ReduceOp::Sum),
                    Case::AllReduce(ReduceOp::Min),
                    Case::ReduceScatter(ReduceOp::Sum),
                    Case::AllGather,
                    Case::AllToAll,
                    Case::Broadcast(n - 1),
                ] {
                    run_case(&w, ranks, case, d, count, true);
                }
            }
        }
    }
}

#[test]
fn overlapping_buffers_and_bad_pointers_are_rejected_when_issued() {
    let w = world(2, patient());
    let k = key(&[0, 1]);
    let c = w.provider.acquire(&k, 0).unwrap();
    let s = w.streams[0].as_ref();
    let b = Buf::new(&w.devices[0], 4096, 0);
    let e = c
        .all_reduce(s, b.ptr(), b.ptr().offset(4), 16, F32, ReduceOp::Sum)
        .unwrap_err();
    assert!(e.to_string().contains("overlap"), "{e}");
    // All-gather in place must put the source at this rank's block.
    let e = c
        .all_gather(s, b.ptr().offset(64), b.ptr(), 16, F32)
        .unwrap_err();
    assert!(e.to_string().contains("overlap"), "{e}");
    // A pointer outside every allocation of this device.
    let e = c
        .all_reduce(s, DevicePtr(8), b.ptr(), 16, F32, ReduceOp::Sum)
        .unwrap_err();
    assert!(
        e.to_string().contains("not inside a live allocation"),
        "{e}"
    );
    // Too long for the allocation.
    let e = c
        .all_reduce(s, b.ptr(), b.ptr(), 2000, F32, ReduceOp::Sum)
        .unwrap_err();
    assert!(
        e.to_string().contains("not inside a live allocation"),
        "{e}"
    );
    assert!(c.broadcast(s, b.ptr(), b.ptr(), 1, F32, 2).is_err());
    assert!(c.send(s, b.ptr(), 1, F32, 5).is_err());
    // Nothing was queued: the peer never needs to arrive.
    s.synchronize().unwrap();
    assert!(c.async_error().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Sends and receives.

/// Each rank `r` of `ranks` sends its buffer to `targets[r]` (a clique rank, or none) and
/// receives from whoever targets it, in one group; checks every received buffer.
fn permute(
    w: &World,
    ranks: &[usize],
    targets: &[Option<usize>],
    d: DType,
    count: usize,
    recv_first: bool,
) {
    let ctx = format!("permute {targets:?} on {ranks:?} {d} x{count}");
    let mut rng = rng_for(&ctx);
    let k = key(ranks);
    let es = d.size();
    let mut ins = vec![];
    let mut outs = vec![];
    for &g in ranks {
        let dev = &w.devices[g];
        let input = random_input(d, None, count, &mut rng);
        let s = Buf::new(dev, (count * es) as u64, 0);
        s.write(dev, &input);
        ins.push((input, s));
        outs.push(Buf::new(dev, (count * es) as u64, 3));
    }
    for (r, &g) in ranks.iter().enumerate() {
        let c = w.provider.acquire(&k, g).unwrap();
        let s = w.streams[g].as_ref();
        let from = targets.iter().position(|t| *t == Some(r));
        c.group_start().unwrap();
        let recv = |c: &Arc<dyn Communicator>| {
            if let Some(f) = from {
                c.recv(s, outs[r].ptr(), count as u64, d, f).unwrap();
            }
        };
        if recv_first {
            recv(&c);
        }
        if let Some(t) = targets[r] {
            c.send(s, ins[r].1.ptr(), count as u64, d, t).unwrap();
        }
        if !recv_first {
            recv(&c);
        }
        c.group_end_on(s).unwrap();
    }
    for &g in ranks {
        w.streams[g]
            .synchronize()
            .unwrap_or_else(|e| panic!("{ctx}: rank {g}: {e}"));
    }
    for (r, &g) in ranks.iter().enumerate() {
        let got = outs[r].read(&w.devices[g], &ctx);
        match targets.iter().position(|t| *t == Some(r)) {
            Some(f) => assert!(got == ins[f].0, "{ctx}: rank {r} from {f}"),
            None => assert!(
                got.iter().all(|x| *x == POISON),
                "{ctx}: rank {r} untouched"
            ),
        }
    }
}

#[test]
fn permute_rings_and_partial_pairs() {
    let w = world(4, patient());
    for ranks in [&[0usize, 1][..], &[0, 1, 2], &[0, 1, 2, 3], &[0, 2, 3]] {
        let n = ranks.len();
        let ring: Vec<Option<usize>> = (0..n).map(|r| Some((r + 1) % n)).collect();
        let back: Vec<Option<usize>> = (0..n).map(|r| Some((r + n - 1) % n)).collect();
        for d in [F32, F16, I8, I64] {
            for count in [1, 1000, 70_001] {
                permute(&w, ranks, &ring, d, count, false);
                permute(&w, ranks, &back, d, count, true);
            }
        }
        // Rank 0 sends to itself; the last rank sends to no one and receives nothing.
        let mut partial: Vec<Option<usize>> = vec![None; n];
        partial[0] = Some(0);
        if n > 2 {
            partial[1] = Some(2);
        }
        permute(&w, ranks, &partial, F32, 513, false);
    }
}

#[test]
fn send_recv_outside_a_group_and_repeated() {
    let w = world(3, patient());
    let k = key(&[0, 1, 2]);
    let c: Vec<_> = (0..3).map(|g| w.provider.acquire(&k, g).unwrap()).collect();
    let a = Buf::new(&w.devices[0], 400, 0);
    let b = Buf::new(&w.devices[2], 400, 0);
    let payloads: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 400]).collect();
    for p in &payloads {
        a.write(&w.devices[0], p);
        // Three sends in a row from 0 to 2 meet three receives in order.
        c[0].send(w.streams[0].as_ref(), a.ptr(), 100, F32, 2)
            .unwrap();
        c[2].recv(w.streams[2].as_ref(), b.ptr(), 100, F32, 0)
            .unwrap();
        w.streams[0].synchronize().unwrap();
        w.streams[2].synchronize().unwrap();
        assert_eq!(&b.read(&w.devices[2], "send"), p);
    }
}

// ---------------------------------------------------------------------------------------------
// Immediate mode, threads per rank, command buffers, splits, keys.

#[test]
fn one_thread_per_rank_in_immediate_mode() {
    let w = Arc::new(world(4, patient()));
    let k = key(&[0, 1, 2, 3]);
    let count = 3000usize;
    let handles: Vec<_> = (0..4)
        .map(|g| {
            let w = w.clone();
            let k = k.clone();
            std::thread::spawn(move || {
                let dev = &w.devices[g];
                let s = &w.streams[g];
                s.set_immediate(true);
                let c = w.provider.acquire(&k, g).unwrap();
                let src = Buf::new(dev, (count * 4) as u64, 0);
                let dst = Buf::new(dev, (count * 4) as u64, 0);
                let mut sums = vec![];
                for it in 0..20 {
                    let v: Vec<u8> = (0..count)
                        .flat_map(|i| ((g * 1000 + i + it) as i32).to_le_bytes())
                        .collect();
                    src.write(dev, &v);
                    c.all_reduce(
                        s.as_ref(),
                        src.ptr(),
                        dst.ptr(),
                        count as u64,
                        I32,
                        ReduceOp::Sum,
                    )
                    .unwrap();
                    s.synchronize().unwrap();
                    sums.push(dst.read(dev, "immediate"));
                }
                s.set_immediate(false);
                sums
            })
        })
        .collect();
    for h in handles {
        for (it, got) in h.join().unwrap().into_iter().enumerate() {
            let want: Vec<u8> = (0..count)
                .flat_map(|i| ((6000 + 4 * (i + it)) as i32).to_le_bytes())
                .collect();
            assert!(got == want, "iteration {it}");
        }
    }
}

#[test]
fn command_buffer_replays_collectives() {
    let w = world(2, patient());
    let k = key(&[0, 1]);
    let count = 777usize;
    let mut bufs = vec![];
    let mut graphs = vec![];
    for g in 0..2 {
        let dev = &w.devices[g];
        let s = &w.streams[g];
        let c = w.provider.acquire(&k, g).unwrap();
        let src = Buf::new(dev, (count * 8) as u64, 0);
        let dst = Buf::new(dev, (count * 8) as u64, 0);
        let got = Buf::new(dev, (count * 8) as u64, 0);
        s.begin_capture().unwrap();
        c.all_reduce(
            s.as_ref(),
            src.ptr(),
            dst.ptr(),
            count as u64,
            F64,
            ReduceOp::Sum,
        )
        .unwrap();
        // And a swap of the sources, as one group.
        c.group_start().unwrap();
        c.send(s.as_ref(), src.ptr(), count as u64, F64, 1 - g)
            .unwrap();
        c.recv(s.as_ref(), got.ptr(), count as u64, F64, 1 - g)
            .unwrap();
        c.group_end_on(s.as_ref()).unwrap();
        graphs.push(s.end_capture().unwrap());
        bufs.push((src, dst, got));
    }
    for round in 0..3 {
        let mut ins = vec![];
        for g in 0..2 {
            let v: Vec<f64> = (0..count).map(|i| (i * (g + 1) + round) as f64).collect();
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            bufs[g].0.write(&w.devices[g], &bytes);
            ins.push(v);
        }
        for g in 0..2 {
            w.streams[g].launch_graph(&graphs[g]).unwrap();
        }
        for g in 0..2 {
            w.streams[g].synchronize().unwrap();
        }
        for g in 0..2 {
            let got = decode_f(F64, &bufs[g].1.read(&w.devices[g], "replay"));
            for i in 0..count {
                assert_eq!(got[i], ins[0][i] + ins[1][i], "round {round} rank {g}");
            }
            let swapped = decode_f(F64, &bufs[g].2.read(&w.devices[g], "replay"));
            assert_eq!(swapped, ins[1 - g], "round {round} rank {g}");
        }
    }
}

#[test]
fn split_by_hashed_color() {
    let w = Arc::new(world(4, patient()));
    let parent = key(&[0, 1, 2, 3]);
    let color = |g: usize| match g {
        0 | 2 => Some(split_color(&[0, 2])),
        1 => Some(split_color(&[1, 3])),
        3 => Some(split_color(&[3, 1])),
        _ => None,
    };
    assert_eq!(split_color(&[1, 3]), split_color(&[3, 1]));
    assert_ne!(split_color(&[0, 2]), split_color(&[1, 3]));
    assert!(split_color(&[0, 1, 2, 3]) < 1 << 31);
    let handles: Vec<_> = (0..4)
        .map(|g| {
            let w = w.clone();
            let parent = parent.clone();
            std::thread::spawn(move || {
                let c = w.provider.split(&parent, g, color(g)).unwrap().unwrap();
                assert_eq!(c.size(), 2);
                assert_eq!(c.rank(), usize::from(g >= 2));
                // An all-reduce within the new clique.
                let dev = &w.devices[g];
                let s = w.streams[g].as_ref();
                let b = Buf::new(dev, 8, 0);
                b.write(dev, &(g as i64).to_le_bytes());
                c.all_reduce(s, b.ptr(), b.ptr(), 1, I64, ReduceOp::Sum)
                    .unwrap();
                s.synchronize().unwrap();
                let got = i64::from_le_bytes(b.read(dev, "split").try_into().unwrap());
                // Splitting again (same colors) returns the cached communicators.
                let again = w.provider.split(&parent, g, color(g)).unwrap().unwrap();
                assert!(Arc::ptr_eq(&c, &again));
                got
            })
        })
        .collect();
    let sums: Vec<i64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(sums, vec![2, 4, 2, 4]);
    let keys = w.provider.cliques();
    assert!(keys.contains(&key(&[0, 2]).with_color(split_color(&[0, 2]))));
    assert!(keys.contains(&key(&[1, 3]).with_color(split_color(&[1, 3]))));
    // A rank passing no color joins nothing.
    let handles: Vec<_> = (0..4)
        .map(|g| {
            let w = w.clone();
            let parent = parent.clone();
            std::thread::spawn(move || {
                let c = (g != 3).then(|| split_color(&[0, 1, 2]));
                w.provider.split(&parent, g, c).unwrap().map(|c| c.size())
            })
        })
        .collect();
    let sizes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(sizes, vec![Some(3), Some(3), Some(3), None]);
}

#[test]
fn clique_keys_order_and_cache() {
    let a = CliqueKey::new([3, 1], StreamKind::Compute).unwrap();
    assert_eq!(a.ranks(), &[1, 3]);
    assert_eq!(a.rank_of(3), Some(1));
    assert_eq!(a.rank_of(2), None);
    let b = CliqueKey::new([1, 3], StreamKind::Communication).unwrap();
    let c = CliqueKey::new([1, 3], StreamKind::Communication)
        .unwrap()
        .with_color(7);
    let d = CliqueKey::new([0, 5], StreamKind::Communication).unwrap();
    let mut v = vec![c.clone(), b.clone(), a.clone(), d.clone()];
    v.sort();
    assert_eq!(v, vec![d, a.clone(), b.clone(), c.clone()]);
    assert!(CliqueKey::new([], StreamKind::Compute).is_err());
    assert!(CliqueKey::new([1, 1], StreamKind::Compute).is_err());
    assert_eq!(c.to_string(), "clique [1, 3] communication color 0x7");

    let w = world(4, patient());
    let x = w.provider.acquire(&a, 3).unwrap();
    let y = w.provider.acquire(&a, 3).unwrap();
    assert!(Arc::ptr_eq(&x, &y));
    assert_eq!((x.rank(), x.size()), (1, 2));
    let z = w.provider.acquire(&b, 3).unwrap();
    assert!(!Arc::ptr_eq(&x, &z));
    assert!(w.provider.acquire(&a, 0).is_err());
    assert!(w.provider.acquire(&key(&[2, 4]), 2).is_err());
    assert_eq!(w.provider.num_ranks(), 4);
    assert!(x.describe().contains("global rank 3"), "{}", x.describe());
}

// ---------------------------------------------------------------------------------------------
// Failures: mismatches, missing ranks, aborts, the watchdog.

fn two_ranks_issue(
    w: &World,
    k: &CliqueKey,
    f: impl Fn(usize, &dyn Communicator, &dyn Stream, DevicePtr) -> xthunk_core::Result<()>,
) -> Vec<String> {
    let bufs: Vec<Buf> = k
        .ranks()
        .iter()
        .map(|&g| Buf::new(&w.devices[g], 1024, 0))
        .collect();
    for (r, &g) in k.ranks().iter().enumerate() {
        let c = w.provider.acquire(k, g).unwrap();
        f(r, c.as_ref(), w.streams[g].as_ref(), bufs[r].ptr()).unwrap();
    }
    k.ranks()
        .iter()
        .map(|&g| w.streams[g].synchronize().unwrap_err().to_string())
        .collect()
}

#[test]
fn mismatched_collectives_fail_on_every_rank_without_hanging() {
    let start = Instant::now();
    type Issue = fn(usize, &dyn Communicator, &dyn Stream, DevicePtr) -> xthunk_core::Result<()>;
    let cases: [(&str, Issue); 5] = [
        ("count", |r, c, s, p| {
            c.all_reduce(s, p, p, 16 + r as u64, F32, ReduceOp::Sum)
        }),
        ("kind", |r, c, s, p| {
            if r == 0 {
                c.all_reduce(s, p, p, 16, F32, ReduceOp::Sum)
            } else {
                c.broadcast(s, p, p, 16, F32, 0)
            }
        }),
        ("dtype", |r, c, s, p| {
            c.all_gather(
                s,
                p,
                p.offset(r as u64 * 64),
                16,
                if r == 0 { F32 } else { I32 },
            )
        }),
        ("operator", |r, c, s, p| {
            c.all_reduce(
                s,
                p,
                p,
                16,
                F32,
                if r == 0 { ReduceOp::Sum } else { ReduceOp::Max },
            )
        }),
        ("root", |r, c, s, p| c.broadcast(s, p, p, 16, F32, r)),
    ];
    for (what, f) in cases {
        // Default timeouts (60 s): a hang would show as a slow test, the assert below.
        let w = world(3, Timeouts::default());
        let k = key(&[0, 2]);
        let errs = two_ranks_issue(&w, &k, f);
        for e in &errs {
            assert!(e.contains("different collectives"), "{what}: {e}");
            assert!(
                e.contains("rank 0: ") && e.contains("rank 2: "),
                "{what}: {e}"
            );
        }
        // The clique is now failed: later operations fail at once, on every rank.
        let c = w.provider.acquire(&k, 0).unwrap();
        assert!(c.async_error().is_err());
        let b = Buf::new(&w.devices[0], 64, 0);
        c.all_reduce(
            w.streams[0].as_ref(),
            b.ptr(),
            b.ptr(),
            1,
            F32,
            ReduceOp::Sum,
        )
        .unwrap();
        assert!(w.streams[0].synchronize().is_err());
        // Until evicted.
        assert_eq!(w.provider.evict_aborted(), vec![k.clone()]);
    }
    // A send/receive pair that disagrees on the size.
    let w = world(2, Timeouts::default());
    let k = key(&[0, 1]);
    let errs = two_ranks_issue(&w, &k, |r, c, s, p| {
        if r == 0 {
            c.send(s, p, 10, F32, 1)
        } else {
            c.recv(s, p, 12, F32, 0)
        }
    });
    for e in &errs {
        assert!(
            e.contains("sends 10 f32 but the receiver expects 12 f32"),
            "{e}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_rank_that_never_arrives_is_named_at_the_terminate_timeout() {
    let timeouts = Timeouts::new(Duration::from_millis(100), Duration::from_millis(300));
    let w = Arc::new(world(4, timeouts));
    let k = key(&[0, 1, 3]);
    let start = Instant::now();
    // Ranks 0 and 1 (global), each in its own thread, in immediate mode; global rank 3 never
    // comes.
    let handles: Vec<_> = [0usize, 1]
        .into_iter()
        .map(|g| {
            let w = w.clone();
            let k = k.clone();
            std::thread::spawn(move || {
                let s = &w.streams[g];
                s.set_immediate(true);
                let b = Buf::new(&w.devices[g], 64, 0);
                let c = w.provider.acquire(&k, g).unwrap();
                c.all_reduce(s.as_ref(), b.ptr(), b.ptr(), 16, F32, ReduceOp::Sum)
                    .unwrap();
                let r = s.synchronize();
                s.set_immediate(false);
                (r, start.elapsed())
            })
        })
        .collect();
    for h in handles {
        let (r, t) = h.join().unwrap();
        let e = r.unwrap_err().to_string();
        assert!(e.contains("rank(s) 3 did not arrive"), "{e}");
        assert!(e.contains("arrived: 0, 1"), "{e}");
        assert!(e.contains("collective #0"), "{e}");
        assert!(e.contains("all_reduce(f32 sum, 16 elements)"), "{e}");
        assert!(t >= Duration::from_millis(300), "{t:?}");
        assert!(t < Duration::from_secs(5), "{t:?}");
    }
    // The late rank fails at once instead of waiting for peers that left.
    let c = w.provider.acquire(&k, 3).unwrap();
    assert!(
        c.async_error()
            .unwrap_err()
            .to_string()
            .contains("did not arrive")
    );
    let b = Buf::new(&w.devices[3], 64, 0);
    let t = Instant::now();
    c.all_reduce(
        w.streams[3].as_ref(),
        b.ptr(),
        b.ptr(),
        16,
        F32,
        ReduceOp::Sum,
    )
    .unwrap();
    let e = w.streams[3].synchronize().unwrap_err().to_string();
    assert!(e.contains("did not arrive"), "{e}");
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    // Other cliques are unaffected.
    run_case(&w, &[0, 1], Case::AllReduce(ReduceOp::Sum), F32, 100, false);
    drop(c);
    // Every stream thread is joined when the world goes.
    drop(Arc::try_unwrap(w).ok().expect("all rank threads joined"));
}

#[test]
fn abort_unblocks_waiters_and_eviction_recovers() {
    // Long timeouts: only the abort can end the wait.
    let w = world(
        3,
        Timeouts::new(Duration::from_secs(60), Duration::from_secs(600)),
    );
    let k = key(&[0, 1, 2]);
    let bufs: Vec<Buf> = (0..3).map(|g| Buf::new(&w.devices[g], 64, 0)).collect();
    let comms: Vec<_> = (0..3).map(|g| w.provider.acquire(&k, g).unwrap()).collect();
    for g in 0..2 {
        comms[g]
            .all_reduce(
                w.streams[g].as_ref(),
                bufs[g].ptr(),
                bufs[g].ptr(),
                16,
                F32,
                ReduceOp::Sum,
            )
            .unwrap();
    }
    // The watchdog's view: who is missing.
    let t = Instant::now();
    let pending = loop {
        if let Some(p) = comms[2].pending()
            && p.contains("arrived: 0, 1")
        {
            break p;
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(pending.contains("for rank(s) 2"), "{pending}");
    assert!(pending.contains("collective #0 waiting"), "{pending}");
    assert!(
        xthunk_core::collectives::describe_pending(&comms)
            .unwrap()
            .contains("global rank 1")
    );
    let t = Instant::now();
    comms[2].abort("operator gave up");
    for g in 0..2 {
        let e = w.streams[g].synchronize().unwrap_err().to_string();
        assert!(e.contains("aborted by rank 2: operator gave up"), "{e}");
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    for c in &comms {
        assert!(c.async_error().is_err());
    }
    // Future operations fail fast, on every rank.
    comms[2]
        .all_reduce(
            w.streams[2].as_ref(),
            bufs[2].ptr(),
            bufs[2].ptr(),
            16,
            F32,
            ReduceOp::Sum,
        )
        .unwrap();
    assert!(w.streams[2].synchronize().is_err());
    assert!(w.provider.acquire(&k, 0).unwrap().async_error().is_err());
    // Eviction makes the next acquire start afresh.
    assert_eq!(w.provider.evict_aborted(), vec![k.clone()]);
    run_case(
        &w,
        &[0, 1, 2],
        Case::AllReduce(ReduceOp::Sum),
        F32,
        100,
        false,
    );
}

#[test]
fn abort_in_the_middle_of_data_movement_is_safe() {
    // Aborts at random moments of large all-reduces and permutes: every rank fails or
    // succeeds, none hangs, and buffers freed right after are never written by a peer (a rank
    // leaves only once its peers are done with its memory).
    let w = world(3, patient());
    let mut rng = rng_for("abort in the middle");
    let count = 1 << 18;
    for round in 0..12 {
        let k = key(&[0, 1, 2]);
        let comms: Vec<_> = (0..3).map(|g| w.provider.acquire(&k, g).unwrap()).collect();
        let bufs: Vec<(Buf, Buf)> = (0..3)
            .map(|g| {
                (
                    Buf::new(&w.devices[g], count * 4, 0),
                    Buf::new(&w.devices[g], count * 4, 0),
                )
            })
            .collect();
        for g in 0..3 {
            let s = w.streams[g].as_ref();
            let (a, b) = (&bufs[g].0, &bufs[g].1);
            comms[g]
                .all_reduce(s, a.ptr(), b.ptr(), count, F32, ReduceOp::Sum)
                .unwrap();
            comms[g].group_start().unwrap();
            comms[g].send(s, b.ptr(), count, F32, (g + 1) % 3).unwrap();
            comms[g].recv(s, a.ptr(), count, F32, (g + 2) % 3).unwrap();
            comms[g].group_end_on(s).unwrap();
            comms[g]
                .all_reduce(s, a.ptr(), a.ptr(), count, F32, ReduceOp::Max)
                .unwrap();
        }
        std::thread::sleep(Duration::from_micros(rng.next_u64() % 3000));
        comms[round % 3].abort("test abort");
        for g in 0..3 {
            let _ = w.streams[g].synchronize();
        }
        drop(bufs);
        assert_eq!(w.provider.evict_aborted(), vec![k]);
    }
}

#[test]
fn watchdog_aborts_every_clique_on_the_first_error() {
    let w = world(
        4,
        Timeouts::new(Duration::from_secs(60), Duration::from_secs(600)),
    );
    let (ka, kb) = (key(&[0, 1]), key(&[2, 3]));
    let watched: Vec<Arc<dyn Communicator>> = [(&ka, 0), (&ka, 1), (&kb, 2), (&kb, 3)]
        .into_iter()
        .map(|(k, g)| w.provider.acquire(k, g).unwrap())
        .collect();
    let dog = Watchdog::spawn(watched.clone(), Duration::from_millis(10)).unwrap();
    // Rank 2 waits on clique B for rank 3, which never comes.
    let b = Buf::new(&w.devices[2], 64, 0);
    watched[2]
        .all_reduce(
            w.streams[2].as_ref(),
            b.ptr(),
            b.ptr(),
            1,
            F32,
            ReduceOp::Sum,
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(dog.error().is_none());
    // Clique A fails (its rank 0 aborts); the watchdog aborts B too, which frees rank 2.
    let t = Instant::now();
    watched[0].abort("rank 0 failed");
    let e = w.streams[2].synchronize().unwrap_err().to_string();
    assert!(e.contains("watchdog") && e.contains("rank 0 failed"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2));
    let reason = dog.stop().unwrap();
    assert!(reason.contains("clique [0, 1]"), "{reason}");
    assert!(xthunk_core::collectives::first_async_error(&watched).is_err());
}
