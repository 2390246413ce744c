//! The host backend's collectives among the devices of one process, over shared memory.
//!
//! # How an operation runs
//!
//! Each operation is queued on the rank's [`HostStream`] as ordinary stream work (a launch of
//! a built-in host kernel whose arguments are the operation's buffers — so the stream checks
//! every pointer range against the device's live allocations and keeps the memory alive while
//! the work runs — and scalars describing the operation). When the stream reaches it, on the
//! stream's worker (or in the issuing thread, in the stream's immediate mode):
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
//! the stream is idle, so it blocks there until the peers arrive: issue each rank from its own
//! thread then (as an SPMD executor does). Queued (the default), one thread may issue for
//! every rank.

use super::issue::{
    DIMS, KINDS, OpDesc, OpKind, P2pGroup, P2pItem, byte_len, dtype_code, kind_code, op_code,
    overlaps, scalar, stream_id,
};
use super::reduce;
use crate::backend::{Device, DevicePtr, KernelHandle, LaunchArg, Stream};
use crate::collectives::{
    CliqueKey, CliqueProvider, Communicator, ReduceOp, Rendezvous, Ticket, Timeouts, may_spin,
    spin_while,
};
use crate::error::{Error, Result};
use crate::host::{HostKernelHandle, HostStream};
use crate::ir::{DType, Scalar};
use crate::kernels::{HostArg, HostKernel, KernelError, KernelSignature};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

// ---------------------------------------------------------------------------------------------
// Operation descriptions.

/// A checked buffer of one rank, shared with its peers for the duration of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a `RawBuf` is the address of a region that its rank's queued stream work checked
// against a live allocation and keeps alive for the whole operation. A rank exposes its
// buffers to peers only through a completed rendezvous round, and never leaves an operation
// whose round completed before every peer that may touch its buffers has said it is done
// ([`Touching`]); the algorithms below give every byte of every output to exactly one writer
// and never write bytes that anyone reads at the same time.
unsafe impl Send for RawBuf {}
// SAFETY: as above; the struct itself is an immutable address and length.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    const NONE: RawBuf = RawBuf {
        ptr: ptr::null_mut(),
        len: 0,
    };
}

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
// Cliques, ranks and the registry the stream work finds them in.

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

