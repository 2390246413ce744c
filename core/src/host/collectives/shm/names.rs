//! The names of the segments in `/dev/shm` (`xthunk-shm@<job>@<key hash>.<generation>`), the
//! list of those this process may still have there, and their removal.

use super::segment::unlink;
use crate::collectives::CliqueKey;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};

/// Names this process created or learned and that may still be in `/dev/shm`.
pub(super) static PENDING: Mutex<BTreeSet<String>> = parking_lot::const_mutex(BTreeSet::new());

/// The prefix of the name of every segment of `job_id` (a job id never contains `@`).
pub fn job_segment_prefix(job_id: &str) -> String {
    format!("xthunk-shm@{job_id}@")
}

pub(super) fn segment_name(job_id: &str, key_hash: u64, generation: u64) -> String {
    format!("{}{key_hash:016x}.{generation}", job_segment_prefix(job_id))
}

/// Removes every segment whose setup is in progress in this process (the others are already
/// unlinked); returns how many names went. Safe to call from any thread at any time (e.g. a
/// failure handler about to exit): mappings stay valid, only the names go.
pub fn remove_pending_segments() -> usize {
    let names: Vec<String> = PENDING.lock().iter().cloned().collect();
    names.iter().filter(|n| unlink(n)).count()
}

/// The segments of `job_id` now in `/dev/shm` (Linux; empty elsewhere).
pub fn job_segments(job_id: &str) -> Vec<String> {
    let prefix = job_segment_prefix(job_id);
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    v.sort();
    v
}

/// Removes every segment of `job_id` from `/dev/shm` — this process's pending ones and any
/// other (left by a rank killed during a setup): for a process leaving a failed job. Returns
/// how many names went.
pub fn remove_job_segments(job_id: &str) -> usize {
    let prefix = job_segment_prefix(job_id);
    let mut gone = 0;
    let pending: Vec<String> = PENDING
        .lock()
        .iter()
        .filter(|n| n.starts_with(&prefix))
        .cloned()
        .collect();
    for n in pending.iter().chain(&job_segments(job_id)) {
        if unlink(n) {
            gone += 1;
        }
    }
    gone
}

/// A deterministic hash of a clique key ([`CliqueKey::stable_hash`]).
pub(super) fn key_hash(key: &CliqueKey) -> u64 {
    key.stable_hash()
}

pub(super) fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_hold_the_job() {
        let k = CliqueKey::new([0, 1], crate::collectives::StreamKind::Compute).unwrap();
        let name = segment_name("job-1", key_hash(&k), 3);
        assert!(name.starts_with(&job_segment_prefix("job-1")));
        assert!(!name.starts_with(&job_segment_prefix("job")));
        assert!(name.ends_with(".3"));
        assert_ne!(
            key_hash(&k),
            key_hash(
                &CliqueKey::new([0, 1], crate::collectives::StreamKind::Communication).unwrap()
            )
        );
    }
}
