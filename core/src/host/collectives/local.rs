//! The in-process transport: host collectives among the devices of one process, each rank
//! reading and writing its peers' buffers directly (host device memory is host memory).
//!
//! # How an operation runs
//!
//! Each operation is queued on the rank's [`HostStream`](crate::host::HostStream) as ordinary
//! stream work (a launch of a built-in host kernel whose arguments are the operation's buffers
//! — so the stream checks every pointer range against the device's live allocations and keeps
//! the memory alive while the work runs — and scalars describing the operation). When the
//! stream reaches it, on the stream's worker (or in the issuing thread, in the stream's
//! immediate mode):
//!
//! 1. the rank takes the communicator's next **sequence number** (counted when operations run,
//!    so captured command buffers replay correctly) and meets the other ranks at the
//!    rendezvous `collective #seq` (warn-after and terminate-after timeouts, abortable),
//!    contributing the operation's description and its buffer addresses;
//! 2. every rank compares the descriptions: any difference (kind, count, dtype, operator,
//!    root) fails the operation on **every** rank with a message listing what each rank
//!    issued, and poisons the clique;
//! 3. the ranks move the data directly between each other's buffers (host device memory is
//!    host memory), each rank doing a disjoint share of the work in parallel;
//! 4. each rank counts down a shared counter when its share is done and leaves only when it
//!    reaches zero: nobody's buffers are released or reused before every peer is done with
//!    them. That wait has no timeout and ignores aborts — it is bounded by the peers' memory
//!    copies, which never block — because leaving earlier could let a peer write into memory
//!    the stream has already given back; it is how the design stays memory safe when an
//!    operation fails half way.
//!
//! **All-reduce** is fused and chunked: the elements are split into one chunk per rank
//! (aligned to cache lines); rank `r` reduces chunk `r` across every rank's input, block by
//! block in L1-sized blocks, and writes the result to every rank's output (reduce-scatter and
//! all-gather in one pass, every input byte read once and every output byte written once,
//! large outputs with non-temporal stores). **Reduce-scatter**: each rank reduces its own
//! block. **All-gather**, **broadcast**, **all-to-all**: each rank pulls what it receives
//! (in-place all-to-all stages through a private buffer and writes once everyone has read). In-place
//! forms are the NCCL ones (`src == dst`; all-gather `src == dst + rank·count`;
//! reduce-scatter `dst == src + rank·count`); other overlaps are rejected when issued.
//!
//! **Send/receive**: the `k`-th send from `a` to `b` meets the `k`-th receive on `b` from `a`
//! (counted when they run). A group (`group_start` … [`Communicator::group_end_on`]) is queued
//! as one operation: the rank posts all its sends and receives first and only then waits, so
//! a permute (one send and one receive per rank, in any order) cannot deadlock; the receiver
//! copies and releases the sender, which leaves only then. Once any round of a group may
//! have completed, every posted round is seen through, even after an error.
//!
//! Any failure inside an operation (timeout, mismatch, abort) poisons the clique, so no rank
//! is ever left waiting for one that gave up. The communicator stays failed: after an abort,
//! [`CliqueProvider::evict_aborted`] makes the next acquire create a fresh clique.
//!
//! **Immediate mode** (`Stream::set_immediate`) runs an operation in the issuing thread when

use super::kernel::{self, P2pOp, RawBuf};
use super::ops::{OpDesc, OpKind};
use super::reduce;
use super::{HostComm, HostCommunicator, Transport};
use crate::backend::Device;
use crate::collectives::{
    CliqueKey, CliqueProvider, Communicator, ReduceOp, Rendezvous, Ticket, Timeouts, error_message,
    may_spin, spin_while,
};
use crate::error::{Error, Result};
use crate::ir::DType;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::fmt;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

// ---------------------------------------------------------------------------------------------
// Sharing buffers with the peers.

