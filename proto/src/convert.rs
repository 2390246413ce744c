//! Conversion between the prost types and the core IR.
//!
//! [`from_proto`] checks everything the IR's types cannot express (missing oneofs and
//! messages, unspecified or unknown enums, out-of-range values), then runs
//! [`xthunk_core::verify`]. The thunk path of an error is built only when the error
//! happens, so converting a large program costs O(number of thunks).

use crate::{ProtoError, pb};
use xthunk_core::ir::{
    ABI_VERSION, Access, AllocationKind, AsyncKind, BufferAllocation, CollectiveOp,
    CollectiveThunk, DType, Dim3, Executable, GemmThunk, KernelArg, KernelThunk, MemorySpace,
    MemsetPattern, Module, ModuleImage, PathSegment, ReduceOp, Scalar, Signature, Slice,
    TensorSpec, Thunk, ThunkPath,
};
use xthunk_core::verify;

// ---------------------------------------------------------------------------------------------
// IR -> proto
// ---------------------------------------------------------------------------------------------

/// Converts a program to its protobuf message. Total: every IR value has a message.
pub fn to_proto(exe: &Executable) -> pb::Executable {
    let signature = if exe.signature.parameters.is_empty() && exe.signature.outputs.is_empty() {
        None
    } else {
        Some(pb::Signature {
            parameters: exe.signature.parameters.iter().map(tensor_to).collect(),
            outputs: exe.signature.outputs.iter().map(tensor_to).collect(),
        })
    };
    pb::Executable {
        abi_version: exe.abi_version,
        name: exe.name.clone(),
        allocations: exe.allocations.iter().map(allocation_to).collect(),
        modules: exe.modules.iter().map(module_to).collect(),
        entry: exe.entry.iter().map(thunk_to).collect(),
        signature,
    }
}

fn dtype_to(d: DType) -> pb::DType {
    match d {
        DType::Pred => pb::DType::DtypePred,
        DType::I8 => pb::DType::DtypeI8,
        DType::U8 => pb::DType::DtypeU8,
        DType::I32 => pb::DType::DtypeI32,
        DType::I64 => pb::DType::DtypeI64,
        DType::F16 => pb::DType::DtypeF16,
        DType::BF16 => pb::DType::DtypeBf16,
        DType::F32 => pb::DType::DtypeF32,
        DType::F64 => pb::DType::DtypeF64,
    }
}

fn tensor_to(t: &TensorSpec) -> pb::TensorSpec {
    pb::TensorSpec {
        name: t.name.clone(),
        dtype: dtype_to(t.dtype) as i32,
        dims: t.dims.clone(),
        allocation: t.allocation,
    }
}

fn allocation_to(a: &BufferAllocation) -> pb::BufferAllocation {
    use pb::buffer_allocation::Kind;
    let kind = match &a.kind {
        AllocationKind::Parameter(n) => Kind::Parameter(*n),
        AllocationKind::Output(n) => Kind::Output(*n),
        AllocationKind::Temp => Kind::Temp(pb::buffer_allocation::Temp {}),
        AllocationKind::Constant(bytes) => Kind::Constant(bytes.clone()),
    };
    let memory_space = match a.memory_space {
        // Device is the default: written as UNSPECIFIED so that text programs stay short.
        MemorySpace::Device => pb::MemorySpace::Unspecified,
        MemorySpace::HostPinned => pb::MemorySpace::HostPinned,
        MemorySpace::Unified => pb::MemorySpace::Unified,
        MemorySpace::Collective => pb::MemorySpace::Collective,
    };
    pb::BufferAllocation {
        index: a.index,
        size: a.size,
        alignment: a.alignment,
        kind: Some(kind),
        memory_space: memory_space as i32,
    }
}

