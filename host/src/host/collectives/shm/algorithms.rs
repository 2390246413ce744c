//! How the data moves through the segment: collectives in phases (one per chunk, through
//! every rank's staging slots) and sends and receives through the mailboxes of ordered pairs.

use super::super::kernel;
use super::super::ops::{OpDesc, OpKind, dtype_code, dtype_from_code};
use super::super::reduce;
use super::super::transport::{P2pOp, RawBuf};
use super::layout::*;
use super::rank::{RunState, ShmRank, Waiter};
use super::shm_error;
use crate::collectives::ReduceOp;
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::ptr;
use std::sync::atomic::Ordering;

impl ShmRank {
    /// # Safety
    /// `src` and `dst` are valid for their lengths (those `desc` implies, checked by the
    /// caller) for the whole call.
    pub(super) unsafe fn collective(
        &self,
        run: &mut RunState,
        seq: u64,
        desc: OpDesc,
        src: RawBuf,
        dst: RawBuf,
    ) -> Result<()> {
        let seg = &self.seg;
        let n = seg.n();
        let r = self.member.rank();
        let s = desc.dtype.size();
        let count = usize::try_from(desc.count)
            .map_err(|_| Error::InvalidArgument("count does not fit in memory".into()))?;
        let blocks = match desc.kind {
            OpKind::ReduceScatter | OpKind::AllToAll => n,
            _ => 1,
        };
        let per = (seg.layout.slot / (blocks * s)).max(1);
        let chunks = count.div_ceil(per).max(1);
        let op = desc.op.unwrap_or(ReduceOp::Sum);
        let root = desc.root;
        if desc.kind == OpKind::Broadcast && root >= n {
            return Err(Error::InvalidArgument(format!(
                "broadcast root {root} out of range"
            )));
        }
        for k in 0..chunks {
            let lo = k * per;
            let hi = count.min(lo + per);
            let len = (hi - lo) * s;
            let p = run.phase;
            let parity = (p % 2) as usize;
            let words = desc_words(&desc, seq, k as u64);
            for (i, w) in words.iter().enumerate() {
                seg.desc_word(r, parity, i).store(*w, Ordering::Relaxed);
            }
            let mine = seg.slot(r, parity);
            // Stage this rank's part of chunk k. Nobody reads this slot until this rank
            // publishes phase p + 1, and everyone finished reading it (phase p - 1) before
            // this rank could pass phase p.
            // SAFETY: (every copy) the source ranges lie inside `src` (chunk k of each block
            // of `count` elements); the destination ranges inside this rank's slot
            // (`blocks * len <= slot` bytes); nothing is copied when `len` is 0 (buffers may
            // then be null).
            unsafe {
                match desc.kind {
                    _ if len == 0 => {}
                    OpKind::AllReduce | OpKind::AllGather => {
                        ptr::copy_nonoverlapping(src.ptr.add(lo * s), mine, len);
                    }
                    OpKind::Broadcast => {
                        if r == root {
                            ptr::copy_nonoverlapping(src.ptr.add(lo * s), mine, len);
                        }
                    }
                    OpKind::ReduceScatter | OpKind::AllToAll => {
                        for d in 0..n {
                            ptr::copy_nonoverlapping(
                                src.ptr.add((d * count + lo) * s),
                                mine.add(d * len),
                                len,
                            );
                        }
                    }
                    OpKind::P2p => {}
                }
            }
            seg.phase(r).store(p + 1, Ordering::Release);
            run.phase = p + 1;
            self.wait_phase(p + 1, &|| format!("chunk {} of {chunks}", k + 1))?;
            // Every rank issued the same operation?
            let theirs: Vec<[u64; DESC_WORDS]> = (0..n)
                .map(|q| {
                    let mut w = [0u64; DESC_WORDS];
                    for (i, x) in w.iter_mut().enumerate() {
                        *x = seg.desc_word(q, parity, i).load(Ordering::Relaxed);
                    }
                    w
                })
                .collect();
            if theirs.iter().any(|w| *w != words) {
                let each: Vec<String> = theirs
                    .iter()
                    .enumerate()
                    .map(|(q, w)| {
                        format!(
                            "rank {}: {}",
                            self.member.key().global_rank(q).unwrap_or(q),
                            describe_words(w)
                        )
                    })
                    .collect();
                return Err(shm_error(
                    "collective",
                    format!(
                        "the ranks issued different collectives at #{seq}: {}",
                        each.join(", ")
                    ),
                ));
            }
            if len == 0 {
                continue;
            }
            // Read what this rank receives. The slots of phase p + 1 stay unwritten until
            // every rank (this one included) published phase p + 2.
            // SAFETY: (every access) the slot ranges lie inside the slots (`blocks * len`
            // bytes each), the destination ranges inside `dst` (chunk k of each block of
            // `count` elements of the output); outputs are this rank's own memory.
            unsafe {
                match desc.kind {
                    OpKind::AllReduce | OpKind::ReduceScatter => {
                        // All-reduce: every slot holds the chunk; reduce-scatter: this rank's
                        // block of it.
                        let at = if desc.kind == OpKind::ReduceScatter {
                            r * len
                        } else {
                            0
                        };
                        let ins: Vec<*const u8> = (0..n)
                            .map(|q| seg.slot(q, parity).add(at).cast_const())
                            .collect();
                        let out = [dst.ptr.add(lo * s)];
                        reduce::reduce(desc.dtype, op, &ins, &out, hi - lo, false)?;
                    }
                    OpKind::AllGather => {
                        for q in 0..n {
                            ptr::copy_nonoverlapping(
                                seg.slot(q, parity),
                                dst.ptr.add((q * count + lo) * s),
                                len,
                            );
                        }
                    }
                    OpKind::AllToAll => {
                        for q in 0..n {
                            ptr::copy_nonoverlapping(
                                seg.slot(q, parity).add(r * len),
                                dst.ptr.add((q * count + lo) * s),
                                len,
                            );
                        }
                    }
                    OpKind::Broadcast => {
                        if r == root {
                            if src.ptr != dst.ptr {
                                ptr::copy_nonoverlapping(
                                    src.ptr.add(lo * s),
                                    dst.ptr.add(lo * s),
                                    len,
                                );
                            }
                        } else {
                            ptr::copy_nonoverlapping(
                                seg.slot(root, parity),
                                dst.ptr.add(lo * s),
                                len,
                            );
                        }
                    }
                    OpKind::P2p => {}
                }
            }
        }
        Ok(())
    }

