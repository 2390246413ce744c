//! Memory bookkeeping every backend shares: live and peak bytes per memory space (what
//! [`Device::memory_stats`](super::Device::memory_stats) reports), and the registry of live
//! allocations by base address that every pointer range is checked against before a backend
//! touches it (a wrong address is an error, not a device fault or memory corruption).
//!
//! Both are backend-neutral: what an allocation is, and how it is freed, stays with the
//! backend (the registry holds any `T`, typically an `Arc` of the backend's allocation).

use super::{DevicePtr, MemoryStats};
use crate::error::{Error, Result};
use crate::ir::MemorySpace;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;

/// Live-byte accounting of one device: bytes and allocations alive, per memory space, and the
/// peak. Counts saturate rather than wrap.
#[derive(Debug, Default)]
pub struct Accounting {
    inner: Mutex<AccountingInner>,
}

#[derive(Debug, Default)]
struct AccountingInner {
    live_bytes: u64,
    live_allocations: u64,
    made: u64,
    peak: u64,
    per_space: BTreeMap<MemorySpace, u64>,
}

impl Accounting {
    /// Counts an allocation of `size` bytes in `space`.
    pub fn add(&self, space: MemorySpace, size: u64) {
        let mut g = self.inner.lock();
        g.live_bytes = g.live_bytes.saturating_add(size);
        g.live_allocations = g.live_allocations.saturating_add(1);
        g.made = g.made.saturating_add(1);
        g.peak = g.peak.max(g.live_bytes);
        let e = g.per_space.entry(space).or_default();
        *e = e.saturating_add(size);
    }

    /// Counts the release of an allocation of `size` bytes in `space`.
    pub fn sub(&self, space: MemorySpace, size: u64) {
        let mut g = self.inner.lock();
        g.live_bytes = g.live_bytes.saturating_sub(size);
        g.live_allocations = g.live_allocations.saturating_sub(1);
        let e = g.per_space.entry(space).or_default();
        *e = e.saturating_sub(size);
    }

    /// What is live now, and the peak.
    pub fn stats(&self) -> MemoryStats {
        let g = self.inner.lock();
        MemoryStats {
            live_bytes: g.live_bytes,
            live_allocations: g.live_allocations,
            per_space: g.per_space.iter().map(|(k, v)| (*k, *v)).collect(),
            peak_bytes: g.peak,
            allocations_made: g.made,
        }
    }
}

/// The live allocations of one device, keyed by base address, each with its size and the
/// backend's value for it (`T`, e.g. `Arc<Allocation>`).
#[derive(Debug)]
pub struct AllocationRegistry<T> {
    map: RwLock<BTreeMap<u64, (u64, T)>>,
}

/// A range found inside one live allocation (see [`AllocationRegistry::check`]).
#[derive(Clone, Debug)]
pub struct Checked<T> {
    /// The allocation's base address.
    pub base: u64,
    /// Where the range starts, from `base`; `offset + len` is within the allocation's size.
    pub offset: u64,
    /// The backend's value for the allocation.
    pub value: T,
}

impl<T> Default for AllocationRegistry<T> {
    fn default() -> Self {
        AllocationRegistry {
            map: RwLock::new(BTreeMap::new()),
        }
    }
}

impl<T> AllocationRegistry<T> {
    /// Registers `size` bytes at `base`.
    pub fn insert(&self, base: u64, size: u64, value: T) {
        self.map.write().insert(base, (size, value));
    }

    /// Forgets the allocation at `base`, returning its value (dropped by the caller, outside
    /// the registry's lock).
    pub fn remove(&self, base: u64) -> Option<T> {
        self.map.write().remove(&base).map(|(_, v)| v)
    }
}

impl<T: Clone> AllocationRegistry<T> {
    /// Checks that `len` bytes at `ptr` lie inside one live allocation, and returns it. The
    /// error names the device as `device` (`… not inside a live allocation of this CUDA
    /// device`).
    pub fn check(&self, ptr: DevicePtr, len: u64, device: &str) -> Result<Checked<T>> {
        let map = self.map.read();
        let bad = || {
            Error::InvalidArgument(format!(
                "{len} bytes at {ptr} are not inside a live allocation of this {device}"
            ))
        };
        let Some((&base, (size, value))) = map.range(..=ptr.0).next_back() else {
            return Err(bad());
        };
        let offset = ptr.0 - base;
        match offset.checked_add(len) {
            Some(end) if end <= *size => Ok(Checked {
                base,
                offset,
                value: value.clone(),
            }),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_tracks_live_and_peak_per_space() {
        let a = Accounting::default();
        a.add(MemorySpace::Device, 100);
        a.add(MemorySpace::HostPinned, 50);
        a.sub(MemorySpace::Device, 100);
        let s = a.stats();
        assert_eq!(s.live_bytes, 50);
        assert_eq!(s.live_allocations, 1);
        assert_eq!(s.peak_bytes, 150);
        assert_eq!(
            s.per_space,
            vec![(MemorySpace::Device, 0), (MemorySpace::HostPinned, 50)]
        );
        // A stray release never underflows.
        a.sub(MemorySpace::Unified, 10);
        a.sub(MemorySpace::HostPinned, 60);
        let s = a.stats();
        assert_eq!((s.live_bytes, s.live_allocations), (0, 0));
    }

    #[test]
    fn registry_checks_ranges_against_live_allocations() {
        let r = AllocationRegistry::default();
        r.insert(0x1000, 0x100, 'a');
        r.insert(0x2000, 0, 'b');
        let c = r
            .check(DevicePtr(0x1010), 0xf0, "test device")
            .map(|c| (c.base, c.offset, c.value));
        assert_eq!(c.ok(), Some((0x1000, 0x10, 'a')));
        assert!(r.check(DevicePtr(0x1010), 0xf1, "test device").is_err());
        assert!(r.check(DevicePtr(0x10ff), u64::MAX, "test device").is_err());
        assert!(r.check(DevicePtr(0xfff), 1, "test device").is_err());
        assert_eq!(
            r.check(DevicePtr(0x2000), 0, "test device")
                .ok()
                .map(|c| c.value),
            Some('b')
        );
        assert!(r.check(DevicePtr(0x2000), 1, "test device").is_err());
        let msg = r
            .check(DevicePtr(0x1200), 4, "test device")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.contains("4 bytes at 0x1200 are not inside a live allocation of this test device"),
            "{msg}"
        );
        assert_eq!(r.remove(0x1000), Some('a'));
        assert_eq!(r.remove(0x1000), None);
        assert!(r.check(DevicePtr(0x1010), 1, "test device").is_err());
    }
}
