//! The data of an NCCL operation and of its slot, shared by every module of the emulated
//! NCCL: what an operation is (`OpKind`, `Meta`), a rank's part of it, the slot where the
//! parts meet and its places, why it failed, and where a clique's initialization stands. Only
//! data and the checked memory accesses: nothing here reaches a clique or a connection.

use super::NcclResult;
use super::reduce::{Dt, Red};
use crate::error::Code;
use crate::stream::StreamCore;
use std::sync::Arc;

/// What an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    Send,
    Recv,
}

impl OpKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "ncclAllReduce",
            OpKind::Broadcast => "ncclBroadcast",
            OpKind::Reduce => "ncclReduce",
            OpKind::AllGather => "ncclAllGather",
            OpKind::ReduceScatter => "ncclReduceScatter",
            OpKind::Send => "ncclSend",
            OpKind::Recv => "ncclRecv",
        }
    }

    const ALL: [OpKind; 7] = [
        OpKind::AllReduce,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::Send,
        OpKind::Recv,
    ];

    pub(super) fn code(self) -> u8 {
        OpKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u8
    }

    pub(super) fn from_code(c: u8) -> Option<OpKind> {
        OpKind::ALL.get(c as usize).copied()
    }

    /// Whether the operation reduces (its type and operator must agree across ranks).
    pub(super) fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter
        )
    }

    /// Whether the operation has a root (which must agree across ranks).
    pub(super) fn rooted(self) -> bool {
        matches!(self, OpKind::Broadcast | OpKind::Reduce)
    }
}

/// What one rank's part of an operation is, without its buffers (what travels to the other
/// processes of a clique).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) kind: OpKind,
    /// The call's count in bytes (a reduce-scatter's receive count, an all-gather's send
    /// count).
    pub(super) bytes: usize,
    pub(super) dt: Dt,
    /// `Sum` for operations that do not reduce.
    pub(super) op: Red,
    /// 0 for operations without a root.
    pub(super) root: usize,
}

impl Meta {
    /// The bytes of this part's input in a clique of `nranks` (none for a receive).
    pub(super) fn input_len(&self, nranks: usize) -> Option<usize> {
        match self.kind {
            OpKind::ReduceScatter => self.bytes.checked_mul(nranks),
            OpKind::Recv => Some(0),
            _ => Some(self.bytes),
        }
    }
}

/// What one local rank contributes to a slot: its metadata and its buffers (`send` unused by
/// a receive, `recv` by a send).
#[derive(Clone, Debug)]
pub(super) struct Part {
    pub(super) meta: Meta,
    pub(super) send: usize,
    pub(super) recv: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum SlotKey {
    Coll(u64),
    /// (sender, receiver, n-th message between them)
    P2p(usize, usize, u64),
}

/// A part of a rank in another process, as received.
#[derive(Debug)]
pub(super) struct Remote {
    pub(super) meta: Meta,
    /// The input when this process needs it, or why the rank could not read it.
    pub(super) input: Result<Option<Vec<u8>>, String>,
}

/// Why an operation failed: the NCCL result its communicators report and the message.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub(super) code: NcclResult,
    pub(super) msg: String,
}

#[derive(Default)]
pub(super) struct Slot {
    /// Per place (a rank of a collective; the send and the receive of a message): the local
    /// part and its queued position.
    pub(super) parts: Vec<Option<Part>>,
    pub(super) queued: Vec<Option<(Arc<StreamCore>, u64)>>,
    /// Per place: the part of a rank in another process.
    pub(super) remote: Vec<Option<Remote>>,
    /// Per place: the local part's stream has reached it.
    pub(super) reached: Vec<bool>,
    /// Local participants that have seen the result (the slot is dropped when all have).
    pub(super) finished: usize,
    pub(super) done: Option<Result<(), Failure>>,
}

impl Slot {
    pub(super) fn sized(n: usize) -> Slot {
        Slot {
            parts: vec![None; n],
            queued: vec![None; n],
            reached: vec![false; n],
            remote: (0..n).map(|_| None).collect(),
            ..Slot::default()
        }
    }

    /// Places whose part is there: local ones that arrived, remote ones received. A slot is
    /// performed when every place is filled (a message whose receive is in another process
    /// never is: it completes when that process says so).
    pub(super) fn filled(&self) -> usize {
        let reached = self.reached.iter().filter(|r| **r).count();
        reached + self.remote.iter().filter(|r| r.is_some()).count()
    }

    /// Lets the queued local parts' streams run up to them (but `except`).
    pub(super) fn release(&self, except: Option<usize>) {
        for (i, q) in self.queued.iter().enumerate() {
            if Some(i) != except
                && let Some((s, seq)) = q
            {
                s.release(*seq);
            }
        }
    }
}

/// The number of places of slot `key` in a clique of `nranks`.
pub(super) fn slot_size(key: SlotKey, nranks: usize) -> usize {
    match key {
        SlotKey::Coll(_) => nranks,
        SlotKey::P2p(..) => 2,
    }
}

/// The place of `part` (of `rank`) in its slot. A message's slot has two places, the send's
/// (0) and the receive's (1), told apart by the part rather than by the rank: a send to the
/// rank itself and its receive are two parts of one slot.
pub(super) fn place(key: SlotKey, rank: usize, part: &Part) -> usize {
    match key {
        SlotKey::Coll(_) => rank,
        SlotKey::P2p(..) => usize::from(part.meta.kind == OpKind::Recv),
    }
}

/// The rank at `place` of slot `key`.
pub(super) fn rank_at(key: SlotKey, place: usize) -> usize {
    match key {
        SlotKey::Coll(_) => place,
        SlotKey::P2p(s, r, _) => {
            if place == 0 {
                s
            } else {
                r
            }
        }
    }
}

/// Where a clique's initialization stands.
#[derive(Clone, Debug)]
pub(super) enum Init {
    /// Waiting for ranks to join.
    Forming,
    Ready,
    Failed(Failure),
}

/// Reads `len` bytes of emulated memory (checked).
pub(super) fn read(ptr: usize, len: usize, what: &str, call: &str) -> Result<Vec<u8>, String> {
    crate::memory::check(ptr, len, what, call, Code::IllegalAddress).map_err(|e| e.message)?;
    if len == 0 {
        return Ok(vec![]);
    }
    // SAFETY: `len` bytes at `ptr` lie inside a live allocation (checked under the execution
    // lock held by the caller).
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec())
}

/// Writes `data` to emulated memory (checked).
pub(super) fn write(ptr: usize, data: &[u8], what: &str, call: &str) -> Result<(), String> {
    crate::memory::check(ptr, data.len(), what, call, Code::IllegalAddress)
        .map_err(|e| e.message)?;
    if !data.is_empty() {
        // SAFETY: as in `read`, for writing.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr as *mut u8, data.len()) };
    }
    Ok(())
}