    /// # Safety
    /// As [`Transport::run_group`](super::super::Transport::run_group).
    pub(super) unsafe fn p2p_group(&self, run: &mut RunState, ops: &[P2pOp]) -> Result<()> {
        let seg = &self.seg;
        let me = self.member.rank();
        let mb = seg.layout.mbox;
        struct Transfer {
            item: usize,
            send: bool,
            peer: usize,
            /// Message number on this (ordered) pair.
            msg: u64,
            chunks: u64,
            done: u64,
        }
        let mut transfers: Vec<Transfer> = vec![];
        for (i, op) in ops.iter().enumerate() {
            let (send, peer) = (op.send, op.peer);
            if peer == me {
                // Sends to and receives from this rank itself are copied locally.
                continue;
            }
            let counter = if send {
                &mut run.sent[peer]
            } else {
                &mut run.received[peer]
            };
            let msg = *counter;
            *counter += 1;
            transfers.push(Transfer {
                item: i,
                send,
                peer,
                msg,
                chunks: op.buf.len.div_ceil(mb).max(1) as u64,
                done: 0,
            });
        }
        kernel::copy_to_self(ops, me)?;
        let global = |q: usize| self.member.key().global_rank(q).unwrap_or(q);
        let mut w = Waiter::new(self);
        loop {
            let mut progressed = false;
            let mut busy: BTreeSet<(bool, usize)> = BTreeSet::new();
            for t in transfers.iter_mut() {
                if t.done == t.chunks {
                    continue;
                }
                // Messages on one mailbox go in order: only the first unfinished one moves.
                if !busy.insert((t.send, t.peer)) {
                    continue;
                }
                let P2pOp {
                    count, dtype, buf, ..
                } = ops[t.item];
                let bytes = buf.len;
                let (from, to) = if t.send { (me, t.peer) } else { (t.peer, me) };
                let written = seg.mbox_word(from, to, M_WRITTEN);
                let read = seg.mbox_word(from, to, M_READ);
                loop {
                    if t.done == t.chunks {
                        break;
                    }
                    let off = (t.done as usize) * mb;
                    let len = bytes.saturating_sub(off).min(mb);
                    if t.send {
                        let wr = written.load(Ordering::Relaxed);
                        if wr.saturating_sub(read.load(Ordering::Acquire)) >= 2 {
                            break;
                        }
                        let parity = (wr % 2) as usize;
                        for (i, v) in [t.msg, count, dtype_code(dtype), len as u64]
                            .into_iter()
                            .enumerate()
                        {
                            seg.mbox_hdr(from, to, parity, i)
                                .store(v, Ordering::Relaxed);
                        }
                        // SAFETY: `off + len <= bytes`, inside the send buffer; the chunk is
                        // `mb >= len` bytes, free (the receiver consumed it: checked above).
                        unsafe {
                            ptr::copy_nonoverlapping(
                                buf.ptr.add(off),
                                seg.mbox_data(from, to, parity),
                                len,
                            )
                        };
                        written.store(wr + 1, Ordering::Release);
                    } else {
                        let rd = read.load(Ordering::Relaxed);
                        if written.load(Ordering::Acquire) <= rd {
                            break;
                        }
                        let parity = (rd % 2) as usize;
                        let hdr: Vec<u64> = (0..HDR_WORDS)
                            .map(|i| seg.mbox_hdr(from, to, parity, i).load(Ordering::Relaxed))
                            .collect();
                        let (g_from, g_to) = (global(from), global(to));
                        if hdr[0] != t.msg {
                            return Err(shm_error(
                                "send/recv",
                                format!(
                                    "send #{} from rank {g_from} to rank {g_to}: got a chunk of \
                                     message #{} instead (the ranks are out of step)",
                                    t.msg, hdr[0]
                                ),
                            ));
                        }
                        if (hdr[1], hdr[2]) != (count, dtype_code(dtype)) {
                            let theirs = dtype_from_code(hdr[2])
                                .map_or_else(|| format!("type #{}", hdr[2]), |d| d.to_string());
                            return Err(shm_error(
                                "send/recv",
                                format!(
                                    "send #{} from rank {g_from} to rank {g_to}: the sender \
                                     sends {} {theirs} but the receiver expects {count} {dtype}",
                                    t.msg, hdr[1]
                                ),
                            ));
                        }
                        if hdr[3] != len as u64 {
                            return Err(shm_error(
                                "send/recv",
                                format!(
                                    "send #{} from rank {g_from} to rank {g_to}: a chunk of {} \
                                     bytes where {len} were expected",
                                    t.msg, hdr[3]
                                ),
                            ));
                        }
                        // SAFETY: the chunk holds `len` bytes written before the release
                        // store of `written` acquired above; `off + len` lies inside the
                        // receive buffer, this rank's own memory.
                        unsafe {
                            ptr::copy_nonoverlapping(
                                seg.mbox_data(from, to, parity),
                                buf.ptr.add(off),
                                len,
                            )
                        };
                        read.store(rd + 1, Ordering::Release);
                    }
                    t.done += 1;
                    progressed = true;
                }
            }
            if transfers.iter().all(|t| t.done == t.chunks) {
                return Ok(());
            }
            if progressed {
                w.progressed(self);
                continue;
            }
            let stuck: Vec<&Transfer> = transfers.iter().filter(|t| t.done < t.chunks).collect();
            let what = || {
                stuck
                    .iter()
                    .map(|t| {
                        let (a, b) = if t.send {
                            (self.member.global_rank(), global(t.peer))
                        } else {
                            (global(t.peer), self.member.global_rank())
                        };
                        format!(
                            "{} #{} from rank {a} to rank {b}",
                            if t.send { "send" } else { "receive" },
                            t.msg
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let missing = || {
                let mut peers: Vec<usize> = stuck.iter().map(|t| global(t.peer)).collect();
                peers.sort_unstable();
                peers.dedup();
                let mut arrived = vec![self.member.global_rank()];
                arrived.extend(
                    transfers
                        .iter()
                        .filter(|t| t.done == t.chunks)
                        .map(|t| global(t.peer))
                        .filter(|g| !peers.contains(g)),
                );
                arrived.sort_unstable();
                arrived.dedup();
                (peers, arrived)
            };
            w.idle(self, &what, &missing)?;
        }
    }
}
