//! The thunk IR's plain data around the thunks: allocations, slices, launch shapes, scalars
//! and kernel arguments, modules and signatures (the thunks themselves are in `thunk/`, the
//! executable holding them in `executable.rs`).

use super::dtype::DType;
use std::fmt;

/// Version of the program ABI (the protobuf schema and the IR semantics). A loader refuses
/// programs whose major version differs from its own.
pub const ABI_VERSION: u32 = 1;

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum MemorySpace {
    /// Device memory (the default).
    #[default]
    Device,
    /// Page-locked host memory visible to the device.
    HostPinned,
    /// Unified / managed memory.
    Unified,
    /// Symmetric memory registered for collectives.
    Collective,
}

impl MemorySpace {
    pub const ALL: [MemorySpace; 4] = [
        MemorySpace::Device,
        MemorySpace::HostPinned,
        MemorySpace::Unified,
        MemorySpace::Collective,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            MemorySpace::Device => "device",
            MemorySpace::HostPinned => "host_pinned",
            MemorySpace::Unified => "unified",
            MemorySpace::Collective => "collective",
        }
    }
}

impl fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an allocation holds and who provides it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AllocationKind {
    /// Provided by the caller: the `n`-th parameter of the executable.
    Parameter(u32),
    /// Returned to the caller: the `n`-th output.
    Output(u32),
    /// Scratch memory owned by one execution.
    Temp,
    /// Read-only data stored in the program, uploaded once at load.
    Constant(Vec<u8>),
}

impl AllocationKind {
    pub fn name(&self) -> &'static str {
        match self {
            AllocationKind::Parameter(_) => "parameter",
            AllocationKind::Output(_) => "output",
            AllocationKind::Temp => "temp",
            AllocationKind::Constant(_) => "constant",
        }
    }
}

/// A buffer the program uses. `index` is its position in
/// [`Executable::allocations`](crate::ir::Executable::allocations).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferAllocation {
    pub index: u32,
    pub size: u64,
    /// Required alignment of the base address in bytes (a power of two).
    pub alignment: u64,
    pub kind: AllocationKind,
    pub memory_space: MemorySpace,
}

/// A byte range of an allocation; every buffer operand of every thunk is a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slice {
    pub allocation: u32,
    pub offset: u64,
    pub size: u64,
}

impl Slice {
    pub const fn new(allocation: u32, offset: u64, size: u64) -> Self {
        Slice {
            allocation,
            offset,
            size,
        }
    }

    /// One past the last byte, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }

    /// True if both slices share at least one byte.
    pub fn overlaps(&self, other: &Slice) -> bool {
        self.allocation == other.allocation
            && self.size > 0
            && other.size > 0
            && self.offset < other.offset.saturating_add(other.size)
            && other.offset < self.offset.saturating_add(self.size)
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}[{}..+{}]", self.allocation, self.offset, self.size)
    }
}

/// How a thunk uses a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    pub const fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    pub const fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
    pub const fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "read_write",
        }
    }
    /// `r`, `w` or `rw`, as listings show a buffer use.
    pub const fn short(self) -> &'static str {
        match self {
            Access::Read => "r",
            Access::Write => "w",
            Access::ReadWrite => "rw",
        }
    }
}

/// One buffer use of a thunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferUse {
    pub slice: Slice,
    pub access: Access,
}

/// A launch dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Dim3 {
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Dim3 { x, y, z }
    }
    pub const fn x(x: u32) -> Self {
        Dim3 { x, y: 1, z: 1 }
    }
    /// Product of the three extents, exact: three `u32`s multiply to less than 2^96, so the
    /// product is a `u128` and never wraps (a block of (2^22, 2^22, 2^20) is 2^64 threads,
    /// not 0).
    pub fn count(&self) -> u128 {
        u128::from(self.x) * u128::from(self.y) * u128::from(self.z)
    }
}

impl Default for Dim3 {
    fn default() -> Self {
        Dim3::new(1, 1, 1)
    }
}

impl fmt::Display for Dim3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{},{})", self.x, self.y, self.z)
    }
}

/// A typed immediate kernel argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Pred(bool),
    I8(i8),
    U8(u8),
    I32(i32),
    I64(i64),
    /// Raw bits of an IEEE half.
    F16(u16),
    /// Raw bits of a bfloat16.
    BF16(u16),
    F32(f32),
    F64(f64),
    I16(i16),
    U16(u16),
    U32(u32),
    U64(u64),
}

