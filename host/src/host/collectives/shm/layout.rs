//! Where everything is in a clique's segment: the header page, a control block per rank (with
//! the words in which a rank publishes its current operation), the mailboxes' control blocks,
//! the staging slots and the mailboxes' chunks.

use super::super::ops::{self, OpDesc};
use super::ShmOptions;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"XTSHM\0\x01\0");
pub(super) const PAGE: usize = 4096;

// Header words (byte offsets).
pub(super) const H_MAGIC: usize = 0;
pub(super) const H_N: usize = 8;
pub(super) const H_SLOT: usize = 16;
pub(super) const H_MBOX: usize = 24;
pub(super) const H_LEN: usize = 32;
pub(super) const H_TOKEN: usize = 40;
pub(super) const H_KEY: usize = 48;
pub(super) const H_JOINED: usize = 64;
pub(super) const H_POISON_STATE: usize = 128;
pub(super) const H_POISON_LEN: usize = 136;
pub(super) const H_POISON_MSG: usize = 192;
pub(super) const POISON_MAX: usize = PAGE - H_POISON_MSG;

// A rank's control block.
pub(super) const RANK_BLOCK: usize = 256;
pub(super) const R_PHASE: usize = 0;
pub(super) const R_JOINED: usize = 8;
pub(super) const R_PID: usize = 16;
pub(super) const R_DESC: usize = 64;

// A mailbox's control block: the sender's counter and a header per chunk parity (one cache
// line), then the receiver's counter (another).
pub(super) const MBOX_BLOCK: usize = 192;
pub(super) const M_WRITTEN: usize = 0;
pub(super) const M_HDR: usize = 8;
pub(super) const HDR_WORDS: usize = 4;
pub(super) const M_READ: usize = 128;
const _: () = assert!(M_HDR + 2 * HDR_WORDS * 8 <= M_READ && M_READ + 8 <= MBOX_BLOCK);
const _: () = assert!(R_DESC + 2 * 64 <= RANK_BLOCK && DESC_WORDS * 8 <= 64);
const _: () = assert!(H_POISON_LEN < H_POISON_MSG && H_JOINED < H_POISON_STATE);

/// Where everything is in a segment of `n` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) n: usize,
    pub(super) slot: usize,
    pub(super) mbox: usize,
    pub(super) ranks: usize,
    pub(super) mbox_ctl: usize,
    pub(super) slots: usize,
    pub(super) mbox_data: usize,
    pub(super) len: usize,
}

fn round_up(v: usize, to: usize) -> Option<usize> {
    v.checked_add(to - 1).map(|v| v / to * to)
}

impl Layout {
    pub(super) fn new(n: usize, slot: usize, mbox: usize) -> Option<Layout> {
        let ranks = PAGE;
        let mbox_ctl = round_up(ranks.checked_add(n.checked_mul(RANK_BLOCK)?)?, PAGE)?;
        let slots = round_up(
            mbox_ctl.checked_add(n.checked_mul(n)?.checked_mul(MBOX_BLOCK)?)?,
            PAGE,
        )?;
        let mbox_data = slots.checked_add(n.checked_mul(2)?.checked_mul(slot)?)?;
        let len = round_up(
            mbox_data.checked_add(n.checked_mul(n)?.checked_mul(2)?.checked_mul(mbox)?)?,
            PAGE,
        )?;
        (slot.is_multiple_of(64) && mbox.is_multiple_of(64) && slot > 0 && mbox > 0 && n > 0)
            .then_some(Layout {
                n,
                slot,
                mbox,
                ranks,
                mbox_ctl,
                slots,
                mbox_data,
                len,
            })
    }

    /// The sizes a clique of `n` ranks gets from `opts`: at most about 16 MiB of slots and
    /// 16 MiB of mailboxes, slots of at least 8 bytes per rank (a chunk of reduce-scatter
    /// holds one element of every rank), multiples of 64 bytes.
    pub(super) fn for_clique(n: usize, opts: &ShmOptions) -> Option<Layout> {
        const BUDGET: usize = 16 << 20;
        let floor64 = |v: usize| (v / 64 * 64).max(64);
        let min_slot = round_up(n.checked_mul(8)?, 64)?;
        let slot = floor64(opts.slot_bytes.min(BUDGET / (2 * n))).max(min_slot);
        let mbox = floor64(opts.mailbox_bytes.min(BUDGET / (2 * n * n).max(1)));
        Layout::new(n, slot, mbox)
    }
}

// ---------------------------------------------------------------------------------------------
// The words in which a rank publishes its current operation (compared across ranks at every
// phase).

/// The words of a description as it is published in a rank's control block: the collective's
/// number, the [`OpDesc`] words, the chunk's number.
pub(super) const DESC_WORDS: usize = 2 + ops::DESC_WORDS;

pub(super) fn desc_words(desc: &OpDesc, seq: u64, chunk: u64) -> [u64; DESC_WORDS] {
    let mut w = [seq; DESC_WORDS];
    w[1..DESC_WORDS - 1].copy_from_slice(&desc.to_words());
    w[DESC_WORDS - 1] = chunk;
    w
}

/// A description as another rank published it, in words, for messages.
pub(super) fn describe_words(w: &[u64; DESC_WORDS]) -> String {
    let mut d = [0; ops::DESC_WORDS];
    d.copy_from_slice(&w[1..DESC_WORDS - 1]);
    match OpDesc::from_words(&d) {
        Some(desc) => format!("{desc} (collective #{}, chunk {})", w[0], w[DESC_WORDS - 1]),
        None => format!("an unknown operation {w:?}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_bounded_and_aligned() {
        for n in [1, 2, 3, 4, 8, 64, 256] {
            let l = Layout::for_clique(n, &ShmOptions::default()).unwrap();
            assert_eq!(l.slot % 64, 0);
            assert_eq!(l.mbox % 64, 0);
            assert!(l.slot >= n * 8);
            assert_eq!(l.len % PAGE, 0);
            assert!(l.len <= 48 << 20, "n={n}: {l:?}");
            assert!(l.mbox_ctl >= l.ranks + n * RANK_BLOCK);
            assert!(l.slots >= l.mbox_ctl + n * n * MBOX_BLOCK);
        }
        let tiny = ShmOptions {
            slot_bytes: 1,
            mailbox_bytes: 1,
            ..Default::default()
        };
        let l = Layout::for_clique(4, &tiny).unwrap();
        assert_eq!((l.slot, l.mbox), (64, 64));
    }
}
