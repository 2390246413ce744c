//! Allocations with per-space accounting, and the registry of a device's live allocations:
//! every pointer range a stream, copy or launch touches is checked against it before the
//! vendor sees it (as the host backend does), so a wrong address is an error, not a device
//! fault. The vendor's part is the raw allocate and free calls ([`Vendor::allocate`],
//! [`Vendor::free`]) and what they hand back ([`Vendor::RawMemory`]).
//!
//! Alignment: the vendor's own where it suffices; a larger one is met by padding, up front
//! where the vendor states what it guarantees ([`Vendor::guaranteed_alignment`]), else by a
//! second, padded allocation when the first comes back misaligned; the address handed out is
//! rounded up inside the allocation.

use crate::vendor::Vendor;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::backend::accounting::{Accounting, AllocationRegistry};
use xthunk_core::backend::{DeviceMemory, DevicePtr, ExternalAllocator, MemoryStats};
use xthunk_core::ir::MemorySpace;
use xthunk_core::{Error, Result};

/// One allocation; given back when the last reference goes (the owner's [`Buffer`] and any
/// checked [`Region`] still held).
pub struct Allocation<V: Vendor> {
    /// The (aligned) address handed to users.
    base: u64,
    size: u64,
    space: MemorySpace,
    raw: Raw<V>,
    ctx: Arc<V::Context>,
    accounting: Arc<Accounting>,
}

/// What goes back when an allocation is freed: the vendor's memory, or an outside
/// allocator's (a collective library's) at its address.
enum Raw<V: Vendor> {
    Vendor(V::RawMemory),
    External(Arc<dyn ExternalAllocator>, u64),
}

impl<V: Vendor> std::fmt::Debug for Raw<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raw::Vendor(r) => r.fmt(f),
            Raw::External(a, addr) => write!(f, "{} at {addr:#x}", a.name()),
        }
    }
}

impl<V: Vendor> std::fmt::Debug for Allocation<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("base", &format_args!("{:#x}", self.base))
            .field("size", &self.size)
            .field("space", &self.space)
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

// SAFETY: `raw` is a vendor allocation owned by this struct and only given back in `drop`
// (the `Vendor` contract: usable and freed from any thread); a pinned host pointer in it is
// never dereferenced here. Access to the memory is ordered by streams, as on any GPU.
unsafe impl<V: Vendor> Send for Allocation<V> {}
// SAFETY: as above; the struct is immutable after creation.
unsafe impl<V: Vendor> Sync for Allocation<V> {}

