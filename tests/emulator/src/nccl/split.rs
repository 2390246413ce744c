//! `ncclCommSplit`: the ranks of a communicator regroup by color into new communicators.

use super::comm::{comm_of, new_clique, new_comm};
use super::group::GROUP;
use super::{
    INTERNAL_ERROR, INVALID_ARGUMENT, INVALID_USAGE, NcclResult, SUCCESS, SYSTEM_ERROR, api, fail,
    timeout,
};
use crate::context::Ctx;
use crate::diag::Kind;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[derive(Default)]
pub(super) struct SplitRound {
    pub(super) entries: Vec<Option<(c_int, c_int, Arc<Ctx>)>>,
    pub(super) result: Option<Vec<usize>>,
    pub(super) taken: usize,
}

/// `NCCL_SPLIT_NOCOLOR`.
const NOCOLOR: c_int = -1;

/// `ncclCommSplit`: every rank of `comm` calls it (one thread each); ranks of one color form a
/// new communicator, ordered by `key` then by their old rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: usize,
    color: c_int,
    key: c_int,
    newcomm: *mut usize,
    _config: *mut c_void,
) -> NcclResult {
    const C: &str = "ncclCommSplit";
    api(C, || {
        let c = match comm_of(comm, C) {
            Ok(c) => c,
            Err(r) => return r,
        };
        if newcomm.is_null() || (color < 0 && color != NOCOLOR) {
            return fail(
                INVALID_ARGUMENT,
                C,
                Kind::InvalidValue,
                "bad color or null newcomm",
            );
        }
        if GROUP.with(|g| g.borrow().depth > 0) {
            return fail(
                INVALID_USAGE,
                C,
                Kind::Unsupported,
                "ncclCommSplit inside a group (one thread driving several ranks) is not emulated",
            );
        }
        let cl = c.clique.clone();
        let round = c.next_split.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + timeout();
        let mut g = cl.splits.lock();
        let r = g.entry(round).or_default();
        if r.entries.is_empty() {
            r.entries = vec![None; cl.nranks];
        }
        r.entries[c.rank] = Some((color, key, c.ctx.clone()));
        if r.entries.iter().all(Option::is_some) {
            let entries: Vec<(c_int, c_int, Arc<Ctx>)> =
                r.entries.iter().flatten().cloned().collect();
            let mut handles = vec![0usize; cl.nranks];
            let mut colors: Vec<c_int> = entries
                .iter()
                .map(|e| e.0)
                .filter(|&x| x != NOCOLOR)
                .collect();
            colors.sort();
            colors.dedup();
            for col in colors {
                let mut members: Vec<(c_int, usize)> = entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.0 == col)
                    .map(|(old, e)| (e.1, old))
                    .collect();
                members.sort();
                let sub = new_clique(members.len());
                for (new_rank, (_, old)) in members.iter().enumerate() {
                    handles[*old] = new_comm(&sub, new_rank, entries[*old].2.clone());
                }
            }
            r.result = Some(handles);
            cl.split_cv.notify_all();
        }
        loop {
            let Some(r) = g.get_mut(&round) else {
                return fail(INTERNAL_ERROR, C, Kind::InvalidState, "the split vanished");
            };
            if let Some(res) = &r.result {
                let h = res[c.rank];
                r.taken += 1;
                if r.taken == cl.nranks {
                    g.remove(&round);
                }
                // SAFETY: the caller's non-null out-pointer.
                unsafe { *newcomm = h };
                return SUCCESS;
            }
            if cl.split_cv.wait_until(&mut g, deadline).timed_out() {
                return fail(
                    SYSTEM_ERROR,
                    C,
                    Kind::InvalidState,
                    format!(
                        "rank {} timed out waiting for the other ranks to split",
                        c.rank
                    ),
                );
            }
        }
    })
}