fn module_to(m: &Module) -> pb::Module {
    use pb::module_image::Kind;
    let images = m
        .images
        .iter()
        .map(|img| {
            let kind = match img {
                ModuleImage::Standard => Kind::Standard(pb::StandardImage {}),
                ModuleImage::Source { code } => {
                    Kind::Source(pb::SourceImage { code: code.clone() })
                }
                ModuleImage::Ptx { code } => Kind::Ptx(pb::PtxImage { code: code.clone() }),
                ModuleImage::Cubin { arch, data } => Kind::Cubin(pb::BinaryImage {
                    arch: arch.clone(),
                    data: data.clone(),
                }),
                ModuleImage::Hsaco { arch, data } => Kind::Hsaco(pb::BinaryImage {
                    arch: arch.clone(),
                    data: data.clone(),
                }),
                ModuleImage::Host { library } => Kind::Host(pb::HostImage {
                    library: library.clone(),
                }),
            };
            pb::ModuleImage { kind: Some(kind) }
        })
        .collect();
    pb::Module {
        name: m.name.clone(),
        images,
    }
}

fn slice_to(s: &Slice) -> Option<pb::Slice> {
    Some(pb::Slice {
        allocation: s.allocation,
        offset: s.offset,
        size: s.size,
    })
}

fn dim3_to(d: &Dim3) -> Option<pb::Dim3> {
    Some(pb::Dim3 {
        x: d.x,
        y: d.y,
        z: d.z,
    })
}

fn access_to(a: Access) -> pb::Access {
    match a {
        Access::Read => pb::Access::Read,
        Access::Write => pb::Access::Write,
        Access::ReadWrite => pb::Access::ReadWrite,
    }
}

fn scalar_to(s: &Scalar) -> pb::Scalar {
    use pb::scalar::Value;
    let value = match *s {
        Scalar::Pred(v) => Value::Pred(v),
        Scalar::I8(v) => Value::I8(i32::from(v)),
        Scalar::U8(v) => Value::U8(u32::from(v)),
        Scalar::I32(v) => Value::I32(v),
        Scalar::I64(v) => Value::I64(v),
        Scalar::F16(v) => Value::F16(u32::from(v)),
        Scalar::BF16(v) => Value::Bf16(u32::from(v)),
        Scalar::F32(v) => Value::F32(v),
        Scalar::F64(v) => Value::F64(v),
    };
    pb::Scalar { value: Some(value) }
}

