//! Collectives: communicators, clique keys, the communicator cache, rendezvous with hang
//! detection, and the host backend's in-process collectives.
//!
//! A [`Communicator`] is one rank's handle on a clique of devices. Collective operations are
//! issued on a stream, in order with the stream's other work; every rank of the clique must
//! issue the same operations in the same order (the executor guarantees it for SPMD programs by
//! keeping program order per communicator).

use crate::backend::{DevicePtr, Stream};
use crate::error::Result;
use crate::ir::DType;
use std::fmt;

/// Reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One rank's handle on a clique. All operations are asynchronous on `stream`: they are
/// queued in order with the stream's other work and complete when the stream reaches them
/// on every participating rank. Counts are in elements of `dtype`.
pub trait Communicator: Send + Sync {
    /// This rank (0-based) within the clique.
    fn rank(&self) -> usize;
    /// Number of ranks in the clique.
    fn size(&self) -> usize;
    /// `dst[i] = op over ranks of src[i]`, `count` elements; `src == dst` is allowed.
    fn all_reduce(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// `dst[r*count .. (r+1)*count] = src of rank r`.
    fn all_gather(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()>;
    /// `dst = op over ranks of src[rank*count .. (rank+1)*count]`.
    fn reduce_scatter(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// `dst[r*count ..] = src of rank r at [rank*count ..]` (`count` elements per peer).
    fn all_to_all(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()>;
    /// `dst = src of root` on every rank.
    fn broadcast(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        root: usize,
    ) -> Result<()>;
    /// Sends `count` elements to `peer` (matched by a `recv` there).
    fn send(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()>;
    /// Receives `count` elements from `peer`.
    fn recv(
        &self,
        stream: &dyn Stream,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()>;
    /// Groups the sends and receives issued until [`Communicator::group_end`] so they progress
    /// together (a permute is a group of one send and one receive per rank).
    fn group_start(&self) -> Result<()>;
    fn group_end(&self) -> Result<()>;
    /// An error the communicator hit asynchronously (a peer failed, a timeout), if any.
    fn async_error(&self) -> Result<()>;
    /// Aborts: pending and future operations fail on every rank instead of hanging.
    fn abort(&self, reason: &str);
}
