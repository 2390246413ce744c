//! The plain data that crosses the backend interface at launch: device addresses
//! ([`DevicePtr`]), allocations ([`DeviceMemory`], [`Buffer`]), kernel handles, launch
//! arguments and dimensions, and gemm operands ([`DeviceRange`], [`GemmLaunch`]). A leaf: the
//! stream and device traits (`stream.rs`, `mod.rs`), the conditional-node data, the benchmark
//! baselines and the accounting all use it; `mod.rs` re-exports every item.

use crate::ir::{Gemm, GemmOperand, MemorySpace, Scalar};
use std::any::Any;
use std::fmt;

/// An address in a device's memory (for the host backend, a host address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// An allocator outside the backend, for memory a library must have allocated itself (a
/// collective library's `ncclMemAlloc`, whose memory it can register as a symmetric window).
/// The backend calls it with its device current and registers what it returns like its own
/// allocations ([`Device::allocate_external`](super::Device::allocate_external)).
pub trait ExternalAllocator: Send + Sync + fmt::Debug {
    /// The allocator in words (`ncclMemAlloc (NCCL 2.27.5)`), for messages.
    fn name(&self) -> String;
    /// Allocates `bytes` on the current device; returns the address.
    fn allocate(&self, bytes: u64) -> crate::Result<u64>;
    /// Gives back what [`ExternalAllocator::allocate`] returned.
    ///
    /// # Safety
    /// `addr` came from this allocator's `allocate` and is freed once, with no work pending
    /// on it.
    unsafe fn free(&self, addr: u64) -> crate::Result<()>;
}

/// An allocation. Dropping it frees the memory (after work already queued on it finished).
pub trait DeviceMemory: Send + Sync + fmt::Debug {
    fn ptr(&self) -> DevicePtr;
    fn size(&self) -> u64;
    fn space(&self) -> MemorySpace;
}

/// An owned allocation.
pub type Buffer = Box<dyn DeviceMemory>;

/// A kernel ready to launch.
pub trait KernelHandle: Send + Sync {
    fn name(&self) -> &str;
    fn as_any(&self) -> &dyn Any;
}

/// A kernel argument at launch time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaunchArg {
    /// A pointer into device memory, with the byte length the kernel may touch.
    Buffer {
        ptr: DevicePtr,
        len: u64,
    },
    Scalar(Scalar),
}

/// Launch configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: crate::ir::Dim3,
    pub block: crate::ir::Dim3,
    pub shared_mem: u32,
}

/// `len` bytes of device memory at `ptr`: a gemm operand at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRange {
    pub ptr: DevicePtr,
    pub len: u64,
}

impl GemmOperand for DeviceRange {
    fn start(&self) -> u64 {
        self.ptr.0
    }
    fn bytes(&self) -> u64 {
        self.len
    }
    fn describe(&self) -> String {
        format!("the buffer at {}", self.ptr)
    }
    fn describe_start(&self) -> String {
        format!("address {}", self.ptr)
    }
    fn overlaps(&self, other: &Self) -> bool {
        let (a, b) = (self.ptr.0, other.ptr.0);
        self.len > 0
            && other.len > 0
            && a < b.saturating_add(other.len)
            && b < a.saturating_add(self.len)
    }
}

/// A gemm with resolved operands: the [`crate::ir::GemmThunk`]'s shape over device ranges.
/// Backends check it with [`Gemm::check`] and map it for a column-major BLAS with
/// [`Gemm::column_major`].
pub type GemmLaunch = Gemm<DeviceRange>;