impl<V: Vendor> Allocation<V> {
    /// The (aligned) device address.
    pub fn addr(&self) -> u64 {
        self.base
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn space(&self) -> MemorySpace {
        self.space
    }
}

impl<V: Vendor> Drop for Allocation<V> {
    fn drop(&mut self) {
        let r = V::bind(&self.ctx).and_then(|()| match &self.raw {
            // SAFETY: `raw` came from the vendor's allocator for this device and is given
            // back exactly once, here.
            Raw::Vendor(raw) => unsafe { V::free(&self.ctx, raw) },
            // SAFETY: `addr` came from this outside allocator and is given back once, here.
            Raw::External(a, addr) => unsafe { a.free(*addr) },
        });
        if let Err(e) = r {
            tracing::error!(
                "freeing {} bytes of {} memory at {:#x}: {e}",
                self.size,
                self.space,
                self.base
            );
        }
        self.accounting.sub(self.space, self.size);
    }
}

/// A checked view of `len` bytes inside a live allocation; holding it keeps the memory alive.
#[derive(Debug)]
pub struct Region<V: Vendor> {
    alloc: Arc<Allocation<V>>,
    offset: u64,
    len: u64,
}

impl<V: Vendor> Clone for Region<V> {
    fn clone(&self) -> Self {
        Region {
            alloc: self.alloc.clone(),
            offset: self.offset,
            len: self.len,
        }
    }
}

impl<V: Vendor> Region<V> {
    /// The device address of the first byte.
    pub fn addr(&self) -> u64 {
        self.alloc.base + self.offset
    }
    /// The device address as the pointer vendor calls take.
    pub fn ptr(&self) -> *mut c_void {
        crate::vendor::device_ptr(self.addr())
    }
    /// The allocation it lies in.
    pub fn allocation(&self) -> &Allocation<V> {
        &self.alloc
    }
    /// True if both regions share at least one byte.
    pub fn overlaps(&self, other: &Region<V>) -> bool {
        let (a, b) = (self.addr(), other.addr());
        self.len > 0
            && other.len > 0
            && a < b.saturating_add(other.len)
            && b < a.saturating_add(self.len)
    }
}

/// One raw allocation of the byte count asked (the out-of-memory error given): what to give
/// back, and its address.
pub type RawAlloc<'a, V> =
    dyn Fn(u64, &dyn Fn() -> Error) -> Result<(<V as Vendor>::RawMemory, u64)> + 'a;

/// The live allocations of one device, by base address.
#[derive(Debug)]
pub struct MemoryRegistry<V: Vendor> {
    allocations: AllocationRegistry<Arc<Allocation<V>>>,
    pub accounting: Arc<Accounting>,
}

impl<V: Vendor> Default for MemoryRegistry<V> {
    fn default() -> Self {
        MemoryRegistry {
            allocations: AllocationRegistry::default(),
            accounting: Arc::default(),
        }
    }
}

/// Rounds `v` up to a multiple of `align` (a power of two).
fn align_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

/// Gives back a raw allocation that was never registered.
fn free_unregistered<V: Vendor>(ctx: &V::Context, raw: &V::RawMemory) {
    // SAFETY: `raw` was just allocated for this device and is given back once, here.
    if let Err(e) = unsafe { V::free(ctx, raw) } {
        tracing::error!("{e}");
    }
}

impl<V: Vendor> MemoryRegistry<V> {
    /// Allocates `size` bytes of `space` (0 allowed: one byte is reserved so the address is
    /// unique) with the vendor's allocator.
    pub fn allocate(
        self: &Arc<Self>,
        ctx: &Arc<V::Context>,
        size: u64,
        alignment: u64,
        space: MemorySpace,
    ) -> Result<Buffer<V>> {
        let c = ctx.clone();
        self.allocate_with(ctx, size, alignment, space, &|n, oom| {
            V::allocate(&c, space, n, oom)
        })
    }

    /// Allocates `size` bytes of `space` with `alloc` (which takes the byte count to ask for),
    /// aligned, registered and counted.
    pub fn allocate_with(
        self: &Arc<Self>,
        ctx: &Arc<V::Context>,
        size: u64,
        alignment: u64,
        space: MemorySpace,
        alloc: &RawAlloc<'_, V>,
    ) -> Result<Buffer<V>> {
        let align = power_of_two(alignment)?;
        let oom = || Error::OutOfMemory {
            device: V::device_name(ctx).to_string(),
            requested: size,
            space,
        };
        V::bind(ctx)?;
        let want = size.max(1);
        let (raw, addr) = match V::guaranteed_alignment(space) {
            Some(guaranteed) => {
                let extra = if align > guaranteed { align } else { 0 };
                alloc(want.checked_add(extra).ok_or_else(oom)?, &oom)?
            }
            None => {
                let (raw, addr) = alloc(want, &oom)?;
                if addr % align == 0 {
                    (raw, addr)
                } else {
                    free_unregistered::<V>(ctx, &raw);
                    alloc(want.checked_add(align).ok_or_else(oom)?, &oom)?
                }
            }
        };
        let Some(base) = align_up(addr, align) else {
            free_unregistered::<V>(ctx, &raw);
            return Err(oom());
        };
        self.accounting.add(space, size);
        let a = Arc::new(Allocation {
            base,
            size,
            space,
            raw: Raw::Vendor(raw),
            ctx: ctx.clone(),
            accounting: self.accounting.clone(),
        });
        self.allocations.insert(base, size, a.clone());
        Ok(Buffer {
            alloc: a,
            registry: self.clone(),
        })
    }

