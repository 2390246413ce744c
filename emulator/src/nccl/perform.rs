//! Performing a complete slot: the ranks' parts are checked against each other (the same
//! collective, count, type, operator and root on every rank; a send and its receive of the
//! same size), then every input is read (local buffers, or the bytes a rank in another
//! process sent) before any output of a local rank is written, so in-place calls are right.
//! Every process of a clique performs each collective from the same parts in rank order, so
//! they all reach the same result, or report the same mismatch. A failure is recorded as a
//! diagnostic naming the operation, its clique and the ranks.

use super::SYSTEM_ERROR;
use super::comm::{Clique, describe};
use super::reduce::reduce;
use super::types::{Failure, Meta, OpKind, Slot, SlotKey, rank_at, read, write};
use crate::diag::{self, Kind};
use crate::stream;
use std::borrow::Cow;

/// Moves a complete slot's data; every failure is recorded and returned.
pub(super) fn perform(slot: &Slot, key: SlotKey, cl: &Clique) -> Result<(), Failure> {
    let _x = stream::EXEC.lock();
    let metas: Option<Vec<Meta>> = (0..slot.parts.len())
        .map(|i| {
            slot.parts[i]
                .as_ref()
                .map(|p| p.meta)
                .or_else(|| slot.remote[i].as_ref().map(|r| r.meta))
        })
        .collect();
    // The call the diagnostic names: a local part's (this process issued it), else the
    // first part's.
    let local_kind = slot.parts.iter().flatten().map(|p| p.meta.kind).next();
    let Some(metas) = metas else {
        let kind = local_kind.unwrap_or(OpKind::AllReduce);
        let msg = format!("{}: a participant is missing", describe(cl, key, kind));
        diag::record(Kind::InvalidState, kind.name(), msg.clone());
        return Err(Failure {
            code: super::INTERNAL_ERROR,
            msg,
        });
    };
    let kind = local_kind.unwrap_or(metas[0].kind);
    let call = kind.name();
    let what = describe(cl, key, metas[0].kind);
    match check(key, &metas).and_then(|()| move_data(slot, key, cl, &metas, call)) {
        Ok(()) => Ok(()),
        Err((k, why)) => {
            let msg = format!("{what} failed: {why}");
            diag::record(k, call, msg.clone());
            Err(Failure {
                code: SYSTEM_ERROR,
                msg,
            })
        }
    }
}

/// Every rank's part agrees with rank 0's (a message: the send's with the receive's).
fn check(key: SlotKey, metas: &[Meta]) -> Result<(), (Kind, String)> {
    let bad = |m: String| Err((Kind::InvalidValue, m));
    if let SlotKey::P2p(s, r, _) = key {
        let (a, b) = (&metas[0], &metas[1]);
        if a.kind != OpKind::Send || b.kind != OpKind::Recv {
            return bad("a send met no matching receive".into());
        }
        if a.bytes != b.bytes {
            return bad(format!(
                "rank {s} sends {} bytes, rank {r} receives {} bytes",
                a.bytes, b.bytes
            ));
        }
        return Ok(());
    }
    let first = &metas[0];
    if metas.iter().any(|m| m.kind != first.kind) {
        let names: Vec<String> = metas
            .iter()
            .enumerate()
            .map(|(r, m)| format!("rank {r}: {}", m.kind.name()))
            .collect();
        return bad(format!(
            "ranks issued different collectives in the same position ({})",
            names.join(", ")
        ));
    }
    let shape = |m: &Meta| {
        let n = m.bytes / m.dt.size().max(1);
        let mut s = format!("{n} × {} ({} bytes)", m.dt.name(), m.bytes);
        if m.kind.reduces() {
            s += &format!(", {}", m.op.name());
        }
        if m.kind.rooted() {
            s += &format!(", root {}", m.root);
        }
        s
    };
    for (r, m) in metas.iter().enumerate().skip(1) {
        let differs = m.bytes != first.bytes
            || (m.kind.reduces() && (m.dt != first.dt || m.op != first.op))
            || (m.kind.rooted() && m.root != first.root);
        if differs {
            return bad(format!(
                "rank {r} passed {}, rank 0 passed {}",
                shape(m),
                shape(first)
            ));
        }
    }
    if first.kind.rooted() && first.root >= metas.len() {
        return bad(format!("root {} is not a rank", first.root));
    }
    Ok(())
}