fn thunk_to(t: &Thunk) -> pb::Thunk {
    use pb::thunk::Kind;
    let kind = match t {
        Thunk::Copy { src, dst } => Kind::Copy(pb::CopyThunk {
            src: slice_to(src),
            dst: slice_to(dst),
        }),
        Thunk::Memset { dst, pattern } => {
            let (width, value) = match *pattern {
                MemsetPattern::U8(v) => (pb::MemsetWidth::U8, u32::from(v)),
                MemsetPattern::U16(v) => (pb::MemsetWidth::U16, u32::from(v)),
                MemsetPattern::U32(v) => (pb::MemsetWidth::U32, v),
            };
            Kind::Memset(pb::MemsetThunk {
                dst: slice_to(dst),
                width: width as i32,
                value,
            })
        }
        Thunk::Kernel(k) => Kind::Kernel(pb::KernelThunk {
            module: k.module.clone(),
            name: k.name.clone(),
            grid: dim3_to(&k.grid),
            block: dim3_to(&k.block),
            shared_mem: k.shared_mem,
            args: k
                .args
                .iter()
                .map(|a| {
                    use pb::kernel_arg::Kind as ArgKind;
                    let kind = match a {
                        KernelArg::Buffer { slice, access } => ArgKind::Buffer(pb::BufferArg {
                            slice: slice_to(slice),
                            access: access_to(*access) as i32,
                        }),
                        KernelArg::Scalar(s) => ArgKind::Scalar(scalar_to(s)),
                    };
                    pb::KernelArg { kind: Some(kind) }
                })
                .collect(),
        }),
        Thunk::Gemm(g) => Kind::Gemm(pb::GemmThunk {
            a: slice_to(&g.a),
            b: slice_to(&g.b),
            c: slice_to(&g.c),
            m: g.m,
            n: g.n,
            k: g.k,
            lda: g.lda,
            ldb: g.ldb,
            ldc: g.ldc,
            trans_a: g.trans_a,
            trans_b: g.trans_b,
            alpha: Some(g.alpha),
            beta: g.beta,
            dtype: dtype_to(g.dtype) as i32,
            batch: Some(g.batch),
            stride_a: g.stride_a,
            stride_b: g.stride_b,
            stride_c: g.stride_c,
        }),
        Thunk::Sequence(body) => Kind::Sequence(pb::SequenceThunk {
            thunks: body.iter().map(thunk_to).collect(),
        }),
        Thunk::While {
            cond,
            pred,
            body,
            trip_count,
        } => Kind::While(pb::WhileThunk {
            cond: cond.iter().map(thunk_to).collect(),
            pred: slice_to(pred),
            body: body.iter().map(thunk_to).collect(),
            trip_count: trip_count.map(|n| n.min(i64::MAX as u64) as i64),
        }),
        Thunk::Conditional {
            index,
            index_type,
            branches,
        } => Kind::Conditional(pb::ConditionalThunk {
            index: slice_to(index),
            index_type: dtype_to(*index_type) as i32,
            branches: branches
                .iter()
                .map(|b| pb::Branch {
                    thunks: b.iter().map(thunk_to).collect(),
                })
                .collect(),
        }),
        Thunk::AsyncStart { id, kind, body } => Kind::AsyncStart(pb::AsyncStartThunk {
            id: *id,
            kind: match kind {
                AsyncKind::Compute => pb::AsyncKind::Compute,
                AsyncKind::Communication => pb::AsyncKind::Communication,
            } as i32,
            body: body.iter().map(thunk_to).collect(),
        }),
        Thunk::AsyncDone { id } => Kind::AsyncDone(pb::AsyncDoneThunk { id: *id }),
        Thunk::CommandBuffer { body } => Kind::CommandBuffer(pb::CommandBufferThunk {
            body: body.iter().map(thunk_to).collect(),
        }),
        Thunk::Collective(c) => {
            let groups: Vec<pb::ReplicaGroup> = c
                .groups
                .iter()
                .map(|g| pb::ReplicaGroup { ranks: g.clone() })
                .collect();
            let (src, dst, dtype) = (slice_to(&c.src), slice_to(&c.dst), dtype_to(c.dtype) as i32);
            match c.op {
                CollectiveOp::AllReduce { op } => Kind::AllReduce(pb::AllReduceThunk {
                    src,
                    dst,
                    dtype,
                    op: reduce_to(op) as i32,
                    groups,
                }),
                CollectiveOp::AllGather => Kind::AllGather(pb::AllGatherThunk {
                    src,
                    dst,
                    dtype,
                    groups,
                }),
                CollectiveOp::ReduceScatter { op } => Kind::ReduceScatter(pb::ReduceScatterThunk {
                    src,
                    dst,
                    dtype,
                    op: reduce_to(op) as i32,
                    groups,
                }),
                CollectiveOp::AllToAll => Kind::AllToAll(pb::AllToAllThunk {
                    src,
                    dst,
                    dtype,
                    groups,
                }),
                CollectiveOp::Broadcast { root } => Kind::Broadcast(pb::BroadcastThunk {
                    src,
                    dst,
                    dtype,
                    root,
                    groups,
                }),
            }
        }
        Thunk::CollectivePermute {
            src,
            dst,
            dtype,
            pairs,
        } => Kind::CollectivePermute(pb::CollectivePermuteThunk {
            src: slice_to(src),
            dst: slice_to(dst),
            dtype: dtype_to(*dtype) as i32,
            pairs: pairs
                .iter()
                .map(|(s, t)| pb::SourceTargetPair {
                    source: *s,
                    target: *t,
                })
                .collect(),
        }),
        Thunk::Send { src, dtype, peer } => Kind::Send(pb::SendThunk {
            src: slice_to(src),
            dtype: dtype_to(*dtype) as i32,
            peer: *peer,
        }),
        Thunk::Recv { dst, dtype, peer } => Kind::Recv(pb::RecvThunk {
            dst: slice_to(dst),
            dtype: dtype_to(*dtype) as i32,
            peer: *peer,
        }),
        Thunk::RankId { dst } => Kind::RankId(pb::RankIdThunk { dst: slice_to(dst) }),
    };
    pb::Thunk { kind: Some(kind) }
}

