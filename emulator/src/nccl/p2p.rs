//! Point-to-point: `ncclSend` / `ncclRecv`, matched by (sender, receiver, n-th message).

use super::collectives::{part, submit_part, typed};
use super::comm::{Comm, comm_of};
use super::reduce::Red;
use super::types::{OpKind, SlotKey};
use super::{INVALID_ARGUMENT, NcclResult, api_try, fail};
use crate::diag::Kind;
use std::ffi::{c_int, c_void};

/// Validates and queues (or defers, inside a group) one send (`is_send`) or receive.
fn p2p(
    buf: usize,
    count: usize,
    dt: c_int,
    peer: c_int,
    comm: usize,
    stream: usize,
    is_send: bool,
) -> Result<(), NcclResult> {
    let call = if is_send { "ncclSend" } else { "ncclRecv" };
    let (dt, _, b) = typed(count, dt, None, call)?;
    let c = comm_of(comm, call)?;
    if peer < 0 || peer as usize >= c.clique.nranks {
        return Err(fail(
            INVALID_ARGUMENT,
            call,
            Kind::InvalidValue,
            format!("peer {peer}"),
        ));
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
        part(OpKind::Send, buf, 0, b, dt, Red::Sum, 0)
    } else {
        part(OpKind::Recv, 0, buf, b, dt, Red::Sum, 0)
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
    api_try("ncclSend", || {
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
    api_try("ncclRecv", || {
        p2p(recv as usize, count, dt, peer, comm, stream, false)
    })
}
