//! Point-to-point: `ncclSend` / `ncclRecv`, matched by (sender, receiver, n-th message).

use super::collectives::{bytes, dt_op, submit_part};
use super::comm::{Comm, comm_of};
use super::slot::{Part, SlotKey};
use super::{INVALID_ARGUMENT, NcclResult, api, fail};
use crate::diag::Kind;
use std::ffi::{c_int, c_void};

pub(super) fn p2p(
    buf: usize,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
    is_send: bool,
) -> NcclResult {
    let call = if is_send { "ncclSend" } else { "ncclRecv" };
    let (d, _) = match dt_op(dt, None, call) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let b = match bytes(count, d, call) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let c = match comm_of(comm, call) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if peer < 0 || peer as usize >= c.clique.nranks {
        return fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("peer {peer}"),
        );
    }
    let peer = peer as usize;
    let key_of = move |c: &Comm| {
        if is_send {
            let mut m = c.next_send.lock();
            let n = m.entry(peer).or_insert(0);
            *n += 1;
            SlotKey::P2p(c.rank, peer, *n)
        } else {
            let mut m = c.next_recv.lock();
            let n = m.entry(peer).or_insert(0);
            *n += 1;
            SlotKey::P2p(peer, c.rank, *n)
        }
    };
    let part = if is_send {
        Part::Send {
            send: buf,
            bytes: b,
        }
    } else {
        Part::Recv {
            recv: buf,
            bytes: b,
        }
    };
    submit_part(
        comm,
        stream,
        key_of,
        part,
        &[(buf, b, if is_send { "sendbuff" } else { "recvbuff" })],
        call,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    api("ncclSend", || {
        p2p(send as usize, count, dt, peer, comm, stream, true)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
) -> NcclResult {
    api("ncclRecv", || {
        p2p(recv as usize, count, dt, peer, comm, stream, false)
    })
}