// ---------------------------------------------------------------------------------------------
// proto -> IR
// ---------------------------------------------------------------------------------------------

/// Where a thunk is, as a chain of borrowed steps: the [`ThunkPath`] is materialized only for
/// an error.
#[derive(Clone, Copy)]
enum Loc<'a> {
    Root,
    Step {
        parent: &'a Loc<'a>,
        field: &'static str,
        index: usize,
    },
}

impl Loc<'_> {
    fn path(&self) -> ThunkPath {
        let mut steps = Vec::new();
        let mut cur = self;
        while let Loc::Step {
            parent,
            field,
            index,
        } = cur
        {
            steps.push(PathSegment {
                field,
                index: *index,
            });
            cur = parent;
        }
        steps.reverse();
        ThunkPath(steps)
    }

    fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> ProtoError {
        ProtoError::Invalid {
            path: self.path(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Converts a protobuf message to a program and validates it (field presence, enum values and
/// ranges here, then [`verify`]).
pub fn from_proto(msg: &pb::Executable) -> Result<Executable, ProtoError> {
    let root = Loc::Root;
    // Checked first: a program of another ABI version may use thunk kinds this build does not
    // know, and the version is the error to report.
    if msg.abi_version == 0 {
        return Err(root.invalid(
            "abi_version",
            format!("is missing (0); this build reads ABI version {ABI_VERSION}"),
        ));
    }
    if msg.abi_version != ABI_VERSION {
        return Err(root.invalid(
            "abi_version",
            format!(
                "program ABI version {} is not supported (this build reads version {ABI_VERSION})",
                msg.abi_version
            ),
        ));
    }

    let allocations = msg
        .allocations
        .iter()
        .enumerate()
        .map(|(i, a)| allocation_from(a, i))
        .collect::<Result<Vec<_>, _>>()?;
    let modules = msg
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| module_from(m, i))
        .collect::<Result<Vec<_>, _>>()?;
    let signature = match &msg.signature {
        None => Signature::default(),
        Some(s) => Signature {
            parameters: tensors_from(&s.parameters, "parameters")?,
            outputs: tensors_from(&s.outputs, "outputs")?,
        },
    };
    let entry = msg
        .entry
        .iter()
        .enumerate()
        .map(|(i, t)| {
            thunk_from(
                t,
                &Loc::Step {
                    parent: &root,
                    field: "entry",
                    index: i,
                },
            )
        })
        .collect::<Result<Vec<_>, _>>()?;

    let exe = Executable {
        abi_version: msg.abi_version,
        name: msg.name.clone(),
        allocations,
        modules,
        entry,
        signature,
    };
    verify(&exe)?;
    Ok(exe)
}

/// Names of the planned/known oneof members, for "nothing is set" messages.
const THUNK_KINDS: &str = "copy, memset, kernel, gemm, sequence, while, conditional, async_start, async_done or command_buffer";

fn dtype_from(v: i32, loc: &Loc<'_>, field: &str) -> Result<DType, ProtoError> {
    match pb::DType::try_from(v) {
        Ok(pb::DType::DtypeUnspecified) => {
            Err(loc.invalid(field, "the element type is unspecified"))
        }
        Ok(pb::DType::DtypePred) => Ok(DType::Pred),
        Ok(pb::DType::DtypeI8) => Ok(DType::I8),
        Ok(pb::DType::DtypeU8) => Ok(DType::U8),
        Ok(pb::DType::DtypeI32) => Ok(DType::I32),
        Ok(pb::DType::DtypeI64) => Ok(DType::I64),
        Ok(pb::DType::DtypeF16) => Ok(DType::F16),
        Ok(pb::DType::DtypeBf16) => Ok(DType::BF16),
        Ok(pb::DType::DtypeF32) => Ok(DType::F32),
        Ok(pb::DType::DtypeF64) => Ok(DType::F64),
        Err(_) => Err(loc.invalid(field, format!("unknown element type value {v}"))),
    }
}

fn tensors_from(specs: &[pb::TensorSpec], list: &str) -> Result<Vec<TensorSpec>, ProtoError> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Ok(TensorSpec {
                name: s.name.clone(),
                dtype: dtype_from(s.dtype, &Loc::Root, &format!("signature.{list}[{i}].dtype"))?,
                dims: s.dims.clone(),
                allocation: s.allocation,
            })
        })
        .collect()
}

