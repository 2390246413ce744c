//! The thunk IR: allocations, slices, modules, thunks and executables.

use super::custom_call::CustomCallThunk;
use super::dtype::DType;
use super::gemm::GemmThunk;
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

/// A buffer the program uses. `index` is its position in [`Executable::allocations`].
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
        }
    }

    /// The value as an i64 when it is an integer (used for extents).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Scalar::I8(v) => Some(v as i64),
            Scalar::U8(v) => Some(v as i64),
            Scalar::I32(v) => Some(v as i64),
            Scalar::I64(v) => Some(v),
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

/// Byte pattern of a memset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemsetPattern {
    U8(u8),
    U16(u16),
    U32(u32),
}

impl MemsetPattern {
    /// Width of the repeated pattern in bytes.
    pub const fn width(&self) -> u64 {
        match self {
            MemsetPattern::U8(_) => 1,
            MemsetPattern::U16(_) => 2,
            MemsetPattern::U32(_) => 4,
        }
    }
}

/// `Kernel` thunk: launch a kernel from one of the executable's modules.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelThunk {
    /// Name of a module in [`Executable::modules`].
    pub module: String,
    /// Name of the kernel in that module.
    pub name: String,
    pub grid: Dim3,
    pub block: Dim3,
    /// Dynamic shared memory in bytes.
    pub shared_mem: u32,
    pub args: Vec<KernelArg>,
}

/// Which stream class an async scope runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncKind {
    /// Another compute stream.
    Compute,
    /// The communication stream (collectives).
    Communication,
}

impl AsyncKind {
    pub const fn name(self) -> &'static str {
        match self {
            AsyncKind::Compute => "compute",
            AsyncKind::Communication => "communication",
        }
    }
}

/// Reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A collective operation's kind and its kind-specific parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    /// `dst = op over the group of src` (equal sizes; in place allowed).
    AllReduce { op: ReduceOp },
    /// `dst = concatenation over the group (in group order) of src`; `dst` is group-size times
    /// `src`.
    AllGather,
    /// `dst = op over the group of this rank's block of src`; `src` is group-size times `dst`.
    ReduceScatter { op: ReduceOp },
    /// Block `j` of `dst` is block `i` (this rank's position) of member `j`'s `src`; both
    /// hold group-size equal blocks.
    AllToAll,
    /// `dst = src of the member at position `root` in the group` (equal sizes).
    Broadcast { root: u32 },
}

impl CollectiveOp {
    pub const fn name(&self) -> &'static str {
        match self {
            CollectiveOp::AllReduce { .. } => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter { .. } => "reduce_scatter",
            CollectiveOp::AllToAll => "all_to_all",
            CollectiveOp::Broadcast { .. } => "broadcast",
        }
    }
}

/// A collective over replica groups. `groups` lists global ranks; an empty list means one
/// group of every rank. A rank that belongs to no group skips the operation (its `dst` is left
/// as it was). Every rank of a group must run the same collectives in the same order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CollectiveThunk {
    pub op: CollectiveOp,
    pub src: Slice,
    pub dst: Slice,
    pub dtype: DType,
    pub groups: Vec<Vec<u32>>,
}