/// Counts the ranks still touching the buffers of one operation, once its rendezvous exposed
/// them. Not subject to timeouts or aborts: every rank that saw the round complete releases
/// its count within the bounded time of its memory copies, whatever else fails, so waiting
/// for zero cannot hang — and leaving earlier could let a peer write into memory that the
/// stream has already released or reused.
struct Touching {
    threads: usize,
    left: AtomicUsize,
    failed: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Touching {
    /// `n` ranks to count down, among `threads` running at once (for the spin decision).
    fn new(n: usize, threads: usize) -> Arc<Self> {
        Arc::new(Touching {
            threads,
            left: AtomicUsize::new(n),
            failed: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        })
    }

    /// This rank is done with its peers' buffers (`ok`: and did its whole share).
    fn release(&self, ok: bool) {
        if !ok {
            self.failed.store(true, Ordering::Release);
        }
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    /// Waits until every rank released; true if all did their share.
    fn wait(&self) -> bool {
        if may_spin(self.threads) {
            spin_while(|| self.left.load(Ordering::Acquire) > 0);
        }
        let mut g = self.lock.lock();
        while self.left.load(Ordering::Acquire) > 0 {
            self.cv.wait(&mut g);
        }
        !self.failed.load(Ordering::Acquire)
    }
}

/// One rank's share of a [`Touching`] count: released (as failed, unless
/// [`Hold::done`] said otherwise) and waited for when dropped, on every path.
struct Hold<'a> {
    t: &'a Touching,
    released: bool,
}

impl Hold<'_> {
    fn release(&mut self, ok: bool) {
        if !self.released {
            self.released = true;
            self.t.release(ok);
        }
    }

    /// Releases as successful and waits for everyone: true if every rank did its share.
    fn done(mut self) -> bool {
        self.release(true);
        self.t.wait()
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.release(false);
        self.t.wait();
    }
}

/// What ranks contribute at a rendezvous.
enum Msg {
    Op {
        desc: OpDesc,
        src: RawBuf,
        dst: RawBuf,
        /// Every rank brings one; clique rank 0's is used.
        touching: Arc<Touching>,
    },
    P2p {
        count: u64,
        dtype: DType,
        buf: RawBuf,
        /// The sender's: released by the receiver once it copied.
        touching: Arc<Touching>,
    },
    Split {
        color: Option<u64>,
    },
}

/// A rendezvous round of a clique. Ranks are global ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RvKey {
    Op { seq: u64 },
    P2p { from: usize, to: usize, n: u64 },
    Split { n: u64 },
}