fn allocation_from(a: &pb::BufferAllocation, i: usize) -> Result<BufferAllocation, ProtoError> {
    use pb::buffer_allocation::Kind;
    let root = Loc::Root;
    let kind = match &a.kind {
        Some(Kind::Parameter(n)) => AllocationKind::Parameter(*n),
        Some(Kind::Output(n)) => AllocationKind::Output(*n),
        Some(Kind::Temp(_)) => AllocationKind::Temp,
        Some(Kind::Constant(bytes)) => AllocationKind::Constant(bytes.clone()),
        None => {
            return Err(root.invalid(
                format!("allocations[{i}].kind"),
                "no kind is set (expected parameter, output, temp or constant)",
            ));
        }
    };
    let memory_space = match pb::MemorySpace::try_from(a.memory_space) {
        Ok(pb::MemorySpace::Unspecified | pb::MemorySpace::Device) => MemorySpace::Device,
        Ok(pb::MemorySpace::HostPinned) => MemorySpace::HostPinned,
        Ok(pb::MemorySpace::Unified) => MemorySpace::Unified,
        Ok(pb::MemorySpace::Collective) => MemorySpace::Collective,
        Err(_) => {
            return Err(root.invalid(
                format!("allocations[{i}].memory_space"),
                format!("unknown memory space value {}", a.memory_space),
            ));
        }
    };
    Ok(BufferAllocation {
        index: a.index,
        size: a.size,
        alignment: a.alignment,
        kind,
        memory_space,
    })
}

fn module_from(m: &pb::Module, i: usize) -> Result<Module, ProtoError> {
    use pb::module_image::Kind;
    let images = m
        .images
        .iter()
        .enumerate()
        .map(|(j, img)| {
            Ok(match &img.kind {
                Some(Kind::Standard(_)) => ModuleImage::Standard,
                Some(Kind::Source(s)) => ModuleImage::Source {
                    code: s.code.clone(),
                },
                Some(Kind::Ptx(p)) => ModuleImage::Ptx {
                    code: p.code.clone(),
                },
                Some(Kind::Cubin(b)) => ModuleImage::Cubin {
                    arch: b.arch.clone(),
                    data: b.data.clone(),
                },
                Some(Kind::Hsaco(b)) => ModuleImage::Hsaco {
                    arch: b.arch.clone(),
                    data: b.data.clone(),
                },
                Some(Kind::Host(h)) => ModuleImage::Host {
                    library: h.library.clone(),
                },
                None => {
                    return Err(Loc::Root.invalid(
                        format!("modules[{i}].images[{j}]"),
                        "no image kind is set (expected standard, source, ptx, cubin, hsaco or host)",
                    ));
                }
            })
        })
        .collect::<Result<Vec<_>, ProtoError>>()?;
    Ok(Module {
        name: m.name.clone(),
        images,
    })
}

fn slice_from(s: &Option<pb::Slice>, loc: &Loc<'_>, field: &str) -> Result<Slice, ProtoError> {
    match s {
        Some(s) => Ok(Slice::new(s.allocation, s.offset, s.size)),
        None => Err(loc.invalid(field, "the slice is missing")),
    }
}