/// Element types the collectives support.
pub const COLLECTIVE_DTYPES: [DType; 8] = [
    DType::I8,
    DType::U8,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// One operation of a program.
#[derive(Clone, Debug, PartialEq)]
pub enum Thunk {
    /// Copy `src` to `dst` (equal sizes).
    Copy {
        src: Slice,
        dst: Slice,
    },
    /// Fill `dst` with a repeated pattern (size a multiple of the pattern width).
    Memset {
        dst: Slice,
        pattern: MemsetPattern,
    },
    Kernel(KernelThunk),
    Gemm(GemmThunk),
    /// A nested list of thunks, run in order.
    Sequence(Vec<Thunk>),
    /// `loop { cond; if !pred { break }; body }`. `pred` is a 1-byte pred written by `cond`.
    /// With `trip_count`, the body runs exactly that many times and `cond` is not run (the
    /// count is a promise the producer makes, as in XLA), so the host never waits on the
    /// device; without it, `pred` is copied to pinned host memory after every `cond`.
    While {
        cond: Vec<Thunk>,
        pred: Slice,
        body: Vec<Thunk>,
        trip_count: Option<u64>,
    },
    /// Runs one branch chosen by `index`: an i32 (branch `index`; an index out of range,
    /// negative or too large, runs the last branch, as XLA does) or a pred (true runs
    /// branch 0, false branch 1).
    Conditional {
        index: Slice,
        index_type: DType,
        branches: Vec<Vec<Thunk>>,
    },
    /// Starts `body` asynchronously on another stream of the given kind, after the work it
    /// depends on. Must be matched by an `AsyncDone` with the same id later in the same list.
    AsyncStart {
        id: u32,
        kind: AsyncKind,
        body: Vec<Thunk>,
    },
    /// Later work that depends on the matching `AsyncStart`'s body waits for it.
    AsyncDone {
        id: u32,
    },
    /// Records `body` once per execution state into a replayable graph (CUDA/HIP graph, a
    /// pre-resolved operation list on the host), replays it, and re-records only when an
    /// address it uses changed. The body may hold copies, memsets, kernels, gemms, custom
    /// calls, `While` and `Conditional` (recorded as conditional graph nodes where the backend
    /// has them, else run with host-driven control flow) and sequences of them.
    CommandBuffer {
        body: Vec<Thunk>,
    },
    /// A collective among replica groups of the SPMD ranks.
    Collective(CollectiveThunk),
    /// Every rank sends `src` to the rank `pairs` maps it to and receives `dst` from the rank
    /// mapped to it (`(source, target)` global ranks; each rank at most once as a source and
    /// once as a target). A rank that no one sends to gets `dst` zero-filled, as in XLA.
    CollectivePermute {
        src: Slice,
        dst: Slice,
        dtype: DType,
        pairs: Vec<(u32, u32)>,
    },
    /// Sends `src` to global rank `peer` (matched by a `Recv` there, in order). A cycle of
    /// sends and receives can deadlock, as with NCCL outside a group: use `CollectivePermute`.
    Send {
        src: Slice,
        dtype: DType,
        peer: u32,
    },
    /// Receives `dst` from global rank `peer`.
    Recv {
        dst: Slice,
        dtype: DType,
        peer: u32,
    },
    /// Writes this device's global rank as an i32 into `dst` (4 bytes), for SPMD programs.
    RankId {
        dst: Slice,
    },
    /// Calls the handler registered for a target (a framework's own library call).
    CustomCall(CustomCallThunk),
}

impl Thunk {
    /// Short kind name (`copy`, `memset`, `kernel`, `gemm`, `sequence`).
    pub fn kind(&self) -> &'static str {
        match self {
            Thunk::Copy { .. } => "copy",
            Thunk::Memset { .. } => "memset",
            Thunk::Kernel(_) => "kernel",
            Thunk::Gemm(_) => "gemm",
            Thunk::Sequence(_) => "sequence",
            Thunk::While { .. } => "while",
            Thunk::Conditional { .. } => "conditional",
            Thunk::AsyncStart { .. } => "async_start",
            Thunk::AsyncDone { .. } => "async_done",
            Thunk::CommandBuffer { .. } => "command_buffer",
            Thunk::Collective(c) => c.op.name(),
            Thunk::CollectivePermute { .. } => "collective_permute",
            Thunk::Send { .. } => "send",
            Thunk::Recv { .. } => "recv",
            Thunk::RankId { .. } => "rank_id",
            Thunk::CustomCall(_) => "custom_call",
        }
    }

    /// True for thunks that communicate with other ranks.
    pub fn is_collective(&self) -> bool {
        matches!(
            self,
            Thunk::Collective(_)
                | Thunk::CollectivePermute { .. }
                | Thunk::Send { .. }
                | Thunk::Recv { .. }
        )
    }

    /// Buffer uses of this thunk itself (not of nested thunks).
    pub fn buffer_uses(&self) -> Vec<BufferUse> {
        match self {
            Thunk::Copy { src, dst } => vec![
                BufferUse {
                    slice: *src,
                    access: Access::Read,
                },
                BufferUse {
                    slice: *dst,
                    access: Access::Write,
                },
            ],
            Thunk::Memset { dst, .. } => vec![BufferUse {
                slice: *dst,
                access: Access::Write,
            }],
            Thunk::Kernel(k) => k
                .args
                .iter()
                .filter_map(|a| match a {
                    KernelArg::Buffer { slice, access } => Some(BufferUse {
                        slice: *slice,
                        access: *access,
                    }),
                    KernelArg::Scalar(_) => None,
                })
                .collect(),
            Thunk::Gemm(g) => vec![
                BufferUse {
                    slice: g.a,
                    access: Access::Read,
                },
                BufferUse {
                    slice: g.b,
                    access: Access::Read,
                },
                BufferUse {
                    slice: g.c,
                    access: if g.beta != 0.0 {
                        Access::ReadWrite
                    } else {
                        Access::Write
                    },
                },
            ],
            Thunk::While { pred, .. } => vec![BufferUse {
                slice: *pred,
                access: Access::Read,
            }],
            Thunk::Conditional { index, .. } => vec![BufferUse {
                slice: *index,
                access: Access::Read,
            }],
            Thunk::Collective(c) => {
                let mut v = vec![BufferUse {
                    slice: c.src,
                    access: Access::Read,
                }];
                v.push(BufferUse {
                    slice: c.dst,
                    access: if c.src.overlaps(&c.dst) {
                        Access::ReadWrite
                    } else {
                        Access::Write
                    },
                });
                v
            }
            Thunk::CollectivePermute { src, dst, .. } => vec![
                BufferUse {
                    slice: *src,
                    access: Access::Read,
                },
                BufferUse {
                    slice: *dst,
                    access: Access::Write,
                },
            ],
            Thunk::Send { src, .. } => vec![BufferUse {
                slice: *src,
                access: Access::Read,
            }],
            Thunk::Recv { dst, .. } | Thunk::RankId { dst } => vec![BufferUse {
                slice: *dst,
                access: Access::Write,
            }],
            Thunk::CustomCall(c) => c.buffer_uses(),
            Thunk::Sequence(_)
            | Thunk::AsyncStart { .. }
            | Thunk::AsyncDone { .. }
            | Thunk::CommandBuffer { .. } => vec![],
        }
    }

    /// Buffer uses of this thunk and everything nested in it.
    pub fn all_buffer_uses(&self) -> Vec<BufferUse> {
        let mut out = Vec::new();
        self.collect_uses(&mut out);
        out
    }

    fn collect_uses(&self, out: &mut Vec<BufferUse>) {
        out.extend(self.buffer_uses());
        for c in self.children() {
            c.collect_uses(out);
        }
    }

    /// Nested thunk lists, each with its name in paths.
    pub fn nested(&self) -> Vec<(ListName, &[Thunk])> {
        let l = |field| ListName { field, index: None };
        match self {
            Thunk::Sequence(v) => vec![(l("thunks"), v.as_slice())],
            Thunk::While { cond, body, .. } => {
                vec![(l("cond"), cond.as_slice()), (l("body"), body.as_slice())]
            }
            Thunk::Conditional { branches, .. } => branches
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    (
                        ListName {
                            field: "branches",
                            index: Some(i),
                        },
                        b.as_slice(),
                    )
                })
                .collect(),
            Thunk::AsyncStart { body, .. } | Thunk::CommandBuffer { body } => {
                vec![(l("body"), body.as_slice())]
            }
            _ => vec![],
        }
    }

    fn children(&self) -> impl Iterator<Item = &Thunk> {
        let lists = self.nested();
        lists.into_iter().flat_map(|(_, l)| l.iter())
    }

    /// Number of thunks in this subtree, this one included.
    pub fn count(&self) -> usize {
        1 + self.children().map(Thunk::count).sum::<usize>()
    }
}

/// The name of a nested thunk list in paths: `body`, `cond`, `thunks`, or `branches[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListName {
    pub field: &'static str,
    pub index: Option<usize>,
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

/// A complete program.
#[derive(Clone, Debug, PartialEq)]
pub struct Executable {
    pub abi_version: u32,
    pub name: String,
    pub allocations: Vec<BufferAllocation>,
    pub modules: Vec<Module>,
    pub entry: Vec<Thunk>,
    pub signature: Signature,
}

impl Executable {
    /// Total number of thunks, nested ones included.
    pub fn thunk_count(&self) -> usize {
        self.entry.iter().map(Thunk::count).sum()
    }

    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.iter().find(|m| m.name == name)
    }
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
