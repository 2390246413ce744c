//! The built-in host kernel every host collective operation launches: its arguments (encoded
//! by the issue side, decoded here when the stream runs the launch), the registry in which it
//! finds the rank's [`Transport`], and its entry point.
//!
//! A launch carries only scalars and checked buffers, so it names the rank by the id it was
//! registered under. A collective's arguments are: the id, the [`OpDesc`] words, a flags word
//! (bit 0: a source follows, bit 1: a destination follows) and those buffers. A group of sends
//! and receives: the id, the [`OpKind::P2p`] code, the number of operations, four words per
//! operation (send, peer, count, dtype code), then one buffer per operation of non-zero length.

use super::ops::{DESC_WORDS, OpDesc, OpKind, byte_len, dtype_code, dtype_from_code};
use super::transport::{P2pOp, RawBuf, Transport};
use crate::backend::{DevicePtr, KernelHandle, LaunchArg, LaunchDims};
use crate::collectives::error_message;
use crate::error::{Error, Result};
use crate::host::HostKernelHandle;
use crate::ir::{DType, Dim3, Scalar};
use crate::kernels::{HostArg, HostKernel, KernelError, KernelSignature};
use parking_lot::RwLock;
use std::collections::{BTreeMap, VecDeque};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Launch shape of the built-in collective kernels (they ignore it).
pub(crate) const DIMS: LaunchDims = LaunchDims {
    grid: Dim3::x(1),
    block: Dim3::x(1),
    shared_mem: 0,
};

// ---------------------------------------------------------------------------------------------
// Registry.

static RANKS: RwLock<BTreeMap<u64, Weak<dyn Transport>>> =
    parking_lot::const_rwlock(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A rank's entry in the registry, removed when dropped.
pub(crate) struct Registration {
    id: u64,
}

impl Registration {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        RANKS.write().insert(id, Arc::downgrade(&transport));
        Registration { id }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        RANKS.write().remove(&self.id);
    }
}