impl Scalar {
    pub fn dtype(&self) -> DType {
        match self {
            Scalar::Pred(_) => DType::Pred,
            Scalar::I8(_) => DType::I8,
            Scalar::U8(_) => DType::U8,
            Scalar::I32(_) => DType::I32,
            Scalar::I64(_) => DType::I64,
            Scalar::F16(_) => DType::F16,
            Scalar::BF16(_) => DType::BF16,
            Scalar::F32(_) => DType::F32,
            Scalar::F64(_) => DType::F64,
            Scalar::I16(_) => DType::I16,
            Scalar::U16(_) => DType::U16,
            Scalar::U32(_) => DType::U32,
            Scalar::U64(_) => DType::U64,
        }
    }

    /// Little-endian bytes, as a kernel parameter of its C type.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match *self {
            Scalar::Pred(v) => vec![v as u8],
            Scalar::I8(v) => v.to_le_bytes().to_vec(),
            Scalar::U8(v) => vec![v],
            Scalar::I32(v) => v.to_le_bytes().to_vec(),
            Scalar::I64(v) => v.to_le_bytes().to_vec(),
            Scalar::F16(v) | Scalar::BF16(v) => v.to_le_bytes().to_vec(),
            Scalar::F32(v) => v.to_le_bytes().to_vec(),
            Scalar::F64(v) => v.to_le_bytes().to_vec(),
            Scalar::I16(v) => v.to_le_bytes().to_vec(),
            Scalar::U16(v) => v.to_le_bytes().to_vec(),
            Scalar::U32(v) => v.to_le_bytes().to_vec(),
            Scalar::U64(v) => v.to_le_bytes().to_vec(),
        }
    }

    /// The value as an i64 when it is an integer that fits one (used for extents).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Scalar::I8(v) => Some(v as i64),
            Scalar::U8(v) => Some(v as i64),
            Scalar::I32(v) => Some(v as i64),
            Scalar::I64(v) => Some(v),
            Scalar::I16(v) => Some(v.into()),
            Scalar::U16(v) => Some(v.into()),
            Scalar::U32(v) => Some(v.into()),
            Scalar::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an f64 (floats are widened exactly; integers converted).
    pub fn as_f64(&self) -> f64 {
        match *self {
            Scalar::Pred(v) => v as u8 as f64,
            Scalar::I8(v) => v as f64,
            Scalar::U8(v) => v as f64,
            Scalar::I32(v) => v as f64,
            Scalar::I64(v) => v as f64,
            Scalar::F16(v) => half::f16::from_bits(v).to_f64(),
            Scalar::BF16(v) => half::bf16::from_bits(v).to_f64(),
            Scalar::F32(v) => v as f64,
            Scalar::F64(v) => v,
            Scalar::I16(v) => v as f64,
            Scalar::U16(v) => v as f64,
            Scalar::U32(v) => v as f64,
            Scalar::U64(v) => v as f64,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Scalar::Pred(v) => write!(f, "pred:{v}"),
            Scalar::I8(v) => write!(f, "i8:{v}"),
            Scalar::U8(v) => write!(f, "u8:{v}"),
            Scalar::I32(v) => write!(f, "i32:{v}"),
            Scalar::I64(v) => write!(f, "i64:{v}"),
            Scalar::F16(v) => write!(f, "f16:{}", half::f16::from_bits(v)),
            Scalar::BF16(v) => write!(f, "bf16:{}", half::bf16::from_bits(v)),
            Scalar::F32(v) => write!(f, "f32:{v}"),
            Scalar::F64(v) => write!(f, "f64:{v}"),
            Scalar::I16(v) => write!(f, "i16:{v}"),
            Scalar::U16(v) => write!(f, "u16:{v}"),
            Scalar::U32(v) => write!(f, "u32:{v}"),
            Scalar::U64(v) => write!(f, "u64:{v}"),
        }
    }
}

/// One argument of a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A buffer, passed as a device pointer to the slice's first byte.
    Buffer { slice: Slice, access: Access },
    /// An immediate, passed by value.
    Scalar(Scalar),
}

