//! Host "device" memory: real host allocations, tracked in a registry so every pointer a
//! stream touches is checked against a live allocation first.

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
    layout: Layout,
    space: MemorySpace,
    accounting: Arc<Accounting>,
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
        // SAFETY: `ptr` came from `alloc_zeroed(self.layout)` and is freed exactly once, here.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
        self.accounting.sub(self.space, self.size);
    }
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
        let layout = Layout::from_size_align(bytes, align as usize).map_err(|_| oom())?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(oom());
        }
        self.accounting.add(space, size);
        let a = Arc::new(HostAllocation {
            ptr,
            size,
            layout,
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
                if let Some(end) = offset.checked_add(len) {
                    if end <= alloc.size {
                        return Ok(Region {
                            alloc: alloc.clone(),
                            offset: offset as usize,
                            len: len as usize,
                        });
                    }
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
