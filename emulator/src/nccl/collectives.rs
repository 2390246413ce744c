//! The collectives (`ncclAllReduce`, `ncclBroadcast`, `ncclReduce`, `ncclAllGather`,
//! `ncclReduceScatter`): argument checks, and queuing (or deferring) each rank's part.

use super::comm::{Comm, comm_of, ready_comm};
use super::deferred::GROUP;
use super::reduce::{Dt, Red};
use super::slot::issue;
use super::types::{Meta, OpKind, Part, SlotKey};
use super::{INVALID_ARGUMENT, INVALID_USAGE, LAST_ERROR, NcclResult, api_try, fail};
use crate::diag::Kind;
use crate::error::Code;
use crate::stream::{self, STREAMS, StreamCore};
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The stream a collective names (NULL: the rank's context's legacy stream).
pub(super) fn coll_stream(
    comm: &Comm,
    h: usize,
    call: &str,
) -> Result<Arc<StreamCore>, NcclResult> {
    if h == 0 || h == stream::STREAM_LEGACY || h == stream::STREAM_PER_THREAD {
        return Ok(comm.ctx.legacy.clone());
    }
    STREAMS.get(h, call).map_err(|e| {
        LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
        INVALID_ARGUMENT
    })
}

/// Checks a buffer at the call (the data is checked again when it moves).
pub(super) fn check_buf(ptr: usize, len: usize, what: &str, call: &str) -> Result<(), NcclResult> {
    crate::memory::check(ptr, len, what, call, Code::InvalidValue)
        .map(|_| ())
        .map_err(|e| {
            LAST_ERROR.with(|l| *l.borrow_mut() = e.message);
            INVALID_ARGUMENT
        })
}

/// Validates and queues (or defers, inside a group) one collective part.
pub(super) fn submit_part(
    comm: usize,
    stream_h: usize,
    key_of: impl FnOnce(&Comm) -> SlotKey,
    part: Part,
    buffers: &[(usize, usize, &str)],
    call: &str,
) -> Result<(), NcclResult> {
    let c = ready_comm(comm, call)?;
    if c.clique.aborted.load(Ordering::SeqCst) {
        return Err(fail(
            INVALID_USAGE,
            call,
            Kind::InvalidState,
            "the communicator was aborted",
        ));
    }
    for (p, len, what) in buffers {
        check_buf(*p, *len, what, call)?;
    }
    let s = coll_stream(&c, stream_h, call)?;
    let key = key_of(&c);
    if GROUP.with(|g| g.borrow().depth > 0) {
        GROUP.with(|g| g.borrow_mut().ops.push((c, s, key, part)));
        return Ok(());
    }
    issue(&s, vec![(c, key, part)], call)
}

/// A part of `kind` with its buffers.
pub(super) fn part(
    kind: OpKind,
    send: usize,
    recv: usize,
    bytes: usize,
    dt: Dt,
    op: Red,
    root: usize,
) -> Part {
    let meta = Meta {
        kind,
        bytes,
        dt,
        op,
        root,
    };
    Part { meta, send, recv }
}

pub(super) fn coll_key(c: &Comm) -> SlotKey {
    SlotKey::Coll(c.next_coll.fetch_add(1, Ordering::SeqCst))
}

/// Decodes `ncclDataType_t` `dt` (and, for reductions, `ncclRedOp_t` `op`; else `Sum`) and
/// the byte length of `count` elements.
pub(super) fn typed(
    count: usize,
    dt: c_int,
    op: Option<c_int>,
    call: &str,
) -> Result<(Dt, Red, usize), NcclResult> {
    let Some(d) = Dt::from(dt) else {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("unknown ncclDataType_t {dt}"),
        ));
    };
    let o = op.unwrap_or(0);
    let Some(r) = Red::from(o) else {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("unknown ncclRedOp_t {o}"),
        ));
    };
    let bytes = count.checked_mul(d.size()).ok_or_else(|| {
        fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            "count overflows",
        )
    })?;
    Ok((d, r, bytes))
}

/// The root rank, checked against the communicator's size (`what`: the message's words).
fn root_of(root: c_int, nranks: usize, what: String, call: &str) -> Result<usize, NcclResult> {
    if root < 0 || root as usize >= nranks {
        return Err(fail(INVALID_ARGUMENT, call, Kind::InvalidValue, what));
    }
    Ok(root as usize)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclAllReduce";
    api_try(C, || {
        let (dt, op, bytes) = typed(count, dt, Some(op), C)?;
        let (send, recv) = (send as usize, recv as usize);
        let part = part(OpKind::AllReduce, send, recv, bytes, dt, op, 0);
        let bufs = [(send, bytes, "sendbuff"), (recv, bytes, "recvbuff")];
        submit_part(comm, stream, coll_key, part, &bufs, C)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    root: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclBroadcast";
    api_try(C, || {
        let (dt, _, bytes) = typed(count, dt, None, C)?;
        let c = comm_of(comm, C)?;
        let nranks = c.clique.nranks;
        let root = root_of(root, nranks, format!("root {root} of {nranks} ranks"), C)?;
        let (send, recv) = (send as usize, recv as usize);
        let mut bufs = vec![(recv, bytes, "recvbuff")];
        if c.rank == root {
            bufs.push((send, bytes, "sendbuff"));
        }
        let part = part(OpKind::Broadcast, send, recv, bytes, dt, Red::Sum, root);
        submit_part(comm, stream, coll_key, part, &bufs, C)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: c_int,
    root: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclReduce";
    api_try(C, || {
        let (dt, op, bytes) = typed(count, dt, Some(op), C)?;
        let c = comm_of(comm, C)?;
        let root = root_of(root, c.clique.nranks, format!("root {root}"), C)?;
        let (send, recv) = (send as usize, recv as usize);
        let mut bufs = vec![(send, bytes, "sendbuff")];
        if c.rank == root {
            bufs.push((recv, bytes, "recvbuff"));
        }
        let part = part(OpKind::Reduce, send, recv, bytes, dt, op, root);
        submit_part(comm, stream, coll_key, part, &bufs, C)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dt: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclAllGather";
    api_try(C, || {
        let (dt, _, bytes) = typed(sendcount, dt, None, C)?;
        let nranks = comm_of(comm, C)?.clique.nranks;
        let (send, recv) = (send as usize, recv as usize);
        let part = part(OpKind::AllGather, send, recv, bytes, dt, Red::Sum, 0);
        let bufs = [
            (send, bytes, "sendbuff"),
            (recv, bytes * nranks, "recvbuff"),
        ];
        submit_part(comm, stream, coll_key, part, &bufs, C)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dt: c_int,
    op: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    const C: &str = "ncclReduceScatter";
    api_try(C, || {
        let (dt, op, bytes) = typed(recvcount, dt, Some(op), C)?;
        let nranks = comm_of(comm, C)?.clique.nranks;
        let (send, recv) = (send as usize, recv as usize);
        let part = part(OpKind::ReduceScatter, send, recv, bytes, dt, op, 0);
        let bufs = [
            (send, bytes * nranks, "sendbuff"),
            (recv, bytes, "recvbuff"),
        ];
        submit_part(comm, stream, coll_key, part, &bufs, C)
    })
}