// Rust values as launch arguments and scalars (`builder.kernel(…, &[x.into(), 3i64.into()])`).
macro_rules! scalar_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for KernelArg {
            fn from(x: $t) -> Self { KernelArg::Scalar(Scalar::$v(x)) }
        }
        impl From<$t> for Scalar {
            fn from(x: $t) -> Self { Scalar::$v(x) }
        }
    )*};
}
scalar_from!(
    bool => Pred, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
    i64 => I64, u64 => U64, f32 => F32, f64 => F64
);

impl From<half::f16> for KernelArg {
    fn from(x: half::f16) -> Self {
        KernelArg::Scalar(Scalar::F16(x.to_bits()))
    }
}
impl From<half::bf16> for KernelArg {
    fn from(x: half::bf16) -> Self {
        KernelArg::Scalar(Scalar::BF16(x.to_bits()))
    }
}

/// A kernel image in a module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModuleImage {
    /// The xthunk standard kernel library: portable source shipped with xthunk, compiled by
    /// NVRTC/hipRTC on GPUs, with built-in host implementations.
    Standard,
    /// Portable source in the xthunk CUDA-C subset (the prelude is prepended by the compiler).
    Source { code: String },
    /// PTX text.
    Ptx { code: String },
    /// A CUDA binary for one SM architecture, e.g. `sm_90`.
    Cubin { arch: String, data: Vec<u8> },
    /// An AMD code object for one gfx target, e.g. `gfx90a`.
    Hsaco { arch: String, data: Vec<u8> },
    /// Host implementations registered under this library name.
    Host { library: String },
}

impl ModuleImage {
    pub fn kind(&self) -> &'static str {
        match self {
            ModuleImage::Standard => "standard",
            ModuleImage::Source { .. } => "source",
            ModuleImage::Ptx { .. } => "ptx",
            ModuleImage::Cubin { .. } => "cubin",
            ModuleImage::Hsaco { .. } => "hsaco",
            ModuleImage::Host { .. } => "host",
        }
    }

    /// Short description, e.g. `cubin(sm_90)`.
    pub fn describe(&self) -> String {
        match self {
            ModuleImage::Cubin { arch, .. } => format!("cubin({arch})"),
            ModuleImage::Hsaco { arch, .. } => format!("hsaco({arch})"),
            ModuleImage::Host { library } => format!("host({library})"),
            other => other.kind().to_string(),
        }
    }
}

/// A named set of kernels with one or more images.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Module {
    pub name: String,
    pub images: Vec<ModuleImage>,
    /// How the module's portable source is compiled (all targets alike).
    pub options: ModuleOptions,
}

/// Compile options of a module's portable source (`docs/kernels.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ModuleOptions {
    /// Preprocessor definitions, `NAME` or `NAME=VALUE`, in order.
    pub defines: Vec<String>,
    /// Fast math: contraction and the vendors' approximate math functions.
    pub fast_math: bool,
    /// Header sources the module's source includes by name (`#include "name"`).
    pub headers: Vec<HeaderSource>,
}

/// A header carried in the program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeaderSource {
    pub name: String,
    pub code: String,
}

/// A named, typed parameter or output of an executable, stored in one allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub allocation: u32,
}

impl TensorSpec {
    pub fn element_count(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |a, d| a.checked_mul(*d))
    }
    pub fn byte_size(&self) -> Option<u64> {
        self.element_count()?.checked_mul(self.dtype.size() as u64)
    }
}

/// Parameters and outputs, in order: `parameters[i]` lives in the allocation of kind
/// `Parameter(i)`, `outputs[i]` in the one of kind `Output(i)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Signature {
    pub parameters: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// Output `output` may be written into the buffer of parameter `parameter` (XLA's
/// input–output aliasing): a caller that donates the parameter's buffer gets the output back
/// in it; a caller that does not gets the output in its own buffer, which starts as a copy of
/// the parameter's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoAlias {
    pub output: u32,
    pub parameter: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dim3_count_is_exact() {
        assert_eq!(Dim3::new(2, 3, 4).count(), 24);
        // 2^64 threads: 0 in 64-bit arithmetic.
        assert_eq!(Dim3::new(1 << 22, 1 << 22, 1 << 20).count(), 1 << 64);
        let max = u128::from(u32::MAX);
        assert_eq!(
            Dim3::new(u32::MAX, u32::MAX, u32::MAX).count(),
            max * max * max
        );
    }
}