fn lookup(id: u64) -> Result<Arc<dyn Transport>> {
    RANKS
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

/// The handle of the kernel, named `"{backend} collective"`.
pub(crate) fn handle(backend: &str) -> Arc<dyn KernelHandle> {
    Arc::new(HostKernelHandle {
        kernel: HostKernel {
            signature: KernelSignature {
                name: format!("{backend} collective"),
                params: vec![],
            },
            func: collective_entry,
        },
    })
}

// ---------------------------------------------------------------------------------------------
// What the run side gets.

/// The sends to and receives from rank `me` itself within one group, matched in order and
/// copied locally.
pub(crate) fn copy_to_self(ops: &[P2pOp], me: usize) -> Result<()> {
    let mut sends: VecDeque<&P2pOp> = VecDeque::new();
    let mut recvs: VecDeque<&P2pOp> = VecDeque::new();
    for op in ops.iter().filter(|o| o.peer == me) {
        if op.send {
            sends.push_back(op);
        } else {
            recvs.push_back(op);
        }
    }
    if sends.len() != recvs.len() {
        return Err(Error::InvalidArgument(format!(
            "{} sends to itself but {} receives from itself in one group",
            sends.len(),
            recvs.len()
        )));
    }
    for (a, b) in sends.into_iter().zip(recvs) {
        if (a.count, a.dtype) != (b.count, b.dtype) {
            return Err(Error::InvalidArgument(format!(
                "a send to itself of {} {} meets a receive of {} {}",
                a.count, a.dtype, b.count, b.dtype
            )));
        }
        if a.buf.len > 0 && a.buf.ptr != b.buf.ptr {
            // SAFETY: both are this rank's checked buffers of the same length (same count and
            // dtype); `copy` allows overlap.
            unsafe { ptr::copy(a.buf.ptr, b.buf.ptr, a.buf.len) };
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Encoding (the issue side).

/// A `u64` as an i64 immediate (bit-cast: decoded with `as u64`).
fn scalar(v: u64) -> LaunchArg {
    LaunchArg::Scalar(Scalar::I64(v as i64))
}

/// The arguments of collective `desc` of rank `id`: its source (`None` where the rank has
/// none, e.g. a broadcast's non-root) and destination, each `(pointer, bytes)`; empty buffers
/// are left out.
pub(crate) fn collective_args(
    id: u64,
    desc: &OpDesc,
    src: Option<(DevicePtr, u64)>,
    dst: (DevicePtr, u64),
) -> Vec<LaunchArg> {
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
    let mut args = Vec::with_capacity(2 + DESC_WORDS + bufs.len());
    args.push(scalar(id));
    args.extend(desc.to_words().map(scalar));
    args.push(scalar(flags));
    args.extend(bufs);
    args
}

/// One send or receive of a group, as the issue side collects it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct P2pItem {
    pub(crate) send: bool,
    pub(crate) peer: usize,
    pub(crate) count: u64,
    pub(crate) dtype: DType,
    pub(crate) ptr: DevicePtr,
    pub(crate) bytes: u64,
}

/// The arguments of a group of sends and receives of rank `id`.
pub(crate) fn group_args(id: u64, items: &[P2pItem]) -> Vec<LaunchArg> {
    let mut args = Vec::with_capacity(3 + items.len() * 5);
    args.push(scalar(id));
    args.push(scalar(OpKind::P2p.code()));
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
    args
}

// ---------------------------------------------------------------------------------------------
// Decoding and running (inside the stream work).

/// The kernel's entry point.
///
/// # Safety
/// As [`crate::kernels::HostKernelFn`]: every buffer argument points to `len` valid bytes for
/// the whole call (the host stream checked them against live allocations and keeps those
/// alive). Peers of the clique may also access them during the call, as the transport says.
unsafe fn collective_entry(args: &[HostArg]) -> std::result::Result<(), KernelError> {
    // SAFETY: forwarded.
    unsafe { run(args) }.map_err(|e| KernelError::Failed(error_message(&e)))
}

/// # Safety
/// As [`collective_entry`].
unsafe fn run(args: &[HostArg]) -> Result<()> {
    let mut d = Decoder { args, i: 0 };
    let transport = lookup(d.u64()?)?;
    let member = transport.member();
    let n = member.key().size();
    let kind = d.u64()?;
    // SAFETY: (both calls) the buffers are valid for the call (forwarded), of the lengths the
    // operation implies (checked by `Decoder::buf`).
    unsafe {
        if OpKind::from_code(kind) == Some(OpKind::P2p) {
            let ops = d.group(n)?;
            return transport.run_group(&ops);
        }
        let (desc, src, dst) = d.collective(kind, n, member.rank())?;
        transport.run_collective(desc, src, dst)
    }
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

    fn buf(&mut self, len: u64) -> Result<RawBuf> {
        match self.args.get(self.i) {
            Some(HostArg::Buffer { ptr, len: l }) if *l as u64 == len => {
                self.i += 1;
                Ok(RawBuf { ptr: *ptr, len: *l })
            }
            _ => Err(self.bad(&format!("a buffer of {len} bytes"))),
        }
    }

    /// A collective whose kind code was read, for clique rank `rank` of `n`: the description
    /// and the source and destination (checked against the lengths it implies).
    fn collective(&mut self, kind: u64, n: usize, rank: usize) -> Result<(OpDesc, RawBuf, RawBuf)> {
        let mut w = [kind; DESC_WORDS];
        for x in &mut w[1..] {
            *x = self.u64()?;
        }
        let desc = OpDesc::from_words(&w)
            .filter(|d| d.kind != OpKind::P2p)
            .ok_or_else(|| self.bad(&format!("the last of the words of an operation {w:?}")))?;
        let flags = self.u64()?;
        let (sb, db) = desc.lens(n)?;
        let src = if flags & 1 != 0 {
            self.buf(sb)?
        } else {
            RawBuf::NONE
        };
        let dst = if flags & 2 != 0 {
            self.buf(db)?
        } else {
            RawBuf::NONE
        };
        let needs_src = sb > 0 && (desc.kind != OpKind::Broadcast || desc.root == rank);
        if (needs_src && src.len == 0) || (db > 0 && dst.len == 0) {
            return Err(self.bad("a buffer (one is missing)"));
        }
        Ok((desc, src, dst))
    }

    /// A group (its kind code was read) in a clique of `n`.
    fn group(&mut self, n: usize) -> Result<Vec<P2pOp>> {
        let k = self.usize()?;
        let mut heads = Vec::with_capacity(k.min(1024));
        for _ in 0..k {
            let send = self.u64()? != 0;
            let peer = self.usize()?;
            let count = self.u64()?;
            let dtype = dtype_from_code(self.u64()?).ok_or_else(|| self.bad("a dtype"))?;
            if peer >= n {
                return Err(Error::InvalidArgument(format!("peer {peer} out of range")));
            }
            heads.push((send, peer, count, dtype, byte_len(count, dtype, 1)?));
        }
        heads
            .into_iter()
            .map(|(send, peer, count, dtype, bytes)| {
                let buf = if bytes > 0 {
                    self.buf(bytes)?
                } else {
                    RawBuf::NONE
                };
                Ok(P2pOp {
                    send,
                    peer,
                    count,
                    dtype,
                    buf,
                })
            })
            .collect()
    }
}