    /// Allocates `size` bytes of `space` with an outside allocator (called with the device
    /// current; padded when it returns a misaligned address), registered and counted like
    /// the vendor's memory; freed with the same allocator.
    pub fn allocate_external(
        self: &Arc<Self>,
        ctx: &Arc<V::Context>,
        size: u64,
        alignment: u64,
        space: MemorySpace,
        alloc: Arc<dyn ExternalAllocator>,
    ) -> Result<Buffer<V>> {
        let align = power_of_two(alignment)?;
        let oom = || Error::OutOfMemory {
            device: V::device_name(ctx).to_string(),
            requested: size,
            space,
        };
        V::bind(ctx)?;
        let want = size.max(1);
        let mut addr = alloc.allocate(want)?;
        if addr % align != 0 {
            // SAFETY: just allocated by `alloc`, unused, freed once.
            if let Err(e) = unsafe { alloc.free(addr) } {
                tracing::error!("{e}");
            }
            addr = alloc.allocate(want.checked_add(align).ok_or_else(oom)?)?;
        }
        let Some(base) = align_up(addr, align) else {
            // SAFETY: as above.
            if let Err(e) = unsafe { alloc.free(addr) } {
                tracing::error!("{e}");
            }
            return Err(oom());
        };
        self.accounting.add(space, size);
        let a = Arc::new(Allocation {
            base,
            size,
            space,
            raw: Raw::External(alloc, addr),
            ctx: ctx.clone(),
            accounting: self.accounting.clone(),
        });
        self.allocations.insert(base, size, a.clone());
        Ok(Buffer {
            alloc: a,
            registry: self.clone(),
        })
    }

    /// Removes an allocation from the registry (it is freed when its last user is done).
    pub fn release(&self, ptr: DevicePtr) {
        self.allocations.remove(ptr.0);
    }

    /// Resolves `len` bytes at `ptr` to a region of one live allocation.
    pub fn region(&self, ptr: DevicePtr, len: u64) -> Result<Region<V>> {
        let c = self.allocations.check(ptr, len, V::DEVICE)?;
        Ok(Region {
            alloc: c.value,
            offset: c.offset,
            len,
        })
    }

    /// The source and destination regions of a copy of `size` bytes, which must not overlap.
    pub fn copy_regions(
        &self,
        src: DevicePtr,
        dst: DevicePtr,
        size: u64,
    ) -> Result<(Region<V>, Region<V>)> {
        let s = self.region(src, size)?;
        let d = self.region(dst, size)?;
        if s.overlaps(&d) {
            return Err(Error::InvalidArgument(format!(
                "copy of {size} bytes from {src} to {dst}: the ranges overlap"
            )));
        }
        Ok((s, d))
    }

    pub fn stats(&self) -> MemoryStats {
        self.accounting.stats()
    }
}

/// The owner's handle to an allocation: dropping it unregisters the allocation, whose memory
/// goes when the last region using it does.
#[derive(Debug)]
pub struct Buffer<V: Vendor> {
    alloc: Arc<Allocation<V>>,
    registry: Arc<MemoryRegistry<V>>,
}

impl<V: Vendor> Buffer<V> {
    /// The allocation.
    pub fn allocation(&self) -> &Allocation<V> {
        &self.alloc
    }
}

impl<V: Vendor> DeviceMemory for Buffer<V> {
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.alloc.base)
    }
    fn size(&self) -> u64 {
        self.alloc.size
    }
    fn space(&self) -> MemorySpace {
        self.alloc.space
    }
}

impl<V: Vendor> Drop for Buffer<V> {
    fn drop(&mut self) {
        self.registry.release(self.ptr());
    }
}

