//! The collectives (`ncclAllReduce`, `ncclBroadcast`, `ncclReduce`, `ncclAllGather`,
//! `ncclReduceScatter`): argument checks, and queuing (or deferring) each rank's part.

use super::comm::{COMMS, Comm, comm_of};
use super::group::GROUP;
use super::reduce::{Dt, Red};
use super::slot::{Part, SlotKey, issue};
use super::{INVALID_ARGUMENT, INVALID_USAGE, LAST_ERROR, NcclResult, SUCCESS, api, fail};
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
) -> NcclResult {
    let c = match comm_of(comm, call) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if c.clique.aborted.load(Ordering::SeqCst) {
        return fail(
            INVALID_USAGE,
            call,
            Kind::InvalidState,
            "the communicator was aborted",
        );
    }
    for (p, len, what) in buffers {
        if let Err(r) = check_buf(*p, *len, what, call) {
            return r;
        }
    }
    let s = match coll_stream(&c, stream_h, call) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let key = key_of(&c);
    if GROUP.with(|g| g.borrow().depth > 0) {
        GROUP.with(|g| g.borrow_mut().ops.push((c, s, key, part)));
        return SUCCESS;
    }
    match issue(&s, vec![(c, key, part)], call) {
        Ok(()) => SUCCESS,
        Err(r) => r,
    }
}

pub(super) fn coll_key(c: &Comm) -> SlotKey {
    SlotKey::Coll(c.next_coll.fetch_add(1, Ordering::SeqCst))
}

pub(super) fn dt_op(dt: c_int, op: Option<c_int>, call: &str) -> Result<(Dt, Red), NcclResult> {
    let Some(d) = Dt::from(dt) else {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("unknown ncclDataType_t {dt}"),
        ));
    };
    let r = match op.unwrap_or(0) {
        0 => Red::Sum,
        1 => Red::Prod,
        2 => Red::Max,
        3 => Red::Min,
        4 => Red::Avg,
        o => {
            return Err(fail(
                INVALID_ARGUMENT,
                call,
                Kind::InvalidValue,
                format!("unknown ncclRedOp_t {o}"),
            ));
        }
    };
    Ok((d, r))
}

pub(super) fn bytes(count: usize, dt: Dt, call: &str) -> Result<usize, NcclResult> {
    count.checked_mul(dt.size()).ok_or_else(|| {
        fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            "count overflows",
        )
    })
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
    api(C, || {
        let (d, r) = match dt_op(dt, Some(op), C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(count, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let (s, rv) = (send as usize, recv as usize);
        submit_part(
            comm,
            stream,
            coll_key,
            Part::AllReduce {
                send: s,
                recv: rv,
                bytes: b,
                dt: d,
                op: r,
            },
            &[(s, b, "sendbuff"), (rv, b, "recvbuff")],
            C,
        )
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
    api(C, || {
        let (d, _) = match dt_op(dt, None, C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(count, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let nranks = match comm_of(comm, C) {
            Ok(c) => c.clique.nranks,
            Err(r) => return r,
        };
        if root < 0 || root as usize >= nranks {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                format!("root {root} of {nranks} ranks"),
            );
        }
        let (s, rv) = (send as usize, recv as usize);
        let rank = COMMS.try_get(comm).map(|c| c.rank).unwrap_or(0);
        let mut bufs = vec![(rv, b, "recvbuff")];
        if rank == root as usize {
            bufs.push((s, b, "sendbuff"));
        }
        submit_part(
            comm,
            stream,
            coll_key,
            Part::Broadcast {
                send: s,
                recv: rv,
                bytes: b,
                root: root as usize,
            },
            &bufs,
            C,
        )
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
    api(C, || {
        let (d, r) = match dt_op(dt, Some(op), C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(count, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let c = match comm_of(comm, C) {
            Ok(c) => c,
            Err(r) => return r,
        };
        if root < 0 || root as usize >= c.clique.nranks {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                format!("root {root}"),
            );
        }
        let (s, rv) = (send as usize, recv as usize);
        let mut bufs = vec![(s, b, "sendbuff")];
        if c.rank == root as usize {
            bufs.push((rv, b, "recvbuff"));
        }
        submit_part(
            comm,
            stream,
            coll_key,
            Part::Reduce {
                send: s,
                recv: rv,
                bytes: b,
                dt: d,
                op: r,
                root: root as usize,
            },
            &bufs,
            C,
        )
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
    api(C, || {
        let (d, _) = match dt_op(dt, None, C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(sendcount, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let nranks = match comm_of(comm, C) {
            Ok(c) => c.clique.nranks,
            Err(r) => return r,
        };
        let (s, rv) = (send as usize, recv as usize);
        submit_part(
            comm,
            stream,
            coll_key,
            Part::AllGather {
                send: s,
                recv: rv,
                bytes: b,
            },
            &[(s, b, "sendbuff"), (rv, b * nranks, "recvbuff")],
            C,
        )
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
    api(C, || {
        let (d, r) = match dt_op(dt, Some(op), C) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let b = match bytes(recvcount, d, C) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let nranks = match comm_of(comm, C) {
            Ok(c) => c.clique.nranks,
            Err(r) => return r,
        };
        let (s, rv) = (send as usize, recv as usize);
        submit_part(
            comm,
            stream,
            coll_key,
            Part::ReduceScatter {
                send: s,
                recv: rv,
                bytes: b,
                dt: d,
                op: r,
            },
            &[(s, b * nranks, "sendbuff"), (rv, b, "recvbuff")],
            C,
        )
    })
}