/// One rank's run-time state. Stream work finds it through [`REGISTRY`] by id (a launch can
/// only carry scalars and buffers).
struct RankState {
    id: u64,
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

static REGISTRY: RwLock<BTreeMap<u64, Weak<RankState>>> =
    parking_lot::const_rwlock(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Drop for RankState {
    fn drop(&mut self) {
        REGISTRY.write().remove(&self.id);
    }
}

fn lookup(id: u64) -> Result<Arc<RankState>> {
    REGISTRY
        .read()
        .get(&id)
        .and_then(Weak::upgrade)
        .ok_or_else(|| {
            Error::backend(
                "host",
                "collective",
                format!("communicator {id} was destroyed before its queued operation ran"),
            )
        })
}

fn message_of(e: &Error) -> String {
    match e {
        Error::Backend { message, .. } => message.clone(),
        e => e.to_string(),
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
        let comm = Arc::new(HostCommunicator::new(
            entry.clique.clone(),
            rank,
            global_rank,
        ));
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
        let st = &comm.state;
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
                    format!("{}: {}", comm.describe(), message_of(&e)),
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

// ---------------------------------------------------------------------------------------------
// The communicator: issue side.

/// One rank's host communicator.
pub struct HostCommunicator {
    state: Arc<RankState>,
    handle: Arc<dyn KernelHandle>,
    group: Mutex<P2pGroup>,
}

impl fmt::Debug for HostCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl HostCommunicator {
    fn new(clique: Arc<HostClique>, rank: usize, global: usize) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let size = clique.key.size();
        let state = Arc::new(RankState {
            id,
            clique,
            rank,
            global,
            seq: AtomicU64::new(0),
            p2p: Mutex::new(vec![[0, 0]; size]),
            splits: AtomicU64::new(0),
        });
        REGISTRY.write().insert(id, Arc::downgrade(&state));
        let handle: Arc<dyn KernelHandle> = Arc::new(HostKernelHandle {
            kernel: HostKernel {
                signature: KernelSignature {
                    name: "host collective".into(),
                    params: vec![],
                },
                func: collective_entry,
            },
        });
        HostCommunicator {
            state,
            handle,
            group: Mutex::new(P2pGroup::default()),
        }
    }

    /// The clique this communicator belongs to.
    pub fn clique_key(&self) -> &CliqueKey {
        &self.state.clique.key
    }

    /// This rank's global rank.
    pub fn global_rank(&self) -> usize {
        self.state.global
    }

    fn launch(&self, stream: &dyn Stream, args: &[LaunchArg]) -> Result<()> {
        if stream.as_any().downcast_ref::<HostStream>().is_none() {
            return Err(Error::InvalidArgument(format!(
                "{}: host collectives run on host streams only",
                self.describe()
            )));
        }
        stream.launch(&self.handle, DIMS, args)
    }

    fn issue(
        &self,
        stream: &dyn Stream,
        desc: OpDesc,
        src: Option<(DevicePtr, u64)>,
        dst: (DevicePtr, u64),
    ) -> Result<()> {
        if self.group.lock().depth > 0 {
            return Err(Error::Unsupported {
                backend: "host".into(),
                feature: format!("{} inside a group of sends and receives", desc.kind.name()),
            });
        }
        let mut flags = 0;
        let mut bufs: Vec<LaunchArg> = Vec::with_capacity(2);
        if let Some((ptr, len)) = src.filter(|s| s.1 > 0) {
            flags |= 1;
            bufs.push(LaunchArg::Buffer { ptr, len });
        }
        if dst.1 > 0 {
            flags |= 2;
            bufs.push(LaunchArg::Buffer {
                ptr: dst.0,
                len: dst.1,
            });
        }
        let mut args = vec![
            scalar(self.state.id),
            scalar(kind_code(desc.kind)),
            scalar(desc.count),
            scalar(dtype_code(desc.dtype)),
            scalar(op_code(desc.op)),
            scalar(desc.root as u64),
            scalar(flags),
        ];
        args.extend(bufs);
        self.launch(stream, &args)
    }

    fn bad_overlap(&self, what: &str) -> Error {
        Error::InvalidArgument(format!(
            "{}: {what}: src and dst overlap (only the in-place form is allowed)",
            self.describe()
        ))
    }

    fn p2p(&self, stream: &dyn Stream, item: P2pItem) -> Result<()> {
        let size = self.size();
        if item.peer >= size {
            return Err(Error::InvalidArgument(format!(
                "{}: peer {} does not exist (clique of {size})",
                self.describe(),
                item.peer
            )));
        }
        let mut g = self.group.lock();
        if g.depth == 0 {
            drop(g);
            return self.launch_group(stream, &[item]);
        }
        let id = stream_id(stream);
        if *g.stream.get_or_insert(id) != id {
            return Err(Error::Unsupported {
                backend: "host".into(),
                feature: "a group of sends and receives on more than one stream".into(),
            });
        }
        g.items.push(item);
        Ok(())
    }

    fn launch_group(&self, stream: &dyn Stream, items: &[P2pItem]) -> Result<()> {
        let mut args = Vec::with_capacity(3 + items.len() * 5);
        args.push(scalar(self.state.id));
        args.push(scalar(kind_code(OpKind::P2p)));
        args.push(scalar(items.len() as u64));
        for it in items {
            args.push(scalar(u64::from(it.send)));
            args.push(scalar(it.peer as u64));
            args.push(scalar(it.count));
            args.push(scalar(dtype_code(it.dtype)));
        }
        for it in items.iter().filter(|it| it.bytes > 0) {
            args.push(LaunchArg::Buffer {
                ptr: it.ptr,
                len: it.bytes,
            });
        }
        self.launch(stream, &args)
    }
}

impl Communicator for HostCommunicator {
    fn rank(&self) -> usize {
        self.state.rank
    }

    fn size(&self) -> usize {
        self.state.clique.key.size()
    }

    fn all_reduce(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let b = byte_len(count, dtype, 1)?;
        if src != dst && overlaps(src, b, dst, b) {
            return Err(self.bad_overlap("all_reduce"));
        }
        let desc = OpDesc {
            kind: OpKind::AllReduce,
            count,
            dtype,
            op: Some(op),
            root: 0,
        };
        self.issue(stream, desc, Some((src, b)), (dst, b))
    }

    fn all_gather(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        let sb = byte_len(count, dtype, 1)?;
        let db = byte_len(count, dtype, self.size())?;
        let in_place = src == dst.offset(sb * self.rank() as u64);
        if !in_place && overlaps(src, sb, dst, db) {
            return Err(self.bad_overlap("all_gather"));
        }
        let desc = OpDesc {
            kind: OpKind::AllGather,
            count,
            dtype,
            op: None,
            root: 0,
        };
        self.issue(stream, desc, Some((src, sb)), (dst, db))
    }

    fn reduce_scatter(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let sb = byte_len(count, dtype, self.size())?;
        let db = byte_len(count, dtype, 1)?;
        let in_place = dst == src.offset(db * self.rank() as u64);
        if !in_place && overlaps(src, sb, dst, db) {
            return Err(self.bad_overlap("reduce_scatter"));
        }
        let desc = OpDesc {
            kind: OpKind::ReduceScatter,
            count,
            dtype,
            op: Some(op),
            root: 0,
        };
        self.issue(stream, desc, Some((src, sb)), (dst, db))
    }

    fn all_to_all(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        let b = byte_len(count, dtype, self.size())?;
        if src != dst && overlaps(src, b, dst, b) {
            return Err(self.bad_overlap("all_to_all"));
        }
        let desc = OpDesc {
            kind: OpKind::AllToAll,
            count,
            dtype,
            op: None,
            root: 0,
        };
        self.issue(stream, desc, Some((src, b)), (dst, b))
    }

    fn broadcast(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        root: usize,
    ) -> Result<()> {
        if root >= self.size() {
            return Err(Error::InvalidArgument(format!(
                "{}: broadcast root {root} does not exist (clique of {})",
                self.describe(),
                self.size()
            )));
        }
        let b = byte_len(count, dtype, 1)?;
        let is_root = root == self.rank();
        if is_root && src != dst && overlaps(src, b, dst, b) {
            return Err(self.bad_overlap("broadcast"));
        }
        let desc = OpDesc {
            kind: OpKind::Broadcast,
            count,
            dtype,
            op: None,
            root,
        };
        self.issue(stream, desc, is_root.then_some((src, b)), (dst, b))
    }

    fn send(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let bytes = byte_len(count, dtype, 1)?;
        self.p2p(
            stream,
            P2pItem {
                send: true,
                peer,
                count,
                dtype,
                ptr: src,
                bytes,
            },
        )
    }

    fn recv(
        &self,
        stream: &dyn Stream,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let bytes = byte_len(count, dtype, 1)?;
        self.p2p(
            stream,
            P2pItem {
                send: false,
                peer,
                count,
                dtype,
                ptr: dst,
                bytes,
            },
        )
    }

    fn group_start(&self) -> Result<()> {
        self.group.lock().start();
        Ok(())
    }

    /// Without a stream the host backend cannot queue the group: a group that holds sends
    /// or receives must end with [`Communicator::group_end_on`]. An empty group is fine.
    fn group_end(&self) -> Result<()> {
        self.group.lock().end(&|| self.describe())
    }

    fn group_end_on(&self, stream: &dyn Stream) -> Result<()> {
        let items = self.group.lock().end_on(stream, &|| self.describe())?;
        match items {
            Some(items) => self.launch_group(stream, &items),
            None => Ok(()),
        }
    }

    fn async_error(&self) -> Result<()> {
        match self.state.clique.rv.poisoned() {
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
        self.state.clique.rv.poison(&format!(
            "{} aborted by rank {}: {reason}",
            self.state.clique.key, self.state.global
        ));
    }

    fn describe(&self) -> String {
        self.state.describe()
    }

    fn pending(&self) -> Option<String> {
        self.state.clique.rv.describe_pending()
    }
}

// ---------------------------------------------------------------------------------------------
// The communicator: run side (inside the stream work).

/// The host kernel every operation launches.
///
/// # Safety
/// As [`crate::kernels::HostKernelFn`]: every buffer argument points to `len` valid bytes for
/// the whole call (the host stream checked them against live allocations and keeps those
/// alive). Peers of the clique also access them during the call, as described on [`RawBuf`].
unsafe fn collective_entry(args: &[HostArg]) -> std::result::Result<(), KernelError> {
    // SAFETY: forwarded.
    unsafe { run_entry(args) }.map_err(|e| KernelError::Failed(message_of(&e)))
}

struct Decoder<'a> {
    args: &'a [HostArg],
    i: usize,
}

impl Decoder<'_> {
    fn bad(&self, what: &str) -> Error {
        Error::backend(
            "host",
            "collective",
            format!("malformed launch: argument {} should be {what}", self.i),
        )
    }

    fn u64(&mut self) -> Result<u64> {
        match self.args.get(self.i) {
            Some(HostArg::Scalar(Scalar::I64(v))) => {
                self.i += 1;
                Ok(*v as u64)
            }
            _ => Err(self.bad("an i64 scalar")),
        }
    }

    fn usize(&mut self) -> Result<usize> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| self.bad("an index"))
    }