/// `alignment` (0 meaning 1), which must be a power of two.
fn power_of_two(alignment: u64) -> Result<u64> {
    let align = alignment.max(1);
    if !align.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "alignment {alignment} is not a power of two"
        )));
    }
    Ok(align)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A vendor whose allocator hands out addresses from a counter (`next`), records every
    /// allocation size asked and every free, and guarantees `GUARANTEE` alignment when it is
    /// not 0.
    #[derive(Debug)]
    struct Fake<const GUARANTEE: u64>;

    #[derive(Debug, Default)]
    struct Ctx {
        next: AtomicU64,
        asked: Mutex<Vec<u64>>,
        freed: Mutex<Vec<u64>>,
    }

    impl<const G: u64> Vendor for Fake<G> {
        const NAME: &'static str = "Fake";
        const BACKEND: &'static str = "fake";
        const DEVICE: &'static str = "fake device";
        type Context = Ctx;
        type RawStream = ();
        type RawEvent = ();
        type RawMemory = u64;
        fn bind(_: &Ctx) -> Result<()> {
            Ok(())
        }
        fn device_name(_: &Ctx) -> &str {
            "fake:0"
        }
        fn guaranteed_alignment(_: MemorySpace) -> Option<u64> {
            (G > 0).then_some(G)
        }
        fn allocate(
            ctx: &Ctx,
            _: MemorySpace,
            bytes: u64,
            _: &dyn Fn() -> Error,
        ) -> Result<(u64, u64)> {
            ctx.asked.lock().unwrap().push(bytes);
            let addr = ctx.next.fetch_add(bytes, Ordering::Relaxed);
            Ok((addr, addr))
        }
        unsafe fn free(ctx: &Ctx, raw: &u64) -> Result<()> {
            ctx.freed.lock().unwrap().push(*raw);
            Ok(())
        }
        unsafe fn destroy_stream(_: &Ctx, _: ()) -> Result<()> {
            Ok(())
        }
        fn create_event(_: &Ctx, _: bool) -> Result<()> {
            Ok(())
        }
        unsafe fn destroy_event(_: &Ctx, _: ()) -> Result<()> {
            Ok(())
        }
        unsafe fn event_elapsed_ms(_: &Ctx, _: (), _: ()) -> Result<f32> {
            Ok(0.0)
        }
        unsafe fn event_synchronize(_: &Ctx, _: ()) -> Result<()> {
            Ok(())
        }
        unsafe fn event_query(_: &Ctx, _: ()) -> Result<bool> {
            Ok(true)
        }
    }

    fn setup<const G: u64>(start: u64) -> (Arc<MemoryRegistry<Fake<G>>>, Arc<Ctx>) {
        let ctx = Arc::new(Ctx::default());
        ctx.next.store(start, Ordering::Relaxed);
        (Arc::new(MemoryRegistry::default()), ctx)
    }

    #[test]
    fn without_a_guarantee_a_misaligned_address_is_padded_on_a_second_try() {
        let (reg, ctx) = setup::<0>(0x1010);
        let b = reg.allocate(&ctx, 100, 256, MemorySpace::Device).unwrap();
        assert_eq!(b.ptr().0 % 256, 0);
        assert_eq!(*ctx.asked.lock().unwrap(), [100, 356]);
        assert_eq!(*ctx.freed.lock().unwrap(), [0x1010]);
        // Aligned at once: one allocation.
        let (reg, ctx) = setup::<0>(0x1000);
        let b = reg.allocate(&ctx, 0, 256, MemorySpace::Device).unwrap();
        assert_eq!((b.ptr().0, b.size()), (0x1000, 0));
        assert_eq!(*ctx.asked.lock().unwrap(), [1]);
    }

    #[test]
    fn with_a_guarantee_a_larger_alignment_is_padded_up_front() {
        let (reg, ctx) = setup::<256>(0x1100);
        let b = reg.allocate(&ctx, 100, 4096, MemorySpace::Device).unwrap();
        assert_eq!(b.ptr().0, 0x2000);
        assert_eq!(*ctx.asked.lock().unwrap(), [4196]);
        let c = reg.allocate(&ctx, 100, 64, MemorySpace::Device).unwrap();
        assert_eq!(ctx.asked.lock().unwrap()[1], 100);
        assert!(reg.allocate(&ctx, 1, 3, MemorySpace::Device).is_err());
        drop((b, c));
        assert_eq!(ctx.freed.lock().unwrap().len(), 2);
        let stats = reg.stats();
        assert_eq!(
            (stats.live_bytes, stats.live_allocations, stats.peak_bytes),
            (0, 0, 200)
        );
    }

    #[test]
    fn ranges_are_checked_and_regions_keep_the_memory() {
        let (reg, ctx) = setup::<256>(0x1000);
        let b = reg.allocate(&ctx, 64, 1, MemorySpace::Device).unwrap();
        let p = b.ptr();
        assert!(reg.region(p, 64).is_ok());
        assert!(reg.region(p, 65).is_err());
        assert!(reg.region(DevicePtr(p.0 + 64), 1).is_err());
        let (s, d) = reg.copy_regions(p, DevicePtr(p.0 + 32), 32).unwrap();
        assert!(!s.overlaps(&d));
        assert!(reg.copy_regions(p, DevicePtr(p.0 + 16), 32).is_err());
        let held = reg.region(p, 8).unwrap();
        drop((s, d, b));
        // Unregistered with the buffer, freed with the last region.
        assert!(reg.region(p, 8).is_err());
        assert!(ctx.freed.lock().unwrap().is_empty());
        drop(held);
        assert_eq!(*ctx.freed.lock().unwrap(), [0x1000]);
    }

    #[test]
    fn rounding() {
        assert_eq!(align_up(0, 256), Some(0));
        assert_eq!(align_up(1, 256), Some(256));
        assert_eq!(align_up(512, 256), Some(512));
        assert_eq!(align_up(u64::MAX, 2), None);
    }
}
