//! How much memory host allocations may still take: the machine's available memory (Linux
//! `MemAvailable`, bounded by the memory cgroup's limit when there is one), less what this
//! process has mapped lazily (large host allocations are anonymous mappings, which take
//! memory only once touched) and not touched yet. Large allocations check it first, under one
//! process-wide lock, so that devices allocating at the same time cannot both take the same
//! memory; the executor checks a whole program against it at load.

use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of live lazily mapped host allocations in this process (every host device).
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// Held while a large allocation checks what is available and maps its memory.
static RESERVING: Mutex<()> = Mutex::new(());

/// Counts a new lazily mapped allocation of `bytes`.
pub(crate) fn mapped(bytes: u64) {
    MAPPED.fetch_add(bytes, Ordering::SeqCst);
}

/// Counts the release of a lazily mapped allocation of `bytes`.
pub(crate) fn unmapped(bytes: u64) {
    let _ = MAPPED.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
        Some(m.saturating_sub(bytes))
    });
}

/// Runs `f` (a check of [`available`] and the allocation it allows) while no other large
/// allocation of this process does.
pub(crate) fn reserving<T>(f: impl FnOnce() -> T) -> T {
    let _g = RESERVING.lock();
    f()
}

/// The bytes host allocations (host devices' and any other of this process) may still take;
/// `None` when the system does not say (not Linux, or `/proc` unreadable).
pub fn available() -> Option<u64> {
    let mut avail = meminfo("MemAvailable:")?;
    if let Some(c) = cgroup_room() {
        avail = avail.min(c);
    }
    let resident = status("RssAnon:").unwrap_or(0);
    Some(room(avail, MAPPED.load(Ordering::SeqCst), resident))
}

/// What is left of `avail` when this process has `mapped` bytes mapped lazily and `resident`
/// anonymous bytes resident: mapped but untouched pages are promised to the process without
/// counting as used yet, and there are at most `mapped - resident` of them.
fn room(avail: u64, mapped: u64, resident: u64) -> u64 {
    avail.saturating_sub(mapped.saturating_sub(resident))
}

/// A `kB` field of `/proc/meminfo`, in bytes.
fn meminfo(key: &str) -> Option<u64> {
    kb_field(&std::fs::read_to_string("/proc/meminfo").ok()?, key)
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status(key: &str) -> Option<u64> {
    kb_field(&std::fs::read_to_string("/proc/self/status").ok()?, key)
}

fn kb_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The least room left under the memory limits of this process's cgroup and its parents,
/// not counting the page cache (reclaimable): cgroup v2 (`memory.max` − `memory.current` +
/// the `file` pages of `memory.stat`, for the process's own group and every ancestor, since a
/// parent's limit binds its children too), else v1 (`memory.limit_in_bytes` of the mounted
/// hierarchy). `None` without a limit.
fn cgroup_room() -> Option<u64> {
    let v2 = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|groups| cgroup_v2_room(&groups, |p| std::fs::read_to_string(p).ok()));
    v2.or_else(cgroup_v1_room)
}

/// The least room of the cgroup v2 group named in `groups` (the text of `/proc/self/cgroup`)
/// and its ancestors, reading files with `read`; `None` when none of them has a limit.
fn cgroup_v2_room(groups: &str, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    let path = groups.lines().find_map(|l| l.strip_prefix("0::"))?;
    let root = Path::new("/sys/fs/cgroup");
    let own = root.join(path.trim().trim_start_matches('/'));
    own.ancestors()
        .take_while(|d| d.starts_with(root))
        .filter_map(|d| {
            let stat = read(&d.join("memory.stat")).unwrap_or_default();
            room_under(
                &read(&d.join("memory.max"))?,
                &read(&d.join("memory.current"))?,
                &stat,
                "file ",
            )
        })
        .min()
}

/// The room under the cgroup v1 memory limit of the mounted hierarchy, if there is one.
fn cgroup_v1_room() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    room_under(
        &read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
        &read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?,
        &read("/sys/fs/cgroup/memory/memory.stat").unwrap_or_default(),
        "total_cache ",
    )
}

/// `limit` − (`usage` − the page cache, the `cache_key` line of `stat`): `None` when the
/// limit says there is none ("max" in v2 does not parse; v1 writes a huge number).
fn room_under(limit: &str, usage: &str, stat: &str, cache_key: &str) -> Option<u64> {
    let limit: u64 = limit.trim().parse().ok()?;
    if limit >= 1 << 60 {
        return None;
    }
    let usage: u64 = usage.trim().parse().ok()?;
    let cache: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix(cache_key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Some(limit.saturating_sub(usage.saturating_sub(cache)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fields_parse_in_bytes() {
        let text = "MemTotal:       24684084 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(kb_field(text, "MemAvailable:"), Some(1_024_000));
        assert_eq!(kb_field(text, "MemFree:"), None);
        assert_eq!(kb_field("X: 99999999999999999999 kB", "X:"), None);
    }

    #[test]
    fn untouched_mappings_are_not_available() {
        // 6 GiB mapped, 1 GiB of it (or of anything else) touched.
        assert_eq!(room(10 << 30, 6 << 30, 1 << 30), 5 << 30);
        // Everything touched: the system's figure already counts it.
        assert_eq!(room(10 << 30, 6 << 30, 8 << 30), 10 << 30);
        assert_eq!(room(1 << 30, 6 << 30, 0), 0);
    }

    #[test]
    fn every_limited_ancestor_bounds_the_room() {
        let groups = "0::/a/b\n";
        let files = |p: &Path| -> Option<String> {
            let text = match p.to_str()? {
                "/sys/fs/cgroup/a/b/memory.max" => "max",
                "/sys/fs/cgroup/a/b/memory.current" => "100",
                "/sys/fs/cgroup/a/memory.max" => "1000",
                "/sys/fs/cgroup/a/memory.current" => "900",
                "/sys/fs/cgroup/a/memory.stat" => "anon 500\nfile 300\n",
                "/sys/fs/cgroup/memory.max" => "5000",
                "/sys/fs/cgroup/memory.current" => "1000",
                _ => return None,
            };
            Some(text.into())
        };
        // The group itself has no limit; its parent's (1000 - (900 - 300 cache)) binds.
        assert_eq!(cgroup_v2_room(groups, files), Some(400));
        assert_eq!(cgroup_v2_room("0::/\n", |_| None), None);
        assert_eq!(cgroup_v2_room("1:memory:/x\n", files), None);
    }

    #[test]
    fn limits_parse_like_the_kernel_writes_them() {
        assert_eq!(room_under("max\n", "10", "", "file "), None);
        assert_eq!(
            room_under("9223372036854771712", "10", "", "total_cache "),
            None
        );
        assert_eq!(room_under("100\n", "150\n", "file 80\n", "file "), Some(30));
        assert_eq!(room_under("100", "250", "", "file "), Some(0));
    }

    #[test]
    fn this_machine_says() {
        // Linux gives a figure (the memory this test process runs in).
        assert!(available().unwrap() > 0);
    }
}
