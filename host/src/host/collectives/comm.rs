//! [`HostComm`]: the issue side of the host communicators, the same for every [`Transport`].
//! Each operation is checked (buffer lengths, overlaps, peers and roots), then queued on the
//! rank's host stream as a launch of the built-in kernel ([`super::kernel`]); sends and
//! receives of a group are collected here and launched as one.

use super::kernel::{self, DIMS, P2pItem, Registration};
use super::ops::{OpDesc, OpKind, byte_len};
use super::transport::Transport;
use crate::backend::{DevicePtr, KernelHandle, Stream};
use crate::collectives::{CliqueKey, Communicator, ReduceOp};
use crate::error::{Error, Result};
use crate::host::HostStream;
use crate::ir::DType;
use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;

/// One rank's host communicator over the transport `T` (see [`super::HostCommunicator`] and
/// [`super::ShmCommunicator`]).
pub struct HostComm<T> {
    transport: Arc<T>,
    /// How the kernel finds `transport` (its id travels in every launch).
    registration: Registration,
    handle: Arc<dyn KernelHandle>,
    group: Mutex<P2pGroup>,
}

impl<T: Transport> fmt::Debug for HostComm<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl<T: Transport> HostComm<T> {
    pub(crate) fn new(transport: Arc<T>) -> Self {
        HostComm {
            registration: Registration::new(transport.clone()),
            handle: kernel::handle(transport.backend()),
            transport,
            group: Mutex::new(P2pGroup::default()),
        }
    }

    /// The clique this communicator belongs to.
    pub fn clique_key(&self) -> &CliqueKey {
        self.transport.member().key()
    }

    /// This rank's global rank.
    pub fn global_rank(&self) -> usize {
        self.transport.member().global_rank()
    }

    pub(crate) fn transport(&self) -> &Arc<T> {
        &self.transport
    }

    fn launch(&self, stream: &dyn Stream, args: &[crate::backend::LaunchArg]) -> Result<()> {
        if stream.as_any().downcast_ref::<HostStream>().is_none() {
            return Err(Error::InvalidArgument(format!(
                "{}: host collectives run on host streams only",
                self.describe()
            )));
        }
        stream.launch(&self.handle, DIMS, args)
    }

    /// Checks collective `desc` on `src` and `dst` (their lengths; overlaps: only the NCCL
    /// in-place forms are allowed, `src == dst`, all-gather `src == dst + rank·count`,
    /// reduce-scatter `dst == src + rank·count`) and queues it.
    fn collective(
        &self,
        stream: &dyn Stream,
        desc: OpDesc,
        src: DevicePtr,
        dst: DevicePtr,
    ) -> Result<()> {
        let (sb, db) = desc.lens(self.size())?;
        let rank = self.rank() as u64;
        let in_place = match desc.kind {
            OpKind::AllGather => src == dst.offset(sb * rank),
            OpKind::ReduceScatter => dst == src.offset(db * rank),
            _ => src == dst,
        };
        // A broadcast's source is only read on the root.
        let reads_src = desc.kind != OpKind::Broadcast || desc.root == self.rank();
        if reads_src && !in_place && overlaps(src, sb, dst, db) {
            return Err(self.bad_overlap(desc.kind.name()));
        }
        self.issue(stream, desc, reads_src.then_some((src, sb)), (dst, db))
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
                backend: self.transport.backend().into(),
                feature: format!("{} inside a group of sends and receives", desc.kind.name()),
            });
        }
        let args = kernel::collective_args(self.registration.id(), &desc, src, dst);
        self.launch(stream, &args)
    }

    fn bad_overlap(&self, what: &str) -> Error {
        Error::InvalidArgument(format!(
            "{}: {what}: src and dst overlap (only the in-place form is allowed)",
            self.describe()
        ))
    }

    /// A send (`send`) or receive of `count` elements at `ptr` to or from clique rank `peer`:
    /// launched at once outside a group, collected inside one.
    fn p2p(
        &self,
        stream: &dyn Stream,
        send: bool,
        ptr: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let item = P2pItem {
            send,
            peer,
            count,
            dtype,
            ptr,
            bytes: byte_len(count, dtype, 1)?,
        };
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
                backend: self.transport.backend().into(),
                feature: "a group of sends and receives on more than one stream".into(),
            });
        }
        g.items.push(item);
        Ok(())
    }

    fn launch_group(&self, stream: &dyn Stream, items: &[P2pItem]) -> Result<()> {
        let args = kernel::group_args(self.registration.id(), items);
        self.launch(stream, &args)
    }
}

