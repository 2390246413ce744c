//! The names of the segments in `/dev/shm`
//! (`xthunk-shm@<job>@<key hash>.<generation>.<nonce>`), the list of those this process may
//! still have there, and their removal; the random numbers of a setup (the name's nonce and
//! the header's token).
//!
//! The nonce is 128 bits from the operating system's random source, drawn by the clique's first
//! rank for each setup and learned by the others from its announcement through the
//! coordinator: another user of the host cannot create a segment under the name before the
//! first rank does (which it does exclusively). The job prefix carries no secret, so that a
//! launcher can still list and remove every segment of a job ([`job_segments`],
//! [`remove_job_segments`]); what makes opening safe is the owner and mode check of
//! [`super::segment::Segment::open`].

use super::segment::unlink;
use crate::collectives::CliqueKey;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::io::Read;

/// Names this process created or learned and that may still be in `/dev/shm`.
pub(super) static PENDING: Mutex<BTreeSet<String>> = parking_lot::const_mutex(BTreeSet::new());

/// The prefix of the name of every segment of `job_id` (a job id never contains `@`).
pub fn job_segment_prefix(job_id: &str) -> String {
    format!("xthunk-shm@{job_id}@")
}

/// The prefix of the names of the segments of one setup of a clique (`key_hash`,
/// `generation`): the name is this and a nonce of 32 lowercase hex digits.
pub(super) fn setup_prefix(job_id: &str, key_hash: u64, generation: u64) -> String {
    format!(
        "{}{key_hash:016x}.{generation}.",
        job_segment_prefix(job_id)
    )
}

pub(super) fn segment_name(job_id: &str, key_hash: u64, generation: u64, nonce: u128) -> String {
    format!("{}{nonce:032x}", setup_prefix(job_id, key_hash, generation))
}

/// Whether `name` is a name [`segment_name`] can give for this setup (the announced name a
/// member is about to open: anything else, e.g. a path, is refused before any system call).
pub(super) fn is_setup_name(name: &str, job_id: &str, key_hash: u64, generation: u64) -> bool {
    name.strip_prefix(&setup_prefix(job_id, key_hash, generation))
        .is_some_and(|n| {
            n.len() == 32
                && n.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
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

/// `N` bytes from the operating system's random source (`/dev/urandom`).
fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// A random 64-bit number from the operating system (a header's token).
pub(super) fn random_u64() -> std::io::Result<u64> {
    random_bytes().map(u64::from_le_bytes)
}

/// A random 128-bit number from the operating system (a name's nonce).
pub(super) fn random_u128() -> std::io::Result<u128> {
    random_bytes().map(u128::from_le_bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_hold_the_job_and_a_fresh_nonce() {
        let k = CliqueKey::new([0, 1], crate::collectives::StreamKind::Compute).unwrap();
        let nonce = random_u128().unwrap();
        let name = segment_name("job-1", key_hash(&k), 3, nonce);
        assert!(name.starts_with(&job_segment_prefix("job-1")));
        assert!(!name.starts_with(&job_segment_prefix("job")));
        assert!(name.starts_with(&setup_prefix("job-1", key_hash(&k), 3)));
        assert!(name.ends_with(&format!(".3.{nonce:032x}")));
        assert!(is_setup_name(&name, "job-1", key_hash(&k), 3));
        assert!(!is_setup_name(&name, "job-1", key_hash(&k), 4));
        assert!(!is_setup_name(&name, "job-2", key_hash(&k), 3));
        // Another setup draws another nonce, so another name.
        let again = segment_name("job-1", key_hash(&k), 3, random_u128().unwrap());
        assert_ne!(name, again);
        assert_ne!(random_u64().unwrap(), random_u64().unwrap());
        // An announced name that is not of this setup's shape is refused.
        let p = setup_prefix("job-1", key_hash(&k), 3);
        for bad in [
            p.clone(),
            format!("{p}{}", "0".repeat(31)),
            format!("{p}{}", "0".repeat(33)),
            format!("{p}{}", "A".repeat(32)),
            format!("{p}{}/../x", "0".repeat(26)),
            format!("x{p}{}", "0".repeat(32)),
        ] {
            assert!(!is_setup_name(&bad, "job-1", key_hash(&k), 3), "{bad}");
        }
        assert_ne!(
            key_hash(&k),
            key_hash(
                &CliqueKey::new([0, 1], crate::collectives::StreamKind::Communication).unwrap()
            )
        );
    }
}