/// The input of `place` (`len` bytes): read from a local buffer, or as received.
fn input<'a>(
    slot: &'a Slot,
    key: SlotKey,
    place: usize,
    len: usize,
    call: &str,
) -> Result<Cow<'a, [u8]>, (Kind, String)> {
    let r = rank_at(key, place);
    if let Some(p) = &slot.parts[place] {
        let what = format!("send buffer of rank {r}");
        return read(p.send, len, &what, call)
            .map(Cow::Owned)
            .map_err(|e| (Kind::InvalidValue, e));
    }
    match slot.remote[place].as_ref().map(|x| &x.input) {
        Some(Ok(Some(d))) if d.len() == len => Ok(Cow::Borrowed(d)),
        Some(Ok(Some(d))) => Err((
            Kind::InvalidState,
            format!("rank {r} sent {} bytes, {len} expected", d.len()),
        )),
        Some(Ok(None)) | None => Err((
            Kind::InvalidState,
            format!("rank {r}'s input was not sent to this process"),
        )),
        Some(Err(e)) => Err((
            Kind::InvalidValue,
            format!("rank {r} could not read its input: {e}"),
        )),
    }
}

/// Reads the inputs and writes the local ranks' outputs of checked parts.
fn move_data(
    slot: &Slot,
    key: SlotKey,
    cl: &Clique,
    metas: &[Meta],
    call: &str,
) -> Result<(), (Kind, String)> {
    let n = metas.len();
    let first = metas[0];
    let nranks = cl.nranks;
    let len = first
        .input_len(nranks)
        .ok_or((Kind::InvalidValue, "the input size overflows".to_string()))?;
    let locals: Vec<(usize, usize)> = slot
        .parts
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().map(|p| (i, p.recv)))
        .collect();
    let all_inputs = || -> Result<Vec<Cow<'_, [u8]>>, (Kind, String)> {
        (0..n).map(|i| input(slot, key, i, len, call)).collect()
    };
    let mut writes: Vec<(usize, usize, Cow<'_, [u8]>)> = vec![];
    match first.kind {
        OpKind::AllReduce | OpKind::ReduceScatter => {
            let inputs = all_inputs()?;
            let views: Vec<&[u8]> = inputs.iter().map(|c| &c[..]).collect();
            let red = reduce(first.dt, first.op, &views);
            for (r, recv) in locals {
                let out = if first.kind == OpKind::AllReduce {
                    red.clone()
                } else {
                    red[r * first.bytes..(r + 1) * first.bytes].to_vec()
                };
                writes.push((r, recv, Cow::Owned(out)));
            }
        }
        OpKind::Reduce => {
            if let Some(&(r, recv)) = locals.iter().find(|(r, _)| *r == first.root) {
                let inputs = all_inputs()?;
                let views: Vec<&[u8]> = inputs.iter().map(|c| &c[..]).collect();
                writes.push((r, recv, Cow::Owned(reduce(first.dt, first.op, &views))));
            }
        }
        OpKind::Broadcast => {
            if !locals.is_empty() {
                let data = input(slot, key, first.root, len, call)?;
                for (r, recv) in locals {
                    writes.push((r, recv, data.clone()));
                }
            }
        }
        OpKind::AllGather => {
            let all = all_inputs()?.concat();
            for (r, recv) in locals {
                writes.push((r, recv, Cow::Owned(all.clone())));
            }
        }
        OpKind::Send | OpKind::Recv => {
            if let Some(&(_, recv)) = locals.iter().find(|(p, _)| *p == 1) {
                let data = input(slot, key, 0, first.bytes, call)?;
                writes.push((1, recv, data));
            }
        }
    }
    for (place, ptr, data) in writes {
        let what = format!("receive buffer of rank {}", rank_at(key, place));
        write(ptr, &data, &what, call).map_err(|e| (Kind::InvalidValue, e))?;
    }
    Ok(())
}