    fn dtype(&mut self) -> Result<DType> {
        let v = self.usize()?;
        DType::ALL
            .get(v)
            .copied()
            .ok_or_else(|| self.bad("a dtype"))
    }

    fn kind(&mut self) -> Result<OpKind> {
        let v = self.usize()?;
        KINDS
            .get(v)
            .copied()
            .ok_or_else(|| self.bad("an operation kind"))
    }

    fn op(&mut self) -> Result<Option<ReduceOp>> {
        match self.usize()? {
            0 => Ok(None),
            v => ReduceOp::ALL
                .get(v - 1)
                .copied()
                .map(Some)
                .ok_or_else(|| self.bad("a reduction")),
        }
    }

    fn buf(&mut self, len: u64) -> Result<RawBuf> {
        match self.args.get(self.i) {
            Some(HostArg::Buffer { ptr, len: l }) if *l as u64 == len => {
                self.i += 1;
                Ok(RawBuf { ptr: *ptr, len: *l })
            }
            _ => Err(self.bad(&format!("a buffer of {len} bytes"))),
        }
    }
}

/// # Safety
/// As [`collective_entry`].
unsafe fn run_entry(args: &[HostArg]) -> Result<()> {
    let mut d = Decoder { args, i: 0 };
    let state = lookup(d.u64()?)?;
    let kind = d.kind()?;
    // SAFETY: (both calls) the buffers are valid for the call (forwarded).
    unsafe {
        if kind == OpKind::P2p {
            return state.run_p2p(&mut d);
        }
        let desc = OpDesc {
            kind,
            count: d.u64()?,
            dtype: d.dtype()?,
            op: d.op()?,
            root: d.usize()?,
        };
        let flags = d.u64()?;
        state.run_collective(desc, flags, &mut d)
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

impl RankState {
    fn describe(&self) -> String {
        format!(
            "rank {} (global rank {}) of {}",
            self.rank, self.global, self.clique.key
        )
    }

    fn fail(&self, what: &str, e: Error) -> Error {
        let msg = format!("{what} on {}: {}", self.describe(), message_of(&e));
        // Whatever went wrong, nobody may wait for this rank any longer.
        self.clique.rv.poison(&msg);
        Error::backend("host", "collective", msg)
    }

    /// # Safety
    /// As [`collective_entry`].
    unsafe fn run_collective(&self, desc: OpDesc, flags: u64, d: &mut Decoder) -> Result<()> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let what = format!("{desc} (collective #{seq})");
        // SAFETY: forwarded.
        unsafe { self.collective(seq, desc, flags, d) }.map_err(|e| self.fail(&what, e))
    }

    /// # Safety
    /// As [`collective_entry`].
    unsafe fn collective(&self, seq: u64, desc: OpDesc, flags: u64, d: &mut Decoder) -> Result<()> {
        let c = &self.clique;
        let n = c.key.size();
        let (sb, db) = match desc.kind {
            OpKind::AllReduce | OpKind::Broadcast => {
                let b = byte_len(desc.count, desc.dtype, 1)?;
                (b, b)
            }
            OpKind::AllGather => (
                byte_len(desc.count, desc.dtype, 1)?,
                byte_len(desc.count, desc.dtype, n)?,
            ),
            OpKind::ReduceScatter => (
                byte_len(desc.count, desc.dtype, n)?,
                byte_len(desc.count, desc.dtype, 1)?,
            ),
            OpKind::AllToAll | OpKind::P2p => {
                let b = byte_len(desc.count, desc.dtype, n)?;
                (b, b)
            }
        };
        let src = if flags & 1 != 0 {
            d.buf(sb)?
        } else {
            RawBuf::NONE
        };
        let dst = if flags & 2 != 0 {
            d.buf(db)?
        } else {
            RawBuf::NONE
        };
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
    /// As [`collective_entry`].
    unsafe fn run_p2p(&self, d: &mut Decoder) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.p2p_group(d) }.map_err(|e| self.fail("send/recv group", e))
    }

    /// # Safety
    /// As [`collective_entry`].
    unsafe fn p2p_group(&self, d: &mut Decoder) -> Result<()> {
        let c = &self.clique;
        let size = c.key.size();
        let k = d.usize()?;
        let mut items = Vec::with_capacity(k.min(1024));
        for _ in 0..k {
            let send = d.u64()? != 0;
            let peer = d.usize()?;
            let count = d.u64()?;
            let dtype = d.dtype()?;
            if peer >= size {
                return Err(Error::InvalidArgument(format!("peer {peer} out of range")));
            }
            items.push((send, peer, count, dtype, byte_len(count, dtype, 1)?));
        }
        let mut bufs = Vec::with_capacity(items.len());
        for it in &items {
            bufs.push(if it.4 > 0 { d.buf(it.4)? } else { RawBuf::NONE });
        }
        // Sends to and receives from this rank itself: matched in order, copied locally.
        let mut self_sends: VecDeque<usize> = VecDeque::new();
        let mut self_recvs: VecDeque<usize> = VecDeque::new();
        // Remote ones: numbered per (peer, direction) in the order they run.
        let mut remote: Vec<(usize, RvKey, [usize; 2])> = vec![];
        {
            let mut ctr = self.p2p.lock();
            for (i, &(send, peer, ..)) in items.iter().enumerate() {
                if peer == self.rank {
                    if send {
                        self_sends.push_back(i);
                    } else {
                        self_recvs.push_back(i);
                    }
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
            let (_, _, count, dtype, _) = items[*i];
            match c.rv.post(
                *key,
                ranks,
                self.global,
                Msg::P2p {
                    count,
                    dtype,
                    buf: bufs[*i],
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
            if items[i].0 {
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
            if let Err(e) = self_copies(&items, &bufs, self_sends, self_recvs) {
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

type P2pDesc = (bool, usize, u64, DType, u64);

/// The sends to and receives from a rank itself within one group, matched in order.
fn self_copies(
    items: &[P2pDesc],
    bufs: &[RawBuf],
    sends: VecDeque<usize>,
    recvs: VecDeque<usize>,
) -> Result<()> {
    if sends.len() != recvs.len() {
        return Err(Error::InvalidArgument(format!(
            "{} sends to itself but {} receives from itself in one group",
            sends.len(),
            recvs.len()
        )));
    }
    for (s, r) in sends.into_iter().zip(recvs) {
        let (a, b) = (items[s], items[r]);
        if (a.2, a.3) != (b.2, b.3) {
            return Err(Error::InvalidArgument(format!(
                "a send to itself of {} {} meets a receive of {} {}",
                a.2, a.3, b.2, b.3
            )));
        }
        if a.4 > 0 && bufs[s].ptr != bufs[r].ptr {
            // SAFETY: both are this rank's checked buffers of `a.4` bytes; `copy` allows
            // overlap.
            unsafe { ptr::copy(bufs[s].ptr, bufs[r].ptr, bufs[s].len) };
        }
    }
    Ok(())
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