fn dim3_from(d: &Option<pb::Dim3>, loc: &Loc<'_>, field: &str) -> Result<Dim3, ProtoError> {
    match d {
        Some(d) => Ok(Dim3::new(d.x, d.y, d.z)),
        None => Err(loc.invalid(field, "the launch dimension is missing")),
    }
}

fn scalar_from(s: &pb::Scalar, loc: &Loc<'_>, field: &str) -> Result<Scalar, ProtoError> {
    use pb::scalar::Value;
    let range = |name: &str, v: i64, lo: i64, hi: i64| {
        loc.invalid(
            format!("{field}.{name}"),
            format!("{v} is out of range ({lo}..={hi})"),
        )
    };
    Ok(match s.value {
        Some(Value::Pred(v)) => Scalar::Pred(v),
        Some(Value::I8(v)) => {
            Scalar::I8(i8::try_from(v).map_err(|_| range("i8", v.into(), -128, 127))?)
        }
        Some(Value::U8(v)) => {
            Scalar::U8(u8::try_from(v).map_err(|_| range("u8", v.into(), 0, 255))?)
        }
        Some(Value::I32(v)) => Scalar::I32(v),
        Some(Value::I64(v)) => Scalar::I64(v),
        Some(Value::F16(v)) => {
            Scalar::F16(u16::try_from(v).map_err(|_| range("f16", v.into(), 0, 0xFFFF))?)
        }
        Some(Value::Bf16(v)) => {
            Scalar::BF16(u16::try_from(v).map_err(|_| range("bf16", v.into(), 0, 0xFFFF))?)
        }
        Some(Value::F32(v)) => Scalar::F32(v),
        Some(Value::F64(v)) => Scalar::F64(v),
        None => {
            return Err(loc.invalid(
                field,
                "no scalar value is set (expected pred, i8, u8, i32, i64, f16, bf16, f32 or f64)",
            ));
        }
    })
}

fn kernel_from(k: &pb::KernelThunk, loc: &Loc<'_>) -> Result<KernelThunk, ProtoError> {
    use pb::kernel_arg::Kind;
    let mut args = Vec::with_capacity(k.args.len());
    for (i, a) in k.args.iter().enumerate() {
        let arg = match &a.kind {
            Some(Kind::Buffer(b)) => {
                let slice = slice_from(&b.slice, loc, &format!("args[{i}].slice"))?;
                let access = match pb::Access::try_from(b.access) {
                    Ok(pb::Access::Read) => Access::Read,
                    Ok(pb::Access::Write) => Access::Write,
                    Ok(pb::Access::ReadWrite) => Access::ReadWrite,
                    Ok(pb::Access::Unspecified) => {
                        return Err(loc.invalid(
                            format!("args[{i}].access"),
                            "the access is unspecified (expected ACCESS_READ, ACCESS_WRITE or ACCESS_READ_WRITE)",
                        ));
                    }
                    Err(_) => {
                        return Err(loc.invalid(
                            format!("args[{i}].access"),
                            format!("unknown access value {}", b.access),
                        ));
                    }
                };
                KernelArg::Buffer { slice, access }
            }
            Some(Kind::Scalar(s)) => {
                KernelArg::Scalar(scalar_from(s, loc, &format!("args[{i}].scalar"))?)
            }
            None => {
                return Err(loc.invalid(
                    format!("args[{i}]"),
                    "no argument kind is set (expected buffer or scalar)",
                ));
            }
        };
        args.push(arg);
    }
    Ok(KernelThunk {
        module: k.module.clone(),
        name: k.name.clone(),
        grid: dim3_from(&k.grid, loc, "grid")?,
        block: dim3_from(&k.block, loc, "block")?,
        shared_mem: k.shared_mem,
        args,
    })
}

