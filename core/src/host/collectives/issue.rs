//! Issue-side pieces shared by the host communicators (in-process, [`super::host`], and across
//! processes, [`super::shm`]): every operation is a built-in host kernel launched on the rank's
//! host stream, and sends/receives of a group are collected here and launched as one.

use crate::backend::{DevicePtr, LaunchArg, LaunchDims, Stream};
use crate::collectives::ReduceOp;
use crate::error::{Error, Result};
use crate::ir::{DType, Dim3, Scalar};
use std::fmt;

/// One send or receive of a group.
#[derive(Clone, Copy, Debug)]
pub(super) struct P2pItem {
    pub(super) send: bool,
    pub(super) peer: usize,
    pub(super) count: u64,
    pub(super) dtype: DType,
    pub(super) ptr: DevicePtr,
    pub(super) bytes: u64,
}

/// The open group of a communicator: nesting depth, the sends and receives issued so far, and
/// the stream they were issued on (by identity).
#[derive(Default)]
pub(super) struct P2pGroup {
    pub(super) depth: usize,
    pub(super) items: Vec<P2pItem>,
    /// Address of the stream the group's items were issued on (identity only).
    pub(super) stream: Option<usize>,
}

impl P2pGroup {
    pub(super) fn start(&mut self) {
        self.depth += 1;
    }

    /// `group_end` without a stream: a host group holding sends or receives cannot be queued
    /// without one (they are dropped, with an error); an empty group is fine.
    pub(super) fn end(&mut self, who: &dyn Fn() -> String) -> Result<()> {
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
    pub(super) fn end_on(
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

/// Launch shape of the built-in collective kernels (they ignore it).
pub(super) const DIMS: LaunchDims = LaunchDims {
    grid: Dim3::x(1),
    block: Dim3::x(1),
    shared_mem: 0,
};

/// A `u64` passed to a built-in kernel as an i64 immediate (bit-cast: decoded with `as u64`).
pub(super) fn scalar(v: u64) -> LaunchArg {
    LaunchArg::Scalar(Scalar::I64(v as i64))
}

/// `count` elements of `dtype`, `times` over, in bytes, if that fits the address space.
pub(super) fn byte_len(count: u64, dtype: DType, times: usize) -> Result<u64> {
    count
        .checked_mul(dtype.size() as u64)
        .and_then(|b| b.checked_mul(times as u64))
        .filter(|b| *b <= i64::MAX as u64 && usize::try_from(*b).is_ok())
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{count} elements of {dtype} (x{times}) do not fit in memory"
            ))
        })
}

/// True when the two byte ranges share a byte.
pub(super) fn overlaps(a: DevicePtr, alen: u64, b: DevicePtr, blen: u64) -> bool {
    alen > 0 && blen > 0 && a.0 < b.0.saturating_add(blen) && b.0 < a.0.saturating_add(alen)
}

/// A stream's identity (its address).
pub(super) fn stream_id(stream: &dyn Stream) -> usize {
    (stream as *const dyn Stream).cast::<()>() as usize
}

/// Kinds of host collective operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    P2p,
}

/// Every kind, in code order (`kind_code` is the index).
pub(super) const KINDS: [OpKind; 6] = [
    OpKind::AllReduce,
    OpKind::AllGather,
    OpKind::ReduceScatter,
    OpKind::AllToAll,
    OpKind::Broadcast,
    OpKind::P2p,
];

impl OpKind {
    pub(super) const fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all_reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::AllToAll => "all_to_all",
            OpKind::Broadcast => "broadcast",
            OpKind::P2p => "send/recv",
        }
    }
}

/// What a rank issued: compared across ranks at every collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OpDesc {
    pub(super) kind: OpKind,
    pub(super) count: u64,
    pub(super) dtype: DType,
    pub(super) op: Option<ReduceOp>,
    pub(super) root: usize,
}

impl fmt::Display for OpDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}", self.kind.name(), self.dtype)?;
        if let Some(op) = self.op {
            write!(f, " {op}")?;
        }
        write!(f, ", {} elements", self.count)?;
        if self.kind == OpKind::Broadcast {
            write!(f, ", root {}", self.root)?;
        }
        f.write_str(")")
    }
}

/// Codes passed to the built-in kernels as immediates.
pub(super) fn dtype_code(d: DType) -> u64 {
    DType::ALL.iter().position(|x| *x == d).unwrap_or(0) as u64
}

pub(super) fn op_code(op: Option<ReduceOp>) -> u64 {
    op.and_then(|op| ReduceOp::ALL.iter().position(|x| *x == op))
        .map_or(0, |i| i as u64 + 1)
}

pub(super) fn kind_code(k: OpKind) -> u64 {
    KINDS.iter().position(|x| *x == k).unwrap_or(0) as u64
}
