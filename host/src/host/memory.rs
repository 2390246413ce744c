//! Host "device" memory: real host allocations, tracked in a registry so every pointer a
//! stream touches is checked against a live allocation first.
//!
//! Small allocations come from the global allocator, zeroed. Large ones
//! ([`LAZY_MIN`] bytes or more) are anonymous private mappings: zero pages until first
//! touched, so a large buffer costs neither time nor memory until it is used (device memory
//! is uninitialized by contract; the host's reads as zeros). A large allocation is checked
//! against the memory still [available](super::available) first, so that too much is a clean
//! `OutOfMemory` rather than the kernel's OOM killer at first touch.

use crate::backend::accounting::{Accounting, AllocationRegistry};
use crate::backend::{DeviceMemory, DevicePtr, MemoryStats};
use crate::error::{Error, Result};
use crate::ir::MemorySpace;
use std::alloc::Layout;
use std::sync::Arc;

/// One host allocation. The memory is released when the last reference goes: the owner's
/// [`HostBuffer`] and any queued stream work that uses it.
#[derive(Debug)]
pub(crate) struct HostAllocation {
    ptr: *mut u8,
    size: u64,
    backing: Backing,
    space: MemorySpace,
    accounting: Arc<Accounting>,
}

/// Allocations of at least this many bytes are lazily zeroed mappings.
pub(crate) const LAZY_MIN: u64 = 1 << 20;

/// Where an allocation's bytes come from.
#[derive(Debug)]
enum Backing {
    /// The global allocator (`alloc_zeroed` with this layout).
    Heap(Layout),
    /// An anonymous mapping of `len` bytes at `base` (`ptr` is `base` rounded up to the
    /// alignment).
    Mapped { base: *mut u8, len: usize },
}

// SAFETY: the allocation is plain bytes owned by this struct; access is synchronized by the
// streams (ordered work) and the executor, as device memory is on a GPU.
unsafe impl Send for HostAllocation {}
// SAFETY: as above; the struct itself is immutable after creation.
unsafe impl Sync for HostAllocation {}

impl HostAllocation {
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed exactly once, here.
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr, layout) },
            Backing::Mapped { base, len } => {
                // SAFETY: `base..base + len` is the mapping `map_lazy` made, unmapped exactly
                // once, here; nothing uses it any more (the last reference is going).
                unsafe { libc::munmap(base.cast(), len) };
                super::available::unmapped(len as u64);
            }
        }
        self.accounting.sub(self.space, self.size);
    }
}

/// Maps `bytes` of lazily zeroed memory aligned to `align` (a power of two); returns the
/// aligned pointer and the backing to release. `None` when the system refuses.
fn map_lazy(bytes: usize, align: usize) -> Option<(*mut u8, Backing)> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // Mappings are page-aligned; a larger alignment takes that much more to round up in.
    let len = bytes.checked_add(align.saturating_sub(page))?;
    // SAFETY: a new private anonymous mapping at an address the kernel picks: no existing
    // memory is affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base.cast::<u8>();
    let skip = (base as usize).wrapping_neg() & (align - 1);
    // SAFETY: `skip < align` and `skip + bytes <= len`: inside the mapping.
    let ptr = unsafe { base.add(skip) };
    super::available::mapped(len as u64);
    Some((ptr, Backing::Mapped { base, len }))
}

/// The registry of live allocations of one device, keyed by base address.
#[derive(Debug, Default)]
pub(crate) struct MemoryRegistry {
    allocations: AllocationRegistry<Arc<HostAllocation>>,
    pub(crate) accounting: Arc<Accounting>,
    /// Bumped on every release, so that lookup caches know when to forget.
    generation: std::sync::atomic::AtomicU64,
}

/// A small per-stream cache of recently resolved allocations, valid while the registry's
/// generation (bumped by every free) is unchanged.
#[derive(Debug, Default)]
pub(crate) struct RegionCache {
    generation: u64,
    entries: Vec<(u64, Arc<HostAllocation>)>,
    /// While pinned, nothing is evicted (the cache may grow past its size).
    pinned: bool,
}

impl RegionCache {
    /// Stops evictions (so raw pointers from [`MemoryRegistry::resolve_raw`] stay valid).
    pub(crate) fn pin(&mut self) {
        self.pinned = true;
    }

    /// Allows evictions again and trims the cache to its size.
    pub(crate) fn unpin(&mut self) {
        self.pinned = false;
        if self.entries.len() > CACHE_ENTRIES {
            let extra = self.entries.len() - CACHE_ENTRIES;
            self.entries.drain(..extra);
        }
    }
}

const CACHE_ENTRIES: usize = 8;

/// A checked view of `len` bytes inside a live allocation. Holding it keeps the memory alive.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    alloc: Arc<HostAllocation>,
    offset: usize,
    len: usize,
}