fn gemm_from(g: &pb::GemmThunk, loc: &Loc<'_>) -> Result<GemmThunk, ProtoError> {
    Ok(GemmThunk {
        a: slice_from(&g.a, loc, "a")?,
        b: slice_from(&g.b, loc, "b")?,
        c: slice_from(&g.c, loc, "c")?,
        m: g.m,
        n: g.n,
        k: g.k,
        lda: g.lda,
        ldb: g.ldb,
        ldc: g.ldc,
        trans_a: g.trans_a,
        trans_b: g.trans_b,
        alpha: g.alpha.unwrap_or(1.0),
        beta: g.beta,
        dtype: dtype_from(g.dtype, loc, "dtype")?,
        batch: g.batch.unwrap_or(1),
        stride_a: g.stride_a,
        stride_b: g.stride_b,
        stride_c: g.stride_c,
    })
}

fn memset_from(m: &pb::MemsetThunk, loc: &Loc<'_>) -> Result<Thunk, ProtoError> {
    let dst = slice_from(&m.dst, loc, "dst")?;
    let too_wide = |bits: u32| {
        loc.invalid(
            "value",
            format!("{:#x} does not fit the {bits}-bit pattern", m.value),
        )
    };
    let pattern = match pb::MemsetWidth::try_from(m.width) {
        Ok(pb::MemsetWidth::U8) => {
            MemsetPattern::U8(u8::try_from(m.value).map_err(|_| too_wide(8))?)
        }
        Ok(pb::MemsetWidth::U16) => {
            MemsetPattern::U16(u16::try_from(m.value).map_err(|_| too_wide(16))?)
        }
        Ok(pb::MemsetWidth::U32) => MemsetPattern::U32(m.value),
        Ok(pb::MemsetWidth::Unspecified) => {
            return Err(loc.invalid(
                "width",
                "the pattern width is unspecified (expected MEMSET_WIDTH_U8, MEMSET_WIDTH_U16 or MEMSET_WIDTH_U32)",
            ));
        }
        Err(_) => {
            return Err(loc.invalid("width", format!("unknown pattern width value {}", m.width)));
        }
    };
    Ok(Thunk::Memset { dst, pattern })
}

fn reduce_to(op: ReduceOp) -> pb::ReduceOp {
    match op {
        ReduceOp::Sum => pb::ReduceOp::Sum,
        ReduceOp::Prod => pb::ReduceOp::Prod,
        ReduceOp::Min => pb::ReduceOp::Min,
        ReduceOp::Max => pb::ReduceOp::Max,
    }
}

fn reduce_from(v: i32, loc: &Loc<'_>) -> Result<ReduceOp, ProtoError> {
    match pb::ReduceOp::try_from(v) {
        Ok(pb::ReduceOp::Sum) => Ok(ReduceOp::Sum),
        Ok(pb::ReduceOp::Prod) => Ok(ReduceOp::Prod),
        Ok(pb::ReduceOp::Min) => Ok(ReduceOp::Min),
        Ok(pb::ReduceOp::Max) => Ok(ReduceOp::Max),
        Ok(pb::ReduceOp::Unspecified) => {
            Err(loc.invalid("op", "reduction operator is unspecified"))
        }
        Err(_) => Err(loc.invalid("op", format!("unknown reduction operator {v}"))),
    }
}

fn groups_from(groups: &[pb::ReplicaGroup]) -> Vec<Vec<u32>> {
    groups.iter().map(|g| g.ranks.clone()).collect()
}

fn list_from(
    list: &[pb::Thunk],
    loc: &Loc<'_>,
    field: &'static str,
) -> Result<Vec<Thunk>, ProtoError> {
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            thunk_from(
                c,
                &Loc::Step {
                    parent: loc,
                    field,
                    index: i,
                },
            )
        })
        .collect()
}

