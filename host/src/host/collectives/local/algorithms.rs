//! How the data moves between the ranks' buffers: each collective's share of the work per
//! rank (all-reduce fused and chunked, the others pulled), and groups of sends and receives
//! (everything posted before anything is waited for).

use super::super::kernel;
use super::super::ops::{OpDesc, OpKind};
use super::super::reduce;
use super::super::transport::{P2pOp, RawBuf};
use super::touching::{Hold, Touching};
use super::{LocalRank, Msg, RvKey, peer_failed};
use crate::collectives::{ReduceOp, Ticket};
use crate::error::{Error, Result};
use std::ptr;
use std::sync::Arc;

/// Bounds of chunk `r` of `n` over `count` elements of `elem` bytes, at multiples of 64 bytes
/// from the start, so that ranks never write the same cache line of a line-aligned buffer.
fn chunk(count: usize, n: usize, r: usize, elem: usize) -> (usize, usize) {
    let align = (64 / elem.max(1)).max(1) as u128;
    let units = (count as u128).div_ceil(align);
    let at = |k: usize| ((units * k as u128 / n.max(1) as u128) * align).min(count as u128);
    (at(r) as usize, at(r + 1) as usize)
}

impl LocalRank {
    /// # Safety
    /// As [`Transport::run_collective`](super::super::Transport::run_collective).
    pub(super) unsafe fn collective(
        &self,
        seq: u64,
        desc: OpDesc,
        src: RawBuf,
        dst: RawBuf,
    ) -> Result<()> {
        let c = &self.clique;
        let n = c.key.size();
        let ranks = c.key.ranks();
        let all = c.rv.arrive(
            RvKey::Op { seq },
            ranks,
            self.member.global_rank(),
            Msg::Op {
                desc,
                src,
                dst,
                touching: Touching::new(n, n),
            },
        )?;
        // The round completed: every rank's buffers are now exposed to every other rank, so
        // from here on this rank leaves only through `hold` (released and waited for on every
        // path), and never before all peers are done with its buffers.
        let mut descs = Vec::with_capacity(n);
        let mut srcs = Vec::with_capacity(n);
        let mut dsts = Vec::with_capacity(n);
        let mut touching = None;
        for m in all.iter() {
            if let Msg::Op {
                desc,
                src,
                dst,
                touching: t,
            } = m
            {
                descs.push(*desc);
                srcs.push(*src);
                dsts.push(*dst);
                touching.get_or_insert(t);
            }
        }
        let Some(touching) = touching else {
            return Err(Error::backend(
                "host",
                "collective",
                "internal: a collective round without a collective message",
            ));
        };
        let hold = Hold {
            t: touching,
            released: false,
        };
        if descs.len() != n {
            return Err(Error::backend(
                "host",
                "collective",
                "internal: a collective round got a message of another kind",
            ));
        }
        if descs.iter().any(|x| *x != desc) {
            let each: Vec<String> = ranks
                .iter()
                .zip(&descs)
                .map(|(g, x)| format!("rank {g}: {x}"))
                .collect();
            return Err(Error::backend(
                "host",
                "collective",
                format!(
                    "the ranks issued different collectives at #{seq}: {}",
                    each.join(", ")
                ),
            ));
        }
        // Every rank issued the same operation with buffers of the sizes it implies (checked
        // by `buf` on each rank), except that only the root of a broadcast passes a source.
        // SAFETY: the buffers of every rank stay valid until every rank released `hold`;
        // `move_data` partitions the writes (see `RawBuf`).
        unsafe { self.move_data(desc, &srcs, &dsts, hold) }
    }