impl Region {
    pub(crate) fn ptr(&self) -> *mut u8 {
        // SAFETY: `offset + len <= size` was checked when the region was made, so the result
        // stays inside (or one past the end of) the allocation.
        unsafe { self.alloc.base().add(self.offset) }
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl MemoryRegistry {
    pub(crate) fn allocate(
        &self,
        device: &str,
        size: u64,
        alignment: u64,
        space: MemorySpace,
    ) -> Result<Arc<HostAllocation>> {
        let oom = || Error::OutOfMemory {
            device: device.to_string(),
            requested: size,
            space,
        };
        let align = alignment.max(64);
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        let bytes = usize::try_from(size.max(1)).map_err(|_| oom())?;
        let align = usize::try_from(align).map_err(|_| oom())?;
        let (ptr, backing) = if size >= LAZY_MIN {
            super::available::reserving(|| {
                if super::available::available().is_some_and(|a| size > a) {
                    return None;
                }
                map_lazy(bytes, align)
            })
            .ok_or_else(oom)?
        } else {
            let layout = Layout::from_size_align(bytes, align).map_err(|_| oom())?;
            // SAFETY: the layout has a non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            if ptr.is_null() {
                return Err(oom());
            }
            (ptr, Backing::Heap(layout))
        };
        self.accounting.add(space, size);
        let a = Arc::new(HostAllocation {
            ptr,
            size,
            backing,
            space,
            accounting: self.accounting.clone(),
        });
        self.allocations.insert(ptr as u64, size, a.clone());
        Ok(a)
    }

    /// Removes an allocation from the registry (its memory goes when the last user is done).
    pub(crate) fn release(&self, ptr: DevicePtr) {
        self.allocations.remove(ptr.0);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Checks `len` bytes at `ptr` against a live allocation, making sure the allocation is in
    /// `cache` (which keeps it alive), and returns the raw address. The pointer stays valid as
    /// long as the entry stays in the cache: callers that need several pointers at once use
    /// [`RegionCache::pin`] so nothing is evicted meanwhile.
    pub(crate) fn resolve_raw(
        &self,
        cache: &mut RegionCache,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<*mut u8> {
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        if cache.generation != generation {
            cache.entries.clear();
            cache.generation = generation;
        }
        for (base, alloc) in &cache.entries {
            if ptr.0 >= *base {
                let offset = ptr.0 - base;
                if offset.checked_add(len).is_some_and(|end| end <= alloc.size) {
                    // SAFETY: `offset + len <= size`: inside the allocation.
                    return Ok(unsafe { alloc.base().add(offset as usize) });
                }
            }
        }
        let r = self.region(ptr, len)?;
        if !cache.pinned && cache.entries.len() >= CACHE_ENTRIES {
            cache.entries.remove(0);
        }
        let p = r.ptr();
        cache.entries.push((r.alloc.base() as u64, r.alloc.clone()));
        Ok(p)
    }

    /// As [`Self::region`], through a cache of recent allocations.
    pub(crate) fn region_cached(
        &self,
        cache: &mut RegionCache,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<Region> {
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        if cache.generation != generation {
            cache.entries.clear();
            cache.generation = generation;
        }
        for (base, alloc) in &cache.entries {
            if ptr.0 >= *base {
                let offset = ptr.0 - base;
                if let Some(end) = offset.checked_add(len)
                    && end <= alloc.size
                {
                    return Ok(Region {
                        alloc: alloc.clone(),
                        offset: offset as usize,
                        len: len as usize,
                    });
                }
            }
        }
        let r = self.region(ptr, len)?;
        if cache.entries.len() >= CACHE_ENTRIES {
            cache.entries.remove(0);
        }
        cache.entries.push((r.alloc.base() as u64, r.alloc.clone()));
        Ok(r)
    }

    /// Resolves `len` bytes at `ptr` to a region of one live allocation.
    pub(crate) fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region> {
        let c = self.allocations.check(ptr, len, "device")?;
        Ok(Region {
            alloc: c.value,
            offset: c.offset as usize,
            len: len as usize,
        })
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.accounting.stats()
    }
}

/// The owner's handle to a host allocation.
#[derive(Debug)]
pub struct HostBuffer {
    pub(crate) alloc: Arc<HostAllocation>,
    pub(crate) registry: Arc<MemoryRegistry>,
}

impl DeviceMemory for HostBuffer {
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.alloc.base() as u64)
    }
    fn size(&self) -> u64 {
        self.alloc.size
    }
    fn space(&self) -> MemorySpace {
        self.alloc.space
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        self.registry.release(self.ptr());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Resident pages among the `len` bytes at `base` (page-aligned).
    fn resident(base: *mut u8, len: usize) -> usize {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: `base..base + len` is mapped (a live allocation); `v` has one byte per page.
        let r = unsafe { libc::mincore(base.cast(), len, v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn large_allocations_take_no_memory_until_touched() {
        let reg = MemoryRegistry::default();
        let size = 256usize << 20;
        let a = reg
            .allocate("test", size as u64, 1 << 14, MemorySpace::Device)
            .unwrap();
        assert_eq!(a.base() as usize % (1 << 14), 0);
        // Zeroing it would have made every page resident (65,536 of 4 KiB).
        let before = resident(a.base(), size);
        assert!(before < 64, "{before} pages resident after allocation");
        // SAFETY: the first MiB lies inside the live allocation `a`.
        unsafe { std::ptr::write_bytes(a.base(), 1, 1 << 20) };
        assert!(resident(a.base(), size) >= (1 << 20) / 65536);
        // Untouched bytes read as zeros.
        // SAFETY: inside the allocation; nothing else writes it.
        let tail = unsafe { std::slice::from_raw_parts(a.base().add(size - 4096), 4096) };
        assert!(tail.iter().all(|&b| b == 0));
        assert_eq!(reg.stats().live_bytes, size as u64);
        reg.release(DevicePtr(a.base() as u64));
        drop(a);
        assert_eq!(reg.stats().live_bytes, 0);
    }

    #[test]
    fn more_than_is_available_is_refused() {
        // Linux says (/proc/meminfo).
        let avail = super::super::available::available().unwrap();
        let reg = MemoryRegistry::default();
        let e = reg
            .allocate("test", avail + (4 << 30), 64, MemorySpace::Device)
            .unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        // Small allocations still work, and big ones within what is available.
        reg.allocate("test", 100, 64, MemorySpace::Device).unwrap();
        reg.allocate("test", 8 << 20, 64, MemorySpace::Device)
            .unwrap();
    }
}
