//! Protobuf → IR: [`from_proto`], which checks what the IR's types cannot express, then
//! validates.

use crate::{ProtoError, pb};
use xthunk_core::Program;
use xthunk_core::ir::{
    ABI_VERSION, Access, AllocationKind, AsyncKind, BufferAllocation, CollectiveOp,
    CollectiveThunk, DType, Dim3, Executable, GemmThunk, HeaderSource, KernelArg, KernelThunk,
    MemorySpace, MemsetPattern, Module, ModuleImage, ModuleOptions, PathSegment, ReduceOp, Scalar,
    Signature, Slice, TensorSpec, Thunk, ThunkPath,
};
use xthunk_core::verify;

/// Where a thunk is, as a chain of borrowed steps: the [`ThunkPath`] is materialized only for
/// an error.
#[derive(Clone, Copy)]
pub(super) enum Loc<'a> {
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

    pub(super) fn invalid(
        &self,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ProtoError {
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
    let exe = convert(msg)?;
    verify(&exe)?;
    Ok(exe)
}

/// [`from_proto`] as a [`Program`]: verified once, by [`Program::new`].
pub fn program_from_proto(msg: &pb::Executable) -> Result<Program, ProtoError> {
    Ok(Program::new(convert(msg)?)?)
}

/// The conversion of [`from_proto`], without [`verify`].
fn convert(msg: &pb::Executable) -> Result<Executable, ProtoError> {
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
    Ok(exe)
}

/// Names of the planned/known oneof members, for "nothing is set" messages.
const THUNK_KINDS: &str = "copy, memset, kernel, gemm, sequence, while, conditional, async_start, async_done, command_buffer, collectives, rank_id or custom_call";

pub(super) fn dtype_from(v: i32, loc: &Loc<'_>, field: &str) -> Result<DType, ProtoError> {
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
    let options = m
        .options
        .as_ref()
        .map(|o| ModuleOptions {
            defines: o.defines.clone(),
            fast_math: o.fast_math,
            headers: o
                .headers
                .iter()
                .map(|h| HeaderSource {
                    name: h.name.clone(),
                    code: h.code.clone(),
                })
                .collect(),
        })
        .unwrap_or_default();
    Ok(Module {
        name: m.name.clone(),
        images,
        options,
    })
}

pub(super) fn slice_from(
    s: &Option<pb::Slice>,
    loc: &Loc<'_>,
    field: &str,
) -> Result<Slice, ProtoError> {
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
        Some(Value::F32Bits(bits)) => Scalar::F32(f32::from_bits(bits)),
        Some(Value::F64Bits(bits)) => Scalar::F64(f64::from_bits(bits)),
        None => {
            return Err(loc.invalid(
                field,
                "no scalar value is set (expected pred, i8, u8, i32, i64, f16, bf16, f32, f64, \
                 f32_bits or f64_bits)",
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
        Some(Kind::CustomCall(c)) => Thunk::CustomCall(super::custom_call::from(c, loc)?),
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