    /// Does this rank's share and releases `hold`; returns once every rank did (an error if
    /// some rank could not do its share).
    ///
    /// # Safety
    /// `srcs` and `dsts` are the (identical on every rank) buffers of every rank, of the
    /// sizes `desc` implies, valid until every rank released the `hold` count.
    pub(super) unsafe fn move_data(
        &self,
        desc: OpDesc,
        srcs: &[RawBuf],
        dsts: &[RawBuf],
        hold: Hold,
    ) -> Result<()> {
        let n = srcs.len();
        let r = self.member.rank();
        let size = desc.dtype.size();
        let count = usize::try_from(desc.count)
            .map_err(|_| Error::InvalidArgument("count does not fit in memory".into()))?;
        let bytes = count * size;
        let op = desc.op.unwrap_or(ReduceOp::Sum);
        match desc.kind {
            _ if bytes == 0 => {}
            OpKind::AllReduce => {
                // Chunk r of every input, reduced into chunk r of every output: rank r is the
                // only one touching chunk r anywhere.
                let (lo, hi) = chunk(count, n, r, size);
                if hi > lo {
                    // SAFETY: `lo < hi <= count`, inside every buffer.
                    let ins: Vec<*const u8> = srcs
                        .iter()
                        .map(|b| unsafe { b.ptr.add(lo * size) }.cast_const())
                        .collect();
                    // SAFETY: as above.
                    let outs: Vec<*mut u8> = dsts
                        .iter()
                        .map(|b| unsafe { b.ptr.add(lo * size) })
                        .collect();
                    // SAFETY: chunk `r` of every buffer is touched by this rank only; an
                    // output is identical to its rank's input or disjoint from it (checked
                    // when issued).
                    unsafe {
                        reduce::reduce(
                            desc.dtype,
                            op,
                            &ins,
                            &outs,
                            hi - lo,
                            reduce::nontemporal(bytes * n),
                        )?
                    };
                }
            }
            OpKind::ReduceScatter => {
                // Block r of every input, reduced into this rank's output: nobody else reads
                // block r or writes this output.
                // SAFETY: block `r` lies inside every `n * bytes` input.
                let ins: Vec<*const u8> = srcs
                    .iter()
                    .map(|b| unsafe { b.ptr.add(r * bytes) }.cast_const())
                    .collect();
                let outs = [dsts[r].ptr];
                // SAFETY: as the comment above; in place the output is block r of this rank's
                // input, read in full block by block before it is written.
                unsafe {
                    reduce::reduce(
                        desc.dtype,
                        op,
                        &ins,
                        &outs,
                        count,
                        reduce::nontemporal(bytes * n),
                    )?
                };
            }
            OpKind::AllGather => {
                // Pull: this rank writes only its own output; in place its own source is its
                // block r, which it does not write.
                let out = dsts[r].ptr;
                for (q, s) in srcs.iter().enumerate() {
                    // SAFETY: block q of the `n * bytes` output; sources are `bytes` long and
                    // disjoint from the blocks written (checked when issued).
                    unsafe {
                        let d = out.add(q * bytes);
                        if d != s.ptr {
                            ptr::copy_nonoverlapping(s.ptr, d, bytes);
                        }
                    }
                }
            }
            OpKind::Broadcast => {
                let (Some(s), Some(d)) = (srcs.get(desc.root), dsts.get(r)) else {
                    return Err(Error::InvalidArgument(format!(
                        "broadcast root {} out of range",
                        desc.root
                    )));
                };
                if s.ptr != d.ptr {
                    // SAFETY: the root's source and this rank's output are `bytes` long and
                    // disjoint (checked when issued on the root; other ranks' outputs are
                    // other allocations); the root does not write its source.
                    unsafe { ptr::copy_nonoverlapping(s.ptr, d.ptr, bytes) };
                }
            }
            OpKind::AllToAll => {
                let out = dsts[r].ptr;
                if srcs.iter().zip(dsts).any(|(s, d)| s.ptr == d.ptr) {
                    // In place somewhere: read everything first, then write once every rank
                    // has read (no one touches anyone else's memory after that).
                    let mut tmp: Vec<u8> = Vec::new();
                    tmp.try_reserve_exact(n * bytes).map_err(|_| {
                        Error::backend(
                            "host",
                            "all_to_all",
                            format!("cannot allocate {} bytes of staging", n * bytes),
                        )
                    })?;
                    for s in srcs {
                        // SAFETY: block r of every `n * bytes` source, read only.
                        let block =
                            unsafe { std::slice::from_raw_parts(s.ptr.add(r * bytes), bytes) };
                        tmp.extend_from_slice(block);
                    }
                    if !hold.done() {
                        return Err(peer_failed());
                    }
                    // SAFETY: every rank finished reading; this output is this rank's own.
                    unsafe { ptr::copy_nonoverlapping(tmp.as_ptr(), out, n * bytes) };
                    return Ok(());
                }
                for (q, s) in srcs.iter().enumerate() {
                    // SAFETY: block r of source q into block q of this rank's output;
                    // sources and outputs are disjoint everywhere.
                    unsafe {
                        ptr::copy_nonoverlapping(s.ptr.add(r * bytes), out.add(q * bytes), bytes)
                    };
                }
            }
            OpKind::P2p => {
                return Err(Error::backend(
                    "host",
                    "collective",
                    "internal: send/recv is not a collective",
                ));
            }
        }
        if hold.done() {
            Ok(())
        } else {
            Err(peer_failed())
        }
    }

