//! Protobuf → IR: [`from_proto`], which checks what the IR's types cannot express, then
//! validates.

use crate::{ProtoError, pb};
use xthunk_core::ir::{
    ABI_VERSION, AllocationKind, BufferAllocation, DType, Dim3, Executable, HeaderSource,
    MemorySpace, Module, ModuleImage, ModuleOptions, PathSegment, Scalar, Signature, Slice,
    TensorSpec, ThunkPath,
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
    let entry = super::thunk::list_from(&msg.entry, &root, "entry")?;

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

pub(super) fn dim3_from(
    d: &Option<pb::Dim3>,
    loc: &Loc<'_>,
    field: &str,
) -> Result<Dim3, ProtoError> {
    match d {
        Some(d) => Ok(Dim3::new(d.x, d.y, d.z)),
        None => Err(loc.invalid(field, "the launch dimension is missing")),
    }
}

pub(super) fn scalar_from(
    s: &pb::Scalar,
    loc: &Loc<'_>,
    field: &str,
) -> Result<Scalar, ProtoError> {
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