impl fmt::Display for RvKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RvKey::Op { seq } => write!(f, "collective #{seq}"),
            RvKey::P2p { from, to, n } => write!(f, "send #{n} from rank {from} to rank {to}"),
            RvKey::Split { n } => write!(f, "split #{n}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cliques and ranks.

struct HostClique {
    key: CliqueKey,
    rv: Rendezvous<RvKey, Msg>,
}

impl HostClique {
    fn new(key: &CliqueKey, timeouts: Timeouts) -> Arc<Self> {
        Arc::new(HostClique {
            key: key.clone(),
            rv: Rendezvous::new(format!("host {key}"), timeouts),
        })
    }
}

/// One rank of an in-process clique: the [`Transport`] of a [`HostCommunicator`].
pub struct LocalRank {
    clique: Arc<HostClique>,
    rank: usize,
    global: usize,
    /// Collectives run so far.
    seq: AtomicU64,
    /// Per peer (clique rank): sends and receives run so far.
    p2p: Mutex<Vec<[u64; 2]>>,
    /// Splits so far (issued by the host thread, not a stream).
    splits: AtomicU64,
}

impl LocalRank {
    fn new(clique: Arc<HostClique>, rank: usize, global: usize) -> Self {
        let size = clique.key.size();
        LocalRank {
            clique,
            rank,
            global,
            seq: AtomicU64::new(0),
            p2p: Mutex::new(vec![[0, 0]; size]),
            splits: AtomicU64::new(0),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The provider.

struct Entry {
    clique: Arc<HostClique>,
    comms: Vec<Option<Arc<HostCommunicator>>>,
}

impl Entry {
    fn new(key: &CliqueKey, timeouts: Timeouts) -> Self {
        Entry {
            clique: HostClique::new(key, timeouts),
            comms: vec![None; key.size()],
        }
    }
}

/// Communicators among the devices of one host backend in one process: one rank per device,
/// global rank = index in `devices`.
pub struct HostCliqueProvider {
    devices: Vec<Arc<dyn Device>>,
    timeouts: Timeouts,
    cliques: Mutex<BTreeMap<CliqueKey, Entry>>,
}

impl fmt::Debug for HostCliqueProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostCliqueProvider")
            .field("devices", &self.devices.len())
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl HostCliqueProvider {
    /// A provider for `devices` (all of the host backend). `timeouts` apply to every
    /// rendezvous of its cliques.
    pub fn new(devices: Vec<Arc<dyn Device>>, timeouts: Timeouts) -> Result<Self> {
        if let Some(d) = devices.iter().find(|d| d.backend_name() != "host") {
            return Err(Error::InvalidArgument(format!(
                "host collectives need host devices, got a `{}` device ({})",
                d.backend_name(),
                d.info().name
            )));
        }
        Ok(HostCliqueProvider {
            devices,
            timeouts,
            cliques: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// The cliques created so far, in key order.
    pub fn cliques(&self) -> Vec<CliqueKey> {
        self.cliques.lock().keys().cloned().collect()
    }

    /// As [`CliqueProvider::acquire`], typed.
    pub fn communicator(
        &self,
        key: &CliqueKey,
        global_rank: usize,
    ) -> Result<Arc<HostCommunicator>> {
        let n = self.devices.len();
        if let Some(bad) = key.ranks().iter().find(|r| **r >= n) {
            return Err(Error::InvalidArgument(format!(
                "{key}: rank {bad} does not exist ({n} host devices)"
            )));
        }
        let Some(rank) = key.rank_of(global_rank) else {
            return Err(Error::InvalidArgument(format!(
                "rank {global_rank} is not a member of {key}"
            )));
        };
        let mut map = self.cliques.lock();
        let entry = map
            .entry(key.clone())
            .or_insert_with(|| Entry::new(key, self.timeouts));
        if let Some(c) = entry.comms.get(rank).and_then(Option::as_ref) {
            return Ok(c.clone());
        }
        let comm = Arc::new(HostComm::new(Arc::new(LocalRank::new(
            entry.clique.clone(),
            rank,
            global_rank,
        ))));
        if let Some(slot) = entry.comms.get_mut(rank) {
            *slot = Some(comm.clone());
        }
        tracing::debug!(%key, rank, global_rank, "created host communicator");
        Ok(comm)
    }

    /// Aborts every clique of this provider.
    pub fn abort_all(&self, reason: &str) {
        for e in self.cliques.lock().values() {
            e.clique
                .rv
                .poison(&format!("{} aborted: {reason}", e.clique.key));
        }
    }

    /// What every clique is waiting on, if anything (for watchdog messages).
    pub fn pending(&self) -> Option<String> {
        let lines: Vec<String> = self
            .cliques
            .lock()
            .values()
            .filter_map(|e| e.clique.rv.describe_pending())
            .collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

impl CliqueProvider for HostCliqueProvider {
    fn num_ranks(&self) -> usize {
        self.devices.len()
    }

    fn acquire(&self, key: &CliqueKey, global_rank: usize) -> Result<Arc<dyn Communicator>> {
        Ok(self.communicator(key, global_rank)?)
    }

    fn split(
        &self,
        parent: &CliqueKey,
        global_rank: usize,
        color: Option<u64>,
    ) -> Result<Option<Arc<dyn Communicator>>> {
        let comm = self.communicator(parent, global_rank)?;
        let st = comm.transport();
        let n = st.splits.fetch_add(1, Ordering::Relaxed);
        let all = st
            .clique
            .rv
            .arrive(
                RvKey::Split { n },
                parent.ranks(),
                global_rank,
                Msg::Split { color },
            )
            .map_err(|e| {
                Error::backend(
                    "host",
                    "split",
                    format!("{}: {}", comm.describe(), error_message(&e)),
                )
            })?;
        let Some(color) = color else {
            return Ok(None);
        };
        let members = parent
            .ranks()
            .iter()
            .zip(all.iter())
            .filter(|(_, m)| matches!(m, Msg::Split { color: Some(c) } if *c == color))
            .map(|(g, _)| *g);
        let key = CliqueKey::new(members, parent.stream_kind())?.with_color(color);
        Ok(Some(self.communicator(&key, global_rank)?))
    }

    fn evict_aborted(&self) -> Vec<CliqueKey> {
        let mut map = self.cliques.lock();
        let dead: Vec<CliqueKey> = map
            .iter()
            .filter(|(_, e)| e.clique.rv.poisoned().is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for k in &dead {
            map.remove(k);
        }
        dead
    }
}

/// Bounds of chunk `r` of `n` over `count` elements of `elem` bytes, at multiples of 64 bytes
/// from the start, so that ranks never write the same cache line of a line-aligned buffer.
fn chunk(count: usize, n: usize, r: usize, elem: usize) -> (usize, usize) {
    let align = (64 / elem.max(1)).max(1) as u128;
    let units = (count as u128).div_ceil(align);
    let at = |k: usize| ((units * k as u128 / n.max(1) as u128) * align).min(count as u128);
    (at(r) as usize, at(r + 1) as usize)
}

impl LocalRank {
    /// Poisons the clique with `what` failed because of `e`, and returns the error.
    fn fail(&self, what: &str, e: Error) -> Error {
        let msg = format!("{what} on {}: {}", self.describe(), error_message(&e));
        // Whatever went wrong, nobody may wait for this rank any longer.
        self.clique.rv.poison(&msg);
        Error::backend("host", "collective", msg)
    }

    /// # Safety
    /// As [`Transport::run_collective`].
    unsafe fn collective(&self, seq: u64, desc: OpDesc, src: RawBuf, dst: RawBuf) -> Result<()> {
        let c = &self.clique;
        let n = c.key.size();
        let ranks = c.key.ranks();
        let all = c.rv.arrive(
            RvKey::Op { seq },
            ranks,
            self.global,
            Msg::Op {
                desc,
                src,
                dst,
                touching: Touching::new(n, n),
            },
        )?;
        // The round completed: every rank's buffers are now exposed to every other rank, so
        // from here on this rank leaves only through `hold` (released and waited for on every
        // path), and never before all peers are done with its buffers.
        let mut descs = Vec::with_capacity(n);
        let mut srcs = Vec::with_capacity(n);
        let mut dsts = Vec::with_capacity(n);
        let mut touching = None;
        for m in all.iter() {
            if let Msg::Op {
                desc,
                src,
                dst,
                touching: t,
            } = m
            {
                descs.push(*desc);
                srcs.push(*src);
                dsts.push(*dst);
                touching.get_or_insert(t);
            }
        }
        let Some(touching) = touching else {
            return Err(Error::backend(
                "host",
                "collective",
                "internal: a collective round without a collective message",
            ));
        };
        let hold = Hold {
            t: touching,
            released: false,
        };
        if descs.len() != n {
            return Err(Error::backend(
                "host",
                "collective",
                "internal: a collective round got a message of another kind",
            ));
        }
        if descs.iter().any(|x| *x != desc) {
            let each: Vec<String> = ranks
                .iter()
                .zip(&descs)
                .map(|(g, x)| format!("rank {g}: {x}"))
                .collect();
            return Err(Error::backend(
                "host",
                "collective",
                format!(
                    "the ranks issued different collectives at #{seq}: {}",
                    each.join(", ")
                ),
            ));
        }
        // Every rank issued the same operation with buffers of the sizes it implies (checked
        // by `buf` on each rank), except that only the root of a broadcast passes a source.
        // SAFETY: the buffers of every rank stay valid until every rank released `hold`;
        // `move_data` partitions the writes (see `RawBuf`).
        unsafe { self.move_data(desc, &srcs, &dsts, hold) }
    }

    /// Does this rank's share and releases `hold`; returns once every rank did (an error if
    /// some rank could not do its share).
    ///
    /// # Safety
    /// `srcs` and `dsts` are the (identical on every rank) buffers of every rank, of the
    /// sizes `desc` implies, valid until every rank released the `hold` count.
    unsafe fn move_data(
        &self,
        desc: OpDesc,
        srcs: &[RawBuf],
        dsts: &[RawBuf],
        hold: Hold,
    ) -> Result<()> {
        let n = srcs.len();
        let r = self.rank;
        let size = desc.dtype.size();
        let count = usize::try_from(desc.count)
            .map_err(|_| Error::InvalidArgument("count does not fit in memory".into()))?;
        let bytes = count * size;
        let op = desc.op.unwrap_or(ReduceOp::Sum);
        match desc.kind {
            _ if bytes == 0 => {}
            OpKind::AllReduce => {
                // Chunk r of every input, reduced into chunk r of every output: rank r is the
                // only one touching chunk r anywhere.
                let (lo, hi) = chunk(count, n, r, size);
                if hi > lo {
                    // SAFETY: `lo < hi <= count`, inside every buffer.
                    let ins: Vec<*const u8> = srcs
                        .iter()
                        .map(|b| unsafe { b.ptr.add(lo * size) }.cast_const())
                        .collect();
                    // SAFETY: as above.
                    let outs: Vec<*mut u8> = dsts
                        .iter()
                        .map(|b| unsafe { b.ptr.add(lo * size) })
                        .collect();
                    // SAFETY: chunk `r` of every buffer is touched by this rank only; an
                    // output is identical to its rank's input or disjoint from it (checked
                    // when issued).
                    unsafe {
                        reduce::reduce(
                            desc.dtype,
                            op,
                            &ins,
                            &outs,
                            hi - lo,
                            reduce::nontemporal(bytes * n),
                        )?
                    };
                }
            }
            OpKind::ReduceScatter => {
                // Block r of every input, reduced into this rank's output: nobody else reads
                // block r or writes this output.
                // SAFETY: block `r` lies inside every `n * bytes` input.
                let ins: Vec<*const u8> = srcs
                    .iter()
                    .map(|b| unsafe { b.ptr.add(r * bytes) }.cast_const())
                    .collect();
                let outs = [dsts[r].ptr];
                // SAFETY: as the comment above; in place the output is block r of this rank's
                // input, read in full block by block before it is written.
                unsafe {
                    reduce::reduce(
                        desc.dtype,
                        op,
                        &ins,
                        &outs,
                        count,
                        reduce::nontemporal(bytes * n),
                    )?
                };
            }
            OpKind::AllGather => {
                // Pull: this rank writes only its own output; in place its own source is its
                // block r, which it does not write.
                let out = dsts[r].ptr;
                for (q, s) in srcs.iter().enumerate() {
                    // SAFETY: block q of the `n * bytes` output; sources are `bytes` long and
                    // disjoint from the blocks written (checked when issued).
                    unsafe {
                        let d = out.add(q * bytes);
                        if d != s.ptr {
                            ptr::copy_nonoverlapping(s.ptr, d, bytes);
                        }
                    }
                }
            }
            OpKind::Broadcast => {
                let (Some(s), Some(d)) = (srcs.get(desc.root), dsts.get(r)) else {
                    return Err(Error::InvalidArgument(format!(
                        "broadcast root {} out of range",
                        desc.root
                    )));
                };
                if s.ptr != d.ptr {
                    // SAFETY: the root's source and this rank's output are `bytes` long and
                    // disjoint (checked when issued on the root; other ranks' outputs are
                    // other allocations); the root does not write its source.
                    unsafe { ptr::copy_nonoverlapping(s.ptr, d.ptr, bytes) };
                }
            }
            OpKind::AllToAll => {
                let out = dsts[r].ptr;
                if srcs.iter().zip(dsts).any(|(s, d)| s.ptr == d.ptr) {
                    // In place somewhere: read everything first, then write once every rank
                    // has read (no one touches anyone else's memory after that).
                    let mut tmp: Vec<u8> = Vec::new();
                    tmp.try_reserve_exact(n * bytes).map_err(|_| {
                        Error::backend(
                            "host",
                            "all_to_all",
                            format!("cannot allocate {} bytes of staging", n * bytes),
                        )
                    })?;
                    for s in srcs {
                        // SAFETY: block r of every `n * bytes` source, read only.
                        let block =
                            unsafe { std::slice::from_raw_parts(s.ptr.add(r * bytes), bytes) };
                        tmp.extend_from_slice(block);
                    }
                    if !hold.done() {
                        return Err(peer_failed());
                    }
                    // SAFETY: every rank finished reading; this output is this rank's own.
                    unsafe { ptr::copy_nonoverlapping(tmp.as_ptr(), out, n * bytes) };
                    return Ok(());
                }
                for (q, s) in srcs.iter().enumerate() {
                    // SAFETY: block r of source q into block q of this rank's output;
                    // sources and outputs are disjoint everywhere.
                    unsafe {
                        ptr::copy_nonoverlapping(s.ptr.add(r * bytes), out.add(q * bytes), bytes)
                    };
                }
            }
            OpKind::P2p => {
                return Err(Error::backend(
                    "host",
                    "collective",
                    "internal: send/recv is not a collective",
                ));
            }
        }
        if hold.done() {
            Ok(())
        } else {
            Err(peer_failed())
        }
    }

    /// # Safety
    /// As [`Transport::run_group`].
    unsafe fn p2p_group(&self, ops: &[P2pOp]) -> Result<()> {
        let c = &self.clique;
        // Remote ones: numbered per (peer, direction) in the order they run.
        let mut remote: Vec<(usize, RvKey, [usize; 2])> = vec![];
        {
            let mut ctr = self.p2p.lock();
            for (i, &P2pOp { send, peer, .. }) in ops.iter().enumerate() {
                if peer == self.rank {
                    // Sends to and receives from this rank itself are copied locally.
                    continue;
                }
                let pg = c.key.global_rank(peer).unwrap_or(usize::MAX);
                let Some(slot) = ctr.get_mut(peer).map(|s| &mut s[usize::from(!send)]) else {
                    continue;
                };
                let n = *slot;
                *slot += 1;
                let (from, to) = if send {
                    (self.global, pg)
                } else {
                    (pg, self.global)
                };
                remote.push((i, RvKey::P2p { from, to, n }, [from, to]));
            }
        }
        // Post everything, then wait: no order of sends and receives can deadlock. From the
        // first post on, a round may complete and expose a buffer, so errors are collected and
        // every posted round is seen through.
        let mut first_err: Option<Error> = None;
        let mut posted: Vec<(usize, RvKey, Ticket<RvKey>)> = Vec::with_capacity(remote.len());
        for (i, key, ranks) in &remote {
            let op = ops[*i];
            match c.rv.post(
                *key,
                ranks,
                self.global,
                Msg::P2p {
                    count: op.count,
                    dtype: op.dtype,
                    buf: op.buf,
                    touching: Touching::new(1, 2),
                },
            ) {
                Ok(t) => posted.push((*i, *key, t)),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        // Senders wait for their receivers to have copied, after every round was handled (a
        // receiver never waits for anything once its rounds completed, so this cannot cycle).
        let mut sent: Vec<Arc<Touching>> = vec![];
        for (i, key, t) in posted {
            let res = match c.rv.wait(t) {
                Ok(res) => res,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            let (
                Some(Msg::P2p {
                    count: sc,
                    dtype: sd,
                    buf: sbuf,
                    touching,
                }),
                Some(Msg::P2p {
                    count: rc,
                    dtype: rd,
                    buf: rbuf,
                    ..
                }),
            ) = (res.first(), res.get(1))
            else {
                first_err.get_or_insert(Error::backend(
                    "host",
                    "send/recv",
                    "internal: a send/recv round got a message of another kind",
                ));
                continue;
            };
            let matched = (sc, sd) == (rc, rd);
            if !matched {
                first_err.get_or_insert(Error::backend(
                    "host",
                    "send/recv",
                    format!("{key}: the sender sends {sc} {sd} but the receiver expects {rc} {rd}"),
                ));
            }
            if ops[i].send {
                sent.push(touching.clone());
            } else {
                if matched && rbuf.len > 0 {
                    // SAFETY: the sender's buffer stays valid and unwritten until this rank
                    // releases `touching`; both are `len` bytes (same count and dtype) of
                    // different allocations.
                    unsafe { ptr::copy_nonoverlapping(sbuf.ptr, rbuf.ptr, rbuf.len) };
                }
                touching.release(matched);
            }
        }
        if first_err.is_none() {
            if let Err(e) = kernel::copy_to_self(ops, self.rank) {
                first_err = Some(e);
            }
        }
        for t in sent {
            if !t.wait() && first_err.is_none() {
                first_err = Some(peer_failed());
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Transport for LocalRank {
    fn backend(&self) -> &'static str {
        "host"
    }

    fn key(&self) -> &CliqueKey {
        &self.clique.key
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn global_rank(&self) -> usize {
        self.global
    }

    fn describe(&self) -> String {
        format!(
            "rank {} (global rank {}) of {}",
            self.rank, self.global, self.clique.key
        )
    }

    unsafe fn run_collective(&self, desc: OpDesc, src: RawBuf, dst: RawBuf) -> Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let what = format!("{desc} (collective #{seq})");
        // SAFETY: forwarded.
        unsafe { self.collective(seq, desc, src, dst) }.map_err(|e| self.fail(&what, e))
    }

    unsafe fn run_group(&self, ops: &[P2pOp]) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.p2p_group(ops) }.map_err(|e| self.fail("send/recv group", e))
    }

    fn async_error(&self) -> Result<()> {
        match self.clique.rv.poisoned() {
            Some(msg) => Err(Error::backend(
                "host",
                "collective",
                format!("{}: {msg}", self.describe()),
            )),
            None => Ok(()),
        }
    }

    fn abort(&self, reason: &str) {
        tracing::warn!(communicator = %self.describe(), reason, "aborting host communicator");
        self.clique.rv.poison(&format!(
            "{} aborted by rank {}: {reason}",
            self.clique.key, self.global
        ));
    }

    fn pending(&self) -> Option<String> {
        self.clique.rv.describe_pending()
    }
}

fn peer_failed() -> Error {
    Error::backend(
        "host",
        "collective",
        "another rank could not do its share of the operation",
    )
}

#[cfg(test)]
mod tests {
    use super::chunk;

    #[test]
    fn chunks_cover_and_align() {
        for count in [0, 1, 15, 16, 17, 1000, 4097] {
            for n in 1..=5 {
                let mut next = 0;
                for r in 0..n {
                    let (lo, hi) = chunk(count, n, r, 4);
                    assert_eq!(lo, next);
                    assert!(lo <= hi);
                    assert!(lo % 16 == 0 || lo == count);
                    next = hi;
                }
                assert_eq!(next, count);
            }
        }
    }
}