    /// # Safety
    /// As [`Transport::run_group`](super::super::Transport::run_group).
    pub(super) unsafe fn p2p_group(&self, ops: &[P2pOp]) -> Result<()> {
        let c = &self.clique;
        // Remote ones: numbered per (peer, direction) in the order they run.
        let mut remote: Vec<(usize, RvKey, [usize; 2])> = vec![];
        {
            let mut ctr = self.p2p.lock();
            for (i, &P2pOp { send, peer, .. }) in ops.iter().enumerate() {
                if peer == self.member.rank() {
                    // Sends to and receives from this rank itself are copied locally.
                    continue;
                }
                let pg = c.key.global_rank(peer).unwrap_or(usize::MAX);
                let Some(slot) = ctr.get_mut(peer).map(|s| &mut s[usize::from(!send)]) else {
                    continue;
                };
                let n = *slot;
                *slot += 1;
                let (from, to) = if send {
                    (self.member.global_rank(), pg)
                } else {
                    (pg, self.member.global_rank())
                };
                remote.push((i, RvKey::P2p { from, to, n }, [from, to]));
            }
        }
        // Post everything, then wait: no order of sends and receives can deadlock. From the
        // first post on, a round may complete and expose a buffer, so errors are collected and
        // every posted round is seen through.
        let mut first_err: Option<Error> = None;
        let mut posted: Vec<(usize, RvKey, Ticket<RvKey>)> = Vec::with_capacity(remote.len());
        for (i, key, ranks) in &remote {
            let op = ops[*i];
            match c.rv.post(
                *key,
                ranks,
                self.member.global_rank(),
                Msg::P2p {
                    count: op.count,
                    dtype: op.dtype,
                    buf: op.buf,
                    touching: Touching::new(1, 2),
                },
            ) {
                Ok(t) => posted.push((*i, *key, t)),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        // Senders wait for their receivers to have copied, after every round was handled (a
        // receiver never waits for anything once its rounds completed, so this cannot cycle).
        let mut sent: Vec<Arc<Touching>> = vec![];
        for (i, key, t) in posted {
            let res = match c.rv.wait(t) {
                Ok(res) => res,
                Err(e) => {
                    first_err.get_or_insert(e);
                    continue;
                }
            };
            let (
                Some(Msg::P2p {
                    count: sc,
                    dtype: sd,
                    buf: sbuf,
                    touching,
                }),
                Some(Msg::P2p {
                    count: rc,
                    dtype: rd,
                    buf: rbuf,
                    ..
                }),
            ) = (res.first(), res.get(1))
            else {
                first_err.get_or_insert(Error::backend(
                    "host",
                    "send/recv",
                    "internal: a send/recv round got a message of another kind",
                ));
                continue;
            };
            let matched = (sc, sd) == (rc, rd);
            if !matched {
                first_err.get_or_insert(Error::backend(
                    "host",
                    "send/recv",
                    format!("{key}: the sender sends {sc} {sd} but the receiver expects {rc} {rd}"),
                ));
            }
            if ops[i].send {
                sent.push(touching.clone());
            } else {
                if matched && rbuf.len > 0 {
                    // SAFETY: the sender's buffer stays valid and unwritten until this rank
                    // releases `touching`; both are `len` bytes (same count and dtype) of
                    // different allocations.
                    unsafe { ptr::copy_nonoverlapping(sbuf.ptr, rbuf.ptr, rbuf.len) };
                }
                touching.release(matched);
            }
        }
        if first_err.is_none()
            && let Err(e) = kernel::copy_to_self(ops, self.member.rank())
        {
            first_err = Some(e);
        }
        for t in sent {
            if !t.wait() && first_err.is_none() {
                first_err = Some(peer_failed());
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::chunk;

    #[test]
    fn chunks_cover_and_align() {
        for count in [0, 1, 15, 16, 17, 1000, 4097] {
            for n in 1..=5 {
                let mut next = 0;
                for r in 0..n {
                    let (lo, hi) = chunk(count, n, r, 4);
                    assert_eq!(lo, next);
                    assert!(lo <= hi);
                    assert!(lo % 16 == 0 || lo == count);
                    next = hi;
                }
                assert_eq!(next, count);
            }
        }
    }
}