impl<T: Transport> Communicator for HostComm<T> {
    fn rank(&self) -> usize {
        self.transport.member().rank()
    }

    fn size(&self) -> usize {
        self.transport.member().key().size()
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
        let desc = OpDesc::new(OpKind::AllReduce, count, dtype, Some(op), 0);
        self.collective(stream, desc, src, dst)
    }

    fn all_gather(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        let desc = OpDesc::new(OpKind::AllGather, count, dtype, None, 0);
        self.collective(stream, desc, src, dst)
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
        let desc = OpDesc::new(OpKind::ReduceScatter, count, dtype, Some(op), 0);
        self.collective(stream, desc, src, dst)
    }

    fn all_to_all(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        let desc = OpDesc::new(OpKind::AllToAll, count, dtype, None, 0);
        self.collective(stream, desc, src, dst)
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
        let desc = OpDesc::new(OpKind::Broadcast, count, dtype, None, root);
        self.collective(stream, desc, src, dst)
    }

    fn send(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        self.p2p(stream, true, src, count, dtype, peer)
    }

    fn recv(
        &self,
        stream: &dyn Stream,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        self.p2p(stream, false, dst, count, dtype, peer)
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
        self.transport.async_error()
    }

    fn abort(&self, reason: &str) {
        self.transport.abort(reason);
    }

    fn describe(&self) -> String {
        self.transport.describe()
    }

    fn pending(&self) -> Option<String> {
        self.transport.pending()
    }
}

/// True when the two byte ranges share a byte.
fn overlaps(a: DevicePtr, alen: u64, b: DevicePtr, blen: u64) -> bool {
    alen > 0 && blen > 0 && a.0 < b.0.saturating_add(blen) && b.0 < a.0.saturating_add(alen)
}

/// A stream's identity (its address).
fn stream_id(stream: &dyn Stream) -> usize {
    (stream as *const dyn Stream).cast::<()>() as usize
}

/// The open group of a communicator: nesting depth, the sends and receives issued so far, and
/// the stream they were issued on (by identity).
#[derive(Default)]
struct P2pGroup {
    depth: usize,
    items: Vec<P2pItem>,
    /// Address of the stream the group's items were issued on (identity only).
    stream: Option<usize>,
}

impl P2pGroup {
    fn start(&mut self) {
        self.depth += 1;
    }

    /// `group_end` without a stream: a host group holding sends or receives cannot be queued
    /// without one (they are dropped, with an error); an empty group is fine.
    fn end(&mut self, who: &dyn Fn() -> String) -> Result<()> {
        if self.depth == 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: group_end without group_start",
                who()
            )));
        }
        self.depth -= 1;
        if self.depth == 0 && !self.items.is_empty() {
            let n = self.items.len();
            self.items.clear();
            self.stream = None;
            return Err(Error::InvalidArgument(format!(
                "{}: the host backend runs a group of sends and receives as one operation on \
                 their stream: end it with group_end_on(stream) ({n} operations dropped)",
                who()
            )));
        }
        Ok(())
    }

    /// `group_end_on(stream)`: the items to launch when this closed the outermost group and it
    /// holds any, `None` otherwise.
    fn end_on(
        &mut self,
        stream: &dyn Stream,
        who: &dyn Fn() -> String,
    ) -> Result<Option<Vec<P2pItem>>> {
        if self.depth == 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: group_end without group_start",
                who()
            )));
        }
        self.depth -= 1;
        if self.depth > 0 || self.items.is_empty() {
            return Ok(None);
        }
        let same = self.stream.is_none_or(|id| id == stream_id(stream));
        self.stream = None;
        let items = std::mem::take(&mut self.items);
        if !same {
            return Err(Error::InvalidArgument(format!(
                "{}: group_end_on got another stream than its sends and receives were \
                 issued on ({} operations dropped)",
                who(),
                items.len()
            )));
        }
        Ok(Some(items))
    }
}
