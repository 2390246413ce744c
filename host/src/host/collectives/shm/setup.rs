//! Setting a clique up: the first rank creates and announces the segment, the others open it,
//! everyone joins and waits for everyone, and the name goes (see [`super`]).

use super::layout::*;
use super::names::{
    PENDING, is_setup_name, key_hash, random_u64, random_u128, segment_name, setup_prefix,
};
use super::rank::{RunState, ShmRank, Waiter};
use super::segment::{Segment, unlink};
use super::{ShmOptions, shm_error};
use crate::collectives::Member;
use crate::distributed::{Coordinator, DistributedError};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The coordinator key announcing a clique's segment.
pub(super) fn announce_key(hash: u64, generation: u64) -> String {
    format!("xthunk.shm/{hash:016x}/{generation}")
}

/// Sets the clique of `member` up for this process's rank (see [`super`]).
pub(super) fn join(
    coordinator: &Arc<dyn Coordinator>,
    member: Member,
    generation: u64,
    opts: &ShmOptions,
) -> Result<Arc<ShmRank>> {
    // The member moves into the rank below.
    let key = &member.key().clone();
    let (rank, global) = (member.rank(), member.global_rank());
    let n = key.size();
    let hash = key_hash(key);
    let job = coordinator.job_id().to_string();
    let announce = announce_key(hash, generation);
    let root = key.global_rank(0).unwrap_or(0);
    let t = opts.timeouts.terminate_after;
    let random = |what: &'static str| {
        move |e: std::io::Error| shm_error("setup", format!("{key}: no random {what}: {e}"))
    };
    // The name is learned (drawn by the first rank, announced to the others) when the
    // segment is created or before it is opened; it goes into the pending list, so that it is
    // removed whatever happens next.
    let mut learned: Option<String> = None;
    let mut learn = |name: String| {
        PENDING.lock().insert(name.clone());
        learned = Some(name.clone());
        name
    };
    let mapped = (|| -> Result<Segment> {
        if rank == 0 {
            let layout = Layout::for_clique(n, opts).ok_or_else(|| {
                shm_error(
                    "shared memory",
                    format!("{key}: a segment of {n} ranks is too large"),
                )
            })?;
            let token = random_u64().map_err(random("token"))?;
            let nonce = random_u128().map_err(random("segment name"))?;
            let name = segment_name(&job, hash, generation, nonce);
            // Learned once created: a name that existed already is someone else's, and
            // stays. (A segment of a process killed before it learned the name is still
            // under the job's prefix, where the launcher's sweep finds it.)
            let seg = Segment::create(&name, layout, token, hash)?;
            let name = learn(name);
            let value = format!("{token:016x} {name} {key}");
            coordinator.set(&announce, value.as_bytes())?;
            Ok(seg)
        } else {
            let value = coordinator.get(&announce, t).map_err(|e| match e {
                DistributedError::GetTimeout { .. } => shm_error(
                    "setup",
                    format!(
                        "rank {root} did not arrive within {t:?}: it creates the shared memory \
                         segment of {key}, and never announced it (it never reached this \
                         operation, or is stuck before it)"
                    ),
                ),
                e => Error::Distributed(e),
            })?;
            let value = String::from_utf8_lossy(&value).into_owned();
            let mut parts = value.splitn(3, ' ');
            let token = parts.next().and_then(|t| u64::from_str_radix(t, 16).ok());
            let (Some(token), Some(announced)) = (token, parts.next()) else {
                return Err(shm_error(
                    "setup",
                    format!("{key}: malformed announcement {value:?}"),
                ));
            };
            if !is_setup_name(announced, &job, hash, generation) {
                return Err(shm_error(
                    "setup",
                    format!(
                        "{key}: rank {root} announced segment {announced:?}, not a name of this \
                         setup ({}<32 hex digits>)",
                        setup_prefix(&job, hash, generation)
                    ),
                ));
            }
            let name = learn(announced.to_string());
            Segment::open(&name, token, n, hash)
        }
    })();
    // Empty when the setup failed before a name was drawn or announced.
    let name = learned.unwrap_or_default();
    let result = mapped.and_then(|seg| {
        let st = Arc::new(ShmRank {
            seg,
            member,
            coordinator: coordinator.clone(),
            timeouts: opts.timeouts,
            run: Mutex::new(RunState {
                phase: 0,
                seq: 0,
                sent: vec![0; n],
                received: vec![0; n],
            }),
        });
        let seg = &st.seg;
        seg.rank_word(rank, R_PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        seg.rank_word(rank, R_JOINED).store(1, Ordering::Release);
        seg.word(H_JOINED).fetch_add(1, Ordering::AcqRel);
        let what = || format!("setup of {key} (segment {name})");
        let mut w = Waiter::new(&st);
        while seg.word(H_JOINED).load(Ordering::Acquire) < n as u64 {
            if let Err(e) = w.idle(&st, &what, &|| {
                st.split_ranks(|q| seg.rank_word(q, R_JOINED).load(Ordering::Acquire) != 0)
            }) {
                return Err(st.fail("setup", e));
            }
        }
        Ok(st)
    });
    // Every member mapped the segment, or the setup failed: either way the name goes.
    if !name.is_empty() {
        unlink(&name);
        PENDING.lock().remove(&name);
    }
    let st = result?;
    tracing::debug!(%key, rank, global, segment = %name, len = st.seg.layout.len, "joined a shared memory clique");
    Ok(st)
}