fn thunk_from(t: &pb::Thunk, loc: &Loc<'_>) -> Result<Thunk, ProtoError> {
    use pb::thunk::Kind;
    Ok(match &t.kind {
        Some(Kind::Copy(c)) => Thunk::Copy {
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
        },
        Some(Kind::Memset(m)) => memset_from(m, loc)?,
        Some(Kind::Kernel(k)) => Thunk::Kernel(kernel_from(k, loc)?),
        Some(Kind::Gemm(g)) => Thunk::Gemm(gemm_from(g, loc)?),
        Some(Kind::Sequence(s)) => Thunk::Sequence(list_from(&s.thunks, loc, "thunks")?),
        Some(Kind::While(w)) => Thunk::While {
            cond: list_from(&w.cond, loc, "cond")?,
            pred: slice_from(&w.pred, loc, "pred")?,
            body: list_from(&w.body, loc, "body")?,
            trip_count: match w.trip_count {
                None => None,
                Some(n) if n >= 0 => Some(n as u64),
                Some(n) => {
                    return Err(loc.invalid("trip_count", format!("{n} is negative")));
                }
            },
        },
        Some(Kind::Conditional(c)) => Thunk::Conditional {
            index: slice_from(&c.index, loc, "index")?,
            index_type: dtype_from(c.index_type, loc, "index_type")?,
            branches: c
                .branches
                .iter()
                .enumerate()
                .map(|(b, br)| {
                    list_from(
                        &br.thunks,
                        &Loc::Step {
                            parent: loc,
                            field: "branches",
                            index: b,
                        },
                        "thunks",
                    )
                })
                .collect::<Result<Vec<_>, _>>()?,
        },
        Some(Kind::AsyncStart(a)) => Thunk::AsyncStart {
            id: a.id,
            kind: match pb::AsyncKind::try_from(a.kind) {
                Ok(pb::AsyncKind::Compute) => AsyncKind::Compute,
                Ok(pb::AsyncKind::Communication) => AsyncKind::Communication,
                Ok(pb::AsyncKind::Unspecified) => {
                    return Err(loc.invalid("kind", "async kind is unspecified"));
                }
                Err(_) => {
                    return Err(loc.invalid("kind", format!("unknown async kind {}", a.kind)));
                }
            },
            body: list_from(&a.body, loc, "body")?,
        },
        Some(Kind::AsyncDone(d)) => Thunk::AsyncDone { id: d.id },
        Some(Kind::CommandBuffer(c)) => Thunk::CommandBuffer {
            body: list_from(&c.body, loc, "body")?,
        },
        Some(Kind::AllReduce(c)) => Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllReduce {
                op: reduce_from(c.op, loc)?,
            },
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            groups: groups_from(&c.groups),
        }),
        Some(Kind::AllGather(c)) => Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllGather,
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            groups: groups_from(&c.groups),
        }),
        Some(Kind::ReduceScatter(c)) => Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::ReduceScatter {
                op: reduce_from(c.op, loc)?,
            },
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            groups: groups_from(&c.groups),
        }),
        Some(Kind::AllToAll(c)) => Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllToAll,
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            groups: groups_from(&c.groups),
        }),
        Some(Kind::Broadcast(c)) => Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::Broadcast { root: c.root },
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            groups: groups_from(&c.groups),
        }),
        Some(Kind::CollectivePermute(c)) => Thunk::CollectivePermute {
            src: slice_from(&c.src, loc, "src")?,
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            pairs: c.pairs.iter().map(|p| (p.source, p.target)).collect(),
        },
        Some(Kind::Send(c)) => Thunk::Send {
            src: slice_from(&c.src, loc, "src")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            peer: c.peer,
        },
        Some(Kind::Recv(c)) => Thunk::Recv {
            dst: slice_from(&c.dst, loc, "dst")?,
            dtype: dtype_from(c.dtype, loc, "dtype")?,
            peer: c.peer,
        },
        Some(Kind::RankId(c)) => Thunk::RankId {
            dst: slice_from(&c.dst, loc, "dst")?,
        },
        None => {
            return Err(loc.invalid(
                "kind",
                format!(
                    "no thunk kind is set, or it is one this build does not know (expected {THUNK_KINDS})"
                ),
            ));
        }
    })
}
